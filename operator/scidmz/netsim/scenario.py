"""The simulated testbed, as one typed ``Scenario``; the default is the paper's (§3.1, fig. 2).

A 1 Gb/s BR1→BR2 bottleneck with a drop-tail FIFO; 100 campus senders with one long TCP flow
each over 10 ms, shaped by the campus token bucket at u(t) (the S1-eth1 output rate); one DTN
with 8 parallel streams over 100 ms; optional short flows from paper table 6 (Weibull
inter-departure and size). Scenario files are YAML; every quantity accepts a number in SI
units or a string with a unit as in the API (``1Gbps``, ``10ms``, ``10GB``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from scidmz.api.errors import load_yaml_model, validate_mapping
from scidmz.api.units import UnitError, parse_duration, parse_rate

CongestionControlModel = Literal["reno", "cubic", "bbr", "bbr2"]

_BYTE_UNITS = {"B": 1.0, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
_BYTES_RE = re.compile(r"^([0-9]+([.][0-9]+)?)(B|kB|MB|GB|TB)$")


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names every offending field."""


def _si(parse: Any) -> Any:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse(value)
            except UnitError as error:
                raise ValueError(str(error)) from None
        return value

    return BeforeValidator(convert)


def parse_bytes(text: str) -> float:
    """``"10GB"`` -> ``1e10`` (decimal units, as transfer sizes are quoted)."""
    match = _BYTES_RE.match(text)
    if match is None:
        raise UnitError(f"invalid size {text!r}: expected a number and one of B, kB, MB, GB, TB")
    return float(match.group(1)) * _BYTE_UNITS[match.group(3)]


RateBps = Annotated[float, _si(parse_rate)]
Seconds = Annotated[float, _si(parse_duration)]
Bytes = Annotated[float, _si(parse_bytes)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Bottleneck(_Model):
    """The BR1→BR2 link and its drop-tail FIFO buffer (give bytes or ms, not both)."""

    capacity_bps: RateBps = Field(default=1e9, gt=0, description="B, link capacity.")
    buffer_bytes: Bytes | None = Field(default=None, gt=0, description="Buffer size in bytes.")
    buffer_s: Seconds | None = Field(
        default=None,
        gt=0,
        description="Buffer as time at capacity; default 100 ms (one BDP "
        "of the DTN path) when neither is given.",
    )

    max_buffer_bytes: Bytes | None = Field(
        default=None,
        gt=0,
        description="The largest buffer a run may set while it runs (a buffer actuator's "
        "upper bound; the FIFO is sized for it); default the buffer itself.",
    )
    max_buffer_s: Seconds | None = Field(
        default=None, gt=0, description="The same bound as time at capacity."
    )

    @model_validator(mode="after")
    def _one_buffer_size(self) -> Bottleneck:
        if self.buffer_bytes is not None and self.buffer_s is not None:
            raise ValueError("give buffer_bytes or buffer_s, not both")
        if self.max_buffer_bytes is not None and self.max_buffer_s is not None:
            raise ValueError("give max_buffer_bytes or max_buffer_s, not both")
        if self.max_buffer_size_bytes < self.buffer_size_bytes:
            raise ValueError(
                f"the maximum buffer ({self.max_buffer_size_bytes:.0f} bytes) is below the "
                f"buffer ({self.buffer_size_bytes:.0f} bytes)"
            )
        return self

    @property
    def buffer_size_bytes(self) -> float:
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        return (self.buffer_s if self.buffer_s is not None else 0.1) * self.capacity_bps / 8

    @property
    def max_buffer_size_bytes(self) -> float:
        """The largest buffer ``Simulator.set_bottleneck_buffer`` accepts."""
        if self.max_buffer_bytes is not None:
            return self.max_buffer_bytes
        if self.max_buffer_s is not None:
            return self.max_buffer_s * self.capacity_bps / 8
        return self.buffer_size_bytes


class Weibull(_Model):
    """A clipped Weibull distribution (paper eq. 5 and table 6)."""

    shape: float = Field(gt=0, description="k")
    scale: float = Field(gt=0, description="λ, in the variable's SI unit")
    minimum: float = Field(ge=0)
    maximum: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Weibull:
        if self.minimum > self.maximum:
            raise ValueError("minimum must not exceed maximum")
        return self


def _set_up_time(flows: str) -> Any:
    """A class's ``start_s`` field: the time its connections take to set up."""
    return Field(
        default=0.0,
        ge=0,
        le=3600,
        description=f"When {flows} begin sending: their connection set-up (the lab's iperf3 "
        "needs about 3 + flows round trips before data flows). 0: at once.",
    )


class ShortFlows(_Model):
    """Short campus flows (paper table 6); off by default as in §4.2–4.4."""

    enabled: bool = False
    inter_departure_s: Weibull = Weibull(shape=0.5, scale=0.020, minimum=0.001, maximum=0.100)
    size_bytes: Weibull = Weibull(shape=0.5, scale=100e3, minimum=10e3, maximum=10e6)
    congestion_control: CongestionControlModel = "cubic"
    max_concurrent: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="Flow slots for short flows; an arrival finding none waits for one "
        "(counted as deferred in the summary).",
    )


