"""The collector's sample stream: ``scidmz.v1.Telemetry`` over gRPC server streaming.

``publish`` hands a sample to every subscriber's queue. A subscriber that falls
``QUEUE_DEPTH`` samples behind loses its oldest ones (counted), never the newest: a
controller wants the present, and the collector must never block on a slow reader.

Served over mutual TLS, the stream answers only its link's controller: a spoofed or
eavesdropping client on the pod network gets PERMISSION_DENIED (or no handshake at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from scidmz.auth.identity import PeerPolicy
from scidmz.auth.mtls import refuse_unless_admitted
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

QUEUE_DEPTH = 64


class TelemetryService(telemetry_pb2_grpc.TelemetryServicer):
    def __init__(self, peers: PeerPolicy | None = None) -> None:
        self.peers = peers
        """Who may subscribe (None: anyone, a plaintext development stream)."""
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
        await refuse_unless_admitted(context, self.peers, "the sample stream")
        queue = self.subscribe()
        try:
            while True:
                yield await queue.get()
        finally:
            self.unsubscribe(queue)

    async def Latest(  # noqa: N802
        self, request: telemetry_pb2.LatestRequest, context: Any
    ) -> telemetry_pb2.StateSample:
        await refuse_unless_admitted(context, self.peers, "the sample stream")
        if self.latest is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no sample yet")
        assert self.latest is not None
        return self.latest
