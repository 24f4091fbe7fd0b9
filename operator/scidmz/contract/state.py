"""The network state y(t): seven variables in the order the inverse model reads them.

Paper §3.2: R_DTN, R_campus, RTT_DTN, RTT_campus, QD_DTN, QD_campus, AF. Internally SI
(bit/s, seconds, a count). A variable the collector could not measure in a sample (no
packets of that class, no RTT sample yet) is carried with ``valid`` False rather than a
made-up number, so the controller can decide what to do with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import NamedTuple


class StateVector(NamedTuple):
    """The seven values of y(t) by name; as a tuple they are in model order, so
    ``tuple(y)`` is what the inverse model reads (NaN where not measured)."""

    dtn_rate_bps: float
    campus_rate_bps: float
    dtn_rtt_s: float
    campus_rtt_s: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    active_flows: float


STATE_VARIABLES: tuple[str, ...] = StateVector._fields


@dataclass(frozen=True)
class PathSignals:
    """What the tap says beyond y(t) (P4BS, seed 003 §IV): losses, the mean queuing delay
    over the sample time, and the long-flow count N. Not model inputs; NaN where not
    measured (no packets of the class in the interval, the first sample)."""

    dtn_retransmission_ratio: float = math.nan
    """Resent / sent data packets of the DTN class at BR1's ingress (P4BS loss method 1:
    path loss, the campus shaper's and BR1's drops alike, seen as resent)."""
    campus_retransmission_ratio: float = math.nan
    bottleneck_loss_ratio: float = math.nan
    """BR1's own drops over the bytes that entered it, both classes (method 2: 1 - (egress
    + queue growth) / ingress, the queue growth from the mean queuing delay times B)."""
    dtn_mean_queuing_delay_s: float = math.nan
    """The mean BR1 sojourn of the class's packets that left in the interval."""
    campus_mean_queuing_delay_s: float = math.nan
    long_flows: float = math.nan
    """N: flows active for at least the long-flow age (P4BS's long flows)."""


PATH_SIGNALS: tuple[str, ...] = (
    "dtn_retransmission_ratio",
    "campus_retransmission_ratio",
    "bottleneck_loss_ratio",
    "dtn_mean_queuing_delay_s",
    "campus_mean_queuing_delay_s",
    "long_flows",
)


@dataclass(frozen=True)
class DtnFigures:
    """One DTN host's own class in a sample (several DTNs on one link): what y(t) and the
    path signals say of the DTN class, for this host alone. NaN where not measured."""

    host: str
    """The link's ``spec.dtnHosts[].name``."""
    class_id: int
    rate_bps: float = math.nan
    rtt_s: float = math.nan
    queuing_delay_s: float = math.nan
    mean_queuing_delay_s: float = math.nan
    retransmission_ratio: float = math.nan
    active_flows: float = math.nan
    """Its flows active by the activity rule (those whose start digest was seen)."""


DTN_FIGURES: tuple[str, ...] = tuple(
    f.name for f in fields(DtnFigures) if f.name not in ("host", "class_id")
)
"""The measured figures of ``DtnFigures``, in field order (what the sample stream carries)."""


@dataclass(frozen=True)
class NetworkState:
    """y(t) at ``measured_at_s`` (monotonic seconds of the collector). The DTN variables
    are the DTN classes' aggregate (the paper's one DTN class: rates summed, RTT and
    queuing delay byte-weighted, see ``telemetry.classes.byte_weighted``); ``dtns`` holds
    each DTN host's own figures."""

    dtn_rate_bps: float
    campus_rate_bps: float
    dtn_rtt_s: float
    campus_rtt_s: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    active_flows: float
    measured_at_s: float
    signals: PathSignals = field(default_factory=PathSignals)
    dtns: tuple[DtnFigures, ...] = ()
    interval_s: float = math.nan
    """Δt the rates cover: the switch's tap clock between two reads (or the reads' own
    Δt without one); NaN for a first read."""
    tap_clock_ns: int = 0
    """The switch's tap clock at the interval's end (its own clock, modulo its register's
    width); 0: none."""

    def vector(self) -> StateVector:
        """The seven values by name, in model order (NaN where not measured)."""
        return StateVector(*(float(getattr(self, name)) for name in STATE_VARIABLES))

    def valid(self) -> tuple[bool, ...]:
        """Per variable: was it measured in this sample?"""
        return tuple(math.isfinite(value) for value in self.vector())
