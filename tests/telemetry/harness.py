"""Collector <-> software target <-> netsim, over real gRPC on loopback, in one event loop."""

from __future__ import annotations

import asyncio
import bisect
import collections
import ipaddress
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import grpc

from scidmz.contract.pipeline import FIRST_DTN_CLASS, build_p4info
from scidmz.netsim.scenario import Scenario
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.switch.netsim_source import NetsimSource, TruthPoint, Wiring
from scidmz.switch.runner import Target
from scidmz.telemetry.collector import Collector, CollectorSettings
from scidmz.telemetry.exporter import Snapshot
from scidmz.telemetry.program import DtnClass, Plan
from scidmz.telemetry.sampling import EstimatorSettings
from scidmz.testenv.cluster import free_port

WIRING = Wiring(
    campus_port=1,
    dtn_port=2,
    bottleneck_port=3,
    dtn_address=ipaddress.ip_address("203.0.113.10"),
    campus_address=ipaddress.ip_address("198.51.100.10"),
)
PLAN = Plan(
    dtn_classes=(DtnClass("dtn-1", "203.0.113.10/32", FIRST_DTN_CLASS),),
    campus_prefix="198.51.100.0/24",
    campus_port=1,
    dtn_port=2,
    bottleneck_port=3,
    active_flow_packets=10,
    active_flow_window_ns=100_000_000,
    idle_timeout_ns=2_000_000_000,
    rtt_horizon_ns=1_000_000_000,
)


def settings(
    address: str, election_id: int = 10, sample_time_s: float = 1.0, **changes: object
) -> CollectorSettings:
    base = CollectorSettings(
        link="p",
        address=address,
        device_id=1,
        election_id=election_id,
        sample_time_s=sample_time_s,
        plan=PLAN,
        estimator=EstimatorSettings(rtt_smoothing=0.875, flow_timeout_s=2.0),
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
        rpc_timeout_s=2.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@asynccontextmanager
async def running_target(
    scenario: Scenario | None = None,
    port: int | None = None,
    wiring: Wiring = WIRING,
    arch: str = "v1model",
    credentials: grpc.ServerCredentials | None = None,
) -> AsyncIterator[tuple[Target, str]]:
    port = port or free_port()
    source = NetsimSource(scenario or Scenario(), wiring)
    target = Target(build_p4info(arch), source)  # type: ignore[arg-type]
    address = f"127.0.0.1:{port}"
    await target.start(address, credentials)
    try:
        yield target, address
    finally:
        await target.stop(0)


@asynccontextmanager
async def running_collector(collector_settings: CollectorSettings) -> AsyncIterator[Collector]:
    collector = Collector(collector_settings)
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    try:
        yield collector
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.05) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(step_s)


@dataclass(frozen=True)
class Comparison:
    """One collector sample next to the simulator's truth over the same interval."""

    sequence: int
    measured: tuple[float, ...]
    truth: tuple[float, ...]
    departed_rates: tuple[float, float]


def truth_at(points: list[TruthPoint], wall_s: float) -> TruthPoint:
    """The last tick at or before ``wall_s`` (what a read at that moment saw)."""
    times = [p.wall_s for p in points]
    index = bisect.bisect_right(times, wall_s) - 1
    return points[max(index, 0)]


def served_ticks(points: list[TruthPoint], snapshots: list[Snapshot]) -> dict[int, TruthPoint]:
    """The tick each snapshot's counter read saw, by sequence, found by its byte counters.

    The target's class counters are the tap's bytes since the collector's entries went in,
    so ``int(tap bytes) − counter`` is one constant per class for the tick a read served:
    the constant every snapshot's neighbourhood agrees on. Matched by the read's wall-clock
    stamp instead, a tick that ran while the answer was in flight could land on the wrong
    side of it: 2-8 ms of simulated time in 3 of 21 samples on a loaded host, and in CI runs
    one sample 12 % high and the next 12 % low, their sum right.

    The campus counter alone settles the constant: it is one class's whole bytes, exact at
    every tick. The DTN counter is the sum of the hosts' counters, each taking the whole
    bytes of its own count, so its constant wanders by a byte or two from read to read; a
    vote on the pair split the true constant's votes between those values, and on a link
    whose classes are both held at a fixed rate (every byte count linear in time) a pair
    shifted by a few ticks could tie with it and win."""
    times = [p.wall_s for p in points]
    votes: collections.Counter[int] = collections.Counter()
    for snap in snapshots:
        stamp = snap.state.measured_at_s
        low = bisect.bisect_left(times, stamp - 1.0)
        high = bisect.bisect_right(times, stamp + 1.0)
        votes.update({int(p.campus_tap_bytes) - snap.campus_bytes for p in points[low:high]})
    if not votes:
        return {}
    ((campus_offset, _),) = votes.most_common(1)
    by_campus: dict[int, list[TruthPoint]] = collections.defaultdict(list)
    for point in points:
        by_campus[int(point.campus_tap_bytes)].append(point)
    candidates = {
        s.sequence: (s, by_campus.get(s.campus_bytes + campus_offset, [])) for s in snapshots
    }
    dtn_votes = collections.Counter(
        int(p.dtn_tap_bytes) - s.dtn_bytes for s, found in candidates.values() for p in found
    )
    if not dtn_votes:
        return {}
    ((dtn_offset, _),) = dtn_votes.most_common(1)

    def tick_of(snap: Snapshot, found: list[TruthPoint]) -> TruthPoint | None:
        for slack in DTN_HOST_SLACK_BYTES:
            for point in found:
                if int(point.dtn_tap_bytes) == snap.dtn_bytes + dtn_offset + slack:
                    return point
        return None

    ticks = {sequence: tick_of(s, found) for sequence, (s, found) in candidates.items()}
    return {sequence: point for sequence, point in ticks.items() if point is not None}


DTN_HOST_SLACK_BYTES = (0, -1, 1, -2, 2)


def compare(
    points: list[TruthPoint],
    a: TruthPoint,
    b: TruthPoint,
    measured: tuple[float, ...],
    sequence: int,
) -> Comparison:
    """The truth over the ticks from ``a`` (the interval's first read) to ``b`` (its last)."""
    span = b.sim_s - a.sim_s
    inside = [p for p in points if a.wall_s < p.wall_s <= b.wall_s]
    dtn_rtts = [p.dtn_rtt_s for p in inside if math.isfinite(p.dtn_rtt_s)]
    truth = (
        (b.dtn_tap_bytes - a.dtn_tap_bytes) * 8 / span,
        (b.campus_tap_bytes - a.campus_tap_bytes) * 8 / span,
        sum(dtn_rtts) / len(dtn_rtts) if dtn_rtts else math.nan,
        b.campus_rtt_s,
        b.dtn_queuing_delay_s,
        b.campus_queuing_delay_s,
        float(b.active_flows),
    )
    departed = (
        (b.dtn_departed_bytes - a.dtn_departed_bytes) * 8 / span,
        (b.campus_departed_bytes - a.campus_departed_bytes) * 8 / span,
    )
    return Comparison(sequence, measured, truth, departed)


async def subscribe(address: str, count: int, timeout_s: float) -> list[telemetry_pb2.StateSample]:
    """``count`` samples from a collector's stream, over gRPC."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = telemetry_pb2_grpc.TelemetryStub(channel)
        samples = []
        call = stub.Subscribe(telemetry_pb2.SubscribeRequest(), timeout=timeout_s)
        async for sample in call:
            samples.append(sample)
            if len(samples) >= count:
                call.cancel()
                break
        return samples
