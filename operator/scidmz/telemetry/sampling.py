"""One sample time of the collector, as a pure function: switch reads + digests -> y(t).

``estimate`` chains the paper's control-plane algorithms over what one poll returned:
rates from counter deltas (algorithm 3), RTTs from the digested SEQ/ACK matches
(algorithm 4), queuing delays from the registers (algorithm 6) and active flows from the
start/stop digests (algorithm 8); beside y(t), the loss ratios, mean queuing delays and
long-flow count of ``telemetry.loss``. The collector's I/O loop keeps the returned state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scidmz.contract.state import NetworkState, PathSignals
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
from scidmz.telemetry.loss import (
    LossReading,
    long_flow_count,
    path_signals,
    queue_delay_at_read,
)

LONG_FLOW_S = 2.0
"""N counts the flows active this long (ours; P4BS leaves its heavy-hitter threshold to a
count-min sketch)."""


@dataclass(frozen=True)
class Poll:
    """What one Read returned: the class counters and the queuing-delay registers."""

    counters: CounterReading
    dtn_queuing_delay_ns: int
    campus_queuing_delay_ns: int
    loss: LossReading | None = None
    """The loss counters and sojourn sums (None: a pipeline without them was read)."""


@dataclass(frozen=True)
class EstimatorSettings:
    rtt_smoothing: float
    flow_timeout_s: float
    capacity_bps: float = math.nan
    """B, for method 2's queue correction (NaN: uncorrected)."""
    long_flow_s: float = LONG_FLOW_S


@dataclass(frozen=True)
class EstimatorState:
    previous: CounterReading | None = None
    rtt: RttState = field(default_factory=RttState)
    active_flows: frozenset[int] = frozenset()
    flow_started_at: Mapping[int, float] = field(default_factory=dict)
    """When each active flow started (collector clock): for N."""
    loss: LossReading | None = None
    queue_delay_s: float = math.nan
    """BR1's queue, as delay, at the previous read (method 2's ΔQ)."""


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
    started_at = _start_times(state.flow_started_at, active, flow_events, now)
    long_flows = long_flow_count(started_at, now, settings.long_flow_s)
    signals = PathSignals(long_flows=float(long_flows))
    queue_delay = queue_delay_at_read(poll.dtn_queuing_delay_ns, poll.campus_queuing_delay_ns)
    if poll.loss is not None and state.loss is not None:
        signals = path_signals(
            state.loss,
            poll.loss,
            settings.capacity_bps,
            (state.queue_delay_s, queue_delay),
            long_flows,
        )
    sample = NetworkState(
        dtn_rate_bps=dtn_rate,
        campus_rate_bps=campus_rate,
        dtn_rtt_s=rtt.dtn_rtt_s,
        campus_rtt_s=rtt.campus_rtt_s,
        dtn_queuing_delay_s=dtn_qd,
        campus_queuing_delay_s=campus_qd,
        active_flows=float(len(active)),
        measured_at_s=now,
        signals=signals,
    )
    return (
        EstimatorState(
            previous=poll.counters,
            rtt=rtt,
            active_flows=active,
            flow_started_at=started_at,
            loss=poll.loss,
            queue_delay_s=queue_delay,
        ),
        sample,
    )


def _start_times(
    before: Mapping[int, float],
    active: frozenset[int],
    events: Sequence[FlowEvent],
    now_s: float,
) -> dict[int, float]:
    """Each active flow's start: its start digest's arrival, or ``now_s`` for a flow known
    only from the register read at a (re)connect (it counts as long L seconds later)."""
    started = {flow: at for flow, at in before.items() if flow in active}
    for event in events:
        if event.started and event.flow_id in active and event.flow_id not in started:
            started[event.flow_id] = event.at_s if math.isfinite(event.at_s) else now_s
    for flow in active:
        started.setdefault(flow, now_s)
    return started
