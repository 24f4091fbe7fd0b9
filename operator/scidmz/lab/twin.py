"""The twin set up as a lab case ran, and the calibration variants it is judged in.

A lab case's ``case.json`` holds the netsim scenario the lab was built from. The shipped twin
runs it as is; a ``Variant`` adds what the lab's Linux does that the shipped twin leaves out
(HyStart, PRR loss recovery, BBR's loss recovery, iperf3's connection set-up), one switch
each, so
``bench/netsim_vs_lab.py`` and ``bench/netsim_vs_ns3.py`` judge the same variants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IPERF3_SETUP_ROUND_TRIPS = 3
"""Round trips iperf3 spends before data flows, besides one connect per stream: control
connection, parameter exchange, test start (the lab's first second: a 100 ms DTN with 8
streams sends nothing before ~1.1 s, 10 campus flows at 10 ms start within ~0.15 s)."""


VARIANT_PARTS = ("hystart", "prr", "bbr-recovery", "lab-starts")
"""A variant's switches by name, in the order its name lists them."""


@dataclass(frozen=True)
class Variant:
    """The twin as shipped, or with Cubic's HyStart (``cubic_hystart``), Linux's loss
    recovery (``proportional_rate_reduction``), Linux's BBR window in loss recovery
    (``bbr_loss_recovery``) and/or each class starting when the lab's iperf3 let it
    (``lab_starts``)."""

    hystart: bool = False
    lab_starts: bool = False
    prr: bool = False
    bbr_recovery: bool = False

    @property
    def parts(self) -> list[str]:
        """Its switches that are on, by name, in ``VARIANT_PARTS``' order."""
        on = (self.hystart, self.prr, self.bbr_recovery, self.lab_starts)
        return [name for name, switch in zip(VARIANT_PARTS, on, strict=True) if switch]


SHIPPED = Variant()
"""The twin as the models were trained on it."""


def parse_variant(text: str) -> Variant:
    """A variant from its switches joined by ``+`` (``hystart+prr``); ``shipped`` is none.

    Raises ``ValueError`` naming an unknown switch."""
    if text == "shipped":
        return SHIPPED
    parts = text.split("+")
    unknown = [p for p in parts if p not in VARIANT_PARTS]
    if unknown or not text:
        raise ValueError(
            f"unknown twin variant {text!r}: join {', '.join(VARIANT_PARTS)} with '+', or "
            "give 'shipped'"
        )
    return Variant(
        hystart="hystart" in parts,
        prr="prr" in parts,
        bbr_recovery="bbr-recovery" in parts,
        lab_starts="lab-starts" in parts,
    )


def lab_starts(scenario: dict[str, Any]) -> dict[str, Any]:
    """The scenario with each class starting when the lab's iperf3 lets it send."""
    started = dict(scenario)
    for name, flows_key in (("campus", "long_flows"), ("dtn", "streams")):
        part = dict(started[name])
        part["start_s"] = (IPERF3_SETUP_ROUND_TRIPS + part[flows_key]) * part["base_rtt_s"]
        started[name] = part
    return started


def variant_scenario(scenario: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """A raw scenario (as ``parse_scenario`` takes it) run as ``variant``; the input is
    left alone."""
    raw = lab_starts(scenario) if variant.lab_starts else dict(scenario)
    if variant.hystart:
        raw["cubic_hystart"] = True
    if variant.prr:
        raw["proportional_rate_reduction"] = True
    if variant.bbr_recovery:
        raw["bbr_loss_recovery"] = True
    return raw
