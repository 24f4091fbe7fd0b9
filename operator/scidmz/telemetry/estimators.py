"""Control-plane estimators of y(t) from what the P4 pipeline reports (paper §3.4).

Pure functions over immutable values: the collector's I/O loop (P4Runtime reads, digests)
feeds them and keeps the returned state. Every function names its paper algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

DEFAULT_RTT_SMOOTHING = 0.875
"""α of the campus RTT EWMA (algorithm 4). The paper does not give it; P4BS (seed 003) uses
0.875, the weight of the previous value, as TCP's SRTT does."""


@dataclass(frozen=True)
class CounterReading:
    """The two per-class direct counters (algorithm 2) read at ``at_s`` (monotonic s)."""

    dtn_bytes: int
    campus_bytes: int
    at_s: float


def class_rates(previous: CounterReading, current: CounterReading) -> tuple[float, float]:
    """Algorithm 3: R = ΔB·8/Δt per class, in bit/s, as ``(dtn, campus)``.

    NaN for both when Δt ≤ 0, and NaN for a class whose counter went backwards (a pipeline
    push or a switch restart resets counters; a negative rate would be nonsense).
    """
    elapsed = current.at_s - previous.at_s
    if elapsed <= 0:
        return math.nan, math.nan
    dtn = current.dtn_bytes - previous.dtn_bytes
    campus = current.campus_bytes - previous.campus_bytes
    return (
        dtn * 8.0 / elapsed if dtn >= 0 else math.nan,
        campus * 8.0 / elapsed if campus >= 0 else math.nan,
    )


@dataclass(frozen=True)
class RttSample:
    """One SEQ→ACK match pushed by the data plane (a digest): flow, class, RTT, when."""

    flow_id: int
    is_dtn: bool
    rtt_s: float
    at_s: float


@dataclass(frozen=True)
class FlowRtt:
    rtt_s: float
    seen_at_s: float


@dataclass(frozen=True)
class RttState:
    """The campus ``flow_vector`` of algorithm 4 and the smoothed values it yields."""

    campus_flows: Mapping[int, FlowRtt] = field(default_factory=lambda: MappingProxyType({}))
    campus_rtt_s: float = math.nan
    dtn_rtt_s: float = math.nan


def update_rtt(
    state: RttState,
    samples: Iterable[RttSample],
    now_s: float,
    flow_timeout_s: float,
    alpha: float = DEFAULT_RTT_SMOOTHING,
) -> RttState:
    """Algorithm 4 for one sample time.

    Campus: every flow keeps its latest RTT; flows silent for ``flow_timeout_s`` leave the
    vector; the vector's mean is smoothed, ``RTT ← α·RTT + (1−α)·mean`` (the first mean is
    taken as is). DTN: the mean of this interval's DTN samples (the paper reads it straight
    from the digest); with none, the previous value stands. NaN until a first sample.
    """
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    flows = dict(state.campus_flows)
    dtn_samples: list[float] = []
    for sample in samples:
        if not math.isfinite(sample.rtt_s) or sample.rtt_s < 0:
            continue
        if sample.is_dtn:
            dtn_samples.append(sample.rtt_s)
        else:
            flows[sample.flow_id] = FlowRtt(sample.rtt_s, sample.at_s)
    flows = {k: v for k, v in flows.items() if now_s - v.seen_at_s <= flow_timeout_s}
    campus = state.campus_rtt_s
    if flows:
        mean = sum(f.rtt_s for f in flows.values()) / len(flows)
        campus = mean if math.isnan(campus) else alpha * campus + (1 - alpha) * mean
    dtn = sum(dtn_samples) / len(dtn_samples) if dtn_samples else state.dtn_rtt_s
    return replace(state, campus_flows=MappingProxyType(flows), campus_rtt_s=campus, dtn_rtt_s=dtn)


def queuing_delays(dtn_register_ns: int, campus_register_ns: int) -> tuple[float, float]:
    """Algorithm 6: the per-class queuing-delay registers (egress − ingress timestamp of the
    last packet, algorithm 5) read every T, in seconds. A zero register has never been
    written (no packet of that class yet): NaN."""
    return (
        dtn_register_ns / 1e9 if dtn_register_ns > 0 else math.nan,
        campus_register_ns / 1e9 if campus_register_ns > 0 else math.nan,
    )


@dataclass(frozen=True)
class FlowEvent:
    """A ``new_flow`` (``started``) or ``timeout`` (FIN or idle) digest of algorithm 7."""

    flow_id: int
    started: bool


def update_active_flows(active: frozenset[int], events: Iterable[FlowEvent]) -> frozenset[int]:
    """Algorithm 8: attach new flows, remove timed-out ones, in digest order; AF = the size.

    A stop for a flow never seen is ignored (its start digest was lost or predates the
    collector), as is a repeated start: the set stays a set."""
    flows = set(active)
    for event in events:
        if event.started:
            flows.add(event.flow_id)
        else:
            flows.discard(event.flow_id)
    return frozenset(flows)
