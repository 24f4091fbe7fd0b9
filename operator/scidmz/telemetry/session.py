"""A P4Runtime client session over grpc.aio: arbitration, pipeline, writes, reads, digests.

One ``SwitchSession`` is one connection to one device. It opens the StreamChannel, sends
the arbitration update and learns whether it is primary or backup; its reader task follows
later arbitration updates (a backup promoted when the primary leaves), hands each digest
list to a callback and acks it at once. gRPC failures surface as ``P4RuntimeError`` with
the per-update errors of a failed Write unpacked (P4Runtime §12.3) and predicates for the
cases the collector treats differently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status

from scidmz.auth.switch_tls import ChannelTls, open_channel
from scidmz.contract.p4runtime import uint128

log = logging.getLogger(__name__)

TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)


@dataclass(frozen=True)
class UpdateFailure:
    index: int
    code: str
    message: str


class P4RuntimeError(Exception):
    """A failed P4Runtime call: status code, message, and per-update failures."""

    def __init__(
        self, code: grpc.StatusCode, message: str, failures: Sequence[UpdateFailure] = ()
    ) -> None:
        detail = "; ".join(f"update {f.index}: {f.code}: {f.message}" for f in failures)
        super().__init__(f"{code.name}: {message}" + (f" ({detail})" if detail else ""))
        self.code = code
        self.message = message
        self.failures = tuple(failures)

    @classmethod
    def from_rpc(cls, error: grpc.aio.AioRpcError) -> P4RuntimeError:
        failures: list[UpdateFailure] = []
        for key, value in error.trailing_metadata() or ():
            if key != "grpc-status-details-bin":
                continue
            status = rpc_status.Status()
            status.ParseFromString(value)
            for index, detail in enumerate(status.details):
                update_error = p4r.Error()
                if detail.Unpack(update_error) and update_error.canonical_code != rpc_code.OK:
                    failures.append(
                        UpdateFailure(
                            index,
                            rpc_code.Code.Name(update_error.canonical_code),  # type: ignore[arg-type]
                            update_error.message,
                        )
                    )
        return cls(error.code(), error.details() or "", failures)

    @property
    def is_transient(self) -> bool:
        """Worth retrying: the switch is away, busy or restarting."""
        return bool(self.code in TRANSIENT and not self.failures)

    @property
    def is_not_primary(self) -> bool:
        return bool(self.code == grpc.StatusCode.PERMISSION_DENIED)

    def failures_with(self, code: str) -> list[UpdateFailure]:
        return [f for f in self.failures if f.code == code]


class SessionClosed(Exception):
    """The StreamChannel ended (switch restart, network loss, or a second session)."""


DigestHandler = Callable[[p4r.DigestList], None]


class SwitchSession:
    """One P4Runtime connection; ``async with`` closes it."""

    def __init__(
        self,
        address: str,
        device_id: int,
        election_id: int,
        on_digest: DigestHandler | None = None,
        tls: ChannelTls | None = None,
    ) -> None:
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self._on_digest = on_digest
        self._channel = open_channel(address, tls)
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)
        self._stream: Any = None
        self._reader: asyncio.Task[None] | None = None
        self.is_primary = False
        self.primary_election_id = 0
        self.role_changed = asyncio.Event()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def __aenter__(self) -> SwitchSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- the stream ------------------------------------------------------------------------
    async def open(self, timeout_s: float = 5.0) -> bool:
        """Open the stream and arbitrate; returns True when this session is primary."""
        self._stream = self._stub.StreamChannel()
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        request.arbitration.election_id.CopyFrom(uint128(self.election_id))
        try:
            await asyncio.wait_for(self._stream.write(request), timeout_s)
            first = await asyncio.wait_for(self._stream.read(), timeout_s)
        except grpc.aio.AioRpcError as error:
            raise P4RuntimeError.from_rpc(error) from None
        except TimeoutError:
            raise P4RuntimeError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no arbitration answer in {timeout_s} s"
            ) from None
        if first is grpc.aio.EOF or first.WhichOneof("update") != "arbitration":
            raise P4RuntimeError(grpc.StatusCode.UNAVAILABLE, "the stream closed at once")
        self._arbitrated(first.arbitration)
        self._reader = asyncio.create_task(self._read_stream())
        return self.is_primary

    def _arbitrated(self, update: p4r.MasterArbitrationUpdate) -> None:
        was = self.is_primary
        self.is_primary = update.status.code == rpc_code.OK
        self.primary_election_id = (update.election_id.high << 64) | update.election_id.low
        if was != self.is_primary:
            log.info(
                "%s: now %s (primary election id %d)",
                self.address,
                "primary" if self.is_primary else "backup",
                self.primary_election_id,
            )
        self.role_changed.set()

    async def _read_stream(self) -> None:
        reason: BaseException | None = None
        try:
            while True:
                response = await self._stream.read()
                if response is grpc.aio.EOF:
                    reason = SessionClosed(f"{self.address} closed the stream")
                    break
                kind = response.WhichOneof("update")
                if kind == "arbitration":
                    self._arbitrated(response.arbitration)
                elif kind == "digest":
                    digest = response.digest
                    if self._on_digest is not None:
                        self._on_digest(digest)
                    ack = p4r.StreamMessageRequest()
                    ack.digest_ack.digest_id = digest.digest_id
                    ack.digest_ack.list_id = digest.list_id
                    await self._stream.write(ack)
        except grpc.aio.AioRpcError as error:
            reason = P4RuntimeError.from_rpc(error)
        except asyncio.CancelledError:
            reason = SessionClosed("session closed")
            raise
        finally:
            if not self.closed.done():
                self.closed.set_exception(reason or SessionClosed("stream ended"))
                self.closed.exception()  # consumed here: close() is the normal path
            self.role_changed.set()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._stream is not None:
            self._stream.cancel()
        await self._channel.close(grace=None)

    # ---- unary calls -------------------------------------------------------------------------
    async def _call(self, method: Any, request: Any, timeout_s: float) -> Any:
        try:
            return await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            raise P4RuntimeError.from_rpc(error) from None

    async def get_p4info(self, timeout_s: float = 10.0) -> p4i.P4Info | None:
        """The device's P4Info, or None when it has no pipeline yet."""
        request = p4r.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
        )
        try:
            response = await self._call(self._stub.GetForwardingPipelineConfig, request, timeout_s)
        except P4RuntimeError as error:
            if error.code == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise
        info: p4i.P4Info = response.config.p4info
        return info if info.tables else None

    async def set_pipeline(
        self, p4info: p4i.P4Info, device_config: bytes, timeout_s: float = 30.0
    ) -> None:
        request = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=uint128(self.election_id),
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        request.config.p4info.CopyFrom(p4info)
        request.config.p4_device_config = device_config
        await self._call(self._stub.SetForwardingPipelineConfig, request, timeout_s)

    async def write(self, updates: Sequence[p4r.Update], timeout_s: float = 10.0) -> None:
        if not updates:
            return
        request = p4r.WriteRequest(
            device_id=self.device_id,
            election_id=uint128(self.election_id),
            updates=list(updates),
            atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
        )
        await self._call(self._stub.Write, request, timeout_s)

    async def read(
        self, entities: Sequence[p4r.Entity], timeout_s: float = 10.0
    ) -> list[p4r.Entity]:
        request = p4r.ReadRequest(device_id=self.device_id, entities=list(entities))
        found: list[p4r.Entity] = []
        try:
            async for response in self._stub.Read(request, timeout=timeout_s):
                found.extend(response.entities)
        except grpc.aio.AioRpcError as error:
            raise P4RuntimeError.from_rpc(error) from None
        return found
