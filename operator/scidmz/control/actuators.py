"""Where u(t) (and the DTN cap) go: a Linux tbf qdisc (tc, here or through a `scidmz
shaper` on another node), the software target's simulator, or nowhere.

Every actuator validates what it can at start (``ActuatorError`` stops start-up: an
interface that does not exist, an unreachable simulator) and raises ``ActuatorError`` from
``apply`` on a failure the controller retries at the next sample.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import grpc

from scidmz.contract.tbf import TBF_MAX_RATE_BPS, TBF_MIN_RATE_BPS, tbf_size
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)


class ActuatorError(Exception):
    """The rate could not be applied (or the actuator cannot work at all, at start)."""


class Actuator(Protocol):
    name: str

    async def apply(self, rate_bps: float) -> float:
        """Apply u(t); returns the rate now in force."""
        ...

    async def close(self) -> None: ...


class DryRunActuator:
    """Applies nothing; the controller still logs and exports every u(t)."""

    name = "dryRun"

    def __init__(self) -> None:
        self.applied: list[float] = []

    async def apply(self, rate_bps: float) -> float:
        self.applied.append(rate_bps)
        log.debug("dry run: u = %.0f bit/s", rate_bps)
        return rate_bps

    async def close(self) -> None:
        return


class _GrpcActuator:
    """One unary rate call (``method`` of ``stub_class``, taking a ``message`` with
    ``rate_bps``) on a gRPC channel; a failed call is an ``ActuatorError``."""

    name = "grpc"
    stub_class: Any = None
    method = ""
    message: Any = telemetry_pb2.RateLimit

    def __init__(self, address: str, timeout_s: float = 2.0) -> None:
        self.address = address
        self._timeout = timeout_s
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = self.stub_class(self._channel)

    async def apply(self, rate_bps: float) -> float:
        call = getattr(self._stub, self.method)
        try:
            response = await call(self.message(rate_bps=rate_bps), timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise ActuatorError(
                f"{self.name} actuator {self.address}: {error.code().name}: {error.details()}"
            ) from None
        return float(response.rate_bps)

    async def close(self) -> None:
        await self._channel.close(None)


class SimActuator(_GrpcActuator):
    """``scidmz.v1.SimActuator/SetCampusRateLimit`` on the software target."""

    name = "sim"
    stub_class = telemetry_pb2_grpc.SimActuatorStub
    method = "SetCampusRateLimit"
    message = telemetry_pb2.CampusRateLimit


class SimDtnActuator(_GrpcActuator):
    """``scidmz.v1.SimActuator/SetDtnRateLimit``: the simulated DTN's sending-rate cap."""

    name = "sim-dtn"
    stub_class = telemetry_pb2_grpc.SimActuatorStub
    method = "SetDtnRateLimit"


class ShaperActuator(_GrpcActuator):
    """``scidmz.v1.Shaper/SetRate`` on a `scidmz shaper` (a tbf on another node)."""

    name = "shaper"
    stub_class = telemetry_pb2_grpc.ShaperStub
    method = "SetRate"


def tbf_parameters(rate_bps: float) -> dict[str, object]:
    """pyroute2 ``tc('replace', 'tbf', ...)`` arguments for a rate: burst and queue limit
    sized from it."""
    size = tbf_size(rate_bps)
    return {
        "rate": f"{int(size.rate_bps)}bit",
        "burst": size.burst_bytes,
        "limit": size.limit_bytes,
    }


class TcActuator:
    """The campus aggregate's token bucket: the root tbf qdisc of ``interface`` (created
    if absent, replaced in place after: `tc qdisc change` semantics, ~ms to apply).
    Build it with ``await TcActuator.open(...)``."""

    name = "tc"

    def __init__(self, interface: str, ipr: object, index: int) -> None:
        self.interface = interface
        self._ipr = ipr
        self._index = index

    @classmethod
    async def open(cls, interface: str, netns: str | None = None) -> TcActuator:
        from pyroute2 import AsyncIPRoute

        ipr = AsyncIPRoute(netns=netns) if netns else AsyncIPRoute()
        try:
            await ipr.setup_endpoint()
            links = await ipr.link_lookup(ifname=interface)
        except Exception as error:  # a missing namespace, no CAP_NET_ADMIN, ...
            ipr.close()
            raise ActuatorError(f"tc actuator: {error}") from None
        if not links:
            ipr.close()
            where = f" in network namespace {netns}" if netns else ""
            raise ActuatorError(f"interface {interface} does not exist{where}")
        return cls(interface, ipr, links[0])

    async def apply(self, rate_bps: float) -> float:
        if not math.isfinite(rate_bps) or rate_bps < 0:
            raise ActuatorError(f"rate must be finite and >= 0, got {rate_bps}")
        parameters = tbf_parameters(rate_bps)
        try:
            await self._ipr.tc("replace", "tbf", self._index, **parameters)  # type: ignore[attr-defined]
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            raise ActuatorError(f"tc on {self.interface}: {error}") from None
        return min(max(rate_bps, TBF_MIN_RATE_BPS), TBF_MAX_RATE_BPS)

    async def close(self) -> None:
        self._ipr.close()  # type: ignore[attr-defined]
