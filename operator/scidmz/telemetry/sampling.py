"""One sample time of the collector, as a pure function: switch reads + digests -> y(t).

``estimate`` chains the paper's control-plane algorithms over what one poll returned:
rates from counter deltas (algorithm 3), RTTs from the digested SEQ/ACK matches
(algorithm 4), queuing delays from the registers (algorithm 6) and active flows from the
start/stop digests (algorithm 8). The collector's I/O loop keeps the returned state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from scidmz.contract.state import NetworkState
from scidmz.telemetry.estimators import (
    CounterReading,
    FlowEvent,
    RttBatch,
    RttSample,
    RttState,
    class_rates,
    queuing_delays,
    update_active_flows,
    update_rtt,
)


@dataclass(frozen=True)
class Poll:
    """What one Read returned: the class counters and the queuing-delay registers."""

    counters: CounterReading
    dtn_queuing_delay_ns: int
    campus_queuing_delay_ns: int


@dataclass(frozen=True)
class EstimatorSettings:
    rtt_smoothing: float
    flow_timeout_s: float


@dataclass(frozen=True)
class EstimatorState:
    previous: CounterReading | None = None
    rtt: RttState = field(default_factory=RttState)
    active_flows: frozenset[int] = frozenset()


def estimate(
    state: EstimatorState,
    poll: Poll,
    rtt_samples: RttBatch | Sequence[RttSample],
    flow_events: Sequence[FlowEvent],
    settings: EstimatorSettings,
) -> tuple[EstimatorState, NetworkState]:
    """y(t) at ``poll.counters.at_s``, and the state for the next sample.

    Without a previous reading (the first poll, or the first after a reconnect) the rates
    are NaN. A class that sent nothing in the interval has no queuing delay (its register
    still holds the last packet's, however old).
    """
    now = poll.counters.at_s
    if state.previous is None:
        dtn_rate = campus_rate = math.nan
    else:
        dtn_rate, campus_rate = class_rates(state.previous, poll.counters)
    rtt = update_rtt(
        state.rtt, rtt_samples, now, settings.flow_timeout_s, alpha=settings.rtt_smoothing
    )
    dtn_qd, campus_qd = queuing_delays(poll.dtn_queuing_delay_ns, poll.campus_queuing_delay_ns)
    if dtn_rate == 0:
        dtn_qd = math.nan
    if campus_rate == 0:
        campus_qd = math.nan
    active = update_active_flows(state.active_flows, flow_events)
    sample = NetworkState(
        dtn_rate_bps=dtn_rate,
        campus_rate_bps=campus_rate,
        dtn_rtt_s=rtt.dtn_rtt_s,
        campus_rtt_s=rtt.campus_rtt_s,
        dtn_queuing_delay_s=dtn_qd,
        campus_queuing_delay_s=campus_qd,
        active_flows=float(len(active)),
        measured_at_s=now,
    )
    return EstimatorState(previous=poll.counters, rtt=rtt, active_flows=active), sample