class Campus(_Model):
    """Campus senders: long-lived flows through the campus shaper."""

    long_flows: int = Field(default=100, ge=0, description="N, one long flow per sender.")
    base_rtt_s: Seconds = Field(default=0.010, gt=0)
    congestion_control: CongestionControlModel = "cubic"
    line_rate_bps: RateBps | None = Field(
        default=None, gt=0, description="Each sender's NIC rate; default: the bottleneck capacity."
    )
    short_flows: ShortFlows = ShortFlows()
    start_s: Seconds = _set_up_time("the long flows")


class Shaper(_Model):
    """The campus token bucket whose rate is u(t)."""

    initial_rate_bps: RateBps | None = Field(
        default=None, ge=0, description="u(0); default: the bottleneck capacity (no shaping)."
    )
    burst_bytes: Bytes | None = Field(
        default=None,
        gt=0,
        description="Bucket depth; default: as the tc actuator sizes it at each u "
        "(5 ms at u, at least 64 KiB: the largest GSO packet).",
    )
    queue_bytes: Bytes | None = Field(
        default=None,
        gt=0,
        description="The tbf `limit` (bytes that may queue waiting for tokens); default: as "
        "the tc actuator sizes it at each u (10 ms at u + the bucket).",
    )


class Dtn(_Model):
    """A Science DMZ sender (DTN-s) and its parallel streams."""

    name: str = Field(
        default="dtn-1",
        min_length=1,
        max_length=63,
        description="The DTN host's name (a link's spec.dtnHosts[].name): its class at the tap.",
    )
    streams: int = Field(default=8, ge=0, description="M parallel streams; 0 leaves the DTN out.")
    base_rtt_s: Seconds = Field(default=0.100, gt=0)
    congestion_control: CongestionControlModel = "cubic"
    transfer_bytes: Bytes | None = Field(
        default=None,
        gt=0,
        description="Total bytes over all streams (e.g. 10GB); None sends forever.",
    )
    transfer_split: Literal["pooled", "static"] = Field(
        default="pooled",
        description="How transfer_bytes reaches the streams. pooled: each stream takes "
        "128 KiB blocks from one shared pool whenever its backlog runs low, so the transfer "
        "ends when the total is delivered, as with iperf3 -n or GridFTP's mode E blocks; "
        "static: each stream sends transfer_bytes / streams, and the transfer ends with its "
        "slowest stream.",
    )
    line_rate_bps: RateBps | None = Field(
        default=None, gt=0, description="The DTN's NIC rate; default: the bottleneck capacity."
    )
    start_s: Seconds = _set_up_time("the streams")
    stop_s: Seconds | None = Field(
        default=None,
        gt=0,
        description="When its transfer ends: the streams send what they have in flight and "
        "finish (FIN). None: as transfer_bytes says.",
    )
    rate_limit_bps: RateBps | None = Field(
        default=None,
        ge=0,
        description="A cap on the DTN's aggregate sending rate at start (the DTN actuator: "
        "host pacing or a tbf on its egress); default: none.",
    )


class ActivityRule(_Model):
    """The C_TH / T_TH active-flow rule (paper algorithm 7); the paper leaves values open."""

    packets_threshold: int = Field(default=10, ge=1, description="C_TH")
    window_s: Seconds = Field(default=0.1, gt=0, description="T_TH")
    idle_timeout_s: Seconds = Field(default=2.0, gt=0)


