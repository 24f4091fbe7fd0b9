"""The software P4Runtime target's gRPC service (P4Runtime 1.4 over grpc.aio).

It serves Capabilities; pipeline config (Get/Set, checked against the scidmz contract);
Write of table entries and digest configuration, with the P4Runtime error model; Read of
table entries (optionally with their counter data), direct and indirect counters,
registers and digest configuration; and the StreamChannel with arbitration, digest lists
and their acks. The decisions live in other modules (``arbitration``, ``entries``,
``dataplane``, ``digests``); this one moves messages and maps errors to status codes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf.message import DecodeError

from scidmz.auth.channels import server_options
from scidmz.auth.mtls import grpc_peer_identities
from scidmz.contract.p4runtime import bitstring, entry_key, from_uint128, uint128
from scidmz.contract.pipeline import PipelineError, check_p4info, qualified
from scidmz.switch.arbitration import Arbitration, Verdict, arbitrate, disconnect
from scidmz.switch.dataplane import Dataplane
from scidmz.switch.digests import DigestConfig, ReadyList
from scidmz.switch.entries import (
    Change,
    EntryStore,
    PipelineIndex,
    UpdateError,
    plan_update,
    update_type_name,
)
from scidmz.switch.observation import ActivityRule

API_VERSION = "1.4.0"
READ_BATCH = 4096
"""Entities per ReadResponse: a 65,536-slot register streams in 16 responses."""


class TargetService(p4r_grpc.P4RuntimeServicer):
    """One device: its pipeline, its table entries and its connected controllers."""

    def __init__(
        self,
        device_id: int,
        p4info: p4i.P4Info,
        ports: frozenset[int] | None = None,
        on_settings: Callable[[ActivityRule], None] | None = None,
    ) -> None:
        check_p4info(p4info)
        self.device_id = device_id
        self.ports = ports
        self._on_settings = on_settings
        self.arbitration = Arbitration(device_id)
        self._streams: dict[int, asyncio.Queue[p4r.StreamMessageResponse]] = {}
        self._stream_ids = itertools.count(1)
        self._load(p4info)

    def _load(self, p4info: p4i.P4Info) -> None:
        self.p4info = p4info
        self.index = PipelineIndex.from_p4info(p4info)
        self.store = EntryStore()
        self.dataplane = Dataplane(p4info, self._on_settings)
        self._tap_ports_id = self.dataplane.table_ids.get(qualified("tap_ports"), -1)

    # ---- helpers ---------------------------------------------------------------------------
    async def _check_device(self, device_id: int, context: Any) -> None:
        if device_id != self.device_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no device {device_id}")

    async def _check_primary(self, request_election: p4r.Uint128, context: Any) -> None:
        if not self.arbitration.may_write(from_uint128(request_election)):
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
        update.election_id.CopyFrom(uint128(self.arbitration.primary_election_id))
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
            self._load(request.config.p4info)
        return p4r.SetForwardingPipelineConfigResponse()

    async def Write(  # noqa: N802
        self, request: p4r.WriteRequest, context: Any
    ) -> p4r.WriteResponse:
        """P4Runtime §12: every update gets its own status; a batch with a failure answers
        UNKNOWN with one ``p4.v1.Error`` per update in ``google.rpc.Status`` details. A refused
        update changes nothing. CONTINUE_ON_ERROR applies the others; ROLLBACK_ON_ERROR undoes
        the batch at its first failure (the updates before it and after it are ABORTED);
        DATAPLANE_ATOMIC is not offered (UNIMPLEMENTED), since packets here see the tables
        between any two updates."""
        await self._check_device(request.device_id, context)
        await self._check_primary(request.election_id, context)
        atomicity = request.atomicity
        if atomicity == p4r.WriteRequest.DATAPLANE_ATOMIC:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "DATAPLANE_ATOMIC is not supported by this target (CONTINUE_ON_ERROR and "
                "ROLLBACK_ON_ERROR are)",
            )
        if atomicity not in (
            p4r.WriteRequest.CONTINUE_ON_ERROR,
            p4r.WriteRequest.ROLLBACK_ON_ERROR,
        ):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown atomicity {atomicity}")
        rollback = atomicity == p4r.WriteRequest.ROLLBACK_ON_ERROR
        details: list[p4r.Error] = []
        undo: list[Callable[[], None]] = []
        failed_at: int | None = None
        for position, update in enumerate(request.updates):
            if rollback and failed_at is not None:
                details.append(_error("ABORTED", "not attempted: an earlier update of this "
                                      "ROLLBACK_ON_ERROR batch failed"))  # fmt: skip
                continue
            try:
                undo.append(self._apply(update))
                details.append(p4r.Error(canonical_code=rpc_code.OK))
            except UpdateError as rejected:
                details.append(_error(rejected.code, rejected.message))
                failed_at = position if failed_at is None else failed_at
        if rollback and failed_at is not None:
            for revert in reversed(undo):
                revert()
            for position in range(failed_at):
                details[position] = _error(
                    "ABORTED", f"rolled back: update {failed_at} of this batch failed"
                )
        self.dataplane.entries_settled()
        if failed_at is not None:
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

    def _apply(self, update: p4r.Update) -> Callable[[], None]:
        """Apply one update, or raise ``UpdateError`` having changed nothing; returns what
        undoes it."""
        kind = update.entity.WhichOneof("entity")
        update_type = update_type_name(update.type)
        if kind == "table_entry":
            entry = update.entity.table_entry
            self._check_port(update_type, entry)
            change = plan_update(
                self.index, self.store.entries, self.store.counts, update_type, entry
            )
            self.dataplane.check(change)
            self._commit(change)
            return lambda: self._commit(change.inverse())
        if kind == "digest_entry":
            return self._apply_digest(update_type, update.entity.digest_entry)
        raise UpdateError(
            "UNIMPLEMENTED", f"{kind} is not writable on this target (table and digest entries are)"
        )

    def _commit(self, change: Change) -> None:
        self.store.commit(change)
        self.dataplane.apply(change)

    def _check_port(self, update_type: str, entry: p4r.TableEntry) -> None:
        if self.ports is None or entry.table_id != self._tap_ports_id or update_type == "DELETE":
            return
        for match in entry.match:
            port = int.from_bytes(match.exact.value, "big")
            if port not in self.ports:
                raise UpdateError(
                    "INVALID_ARGUMENT",
                    f"tap_ports: port {port} is not a port of device {self.device_id} "
                    f"(ports: {', '.join(map(str, sorted(self.ports)))})",
                )

    def _apply_digest(self, update_type: str, entry: p4r.DigestEntry) -> Callable[[], None]:
        queue = self.dataplane.digests.get(entry.digest_id)
        if queue is None:
            raise UpdateError("NOT_FOUND", f"no digest with id {entry.digest_id}")
        before = queue.config
        undo: Callable[[], None] = lambda: queue.configure(before)  # noqa: E731
        if update_type == "DELETE":
            if queue.config is None:
                raise UpdateError("NOT_FOUND", f"digest {entry.digest_id} is not configured")
            queue.configure(None)
            return undo
        config = DigestConfig(
            entry.config.max_timeout_ns, entry.config.max_list_size, entry.config.ack_timeout_ns
        )
        problems = config.problems()
        if problems:
            raise UpdateError(
                "INVALID_ARGUMENT", f"digest {entry.digest_id}: {'; '.join(problems)}"
            )
        if update_type == "INSERT" and queue.config is not None:
            raise UpdateError("ALREADY_EXISTS", f"digest {entry.digest_id} is configured")
        if update_type == "MODIFY" and queue.config is None:
            raise UpdateError("NOT_FOUND", f"digest {entry.digest_id} is not configured")
        queue.configure(config)
        return undo

    async def Read(  # noqa: N802
        self, request: p4r.ReadRequest, context: Any
    ) -> AsyncIterator[p4r.ReadResponse]:
        await self._check_device(request.device_id, context)
        batch: list[p4r.Entity] = []
        for wanted in request.entities:
            try:
                for entity in self._read(wanted):
                    batch.append(entity)
                    if len(batch) >= READ_BATCH:
                        yield p4r.ReadResponse(entities=batch)
                        batch = []
            except UpdateError as error:
                await context.abort(getattr(grpc.StatusCode, error.code), error.message)
        yield p4r.ReadResponse(entities=batch)

    def _read(self, wanted: p4r.Entity) -> Iterator[p4r.Entity]:
        kind = wanted.WhichOneof("entity")
        if kind == "table_entry":
            yield from self._read_tables(wanted.table_entry)
        elif kind == "direct_counter_entry":
            yield from self._read_direct(wanted.direct_counter_entry)
        elif kind == "counter_entry":
            yield from self._read_counters(wanted.counter_entry)
        elif kind == "register_entry":
            yield from self._read_registers(wanted.register_entry)
        elif kind == "digest_entry":
            yield from self._read_digests(wanted.digest_entry)
        else:
            raise UpdateError("UNIMPLEMENTED", f"{kind} is not readable on this target")

    def _selected_entries(self, wanted: p4r.TableEntry) -> list[p4r.TableEntry]:
        if wanted.table_id and wanted.table_id not in self.index.tables:
            raise UpdateError("NOT_FOUND", f"no table with id {wanted.table_id}")
        if wanted.match or wanted.is_default_action:
            found = self.store.entries.get(entry_key(wanted))
            if found is None:
                raise UpdateError("NOT_FOUND", "no such table entry")
            return [found]
        return [e for e in self.store.entries.values() if wanted.table_id in (0, e.table_id)]

    def _read_tables(self, wanted: p4r.TableEntry) -> Iterator[p4r.Entity]:
        with_counters = wanted.HasField("counter_data")
        for entry in self._selected_entries(wanted):
            entity = p4r.Entity()
            entity.table_entry.CopyFrom(entry)
            if with_counters and entry.table_id in self.dataplane.direct_counter_tables.values():
                data = entity.table_entry.counter_data
                data.byte_count, data.packet_count = self.dataplane.direct_counter(entry_key(entry))
            yield entity

    def _read_direct(self, wanted: p4r.DirectCounterEntry) -> Iterator[p4r.Entity]:
        counted = set(self.dataplane.direct_counter_tables.values())
        table_id = wanted.table_entry.table_id
        if table_id and table_id not in counted:
            raise UpdateError("INVALID_ARGUMENT", f"table {table_id} has no direct counter")
        for entry in self._selected_entries(wanted.table_entry):
            if entry.table_id not in counted or entry.is_default_action:
                continue
            entity = p4r.Entity()
            entity.direct_counter_entry.table_entry.CopyFrom(entry)
            data = entity.direct_counter_entry.data
            data.byte_count, data.packet_count = self.dataplane.direct_counter(entry_key(entry))
            yield entity

    def _read_counters(self, wanted: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        counters = self.dataplane.counters
        if wanted.counter_id and wanted.counter_id not in counters:
            raise UpdateError("NOT_FOUND", f"no counter with id {wanted.counter_id}")
        for counter_id, values in counters.items():
            if wanted.counter_id not in (0, counter_id):
                continue
            indices = self._indices(wanted, values.shape[0], "counter")
            for index in indices:
                entity = p4r.Entity()
                entry = entity.counter_entry
                entry.counter_id = counter_id
                entry.index.index = index
                entry.data.byte_count = int(values[index, 0])
                entry.data.packet_count = int(values[index, 1])
                yield entity

    def _read_registers(self, wanted: p4r.RegisterEntry) -> Iterator[p4r.Entity]:
        registers = self.dataplane.registers
        if wanted.register_id and wanted.register_id not in registers:
            raise UpdateError("NOT_FOUND", f"no register with id {wanted.register_id}")
        for register_id, values in registers.items():
            if wanted.register_id not in (0, register_id):
                continue
            for index in self._indices(wanted, values.shape[0], "register"):
                entity = p4r.Entity()
                entry = entity.register_entry
                entry.register_id = register_id
                entry.index.index = index
                entry.data.bitstring = bitstring(int(values[index]))
                yield entity

    @staticmethod
    def _indices(wanted: p4r.CounterEntry | p4r.RegisterEntry, size: int, what: str) -> range:
        if not wanted.HasField("index"):
            return range(size)
        index = wanted.index.index
        if not 0 <= index < size:
            raise UpdateError("OUT_OF_RANGE", f"{what} index {index} is outside 0..{size - 1}")
        return range(index, index + 1)

    def _read_digests(self, wanted: p4r.DigestEntry) -> Iterator[p4r.Entity]:
        digests = self.dataplane.digests
        if wanted.digest_id and wanted.digest_id not in digests:
            raise UpdateError("NOT_FOUND", f"no digest with id {wanted.digest_id}")
        for digest_id, queue in digests.items():
            if wanted.digest_id not in (0, digest_id) or queue.config is None:
                continue
            entity = p4r.Entity()
            entity.digest_entry.digest_id = digest_id
            config = entity.digest_entry.config
            config.max_timeout_ns = queue.config.max_timeout_ns
            config.max_list_size = queue.config.max_list_size
            config.ack_timeout_ns = queue.config.ack_timeout_ns
            yield entity

    # ---- digests -------------------------------------------------------------------------
    def deliver_digests(self, now_ns: int, wall_ns: int) -> int:
        """Send every digest list that is due to the primary; returns how many went out.
        Without a primary, digests wait (bounded) for one."""
        primary = self.arbitration.primary
        queue = self._streams.get(primary) if primary is not None else None
        if queue is None:
            return 0
        sent = 0
        for digest_id, digests in self.dataplane.digests.items():
            while (ready := digests.poll(now_ns)) is not None:
                queue.put_nowait(self._digest_list(digest_id, ready, wall_ns))
                sent += 1
        return sent

    @staticmethod
    def _digest_list(digest_id: int, ready: ReadyList, wall_ns: int) -> p4r.StreamMessageResponse:
        response = p4r.StreamMessageResponse()
        digest = response.digest
        digest.digest_id = digest_id
        digest.list_id = ready.list_id
        digest.timestamp = wall_ns
        for record in ready.records:
            members = digest.data.add().struct.members
            for value in record:
                members.add().bitstring = bitstring(value)
        return response

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
            kind = request.WhichOneof("update")
            if kind == "digest_ack":
                if client == self.arbitration.primary:
                    ack = request.digest_ack
                    queue_of = self.dataplane.digests.get(ack.digest_id)
                    if queue_of is not None:
                        queue_of.ack(ack.list_id)
                continue
            if kind != "arbitration":
                continue
            update = request.arbitration
            self.arbitration, verdict, notify = arbitrate(
                self.arbitration, client, update.device_id, from_uint128(update.election_id)
            )
            if verdict in (Verdict.WRONG_DEVICE, Verdict.ELECTION_ID_IN_USE):
                return verdict
            queue.put_nowait(self._arbitration_update(client))
            self._notify(notify)
        return None


def server_credentials(
    cert_chain: bytes, private_key: bytes, client_ca: bytes | None = None
) -> grpc.ServerCredentials:
    """TLS for the P4Runtime server; with ``client_ca``, clients must present a certificate
    it signed (mutual TLS), as switches configured for it require."""
    return grpc.ssl_server_credentials(
        [(private_key, cert_chain)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def add_port(
    server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None
) -> None:
    bound = (
        server.add_insecure_port(listen)
        if credentials is None
        else server.add_secure_port(listen, credentials)
    )
    if bound == 0:
        raise OSError(f"cannot listen on {listen}")


def _error(code: str, message: str) -> p4r.Error:
    return p4r.Error(canonical_code=rpc_code.Code.Value(code), message=message)


class MalformedRequestError(Exception):
    """Bytes that do not parse as the method's request message."""


