"""Where u(t) (and the DTN cap) go: a Linux tbf qdisc (tc, here or through a `scidmz
shaper` on another node), the software target's simulator, or nowhere.

Every actuator validates what it can at start (``ActuatorError`` stops start-up: an
interface that does not exist, an unreachable simulator) and raises ``ActuatorError`` from
``apply`` on a failure the controller retries at the next sample. ``current`` reads the rate
in force, so that a restarted controller moves on from it by at most maxStep per sample
instead of jumping (a bumpless restart).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import grpc

from scidmz.auth.channels import ClientTls, open_channel
from scidmz.contract.netns import named_netns_exists
from scidmz.contract.tbf import (
    LARGEST_PACKET_BYTES,
    TBF_MAX_RATE_BPS,
    TBF_MIN_RATE_BPS,
    tbf_size,
)
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)


class ActuatorError(Exception):
    """The rate could not be applied (or the actuator cannot work at all, at start)."""


class Actuator(Protocol):
    name: str

    async def apply(self, rate_bps: float) -> float:
        """Apply u(t); returns the rate now in force."""
        ...

    async def current(self) -> float | None:
        """The rate in force now; None if the actuator cannot tell or holds none."""
        ...

    async def close(self) -> None: ...


def _held(rate_bps: float) -> float | None:
    """A read-back rate, or None for 'no limit' (0, or not a finite positive number)."""
    return rate_bps if math.isfinite(rate_bps) and rate_bps > 0 else None


class DryRunActuator:
    """Applies nothing; the controller still logs and exports every u(t)."""

    name = "dryRun"

    def __init__(self) -> None:
        self.applied: list[float] = []

    async def apply(self, rate_bps: float) -> float:
        self.applied.append(rate_bps)
        log.debug("dry run: u = %.0f bit/s", rate_bps)
        return rate_bps

    async def current(self) -> float | None:
        return self.applied[-1] if self.applied else None

    async def close(self) -> None:
        return


ACTUATOR_CHANNEL = [("grpc.max_reconnect_backoff_ms", 1000)]
"""gRPC's reconnect back-off grows to 120 s by default: a shaper back from a restart would
stay unreachable (every call failing at once) long after it answers again. Calls also wait
for the connection (``wait_for_ready``) within their timeout instead of failing fast."""


class GrpcClient:
    """A gRPC channel to a scidmz service whose unary calls raise ``ActuatorError``."""

    name = "grpc"
    stub_class: Any = None

    def __init__(
        self,
        address: str,
        timeout_s: float = 2.0,
        tls: ClientTls | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        """``tls``: mutual TLS to a scidmz server; ``channel``: one already opened (the
        simulator behind a TLS switch port, with the switch's credentials)."""
        self.address = address
        self._timeout = timeout_s
        self._tls = tls if channel is None else None
        self._generation = tls.generation if tls is not None else 0
        self._channel = channel or open_channel(address, tls, ACTUATOR_CHANNEL)
        self._stub = self.stub_class(self._channel)

    async def _renew_channel(self) -> None:
        """A new channel when this client's certificate or trusted CAs changed (the
        operator rotates them): an open connection would carry on, but a reconnect on the
        old channel would present a certificate that may have expired."""
        if self._tls is None or self._tls.generation == self._generation:
            return
        old = self._channel
        self._generation = self._tls.generation
        self._channel = open_channel(self.address, self._tls, ACTUATOR_CHANNEL)
        self._stub = self.stub_class(self._channel)
        await old.close(None)

    async def _call(self, method: str, request: Any) -> Any:
        await self._renew_channel()
        try:
            return await getattr(self._stub, method)(
                request, timeout=self._timeout, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as error:
            code, details = error.code().name, error.details()
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED and (
                self._channel.get_state() != grpc.ChannelConnectivity.READY
            ):  # waited for a connection that never came: say so
                code, details = "UNAVAILABLE", f"no connection within {self._timeout:g} s"
            raise ActuatorError(f"{self.name} actuator {self.address}: {code}: {details}") from None

    async def close(self) -> None:
        await self._channel.close(None)


class _GrpcActuator(GrpcClient):
    """One unary rate call (``method`` of ``stub_class``, taking a ``message`` with
    ``rate_bps``) on a gRPC channel; a failed call is an ``ActuatorError``."""

    method = ""
    message: Any = telemetry_pb2.RateLimit

    async def apply(self, rate_bps: float) -> float:
        response = await self._call(self.method, self.message(rate_bps=rate_bps))
        return float(response.rate_bps)

    async def current(self) -> float | None:
        return None  # overridden where the service can read its rate back


class SimActuator(_GrpcActuator):
    """``scidmz.v1.SimActuator/SetCampusRateLimit`` on the software target."""

    name = "sim"
    stub_class = telemetry_pb2_grpc.SimActuatorStub
    method = "SetCampusRateLimit"
    message = telemetry_pb2.CampusRateLimit

    async def current(self) -> float | None:
        truth = await read_ground_truth(self._stub, self._timeout)
        return None if truth is None else _held(truth.campus_rate_limit_bps)


class SimDtnActuator(_GrpcActuator):
    """``scidmz.v1.SimActuator/SetDtnRateLimit``: a simulated DTN host's sending-rate cap."""

    name = "sim-dtn"
    stub_class = telemetry_pb2_grpc.SimActuatorStub
    method = "SetDtnRateLimit"

    def __init__(self, address: str, dtn_host: str = "", **kwargs: Any) -> None:
        """``dtn_host``: which of the scenario's DTN hosts (empty: its first)."""
        super().__init__(address, **kwargs)
        self.dtn_host = dtn_host

    async def apply(self, rate_bps: float) -> float:
        request = telemetry_pb2.RateLimit(rate_bps=rate_bps, dtn_host=self.dtn_host)
        response = await self._call(self.method, request)
        return float(response.rate_bps)

    async def current(self) -> float | None:
        truth = await read_ground_truth(self._stub, self._timeout)
        if truth is None:
            return None
        if self.dtn_host and self.dtn_host in truth.dtn_host_rate_limits_bps:
            return _held(truth.dtn_host_rate_limits_bps[self.dtn_host])
        return _held(truth.dtn_rate_limit_bps)


async def read_ground_truth(stub: Any, timeout_s: float) -> Any:
    """The simulator's last ground-truth point (its limits in force); None if it has none
    yet or cannot be reached (the controller then starts without a rate to move on from)."""
    try:
        return await stub.GetGroundTruth(
            telemetry_pb2.GroundTruthRequest(), timeout=timeout_s, wait_for_ready=True
        )
    except grpc.aio.AioRpcError as error:
        log.info("simulator: no rate in force to read back (%s)", error.code().name)
        return None


class ShaperActuator(_GrpcActuator):
    """``scidmz.v1.Shaper/SetRate`` on a `scidmz shaper` (a tbf on another node)."""

    name = "shaper"
    stub_class = telemetry_pb2_grpc.ShaperStub
    method = "SetRate"

    async def current(self) -> float | None:
        try:
            answer = await self._stub.GetRate(
                telemetry_pb2.RateRequest(), timeout=self._timeout, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as error:
            log.info(
                "shaper %s: no rate in force to read back (%s)", self.address, error.code().name
            )
            return None
        return _held(float(answer.rate_bps))


TC_H_ROOT = 0xFFFFFFFF
"""The parent of a root qdisc in netlink."""


def tbf_parameters(
    rate_bps: float, largest_packet_bytes: int = LARGEST_PACKET_BYTES
) -> dict[str, object]:
    """pyroute2 ``tc('replace', 'tbf', ...)`` arguments for a rate: burst and queue limit
    sized from it, the bucket never below the largest packet the host may queue."""
    size = tbf_size(rate_bps, largest_packet_bytes)
    return {
        "rate": f"{int(size.rate_bps)}bit",
        "burst": size.burst_bytes,
        "limit": size.limit_bytes,
    }


async def _largest_packet_bytes(ipr: object) -> int:
    """The largest GSO/GRO packet any interface of the namespace may hand the shaper's
    qdisc (forwarded packets are as large as their ingress's GRO allows): the tbf's
    bucket must hold it (``contract.tbf.LARGEST_PACKET_BYTES``). BIG TCP raises these
    limits past 64 KiB. Read when the actuator opens (raising them later needs a
    controller restart); unreadable: the default 64 KiB, and said so."""
    try:
        sizes = [
            int(size)
            async for link in await ipr.get_links()  # type: ignore[attr-defined]
            for size in (link.get_attr("IFLA_GSO_MAX_SIZE"), link.get_attr("IFLA_GRO_MAX_SIZE"))
            if size
        ]
    except Exception as error:  # pyroute2 raises NetlinkError and friends
        log.warning("tc: interfaces' GSO/GRO sizes unreadable (%s); bucket >= 64 KiB", error)
        return LARGEST_PACKET_BYTES
    return max([LARGEST_PACKET_BYTES, *sizes])


async def open_interface(interface: str, netns: str | None, what: str) -> tuple[Any, int]:
    """A netlink socket (in ``netns``, if given) and the index of ``interface`` there;
    ``ActuatorError`` naming what is missing (the namespace, the interface, the rights)."""
    from pyroute2 import AsyncIPRoute

    if netns and not named_netns_exists(netns):
        raise ActuatorError(f"network namespace {netns} does not exist")
    ipr = AsyncIPRoute(netns=netns) if netns else AsyncIPRoute()
    try:
        await ipr.setup_endpoint()
        links = await ipr.link_lookup(ifname=interface)
    except Exception as error:  # a missing namespace, no CAP_NET_ADMIN, ...
        ipr.close()
        raise ActuatorError(f"{what}: {error}") from None
    if not links:
        ipr.close()
        where = f" in network namespace {netns}" if netns else ""
        raise ActuatorError(f"interface {interface} does not exist{where}")
    return ipr, links[0]


class TcActuator:
    """The campus aggregate's token bucket: the root tbf qdisc of ``interface`` (created
    if absent, replaced in place after: `tc qdisc change` semantics, ~ms to apply).
    Build it with ``await TcActuator.open(...)``."""

    name = "tc"

    def __init__(
        self,
        interface: str,
        ipr: object,
        index: int,
        largest_packet_bytes: int = LARGEST_PACKET_BYTES,
    ) -> None:
        self.interface = interface
        self._ipr = ipr
        self._index = index
        self.largest_packet_bytes = largest_packet_bytes

    @classmethod
    async def open(cls, interface: str, netns: str | None = None) -> TcActuator:
        ipr, index = await open_interface(interface, netns, "tc actuator")
        return cls(interface, ipr, index, await _largest_packet_bytes(ipr))

    async def apply(self, rate_bps: float) -> float:
        if not math.isfinite(rate_bps) or rate_bps < 0:
            raise ActuatorError(f"rate must be finite and >= 0, got {rate_bps}")
        parameters = tbf_parameters(rate_bps, self.largest_packet_bytes)
        try:
            await self._ipr.tc("replace", "tbf", self._index, **parameters)  # type: ignore[attr-defined]
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            raise ActuatorError(f"tc on {self.interface}: {error}") from None
        return min(max(rate_bps, TBF_MIN_RATE_BPS), TBF_MAX_RATE_BPS)

    async def current(self) -> float | None:
        """The root tbf's rate (another root qdisc, or none: None). A rate above the 32-bit
        field (~34 Gbit/s, which pyroute2 0.9 reads saturated) reads as that ceiling, the
        most this actuator itself ever applies."""
        try:
            async for qdisc in await self._ipr.get_qdiscs(index=self._index):  # type: ignore[attr-defined]
                if qdisc["parent"] != TC_H_ROOT or qdisc.get_attr("TCA_KIND") != "tbf":
                    continue
                options = qdisc.get_attr("TCA_OPTIONS") or {}
                parms = dict(options.get("attrs", [])).get("TCA_TBF_PARMS") or {}
                return _held(min(8.0 * float(parms.get("rate", 0)), TBF_MAX_RATE_BPS))
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            log.info("tc on %s: cannot read the rate in force (%s)", self.interface, error)
        return None

    async def close(self) -> None:
        self._ipr.close()  # type: ignore[attr-defined]
