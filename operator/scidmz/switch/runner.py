"""Run the software target: the P4Runtime service, the packet source's clock, the sim hook.

``Target`` owns one device. Its tick loop advances the source on monotonic deadlines
(overruns are counted, never accumulated as drift), feeds the observation to the
dataplane, and delivers due digest lists to the primary controller. The simulator source
also serves ``scidmz.v1.SimActuator`` on the same gRPC address, through which the
controller's ``sim`` actuator sets u(t).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto import p4i

from scidmz.auth.channels import server_options
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.switch.netsim_source import NetsimSource
from scidmz.switch.observation import PacketSource
from scidmz.switch.server import TargetService, add_p4runtime, add_port, refuse_unless_named

log = logging.getLogger(__name__)

DEFAULT_TICK_S = 0.005


@dataclass
class TickStats:
    ticks: int = 0
    overruns: int = 0


async def _check_rate(rate: float, context: Any) -> None:
    if not math.isfinite(rate) or rate < 0:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"rate_bps must be finite and >= 0, got {rate}"
        )


JOURNAL_DEPTH = 100_000
"""Actuations kept for GetActuations (a day of both shapers at T = 1 s)."""


class SimActuatorService(telemetry_pb2_grpc.SimActuatorServicer):
    """u(t) into the simulated shaper; the simulator's ground truth out."""

    def __init__(
        self,
        source: NetsimSource,
        clock: Callable[[], float] = time.monotonic,
        clients: frozenset[str] | None = None,
    ) -> None:
        """``clients``: the client certificates' common names it answers (None: every
        client the TLS handshake let in)."""
        self.source = source
        self._clock = clock
        self.clients = clients
        self._journal: deque[telemetry_pb2.Actuation] = deque(maxlen=JOURNAL_DEPTH)
        self._journaled = 0  # actuations ever recorded: the index after the newest

    def _record(self, shaper: str, rate_bps: float) -> None:
        self._journal.append(
            telemetry_pb2.Actuation(monotonic_s=self._clock(), shaper=shaper, rate_bps=rate_bps)
        )
        self._journaled += 1

    async def SetCampusRateLimit(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.CampusRateLimit, context: Any
    ) -> telemetry_pb2.CampusRateLimit:
        await refuse_unless_named(context, self.clients, "the simulator's actuators")
        await _check_rate(request.rate_bps, context)
        self.source.set_campus_rate_limit(request.rate_bps)
        self._record("campus", self.source.sim.campus_rate_limit_bps)
        return telemetry_pb2.CampusRateLimit(rate_bps=self.source.sim.campus_rate_limit_bps)

    async def SetDtnRateLimit(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.RateLimit, context: Any
    ) -> telemetry_pb2.RateLimit:
        await refuse_unless_named(context, self.clients, "the simulator's actuators")
        await _check_rate(request.rate_bps, context)
        names = [d.name for d in self.source.sim.scenario.dtns]
        host = request.dtn_host or names[0]
        if host not in names:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no DTN host {host[:63]!r} in the simulated scenario"
            )
        group = names.index(host)
        self.source.sim.set_dtn_rate_limit(request.rate_bps, group)
        cap = self.source.sim.group_rate_limit_bps(group) or 0.0
        self._record("dtn" if group == 0 else f"dtn:{host}", cap)
        return telemetry_pb2.RateLimit(rate_bps=cap, dtn_host=host)

    async def SetBottleneckBuffer(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.BufferSize, context: Any
    ) -> telemetry_pb2.BufferSize:
        await refuse_unless_named(context, self.clients, "the simulator's actuators")
        try:
            self.source.sim.set_bottleneck_buffer(request.bytes)
        except ValueError as error:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(error))
        return telemetry_pb2.BufferSize(bytes=self.source.sim.bottleneck_buffer_bytes)

    async def GetActuations(  # noqa: N802
        self, request: telemetry_pb2.ActuationsRequest, context: Any
    ) -> telemetry_pb2.Actuations:
        await refuse_unless_named(context, self.clients, "the simulator's actuators")
        first = self._journaled - len(self._journal)  # the oldest index still kept
        start = max(request.after, first) - first
        return telemetry_pb2.Actuations(
            actuations=list(itertools.islice(self._journal, start, None)), next=self._journaled
        )

    async def GetGroundTruth(  # noqa: N802
        self, request: telemetry_pb2.GroundTruthRequest, context: Any
    ) -> telemetry_pb2.GroundTruth:
        await refuse_unless_named(context, self.clients, "the simulator's actuators")
        if not self.source.truth:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the simulator has not ticked yet")
        point = self.source.truth[-1]
        return telemetry_pb2.GroundTruth(
            sim_time_s=point.sim_s,
            dtn_tap_bytes=point.dtn_tap_bytes,
            campus_tap_bytes=point.campus_tap_bytes,
            dtn_queuing_delay_s=point.dtn_queuing_delay_s,
            campus_queuing_delay_s=point.campus_queuing_delay_s,
            dtn_rtt_s=point.dtn_rtt_s,
            campus_rtt_s=point.campus_rtt_s,
            active_flows=point.active_flows,
            # the limits in force now, not at the tick: what an actuator reads back
            campus_rate_limit_bps=self.source.sim.campus_rate_limit_bps,
            dtn_rate_limit_bps=self.source.sim.dtn_rate_limit_bps or 0.0,
            bottleneck_buffer_bytes=self.source.sim.bottleneck_buffer_bytes,
            bottleneck_dropped_bytes=point.bottleneck_dropped_bytes,
            bottleneck_departed_bytes=point.dtn_departed_bytes + point.campus_departed_bytes,
            dtn_host_rate_limits_bps={
                d.name: self.source.sim.group_rate_limit_bps(g) or 0.0
                for g, d in enumerate(self.source.sim.scenario.dtns)
            },
        )


