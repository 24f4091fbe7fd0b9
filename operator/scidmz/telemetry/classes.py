"""Per-class reads of the pipeline and what changed between two of them.

The switch keeps cumulative counters and registers per class id (``contract.pipeline``:
the campus and one class per DTN host). ``ClassCells`` is one class's cells at one read;
``grown`` is what happened to a class between two reads, and ``combined`` sums the DTN
classes into the one DTN class the paper's seven variables describe. Summing deltas
rather than cells lets a DTN class appear or go between two reads (a policy admitted or
gone) without a jump in the aggregate: a class counts only once it has two reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ClassCells:
    """One class's cumulative cells at one read (0: never written)."""

    bytes: int = 0
    """Its classification entries' direct byte counters (algorithm 2), summed."""
    queuing_delay_ns: int = 0
    """``queuing_delay_ns[class]``: the last sojourn in BR1 (algorithm 5)."""
    ingress_packets: int = 0
    ingress_bytes: int = 0
    retrans_packets: int = 0
    egress_packets: int = 0
    egress_bytes: int = 0
    sojourn_sum: int = 0
    """In units of 2^QD_SUM_SHIFT ns, wrapping at the register's width."""
    sojourn_count: int = 0


@dataclass(frozen=True)
class ClassDelta:
    """What one class did between two reads. A counter that went backwards (a pipeline
    push, a switch restart, an entry re-installed) is None: its rate is unknown."""

    bytes: int | None
    ingress_packets: int | None
    ingress_bytes: int | None
    retrans_packets: int | None
    egress_packets: int | None
    egress_bytes: int | None
    sojourn_sum: int
    sojourn_count: int


def _grown(now: int, before: int) -> int | None:
    return now - before if now >= before else None


def grown(before: ClassCells, now: ClassCells, sum_bits: int, count_bits: int) -> ClassDelta:
    """Counters by their increase; the sojourn registers modulo their widths (they wrap as
    the program adds)."""
    return ClassDelta(
        bytes=_grown(now.bytes, before.bytes),
        ingress_packets=_grown(now.ingress_packets, before.ingress_packets),
        ingress_bytes=_grown(now.ingress_bytes, before.ingress_bytes),
        retrans_packets=_grown(now.retrans_packets, before.retrans_packets),
        egress_packets=_grown(now.egress_packets, before.egress_packets),
        egress_bytes=_grown(now.egress_bytes, before.egress_bytes),
        sojourn_sum=(now.sojourn_sum - before.sojourn_sum) % (1 << sum_bits),
        sojourn_count=(now.sojourn_count - before.sojourn_count) % (1 << count_bits),
    )


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def combined(deltas: Iterable[ClassDelta]) -> ClassDelta | None:
    """Several classes as one (None: no class had two reads). A counter unknown in any
    class is unknown in the sum."""
    rows = list(deltas)
    if not rows:
        return None
    return ClassDelta(
        bytes=_sum(d.bytes for d in rows),
        ingress_packets=_sum(d.ingress_packets for d in rows),
        ingress_bytes=_sum(d.ingress_bytes for d in rows),
        retrans_packets=_sum(d.retrans_packets for d in rows),
        egress_packets=_sum(d.egress_packets for d in rows),
        egress_bytes=_sum(d.egress_bytes for d in rows),
        sojourn_sum=sum(d.sojourn_sum for d in rows),
        sojourn_count=sum(d.sojourn_count for d in rows),
    )


def byte_weighted(values: Mapping[int, float], weights: Mapping[int, float]) -> float:
    """Σ w·v / Σ w over the classes with a finite value and a positive weight; with no
    such weight, the plain mean of the finite values; NaN when none is finite.

    Ours, not the paper's (it has one DTN): how the DTN classes' RTTs and queuing delays
    become the one DTN value the inverse model reads, weighted by the bytes each class
    sent in the interval, so the aggregate is what the bulk of the DTN traffic saw. With
    one DTN class it is that class's value, the paper's definition."""
    finite = {k: v for k, v in values.items() if math.isfinite(v)}
    if not finite:
        return math.nan
    weighted = {k: w for k, w in weights.items() if k in finite and math.isfinite(w) and w > 0}
    total = sum(weighted.values())
    if total > 0:
        return sum(finite[k] * w for k, w in weighted.items()) / total
    return sum(finite.values()) / len(finite)