def _parse(kind: Any, raw: bytes) -> Any:
    try:
        return kind.FromString(raw)
    except DecodeError as error:
        raise MalformedRequestError(f"not a {kind.DESCRIPTOR.full_name}: {error}") from None


async def _refuse(context: Any, error: MalformedRequestError) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))


async def _request(kind: Any, raw: bytes, context: Any) -> Any:
    """``raw`` parsed as ``kind``, or the call aborted INVALID_ARGUMENT."""
    try:
        return _parse(kind, raw)
    except MalformedRequestError as error:
        await _refuse(context, error)
        raise  # abort raised already; for the type checker


def client_names(context: Any) -> tuple[str, ...]:
    """The names of an RPC's client certificate: its common names and its workload
    identity (a ``spiffe://`` URI, as the operator issues them); () without one."""
    common = context.auth_context().get("x509_common_name") or []
    return (
        *(n.decode("utf-8", "replace") for n in common),
        *grpc_peer_identities(context),
    )


def refusal(allowed: frozenset[str] | None, context: Any, what: str) -> str | None:
    """Why ``refuse_unless_named`` refuses this client (None: it does not)."""
    if allowed is None:
        return None
    names = client_names(context)
    if any(name in allowed for name in names):
        return None
    return (
        f"{what} accepts the client certificates {', '.join(sorted(allowed))}; this one "
        f"is {', '.join(names) or 'anonymous'}"
    )