class Target:
    """One software P4Runtime device fed by a packet source."""

    def __init__(
        self,
        p4info: p4i.P4Info,
        source: PacketSource,
        device_id: int = 1,
        tick_s: float = DEFAULT_TICK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.service = TargetService(
            device_id, p4info, ports=source.ports, on_settings=source.set_activity_rule
        )
        self.tick_s = tick_s
        self.stats = TickStats()
        self._clock = clock
        self.p4runtime_clients: frozenset[str] | None = None
        """With TLS, the client certificates' common names P4Runtime answers (None: all)."""
        self.actuator_clients: frozenset[str] | None = None
        """... and those the simulator's actuators answer."""
        self._server: grpc.aio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def start(self, listen: str, credentials: grpc.ServerCredentials | None = None) -> None:
        """Listen on ``listen`` (host:port), with TLS when given ``credentials``, and start
        ticking."""
        server = grpc.aio.server(options=server_options(keepalive=False))
        add_p4runtime(self.service, server, self.p4runtime_clients)
        if isinstance(self.source, NetsimSource):
            telemetry_pb2_grpc.add_SimActuatorServicer_to_server(
                SimActuatorService(self.source, clients=self.actuator_clients), server
            )
        add_port(server, listen, credentials)
        await server.start()
        self._server = server
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self, grace_s: float = 0.5) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self._server is not None:
            await self._server.stop(grace_s)

    async def failed(self) -> BaseException:
        """Wait until the tick loop dies (a bug in a source); returns why."""
        assert self._ticker is not None, "start() first"
        try:
            await asyncio.shield(self._ticker)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            return error
        return RuntimeError("the tick loop ended")

    def tick(self, elapsed_s: float) -> None:
        """One step of the data plane: advance the source, observe, deliver digests."""
        observation = self.source.advance(elapsed_s)
        now_ns = time.monotonic_ns()
        self.service.dataplane.observe(observation, now_ns)
        self.service.deliver_digests(now_ns, time.time_ns())
        self.stats.ticks += 1

    async def _tick_forever(self) -> None:
        last = self._clock()
        deadline = last + self.tick_s
        while True:
            await asyncio.sleep(max(0.0, deadline - self._clock()))
            now = self._clock()
            try:
                self.tick(now - last)
            except Exception:
                log.exception("the packet source failed; the target stops measuring")
                raise
            last = now
            deadline += self.tick_s
            if deadline < self._clock():
                self.stats.overruns += 1
                deadline = self._clock() + self.tick_s
