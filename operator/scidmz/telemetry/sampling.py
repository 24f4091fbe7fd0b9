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

from scidmz.contract.state import DtnFigures, NetworkState, PathSignals
from scidmz.telemetry.classes import ClassCells, ClassDelta, byte_weighted, combined, grown
from scidmz.telemetry.estimators import (
    FlowEvent,
    RttBatch,
    RttSample,
    RttState,
    rate_bps,
    update_active_flows,
    update_flow_classes,
    update_rtt,
)
from scidmz.telemetry.loss import (
    bottleneck_loss,
    long_flow_count,
    mean_queuing_delay_s,
    queue_delay_at_read,
    retransmission_ratio,
)

LONG_FLOW_S = 2.0
"""N counts the flows active this long (ours; P4BS leaves its heavy-hitter threshold to a
count-min sketch)."""


@dataclass(frozen=True)
class Poll:
    """What one Read returned: every measured class's cells, at ``at_s`` (monotonic s)."""

    at_s: float
    campus: ClassCells
    dtns: Mapping[int, ClassCells]
    """DTN class id -> cells, for the classes of the plan the switch was read for."""
    dtn_hosts: Mapping[int, str] = field(default_factory=dict)
    """DTN class id -> the host it stands for (``spec.dtnHosts[].name``)."""
    sum_bits: int = 48
    count_bits: int = 32
    """Widths of the sojourn sum and count registers in the P4Info read."""
    tap_clock_ns: int = 0
    """The switch's ``tap_clock_ns`` register: the time of the last tapped packet, on the
    switch's clock, modulo ``clock_bits``; 0 while it has tapped none."""
    clock_bits: int = 48


@dataclass(frozen=True)
class EstimatorSettings:
    rtt_smoothing: float
    flow_timeout_s: float
    capacity_bps: float = math.nan
    """B, for method 2's queue correction (NaN: uncorrected)."""
    long_flow_s: float = LONG_FLOW_S


@dataclass(frozen=True)
class EstimatorState:
    previous: Poll | None = None
    rtt: RttState = field(default_factory=RttState)
    active_flows: frozenset[int] = frozenset()
    flow_started_at: Mapping[int, float] = field(default_factory=dict)
    """When each active flow started (collector clock): for N."""
    flow_classes: Mapping[int, int] = field(default_factory=dict)
    """Each active flow's class, from its start digest (per-DTN active flows)."""
    queue_delay_s: float = math.nan
    """BR1's queue, as delay, at the previous read (method 2's ΔQ)."""


def covered_s(previous: Poll, poll: Poll) -> float:
    """Δt of algorithm 3: the time the counters' growth between two reads covers, by the
    switch's tap clock (ours: the paper divides by the sample time). A software tap
    counts in batches and the collector's reads land late on a busy host, so the time
    between two reads is not the time the counts cover (the lab's tap at 1 Gb/s: per-T
    rates ±40 %); the tap clock's advance is. It is taken modulo the register's width,
    with the whole wraps (a 32-bit Tofino cell wraps every 4.29 s) from the reads' own
    Δt. Without a clock on either read, or one that did not advance (nothing tapped,
    every count zero), the reads' Δt."""
    read_s = poll.at_s - previous.at_s
    if not (previous.tap_clock_ns and poll.tap_clock_ns) or previous.clock_bits != poll.clock_bits:
        return read_s
    wrap = 1 << poll.clock_bits
    advanced_ns = (poll.tap_clock_ns - previous.tap_clock_ns) % wrap
    if advanced_ns == 0:
        return read_s
    wraps = max(0, round((read_s * 1e9 - advanced_ns) / wrap))
    return (advanced_ns + wraps * wrap) / 1e9


def _queuing_delay_s(register_ns: int, rate: float) -> float:
    """Algorithm 6: a class's queuing-delay register (egress − ingress timestamp of its
    last packet, algorithm 5), in s. A zero register has never been written (no packet of
    that class yet), and a class that sent nothing in the interval has none (the register
    still holds the last packet's, however old): NaN."""
    return register_ns / 1e9 if register_ns > 0 and rate != 0 else math.nan