class Scenario(_Model):
    """Everything the simulator needs; ``Scenario()`` is the paper's testbed."""

    bottleneck: Bottleneck = Bottleneck()
    campus: Campus = Campus()
    dtn: Dtn = Dtn()
    more_dtns: list[Dtn] = Field(
        default_factory=list,
        max_length=63,
        description="Further DTN hosts behind the same border link (several DTNs per link), "
        "each with its own streams, RTT, congestion control, schedule and cap.",
    )
    shaper: Shaper = Shaper()
    activity: ActivityRule = ActivityRule()
    step_s: Seconds = Field(default=0.001, gt=0, le=0.001, description="Time step, at most 1 ms.")
    sample_time_s: Seconds = Field(default=1.0, gt=0, description="T")
    mss_bytes: int = Field(default=1448, ge=100, le=9000)
    header_bytes: int = Field(
        default=66,
        ge=0,
        le=200,
        description="Frame bytes per segment beyond its payload (Ethernet 14 + IPv4 20 + TCP 20 "
        "+ timestamps 12): the bottleneck, the shaper and the DTN cap count frames, the rates "
        "the twin reports count payload (goodput), as TCP_INFO does.",
    )
    min_tso_segments: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Linux net.ipv4.tcp_min_tso_segs: a loss-based sender's smallest TSO/GSO "
        "burst, which a full drop-tail queue drops as a whole (the lab sets 16).",
    )
    initial_window_segments: int = Field(default=10, ge=1, le=1000, description="IW (RFC 6928).")
    cubic_hystart: bool = Field(
        default=False,
        description="Cubic's HyStart (Linux tcp_cubic hystart=1, the default): slow start ends "
        "without a loss once a round's ACK train spans half the minimum RTT or its RTT rises "
        "4-16 ms above the minimum. false: slow start ends at the first loss (hystart=0).",
    )
    proportional_rate_reduction: bool = Field(
        default=False,
        description="Loss recovery as Linux sends in it (PRR, RFC 6937; tcp_cwnd_reduction): a "
        "Reno or Cubic sender in recovery sends in proportion to what is acknowledged, "
        "ssthresh/prior window per byte while more than ssthresh is in flight, then at most "
        "the acknowledged bytes + 1 segment per step up to ssthresh, and never holds a burst "
        "back (no TSO deferral in recovery). false: after a loss the sender may send its new "
        "window minus what is in flight at once, retransmissions first.",
    )
    bbr_loss_recovery: bool = Field(
        default=False,
        description="BBR's window in loss recovery as Linux's tcp_bbr sets it "
        "(bbr_set_cwnd_to_recover_or_restore): lost segments come off the window, the first "
        "round of a recovery conserves packets (window = in flight + acknowledged), the "
        "window then grows by what is acknowledged towards its target, and leaving recovery "
        "restores the window saved when it began. false: BBR's window ignores losses.",
    )
    paced_drop_weight: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="How much less often a paced sender's (BBR's) bytes are dropped at a full "
        "drop-tail queue than an ACK-clocked sender's, whose packets arrive in clumps: their "
        "weight in the draw of which flow loses the next burst. 0.8 is fitted on the real-TCP "
        "lab's matrix (bench/netsim_vs_lab.py); 1: every byte alike.",
    )
    seed: int = Field(default=1, ge=0)

    @property
    def payload_fraction(self) -> float:
        """Payload per byte of frame for a full segment (1448 / 1514 by default): what a
        rate counted in frames (B, u, a DTN cap) carries as goodput."""
        return self.mss_bytes / (self.mss_bytes + self.header_bytes)

    @property
    def dtns(self) -> list[Dtn]:
        """Every DTN host, ``dtn`` first."""
        return [self.dtn, *self.more_dtns]

    @model_validator(mode="after")
    def _dtns_have_their_own_names(self) -> Scenario:
        names = [d.name for d in self.dtns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"more_dtns: DTN name {', '.join(repeated)} given twice")
        for dtn in self.dtns:
            if dtn.stop_s is not None and dtn.stop_s <= dtn.start_s:
                raise ValueError(f"DTN {dtn.name}: stop_s must be after start_s")
        return self

    @model_validator(mode="after")
    def _sample_is_whole_steps(self) -> Scenario:
        steps = self.sample_time_s / self.step_s
        if abs(steps - round(steps)) > 1e-6:
            raise ValueError("sample_time_s must be a whole number of steps")
        return self


def parse_scenario(raw: Any, source: str = "scenario") -> Scenario:
    """Validate a mapping into a :class:`Scenario`, or raise :class:`ScenarioError`."""
    return validate_mapping(raw, Scenario, source, ScenarioError)


def load_scenario(path: Path) -> Scenario:
    """Read a YAML scenario file; nothing runs if it is invalid."""
    return load_yaml_model(path, Scenario, "scenario", ScenarioError)
