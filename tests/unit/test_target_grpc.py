"""The software P4Runtime target over real gRPC: arbitration, writes, reads, pipeline config."""

import asyncio
import ipaddress

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc, rpc_code, rpc_status

from scidmz.contract.pipeline import build_p4info
from scidmz.switch.server import TargetService, serve
from scidmz.testenv.cluster import free_port

INFO = build_p4info()
TABLE = {t.preamble.alias: t.preamble.id for t in INFO.tables}
ACTION = {a.preamble.alias: a.preamble.id for a in INFO.actions}


def _classify(prefix: str, class_id: int) -> p4r.Update:
    network = ipaddress.ip_network(prefix)
    update = p4r.Update(type=p4r.Update.INSERT)
    entry = update.entity.table_entry
    entry.table_id = TABLE["classify_v4"]
    match = entry.match.add(field_id=1)
    match.lpm.value = network.network_address.packed
    match.lpm.prefix_len = network.prefixlen
    entry.action.action.action_id = ACTION["set_class"]
    entry.action.action.params.add(param_id=1, value=bytes([class_id]))
    return update


class Controller:
    """A test client: one StreamChannel plus a stub."""

    def __init__(self, channel: grpc.aio.Channel, election: int, device: int = 1) -> None:
        self.stub = p4r_grpc.P4RuntimeStub(channel)
        self.election = election
        self.requests: asyncio.Queue = asyncio.Queue()
        self.requests.put_nowait(
            p4r.StreamMessageRequest(
                arbitration=p4r.MasterArbitrationUpdate(
                    device_id=device, election_id=p4r.Uint128(low=election)
                )
            )
        )
        self.stream = self.stub.StreamChannel(self._requests())

    async def _requests(self):
        while True:
            item = await self.requests.get()
            if item is None:
                return
            yield item

    async def next_status(self) -> int:
        response = await asyncio.wait_for(self.stream.read(), 5)
        return response.arbitration.status.code

    async def write(self, *updates: p4r.Update) -> None:
        request = p4r.WriteRequest(device_id=1, election_id=p4r.Uint128(low=self.election))
        request.updates.extend(updates)
        await self.stub.Write(request, timeout=5)

    def close(self) -> None:
        self.requests.put_nowait(None)


@pytest.fixture
def target():
    loop = asyncio.new_event_loop()
    listen = f"127.0.0.1:{free_port()}"
    service = TargetService(device_id=1, p4info=INFO)
    server = loop.run_until_complete(serve(service, listen))
    yield loop, listen, service
    loop.run_until_complete(server.stop(None))
    loop.close()


def test_mastership_writes_and_reads(target):
    loop, listen, service = target

    async def scenario():
        async with grpc.aio.insecure_channel(listen) as channel:
            primary = Controller(channel, election=10)
            assert await primary.next_status() == rpc_code.OK
            backup = Controller(channel, election=5)
            assert await backup.next_status() == rpc_code.ALREADY_EXISTS

            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await backup.write(_classify("203.0.113.10/32", 1))
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

            await primary.write(_classify("203.0.113.10/32", 1))
            bad = _classify("198.51.100.0/24", 2)
            bad.entity.table_entry.match[0].lpm.prefix_len = 16
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await primary.write(_classify("198.51.100.0/24", 2), bad)
            assert failed.value.code() == grpc.StatusCode.UNKNOWN
            details = dict(failed.value.trailing_metadata())["grpc-status-details-bin"]
            status = rpc_status.Status.FromString(details)
            errors = []
            for packed in status.details:
                error = p4r.Error()
                packed.Unpack(error)
                errors.append(error.canonical_code)
            assert errors == [rpc_code.OK, rpc_code.INVALID_ARGUMENT]

            read = p4r.ReadRequest(device_id=1)
            read.entities.add().table_entry.table_id = TABLE["classify_v4"]
            entries = [e async for r in primary.stub.Read(read) for e in r.entities]
            assert len(entries) == 2  # the first insert and the good one of the batch

            primary.close()
            assert await backup.next_status() == rpc_code.OK  # promoted
            await backup.write(_classify("192.0.2.0/24", 2))
            backup.close()
        for _ in range(100):  # the server notices the closed streams asynchronously
            if service.arbitration.primary is None:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"still connected: {service.arbitration}")

    loop.run_until_complete(scenario())


def test_wrong_device_and_duplicate_election_end_the_stream(target):
    loop, listen, _ = target

    async def scenario():
        async with grpc.aio.insecure_channel(listen) as channel:
            stranger = Controller(channel, election=1, device=9)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stranger.next_status()
            assert error.value.code() == grpc.StatusCode.NOT_FOUND
            stranger.close()
            first = Controller(channel, election=7)
            assert await first.next_status() == rpc_code.OK
            twin = Controller(channel, election=7)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await twin.next_status()
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            twin.close()
            first.close()

    loop.run_until_complete(scenario())


def test_pipeline_config_is_checked(target):
    loop, listen, _ = target

    async def scenario():
        async with grpc.aio.insecure_channel(listen) as channel:
            controller = Controller(channel, election=3)
            assert await controller.next_status() == rpc_code.OK
            got = await controller.stub.GetForwardingPipelineConfig(
                p4r.GetForwardingPipelineConfigRequest(device_id=1)
            )
            assert got.config.p4info == INFO
            request = p4r.SetForwardingPipelineConfigRequest(
                device_id=1,
                election_id=p4r.Uint128(low=3),
                action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            )
            request.config.p4info.CopyFrom(INFO)
            del request.config.p4info.registers[0]
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await controller.stub.SetForwardingPipelineConfig(request)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "queuing_delay_ns is missing" in error.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await controller.stub.GetForwardingPipelineConfig(
                    p4r.GetForwardingPipelineConfigRequest(device_id=2)
                )
            assert error.value.code() == grpc.StatusCode.NOT_FOUND
            controller.close()

    loop.run_until_complete(scenario())
