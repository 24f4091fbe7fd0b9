"""The collector's sample stream: ``scidmz.v1.Telemetry`` over gRPC server streaming.

``publish`` hands a sample to every subscriber's queue. A subscriber that falls
``QUEUE_DEPTH`` samples behind loses its oldest ones (counted), never the newest: a
controller wants the present, and the collector must never block on a slow reader.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.telemetry.state import STATE_VARIABLES, NetworkState, StateVector

QUEUE_DEPTH = 64


def to_message(
    sample: NetworkState,
    sequence: int,
    wall_time_s: float,
    interval_s: float,
    stale: bool,
    policy: str,
) -> telemetry_pb2.StateSample:
    measured = Timestamp()
    measured.FromNanoseconds(round(wall_time_s * 1e9))
    return telemetry_pb2.StateSample(
        sequence=sequence,
        measured_at=measured,
        interval_s=interval_s if math.isfinite(interval_s) else 0.0,
        dtn_rate_bps=sample.dtn_rate_bps,
        campus_rate_bps=sample.campus_rate_bps,
        dtn_rtt_s=sample.dtn_rtt_s,
        campus_rtt_s=sample.campus_rtt_s,
        dtn_queuing_delay_s=sample.dtn_queuing_delay_s,
        campus_queuing_delay_s=sample.campus_queuing_delay_s,
        active_flows=sample.active_flows,
        valid=list(sample.valid()) if not stale else [False] * 7,
        stale=stale,
        policy=policy,
    )


def state_message(
    values: Sequence[float], sequence: int, policy: str = ""
) -> telemetry_pb2.StateSample:
    """A fresh sample from the seven values in model order, for in-process feeds (the
    control-quality experiments, benchmarks); validity is each value's finiteness."""
    if len(values) != len(STATE_VARIABLES):
        raise ValueError(f"a state has {len(STATE_VARIABLES)} values, got {len(values)}")
    state = NetworkState(**dict(zip(STATE_VARIABLES, values, strict=True)), measured_at_s=0.0)
    return to_message(state, sequence, 0.0, math.nan, stale=False, policy=policy)


def from_message(sample: telemetry_pb2.StateSample) -> StateVector:
    """y(t) of a sample, by name: NaN where the collector marked a value not measured
    (a stale sample marks them all), the inverse of ``to_message``."""
    values = StateVector(*(float(getattr(sample, name)) for name in STATE_VARIABLES))
    valid = list(sample.valid)
    if len(valid) != len(STATE_VARIABLES):
        return values
    return StateVector(*(v if ok else math.nan for v, ok in zip(values, valid, strict=True)))


class TelemetryService(telemetry_pb2_grpc.TelemetryServicer):
    def __init__(self) -> None:
        self.latest: telemetry_pb2.StateSample | None = None
        self.dropped = 0
        self._subscribers: set[asyncio.Queue[telemetry_pb2.StateSample]] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, message: telemetry_pb2.StateSample) -> None:
        self.latest = message
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
                self.dropped += 1
            queue.put_nowait(message)

    def subscribe(self) -> asyncio.Queue[telemetry_pb2.StateSample]:
        """An in-process subscription (what Subscribe serves); ``unsubscribe`` ends it."""
        queue: asyncio.Queue[telemetry_pb2.StateSample] = asyncio.Queue(QUEUE_DEPTH)
        if self.latest is not None:
            queue.put_nowait(self.latest)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[telemetry_pb2.StateSample]) -> None:
        self._subscribers.discard(queue)

    async def Subscribe(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.SubscribeRequest, context: Any
    ) -> AsyncIterator[telemetry_pb2.StateSample]:
        queue = self.subscribe()
        try:
            while True:
                yield await queue.get()
        finally:
            self.unsubscribe(queue)

    async def Latest(  # noqa: N802
        self, request: telemetry_pb2.LatestRequest, context: Any
    ) -> telemetry_pb2.StateSample:
        if self.latest is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no sample yet")
        assert self.latest is not None
        return self.latest