async def refuse_unless_named(context: Any, allowed: frozenset[str] | None, what: str) -> None:
    """Abort PERMISSION_DENIED unless the client certificate's common name is ``allowed``
    (None: every client the TLS handshake let in). The simulated switch gives each client
    identity of the administrators' Secret only its part: P4Runtime to the collector's,
    the simulator's actuators to the controller's."""
    if allowed is None:
        return
    names = client_names(context)
    if not any(name in allowed for name in names):
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{what} accepts the client certificates {', '.join(sorted(allowed))}; this one "
            f"is {', '.join(names) or 'anonymous'}",
        )


def add_p4runtime(
    service: TargetService, server: grpc.aio.Server, clients: frozenset[str] | None = None
) -> None:
    """``p4.v1.P4Runtime`` on ``server``, where a request that is not a valid protobuf
    message is answered INVALID_ARGUMENT (gRPC's own deserializer would answer UNKNOWN, a
    code that tells the client nothing); with ``clients``, only for those certificates'
    common names (``refuse_unless_named``)."""
    serialize = {"response_serializer": lambda m: m.SerializeToString()}

    def unary(method: Any, kind: Any) -> grpc.RpcMethodHandler:
        async def handle(raw: bytes, context: Any) -> Any:
            await refuse_unless_named(context, clients, "P4Runtime")
            return await method(await _request(kind, raw, context), context)

        return grpc.unary_unary_rpc_method_handler(handle, **serialize)

    async def read(raw: bytes, context: Any) -> AsyncIterator[p4r.ReadResponse]:
        await refuse_unless_named(context, clients, "P4Runtime")
        async for response in service.Read(await _request(p4r.ReadRequest, raw, context), context):
            yield response

    async def stream_channel(
        raw_iterator: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[p4r.StreamMessageResponse]:
        refused = refusal(clients, context, "P4Runtime")
        if refused is not None:
            # a status and an end, not an abort: an abort raised in a bidirectional
            # stream's generator before its first message reaches the client as INTERNAL
            context.set_code(grpc.StatusCode.PERMISSION_DENIED)
            context.set_details(refused)
            return

        async def parsed() -> AsyncIterator[p4r.StreamMessageRequest]:
            async for raw in raw_iterator:
                yield _parse(p4r.StreamMessageRequest, raw)

        try:
            async for response in service.StreamChannel(parsed(), context):
                yield response
        except MalformedRequestError as error:  # raised in the stream's reader task
            await _refuse(context, error)

    handlers = {
        "Write": unary(service.Write, p4r.WriteRequest),
        "SetForwardingPipelineConfig": unary(
            service.SetForwardingPipelineConfig, p4r.SetForwardingPipelineConfigRequest
        ),
        "GetForwardingPipelineConfig": unary(
            service.GetForwardingPipelineConfig, p4r.GetForwardingPipelineConfigRequest
        ),
        "Capabilities": unary(service.Capabilities, p4r.CapabilitiesRequest),
        "Read": grpc.unary_stream_rpc_method_handler(read, **serialize),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(stream_channel, **serialize),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )


async def serve(
    service: TargetService, listen: str, credentials: grpc.ServerCredentials | None = None
) -> grpc.aio.Server:
    """Start the gRPC server on ``listen`` (host:port), plaintext or TLS; the caller stops
    it."""
    server = grpc.aio.server(options=server_options(keepalive=False))
    add_p4runtime(service, server)
    add_port(server, listen, credentials)
    await server.start()
    return server
