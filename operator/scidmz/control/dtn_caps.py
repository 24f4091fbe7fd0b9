"""Each DTN host's cap: an anti-windup filter per shaped DTN host, on its own target.

Several DTNs share one border link, each with its own policy. The campus loop holds their
sum, R* = Σ R*_i (the paper's loop, unchanged: the aggregate DTN class is its y(t)); a DTN
host with a shaper (``spec.dtnHosts[].shaper``) also gets a cap loop of its own, the
filter of figure 5 with feed-forward R*_i and error R*_i − R_i on the host's own class
(``contract.classes``). That is what holds a BBR DTN that ignores campus shaping, and what
shares the link between DTNs in proportion to their targets rather than to their RTTs and
congestion controls. A DTN without a shaper is held only through the sum.

The campus rate's bounds follow the caps only where they are the whole story: when every
admitted DTN is capped, a campus rate below B − Σ caps leaves capacity no DTN can use, and
while each capped DTN runs at its cap a campus rate above it only fills the bottleneck's
queue (``campus_limits``). With an uncapped DTN neither holds (it can take any room).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scidmz.contract.state import DtnFigures
from scidmz.control.actuators import Actuator
from scidmz.control.antiwindup import FilterOutput, FilterState, Gains, Limits

AT_CAP = 0.06
"""A DTN within this fraction of its cap counts as held by it: a cap's token bucket counts
whole frames, the collector fewer bytes per packet, so a DTN its cap holds reads ~96 % of
it (the twin's 1448 of 1514 bytes)."""

CAP_REACH = 0.15
"""Further than this under its cap, a DTN is held back by something else (a loss,
ProbeRTT, slow start): its cap loop skips the sample rather than wind up on the gap."""


@dataclass(frozen=True)
class DtnControl:
    """One DTN cap's anti-windup filter: feed-forward R*_i, error R*_i − R_i."""

    gains: Gains
    limits: Limits
    failsafe_rate_bps: float | None
    """The cap applied when samples go stale (None: its target)."""
    held: bool = False
    """No policy on the host (``api.holds``): no cap is decided; the shaper agent holds
    its fail-safe (the controller applies the same on its own fail-safe)."""
    host: str = ""
    """The DTN host (``spec.dtnHosts[].name``); empty: the link's only DTN, measured as
    the aggregate DTN class."""
    target_bps: float | None = None
    """R*_i, this host's own target; None: the link's R* (its only DTN)."""

    def target(self, link_target_bps: float) -> float:
        return link_target_bps if self.target_bps is None else self.target_bps

    def failsafe(self, link_target_bps: float) -> float:
        if self.failsafe_rate_bps is not None:
            return self.failsafe_rate_bps
        return self.target(link_target_bps)


class DtnCap:
    """A cap loop's running state: its filter, its actuator, the cap in force."""

    def __init__(self, control: DtnControl, actuator: Actuator) -> None:
        self.control = control
        self.actuator = actuator
        self.filter = FilterState()
        self.applied_bps: float | None = None
        self.last_target_bps: float | None = None

    def in_force(self, applied_bps: float) -> None:
        """``applied_bps`` now holds; the integral restarts from it."""
        self.applied_bps = applied_bps
        self.filter = FilterState(applied_bps=applied_bps)


@dataclass(frozen=True)
class CapStep:
    """What one sample decided for one cap."""

    cap: DtnCap
    cap_bps: float
    """The cap decided."""
    rate_bps: float
    """R_i, the host's measured rate (NaN: not measured now)."""
    before_bps: float | None
    """The cap in force before."""
    output: FilterOutput | None = None
    """The filter's terms (None: not stepped this sample)."""


def measured_rate(
    host: str, dtns: Sequence[DtnFigures], aggregate_bps: float, only_cap: bool
) -> float:
    """R_i, the rate a cap filter holds: its host's own class. The aggregate DTN class
    stands in only for the link's one capped DTN when the sample has no per-host figures
    (a single-DTN scenario, a collector of an older contract). NaN: not measured now (a
    class just programmed), and the cap holds."""
    for figures in dtns:
        if figures.host == host:
            return figures.rate_bps
    if only_cap and (not dtns or not host):
        return aggregate_bps
    return math.nan


def under_its_cap(rate_bps: float, cap_bps: float | None) -> bool:
    """A DTN so far under the cap in force that the cap is not what holds it back."""
    return cap_bps is not None and math.isfinite(rate_bps) and rate_bps < (1 - CAP_REACH) * cap_bps


def all_capped(caps: Iterable[DtnControl], admitted_hosts: Iterable[str]) -> bool:
    """Whether every admitted DTN sends under a cap this controller sets. A cap without a
    host (the link's only DTN) covers whatever is admitted."""
    capped = [c for c in caps if not c.held]
    if any(not c.host for c in capped):
        return True
    names = {c.host for c in capped}
    hosts = list(admitted_hosts)
    return bool(capped) and all(h in names for h in hosts)


def campus_limits(
    limits: Limits,
    capacity_bps: float,
    caps: Sequence[tuple[float, float, float | None]],
    every_dtn_capped: bool,
) -> Limits:
    """The campus rate's bounds given the caps just decided: ``caps`` holds, per shaped
    DTN, (the cap now decided, its measured rate, the cap in force before). Without every
    DTN capped the bounds stay as configured."""
    if not caps or not every_dtn_capped:
        return limits
    complement = capacity_bps - sum(cap for cap, _, _ in caps)
    # the DTNs cannot send above their caps: a campus rate below B − Σ caps only leaves
    # the link idle, so the saturator's floor rises to it (the back-calculation keeps the
    # integral from winding up against it)
    bounded = limits.with_floor(complement)
    at_caps = all(
        held is not None and math.isfinite(rate) and rate >= (1 - AT_CAP) * held
        for _, rate, held in caps
    )
    # DTNs at their caps take exactly their shares: more campus only fills the queue
    return bounded.with_ceiling(complement) if at_caps else bounded
