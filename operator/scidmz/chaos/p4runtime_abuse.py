"""Malformed and unauthorised P4Runtime requests, each with the status it must get."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto import p4r, p4r_grpc

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
