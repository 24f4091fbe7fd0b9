"""The network state y(t): seven variables in the order the inverse model reads them.

Paper §3.2: R_DTN, R_campus, RTT_DTN, RTT_campus, QD_DTN, QD_campus, AF. Internally SI
(bit/s, seconds, a count). A variable the collector could not measure in a sample (no
packets of that class, no RTT sample yet) is carried with ``valid`` False rather than a
made-up number, so the controller can decide what to do with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
class NetworkState:
    """y(t) at ``measured_at_s`` (monotonic seconds of the collector)."""

    dtn_rate_bps: float
    campus_rate_bps: float
    dtn_rtt_s: float
    campus_rtt_s: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    active_flows: float
    measured_at_s: float

    def vector(self) -> StateVector:
        """The seven values by name, in model order (NaN where not measured)."""
        return StateVector(*(float(getattr(self, name)) for name in STATE_VARIABLES))

    def valid(self) -> tuple[bool, ...]:
        """Per variable: was it measured in this sample?"""
        return tuple(math.isfinite(value) for value in self.vector())
