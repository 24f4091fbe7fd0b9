"""``scidmz shaper``: a tbf on one node's interface, driven over gRPC by the controller.

The DTN actuator caps the DTN's sending rate on the DTN host, which is rarely the node that
shapes the campus, so the controller cannot own both qdiscs. This agent owns one: it
serves ``scidmz.v1.Shaper/SetRate`` (a ``TcActuator`` underneath, the same netlink code
as the campus actuator) and keeps its own fail-safe, so a controller that dies or is cut
off never leaves a stale cap behind: with no ``SetRate`` for ``stale_after_s`` it applies
``failsafe_rate_bps`` (and again on shutdown). Run by the operator it reads both from the
link's mounted ConfigMap and follows the file (``follow_config``): with ``failsafeRate:
target`` the fail-safe cap is R*, and a new R* reaches the agent without a restart.

Run by the operator it serves mutual TLS and answers only its link's controller, and it
clamps every requested cap to the host's bounds (``minRate`` to the link's capacity): an
anonymous ``SetRate(0)`` once cut a DTN's tbf to 8 kbit/s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from scidmz.api.runtime import config_changed, read_config_bytes
from scidmz.auth.identity import PeerPolicy
from scidmz.auth.mtls import refuse_unless_admitted
from scidmz.control.actuators import Actuator, ActuatorError
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)


class ShaperService(telemetry_pb2_grpc.ShaperServicer):
    def __init__(
        self,
        actuator: Actuator,
        failsafe_rate_bps: float,
        stale_after_s: float,
        clock: Callable[[], float] = time.monotonic,
        peers: PeerPolicy | None = None,
        bounds: tuple[float, float] | None = None,
    ) -> None:
        """``peers``: who may set or read the rate (None: anyone, plaintext development
        use); ``bounds``: every requested cap is clamped to (low, high)."""
        if not (math.isfinite(failsafe_rate_bps) and failsafe_rate_bps >= 0):
            raise ValueError(f"the fail-safe rate must be finite and >= 0, got {failsafe_rate_bps}")
        if not (math.isfinite(stale_after_s) and stale_after_s > 0):
            raise ValueError(f"stale-after must be finite and > 0, got {stale_after_s}")
        self.actuator = actuator
        self.failsafe_rate_bps = failsafe_rate_bps
        self.stale_after_s = stale_after_s
        self._clock = clock
        self.last_set_s = clock()
        self.applied_bps: float | None = None
        self.failsafe_active = False
        self.peers = peers
        self.bounds = bounds
        self.clamped = 0
        """Requests raised or lowered into ``bounds``."""

    def clamp(self, rate_bps: float) -> float:
        if self.bounds is None:
            return rate_bps
        low, high = self.bounds
        held = min(max(rate_bps, low), high)
        if held != rate_bps:
            self.clamped += 1
            if self.clamped == 1 or self.clamped % 100 == 0:
                log.warning(
                    "a cap of %.0f bit/s was asked for; held within %.0f..%.0f bit/s "
                    "(%d such requests)", rate_bps, low, high, self.clamped,
                )  # fmt: skip
        return held

    async def SetRate(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.RateLimit, context: Any
    ) -> telemetry_pb2.RateLimit:
        await refuse_unless_admitted(context, self.peers, "the DTN shaper")
        rate = request.rate_bps
        if not math.isfinite(rate) or rate < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"rate_bps must be finite and >= 0, got {rate}"
            )
        rate = self.clamp(rate)
        try:
            self.applied_bps = await self.actuator.apply(rate)
        except ActuatorError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        self.last_set_s = self._clock()
        if self.failsafe_active:
            log.info("rates again: leaving the fail-safe rate")
        self.failsafe_active = False
        return telemetry_pb2.RateLimit(rate_bps=self.applied_bps or 0.0)

    async def GetRate(  # noqa: N802 (gRPC method name)
        self, request: telemetry_pb2.RateRequest, context: Any
    ) -> telemetry_pb2.RateLimit:
        await refuse_unless_admitted(context, self.peers, "the DTN shaper")
        held = await self.actuator.current()
        if held is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no rate in force on the interface")
        return telemetry_pb2.RateLimit(rate_bps=held or 0.0)

    async def check_staleness(self) -> bool:
        """Apply the fail-safe rate when no SetRate came for stale_after; True if so."""
        if self._clock() - self.last_set_s < self.stale_after_s:
            return False
        await self.apply_failsafe(f"no rate for {self.stale_after_s:.1f} s")
        return True

    async def apply_failsafe(self, why: str) -> bool:
        """The fail-safe rate, logged with ``why`` the first time; False if refused."""
        try:
            self.applied_bps = await self.actuator.apply(self.failsafe_rate_bps)
        except ActuatorError as error:
            log.warning("%s: fail-safe rate not applied: %s (retried)", why, error)
            return False
        if not self.failsafe_active:
            log.warning("%s: fail-safe rate %.0f bit/s applied", why, self.failsafe_rate_bps)
        self.failsafe_active = True
        return True

    async def retune(
        self,
        failsafe_rate_bps: float,
        stale_after_s: float,
        bounds: tuple[float, float] | None = None,
    ) -> None:
        """Take a new fail-safe cap, quiet time and bounds; a fail-safe in force moves to
        the new cap at once."""
        if bounds is not None:
            self.bounds = bounds
        if (failsafe_rate_bps, stale_after_s) == (self.failsafe_rate_bps, self.stale_after_s):
            return
        self.failsafe_rate_bps, self.stale_after_s = failsafe_rate_bps, stale_after_s
        log.info(
            "fail-safe now %.0f bit/s after %.1f s without a rate", failsafe_rate_bps, stale_after_s
        )
        if self.failsafe_active:
            await self.apply_failsafe("new fail-safe settings")

    async def watch(self, stop: asyncio.Event, restore_for_s: float = 5.0) -> bool:
        """Check staleness until ``stop``; then leave the fail-safe rate in force, retried
        once a second for ``restore_for_s``. False if it was never taken: the agent then
        says so and exits non-zero instead of claiming a cap it did not set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.stale_after_s / 4)
            except TimeoutError:
                await self.check_staleness()
        self.failsafe_active = False  # say what happens on the way out, once
        deadline = time.monotonic() + restore_for_s
        while not await self.apply_failsafe("stopping"):
            if time.monotonic() >= deadline:
                log.error(
                    "stopped WITHOUT the fail-safe rate %.0f bit/s: the tbf keeps %s",
                    self.failsafe_rate_bps,
                    "an unknown rate" if self.applied_bps is None
                    else f"{self.applied_bps:.0f} bit/s",
                )  # fmt: skip
                return False
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        return True


async def follow_config(
    service: ShaperService,
    path: Path,
    load: Callable[[Path], tuple[float, float, tuple[float, float] | None]],
    period_s: float = 1.0,
) -> None:
    """Read ``path`` every ``period_s`` and retune ``service`` with ``load(path)`` (the
    fail-safe cap, quiet time and bounds) when the file changes. A file ``load`` refuses
    (a ``ValueError``) changes nothing: the agent runs on and says why."""
    seen = read_config_bytes(path)
    while True:
        await asyncio.sleep(period_s)
        current = read_config_bytes(path)
        if not config_changed(seen, current):
            continue
        seen = current
        try:
            failsafe_rate_bps, stale_after_s, bounds = load(path)
        except ValueError as error:
            log.error("config %s not taken, running on as before: %s", path, error)
            continue
        await service.retune(failsafe_rate_bps, stale_after_s, bounds)
