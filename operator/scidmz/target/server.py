"""The software P4Runtime target's gRPC service (P4Runtime 1.4 over grpc.aio).

This release serves the control half of the API: Capabilities, pipeline config
(Get/Set, checked against the scidmz contract), Write and Read of table entries, and the
StreamChannel with arbitration. Counters, registers and digests from a packet source
(netsim) come next. The decisions live in pure modules (``arbitration``, ``entries``);
this one only moves messages and maps errors to the P4Runtime error model.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status

from scidmz.target.arbitration import Arbitration, Verdict, arbitrate, disconnect
from scidmz.target.entries import EntryKey, PipelineIndex, UpdateError, apply_update
from scidmz.telemetry.pipeline import PipelineError, check_p4info

API_VERSION = "1.4.0"


def election_id(value: p4r.Uint128) -> int:
    return (value.high << 64) | value.low


def _uint128(value: int) -> p4r.Uint128:
    return p4r.Uint128(high=value >> 64, low=value & ((1 << 64) - 1))


class TargetService(p4r_grpc.P4RuntimeServicer):
    """One device: its pipeline, its table entries and its connected controllers."""

    def __init__(self, device_id: int, p4info: p4i.P4Info) -> None:
        check_p4info(p4info)
        self.device_id = device_id
        self.p4info = p4info
        self.index = PipelineIndex.from_p4info(p4info)
        self.entries: Mapping[EntryKey, p4r.TableEntry] = MappingProxyType({})
        self.arbitration = Arbitration(device_id)
        self._streams: dict[int, asyncio.Queue[p4r.StreamMessageResponse]] = {}
        self._stream_ids = itertools.count(1)

    # ---- helpers ---------------------------------------------------------------------------
    async def _check_device(self, device_id: int, context: Any) -> None:
        if device_id != self.device_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no device {device_id}")

    async def _check_primary(self, request_election: p4r.Uint128, context: Any) -> None:
        if not self.arbitration.may_write(election_id(request_election)):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "only the primary controller may write (election id "
                f"{self.arbitration.primary_election_id})",
            )

    def _arbitration_update(self, client: int) -> p4r.StreamMessageResponse:
        verdict = self.arbitration.verdict(client)
        code = rpc_code.OK if verdict is Verdict.PRIMARY else rpc_code.ALREADY_EXISTS
        response = p4r.StreamMessageResponse()
        update = response.arbitration
        update.device_id = self.device_id
        update.election_id.CopyFrom(_uint128(self.arbitration.primary_election_id))
        update.status.code = code
        update.status.message = "primary" if code == rpc_code.OK else "backup"
        return response

    def _notify(self, clients: tuple[int, ...]) -> None:
        for client in clients:
            queue = self._streams.get(client)
            if queue is not None:
                queue.put_nowait(self._arbitration_update(client))

    # ---- unary RPCs --------------------------------------------------------------------------
    async def Capabilities(  # noqa: N802 (gRPC method name)
        self, request: p4r.CapabilitiesRequest, context: Any
    ) -> p4r.CapabilitiesResponse:
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    async def GetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.GetForwardingPipelineConfigRequest, context: Any
    ) -> p4r.GetForwardingPipelineConfigResponse:
        await self._check_device(request.device_id, context)
        response = p4r.GetForwardingPipelineConfigResponse()
        response.config.p4info.CopyFrom(self.p4info)
        return response

    async def SetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.SetForwardingPipelineConfigRequest, context: Any
    ) -> p4r.SetForwardingPipelineConfigResponse:
        await self._check_device(request.device_id, context)
        await self._check_primary(request.election_id, context)
        try:
            check_p4info(request.config.p4info)
        except PipelineError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        if request.action != p4r.SetForwardingPipelineConfigRequest.VERIFY:
            self.p4info = request.config.p4info
            self.index = PipelineIndex.from_p4info(self.p4info)
            self.entries = MappingProxyType({})
        return p4r.SetForwardingPipelineConfigResponse()

    async def Write(  # noqa: N802
        self, request: p4r.WriteRequest, context: Any
    ) -> p4r.WriteResponse:
        await self._check_device(request.device_id, context)
        await self._check_primary(request.election_id, context)
        details = []
        failed = False
        for update in request.updates:
            error = p4r.Error(canonical_code=rpc_code.OK)
            if update.entity.WhichOneof("entity") != "table_entry":
                error = p4r.Error(
                    canonical_code=rpc_code.UNIMPLEMENTED,
                    message="only table entries are writable on this target",
                )
            else:
                try:
                    self.entries = apply_update(
                        self.index,
                        self.entries,
                        p4r.Update.Type.Name(update.type),
                        update.entity.table_entry,
                    )
                except UpdateError as rejected:
                    error = p4r.Error(
                        canonical_code=rpc_code.Code.Value(rejected.code),
                        message=rejected.message,
                    )
            failed = failed or error.canonical_code != rpc_code.OK
            details.append(error)
        if failed:
            # P4Runtime §12.3: a batch with failures is UNKNOWN, one Error per update.
            status = rpc_status.Status(code=rpc_code.UNKNOWN, message="some updates failed")
            for detail in details:
                status.details.add().Pack(detail)
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                status.message,
                trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
            )
        return p4r.WriteResponse()

    async def Read(  # noqa: N802
        self, request: p4r.ReadRequest, context: Any
    ) -> AsyncIterator[p4r.ReadResponse]:
        await self._check_device(request.device_id, context)
        response = p4r.ReadResponse()
        for entity in request.entities:
            if entity.WhichOneof("entity") != "table_entry":
                await context.abort(
                    grpc.StatusCode.UNIMPLEMENTED, "only table entries are readable yet"
                )
            wanted = entity.table_entry.table_id
            for entry in self.entries.values():
                if wanted in (0, entry.table_id):
                    response.entities.add().table_entry.CopyFrom(entry)
        yield response

    # ---- the stream ------------------------------------------------------------------------
    async def StreamChannel(  # noqa: N802
        self, request_iterator: AsyncIterator[p4r.StreamMessageRequest], context: Any
    ) -> AsyncIterator[p4r.StreamMessageResponse]:
        client = next(self._stream_ids)
        queue: asyncio.Queue[p4r.StreamMessageResponse] = asyncio.Queue()
        self._streams[client] = queue
        reader = asyncio.ensure_future(self._read_stream(client, request_iterator, queue))
        getter: asyncio.Future[p4r.StreamMessageResponse] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                verdict = reader.result()
                if verdict is Verdict.WRONG_DEVICE:
                    await context.abort(grpc.StatusCode.NOT_FOUND, "no such device")
                if verdict is Verdict.ELECTION_ID_IN_USE:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, "election id already in use"
                    )
                return
        finally:
            reader.cancel()
            if getter is not None:
                getter.cancel()
            del self._streams[client]
            self.arbitration, notify = disconnect(self.arbitration, client)
            self._notify(notify)

    async def _read_stream(
        self,
        client: int,
        requests: AsyncIterator[p4r.StreamMessageRequest],
        queue: asyncio.Queue[p4r.StreamMessageResponse],
    ) -> Verdict | None:
        """Handle this client's stream requests; returns why the stream must end."""
        async for request in requests:
            if request.WhichOneof("update") != "arbitration":
                continue
            update = request.arbitration
            self.arbitration, verdict, notify = arbitrate(
                self.arbitration, client, update.device_id, election_id(update.election_id)
            )
            if verdict in (Verdict.WRONG_DEVICE, Verdict.ELECTION_ID_IN_USE):
                return verdict
            queue.put_nowait(self._arbitration_update(client))
            self._notify(notify)
        return None


async def serve(service: TargetService, listen: str) -> grpc.aio.Server:
    """Start the gRPC server on ``listen`` (host:port); the caller stops it."""
    server = grpc.aio.server()
    p4r_grpc.add_P4RuntimeServicer_to_server(service, server)
    if server.add_insecure_port(listen) == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    return server
