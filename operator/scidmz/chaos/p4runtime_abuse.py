"""Malformed and unauthorised P4Runtime requests, each with the status it must get."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto import p4r, p4r_grpc, rpc_code, rpc_status

from scidmz.chaos.local_loop import LocalLoop


@dataclass(frozen=True)
class Refusal:
    request: str
    expected: str
    got: str

    @property
    def ok(self) -> bool:
        return self.expected == self.got


def _code(call: Callable[[], object]) -> str:
    try:
        call()
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


def _stream_code(first: bytes | p4r.StreamMessageRequest, channel: grpc.Channel) -> str:
    """The status a StreamChannel ends with after one message (raw bytes or a request)."""
    if isinstance(first, bytes):
        call: Any = channel.stream_stream("/p4.v1.P4Runtime/StreamChannel")(
            iter([first]), timeout=3
        )
    else:
        call = p4r_grpc.P4RuntimeStub(channel).StreamChannel(iter([first]), timeout=3)
    try:
        for _ in call:
            pass
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


def malformed_requests(loop: LocalLoop) -> list[Refusal]:
    """Requests a buggy or hostile client sends to the switch while the collector holds
    mastership, each with the status P4Runtime (or gRPC) prescribes."""
    sw = loop.config.switch
    device, other = sw.device_id, sw.device_id + 8
    backup = p4r.Uint128(low=max(sw.election_id - 7, 1))  # below the collector's: a backup
    with grpc.insecure_channel(loop.switch) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        raw_write = channel.unary_unary("/p4.v1.P4Runtime/Write")
        huge = p4r.WriteRequest(device_id=device, election_id=backup)
        huge.updates.add().entity.table_entry.match.add().exact.value = b"x" * (5 << 20)
        unknown_table = p4r.ReadRequest(device_id=device)
        unknown_table.entities.add().table_entry.table_id = 0x0277_7777
        other_device = p4r.ReadRequest(device_id=other)
        other_device.entities.add().table_entry.table_id = 0
        pipeline = p4r.SetForwardingPipelineConfigRequest(
            device_id=device, election_id=backup,
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )  # fmt: skip
        cases: list[tuple[str, str, Callable[[], str]]] = [
            ("Write of bytes that are no protobuf", "INVALID_ARGUMENT",
             lambda: _code(lambda: raw_write(b"\xff\xff\xff\xff", timeout=3))),
            ("StreamChannel message of bytes that are no protobuf", "INVALID_ARGUMENT",
             lambda: _stream_code(b"\x0a\xff\xff\xff\xff\x0f", channel)),
            ("Write from a backup (lower election id)", "PERMISSION_DENIED",
             lambda: _code(lambda: stub.Write(
                 p4r.WriteRequest(device_id=device, election_id=backup), timeout=3))),
            ("Write to a device the switch does not have", "NOT_FOUND",
             lambda: _code(lambda: stub.Write(
                 p4r.WriteRequest(device_id=other, election_id=backup), timeout=3))),
            ("Read of a table id the pipeline does not have", "NOT_FOUND",
             lambda: _code(lambda: list(stub.Read(unknown_table, timeout=3)))),
            ("Read from a device the switch does not have", "NOT_FOUND",
             lambda: _code(lambda: list(stub.Read(other_device, timeout=3)))),
            ("SetForwardingPipelineConfig from a backup", "PERMISSION_DENIED",
             lambda: _code(lambda: stub.SetForwardingPipelineConfig(pipeline, timeout=3))),
            ("GetForwardingPipelineConfig of another device", "NOT_FOUND",
             lambda: _code(lambda: stub.GetForwardingPipelineConfig(
                 p4r.GetForwardingPipelineConfigRequest(device_id=other), timeout=3))),
            ("arbitration for another device", "NOT_FOUND",
             lambda: _stream_code(_arbitration(other, 3), channel)),
            ("arbitration with the collector's election id", "INVALID_ARGUMENT",
             lambda: _stream_code(_arbitration(device, sw.election_id), channel)),
            ("a 5 MiB Write (above the 4 MiB message limit)", "RESOURCE_EXHAUSTED",
             lambda: _code(lambda: stub.Write(huge, timeout=5))),
            ("a method P4Runtime does not have", "UNIMPLEMENTED",
             lambda: _code(lambda: channel.unary_unary("/p4.v1.P4Runtime/Reboot")(
                 b"", timeout=3))),
        ]  # fmt: skip
        return [Refusal(what, expected, run()) for what, expected, run in cases]


def _arbitration(device: int, election: int) -> p4r.StreamMessageRequest:
    return p4r.StreamMessageRequest(
        arbitration=p4r.MasterArbitrationUpdate(
            device_id=device, election_id=p4r.Uint128(low=election)
        )
    )


def _write_codes(stub: Any, request: p4r.WriteRequest) -> str:
    """A Write's status, with each update's own code from the ``google.rpc.Status``
    details when the batch failed: ``UNKNOWN [OK, INVALID_ARGUMENT]``."""
    try:
        stub.Write(request, timeout=5)
    except grpc.RpcError as error:
        code = str(error.code().name)
        details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
        if not details:
            return code
        status = rpc_status.Status.FromString(details)
        per_update = []
        for detail in status.details:
            update_error = p4r.Error()
            detail.Unpack(update_error)
            per_update.append(rpc_code.Code.Name(update_error.canonical_code))  # type: ignore[arg-type]
        return f"{code} [{', '.join(per_update)}]"
    return "OK"


def _v6_entry(table_id: int, set_class: int, index: int) -> p4r.TableEntry:
    """A classification entry for 2001:db8:<index>::/48: IPv6, so nothing the loop
    measures (its traffic is IPv4) can match it."""
    entry = p4r.TableEntry(table_id=table_id)
    match = entry.match.add(field_id=1)
    match.lpm.value = (0x20010DB8 << 96 | index << 80).to_bytes(16, "big")
    match.lpm.prefix_len = 48
    entry.action.action.action_id = set_class
    entry.action.action.params.add(param_id=1, value=b"\x02")
    return entry


def write_error_model(address: str, device_id: int, election_id: int) -> list[Refusal]:
    """P4Runtime's Write error model (§12) probed as the primary (a Write carries the
    primary's election id) on entries the loop never uses: update types outside INSERT,
    MODIFY, DELETE; a ROLLBACK_ON_ERROR batch with a failing update (nothing of it may
    stay); DATAPLANE_ATOMIC, which this target does not offer; a table over its size; a
    settings value the program would not run (the settings must stay as they were).
    Everything it installs it removes again."""
    from scidmz.contract.pipeline import build_p4info, qualified

    info = build_p4info()
    tables = {t.preamble.name: t for t in info.tables}
    actions = {a.preamble.name: a.preamble.id for a in info.actions}
    v6 = tables[qualified("classify_v6")]
    set_class = actions[qualified("set_class")]
    election = p4r.Uint128(low=election_id)

    def write(*updates: p4r.Update, atomicity: int = 0) -> p4r.WriteRequest:
        return p4r.WriteRequest(
            device_id=device_id,
            election_id=election,
            updates=updates,
            atomicity=atomicity,  # type: ignore[arg-type]
        )

    def insert(entry: p4r.TableEntry, kind: int = p4r.Update.INSERT) -> p4r.Update:
        return p4r.Update(type=kind, entity=p4r.Entity(table_entry=entry))  # type: ignore[arg-type]

    def present(entry: p4r.TableEntry) -> bool:
        request = p4r.ReadRequest(device_id=device_id)
        request.entities.add().table_entry.CopyFrom(entry)
        return _code(lambda: list(stub.Read(request, timeout=3))) == "OK"

    refusals: list[Refusal] = []
    with grpc.insecure_channel(address) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        probe = _v6_entry(v6.preamble.id, set_class, 1)
        for kind, label in ((99, "99"), (p4r.Update.UNSPECIFIED, "UNSPECIFIED")):
            refusals.append(Refusal(
                f"Write of an update of type {label}", "UNKNOWN [INVALID_ARGUMENT]",
                _write_codes(stub, write(insert(probe, kind))),
            ))  # fmt: skip
        bad = _v6_entry(v6.preamble.id, set_class, 2)
        bad.match[0].lpm.prefix_len = 129
        got = _write_codes(
            stub, write(insert(probe), insert(bad), atomicity=p4r.WriteRequest.ROLLBACK_ON_ERROR)
        )
        kept = " — its good update stayed" if present(probe) else ""
        refusals.append(Refusal(
            "ROLLBACK_ON_ERROR batch of a good insert and a bad one",
            "UNKNOWN [ABORTED, INVALID_ARGUMENT]", got + kept,
        ))  # fmt: skip
        refusals.append(Refusal(
            "DATAPLANE_ATOMIC batch", "UNIMPLEMENTED",
            _write_codes(stub, write(insert(probe), atomicity=p4r.WriteRequest.DATAPLANE_ATOMIC)),
        ))  # fmt: skip
        fill = [_v6_entry(v6.preamble.id, set_class, 16 + i) for i in range(v6.size)]
        one_more = _v6_entry(v6.preamble.id, set_class, 16 + v6.size)
        filled = _write_codes(stub, write(*(insert(e) for e in fill)))
        over = _write_codes(stub, write(insert(one_more)))
        _write_codes(stub, write(*(insert(e, p4r.Update.DELETE) for e in fill)))
        refusals.append(Refusal(
            f"an insert into a full table ({v6.size} entries)", "UNKNOWN [RESOURCE_EXHAUSTED]",
            over if filled == "OK" else f"filling it: {filled}",
        ))  # fmt: skip
        settings = p4r.TableEntry(
            table_id=tables[qualified("settings")].preamble.id, is_default_action=True
        )
        before = _settings(stub, device_id, settings)
        zero = p4r.TableEntry()
        zero.CopyFrom(settings)
        zero.action.action.action_id = actions[qualified("set_settings")]
        for param_id, value in enumerate((0, 100_000_000, 2_000_000_000, 1_000_000_000), 1):
            zero.action.action.params.add(param_id=param_id, value=value.to_bytes(8, "big"))
        got = _write_codes(stub, write(insert(zero, p4r.Update.MODIFY)))
        changed = (
            " — the settings changed" if _settings(stub, device_id, settings) != before else ""
        )
        refusals.append(Refusal(
            "settings with C_TH = 0", "UNKNOWN [INVALID_ARGUMENT]", got + changed,
        ))  # fmt: skip
    return refusals


def _settings(stub: Any, device_id: int, settings: p4r.TableEntry) -> bytes:
    """The settings default action as installed (empty when none is)."""
    request = p4r.ReadRequest(device_id=device_id)
    request.entities.add().table_entry.CopyFrom(settings)
    try:
        found = list(stub.Read(request, timeout=3))
    except grpc.RpcError:
        return b""
    return b"".join(e.table_entry.action.SerializeToString() for r in found for e in r.entities)