def estimate(
    state: EstimatorState,
    poll: Poll,
    rtt_samples: RttBatch | Sequence[RttSample],
    flow_events: Sequence[FlowEvent],
    settings: EstimatorSettings,
) -> tuple[EstimatorState, NetworkState]:
    """y(t) at ``poll.at_s``, each DTN host's figures, and the state for the next sample.

    Without a previous reading (the first poll, or the first after a reconnect) the rates
    are NaN. A DTN class counts in the aggregate from its second read on (one admitted
    between two reads joins the sum a sample later, one gone leaves it at once), so the
    aggregate never jumps by a class's whole counter.
    """
    now = poll.at_s
    previous = state.previous
    elapsed = covered_s(previous, poll) if previous is not None else math.nan

    def delta(before: ClassCells | None, cells: ClassCells) -> ClassDelta | None:
        if before is None:
            return None
        return grown(before, cells, poll.sum_bits, poll.count_bits)

    campus = delta(previous.campus if previous else None, poll.campus)
    dtn = {
        c: delta(previous.dtns.get(c) if previous else None, cells)
        for c, cells in poll.dtns.items()
    }
    known = {c: d for c, d in dtn.items() if d is not None}
    dtn_total = combined(known.values())
    rates = {c: rate_bps(d.bytes if d else None, elapsed) for c, d in dtn.items()}
    weights = {c: float(d.bytes) for c, d in known.items() if d.bytes is not None}
    dtn_rate = rate_bps(dtn_total.bytes, elapsed) if dtn_total else math.nan
    campus_rate = rate_bps(campus.bytes if campus else None, elapsed)

    rtt = update_rtt(
        state.rtt, rtt_samples, now, settings.flow_timeout_s, alpha=settings.rtt_smoothing
    )
    dtn_rtts = {c: rtt.dtn_rtt_by_class.get(c, math.nan) for c in poll.dtns}
    qds = {c: _queuing_delay_s(cells.queuing_delay_ns, rates[c]) for c, cells in poll.dtns.items()}
    active = update_active_flows(state.active_flows, flow_events)
    classes = update_flow_classes(state.flow_classes, active, flow_events)
    started_at = _start_times(state.flow_started_at, active, flow_events, now)
    long_flows = long_flow_count(started_at, now, settings.long_flow_s)
    queue_delay = queue_delay_at_read(
        [poll.campus.queuing_delay_ns, *(c.queuing_delay_ns for c in poll.dtns.values())]
    )
    signals = PathSignals(long_flows=float(long_flows))
    if campus is not None:
        signals = PathSignals(
            dtn_retransmission_ratio=retransmission_ratio(dtn_total),
            campus_retransmission_ratio=retransmission_ratio(campus),
            bottleneck_loss_ratio=bottleneck_loss(
                [campus, *known.values()],
                settings.capacity_bps,
                state.queue_delay_s,
                queue_delay,
            ),
            dtn_mean_queuing_delay_s=mean_queuing_delay_s(dtn_total),
            campus_mean_queuing_delay_s=mean_queuing_delay_s(campus),
            long_flows=float(long_flows),
        )
    flows_per_class: dict[int, int] = {}
    for flow_class in classes.values():
        flows_per_class[flow_class] = flows_per_class.get(flow_class, 0) + 1
    dtns = tuple(
        DtnFigures(
            host=poll.dtn_hosts.get(c, ""),
            class_id=c,
            rate_bps=rates[c],
            rtt_s=dtn_rtts[c],
            queuing_delay_s=qds[c],
            mean_queuing_delay_s=mean_queuing_delay_s(dtn[c]),
            retransmission_ratio=retransmission_ratio(dtn[c]),
            active_flows=float(flows_per_class.get(c, 0)),
        )
        for c in sorted(poll.dtns)
    )
    sample = NetworkState(
        dtn_rate_bps=dtn_rate,
        campus_rate_bps=campus_rate,
        dtn_rtt_s=byte_weighted(dtn_rtts, weights),
        campus_rtt_s=rtt.campus_rtt_s,
        dtn_queuing_delay_s=byte_weighted(qds, weights),
        campus_queuing_delay_s=_queuing_delay_s(poll.campus.queuing_delay_ns, campus_rate),
        active_flows=float(len(active)),
        measured_at_s=now,
        signals=signals,
        dtns=dtns,
        interval_s=elapsed,
        tap_clock_ns=poll.tap_clock_ns,
    )
    kept_rtt = RttState(
        flow_ids=rtt.flow_ids,
        flow_rtt_s=rtt.flow_rtt_s,
        flow_seen_s=rtt.flow_seen_s,
        campus_rtt_s=rtt.campus_rtt_s,
        dtn_rtt_by_class={c: v for c, v in rtt.dtn_rtt_by_class.items() if c in poll.dtns},
    )
    return (
        EstimatorState(
            previous=poll,
            rtt=kept_rtt,
            active_flows=active,
            flow_started_at=started_at,
            flow_classes=classes,
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
