"""The software target's data half over real gRPC: counters, registers, digests, errors."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc

from scidmz.contract import pipeline as contract
from scidmz.control.buffer_actuators import drop_ratio
from scidmz.switch.digests import DEFAULT_MAX_OUTSTANDING
from scidmz.telemetry.program import Ids, desired_entries
from scidmz.telemetry.session import P4RuntimeError, SwitchSession
from tests.telemetry.harness import PLAN, running_target, wait_for


def _update(kind: int, **entity: object) -> p4r.Update:
    return p4r.Update(type=kind, entity=p4r.Entity(**entity))  # type: ignore[arg-type]


async def _primary(address: str, election: int = 10) -> SwitchSession:
    session = SwitchSession(address, 1, election)
    assert await session.open()
    return session


async def _install(session: SwitchSession) -> Ids:
    info = await session.get_p4info()
    assert info is not None
    ids = Ids.from_p4info(info)
    updates = [
        _update(p4r.Update.MODIFY if e.is_default_action else p4r.Update.INSERT, table_entry=e)
        for e in desired_entries(ids, PLAN)
    ]
    await session.write(updates)
    return ids


def test_counters_registers_and_digest_config_read_back():
    async def main():
        async with running_target() as (_, address):
            session = await _primary(address)
            try:
                ids = await _install(session)
                await asyncio.sleep(0.5)
                class_traffic = ids.counters["ScidmzIngress.class_traffic"]
                both = [p4r.Entity(), p4r.Entity(), p4r.Entity()]
                both[0].direct_counter_entry.table_entry.table_id = 0  # every direct counter
                both[1].counter_entry.counter_id = class_traffic
                both[2].table_entry.table_id = ids.tables["ScidmzIngress.classify_v4"]
                both[2].table_entry.counter_data.SetInParent()
                found = await session.read(both)
                direct = {
                    e.direct_counter_entry.table_entry.action.action.params[0].value[-1]:
                    e.direct_counter_entry.data.byte_count
                    for e in found if e.WhichOneof("entity") == "direct_counter_entry"
                }  # fmt: skip
                indirect = {
                    e.counter_entry.index.index: e.counter_entry.data
                    for e in found if e.WhichOneof("entity") == "counter_entry"
                }  # fmt: skip
                with_data = [
                    e.table_entry.counter_data.byte_count
                    for e in found if e.WhichOneof("entity") == "table_entry"
                ]  # fmt: skip
                assert set(indirect) == set(range(contract.CLASS_SLOTS))
                for class_id in (contract.FIRST_DTN_CLASS, contract.CLASS_CAMPUS):
                    assert direct[class_id] > 100_000
                    assert indirect[class_id].byte_count == direct[class_id]
                    assert indirect[class_id].packet_count > 0
                assert sorted(with_data) == sorted(direct.values())

                whole = p4r.Entity()
                whole.register_entry.register_id = ids.registers["ScidmzIngress.flow_active"]
                slots = await session.read([whole])
                assert len(slots) == contract.FLOW_SLOTS  # streamed in several responses
                assert sum(int.from_bytes(e.register_entry.data.bitstring) for e in slots) > 100

                digest = p4r.DigestEntry(digest_id=ids.digests["flow_start_t"])
                digest.config.max_timeout_ns = 5_000_000
                digest.config.max_list_size = 10
                await session.write([_update(p4r.Update.INSERT, digest_entry=digest)])
                read = p4r.Entity()
                read.digest_entry.digest_id = 0
                (configured,) = await session.read([read])
                assert configured.digest_entry == digest
            finally:
                await session.close()

    asyncio.run(main())


def test_bad_requests_get_the_p4runtime_status_codes():
    async def main():
        async with running_target() as (_, address):
            session = await _primary(address)
            backup = SwitchSession(address, 1, 5)
            try:
                ids = await _install(session)
                qd = ids.registers["ScidmzIngress.queuing_delay_ns"]

                out_of_range = p4r.Entity()
                out_of_range.register_entry.register_id = qd
                out_of_range.register_entry.index.index = contract.CLASS_SLOTS
                with pytest.raises(P4RuntimeError) as error:
                    await session.read([out_of_range])
                assert error.value.code == grpc.StatusCode.OUT_OF_RANGE

                unknown = p4r.Entity()
                unknown.register_entry.register_id = 0x0300FFFF
                with pytest.raises(P4RuntimeError) as error:
                    await session.read([unknown])
                assert error.value.code == grpc.StatusCode.NOT_FOUND

                bad_port = p4r.TableEntry(table_id=ids.tables["ScidmzIngress.tap_ports"])
                bad_port.match.add(field_id=1).exact.value = (7).to_bytes(2, "big")
                bad_port.action.action.action_id = ids.actions["ScidmzIngress.set_tap_role"]
                bad_port.action.action.params.add(param_id=1, value=b"\x01")
                twice = p4r.DigestEntry(digest_id=ids.digests["rtt_sample_t"])
                negative = p4r.DigestEntry(digest_id=ids.digests["flow_stop_t"])
                negative.config.max_list_size = -1
                with pytest.raises(P4RuntimeError) as error:
                    await session.write(
                        [
                            _update(p4r.Update.INSERT, table_entry=bad_port),
                            _update(p4r.Update.INSERT, digest_entry=twice),
                            _update(p4r.Update.INSERT, digest_entry=twice),
                            _update(p4r.Update.INSERT, digest_entry=negative),
                            _update(p4r.Update.MODIFY, digest_entry=p4r.DigestEntry(digest_id=9)),
                        ]
                    )
                failures = {f.index: (f.code, f.message) for f in error.value.failures}
                assert error.value.code == grpc.StatusCode.UNKNOWN
                assert failures[0][0] == "INVALID_ARGUMENT" and "port 7" in failures[0][1]
                assert 1 not in failures  # the first insert of a batch goes through
                assert failures[2][0] == "ALREADY_EXISTS"
                assert failures[3] == ("INVALID_ARGUMENT", f"digest {negative.digest_id}: "
                                       "max_list_size must be >= 0")  # fmt: skip
                assert failures[4][0] == "NOT_FOUND"

                assert not await backup.open()
                with pytest.raises(P4RuntimeError) as error:
                    await backup.write([_update(p4r.Update.INSERT, digest_entry=negative)])
                assert error.value.is_not_primary

                wrong_device = SwitchSession(address, 2, 20)
                with pytest.raises(P4RuntimeError) as error:
                    await wrong_device.open()
                assert error.value.code == grpc.StatusCode.NOT_FOUND
                await wrong_device.close()
            finally:
                await backup.close()
                await session.close()

    asyncio.run(main())


def test_digest_lists_honour_list_size_and_wait_for_acks():
    async def main():
        async with running_target() as (_, address):
            session = await _primary(address)
            channel = grpc.aio.insecure_channel(address)
            stub = p4r_grpc.P4RuntimeStub(channel)
            try:
                ids = await _install(session)
                # A raw controller that does not ack: take over mastership with a higher id.
                stream = stub.StreamChannel()
                hello = p4r.StreamMessageRequest()
                hello.arbitration.device_id = 1
                hello.arbitration.election_id.low = 99
                await stream.write(hello)
                assert (await stream.read()).arbitration.status.code == 0
                digest = p4r.DigestEntry(digest_id=ids.digests["rtt_sample_t"])
                digest.config.max_timeout_ns = 10**9  # only full lists, in this test's time
                digest.config.max_list_size = 5
                request = p4r.WriteRequest(device_id=1, election_id=p4r.Uint128(low=99))
                request.updates.append(_update(p4r.Update.INSERT, digest_entry=digest))
                await stub.Write(request, timeout=5)

                lists = []

                async def read_forever():
                    # a cancelled read would cancel the whole call: one reader, never cancelled
                    while True:
                        message = await stream.read()
                        if message is grpc.aio.EOF:
                            return
                        if message.WhichOneof("update") == "digest":
                            lists.append(message.digest)

                reader = asyncio.create_task(read_forever())
                await wait_for(lambda: len(lists) >= DEFAULT_MAX_OUTSTANDING, 5, "lists")
                await asyncio.sleep(0.5)
                assert len(lists) == DEFAULT_MAX_OUTSTANDING  # nothing more until an ack
                assert all(len(d.data) == 5 for d in lists)
                assert len({d.list_id for d in lists}) == len(lists)
                ack = p4r.StreamMessageRequest()
                ack.digest_ack.digest_id = digest.digest_id
                ack.digest_ack.list_id = lists[0].list_id
                await stream.write(ack)
                await wait_for(lambda: len(lists) > DEFAULT_MAX_OUTSTANDING, 5, "one more list")
                rtt_ns = int.from_bytes(lists[-1].data[0].struct.members[2].bitstring, "big")
                assert 10_000_000 <= rtt_ns < 1_000_000_000
                stream.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            finally:
                await channel.close()
                await session.close()

    asyncio.run(main())


def test_wait_for_helper_times_out_clearly():
    async def main():
        with pytest.raises(AssertionError, match="never"):
            await wait_for(lambda: False, 0.1, "never")

    asyncio.run(main())


def test_the_sim_actuator_sets_u_and_reports_ground_truth():
    from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

    async def main():
        async with (
            running_target() as (target, address),
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = telemetry_pb2_grpc.SimActuatorStub(channel)
            applied = await stub.SetCampusRateLimit(
                telemetry_pb2.CampusRateLimit(rate_bps=250e6), timeout=5
            )
            assert applied.rate_bps == 250e6
            assert target.source.sim.campus_rate_limit_bps == 250e6
            await asyncio.sleep(1.5)
            truth = await stub.GetGroundTruth(telemetry_pb2.GroundTruthRequest(), timeout=5)
            assert truth.campus_rate_limit_bps == 250e6
            assert truth.sim_time_s > 1.0 and truth.active_flows == 108
            # the shaper holds the campus class to u: its bytes grow at <= 250 Mb/s
            before = truth.campus_tap_bytes
            await asyncio.sleep(1.0)
            later = await stub.GetGroundTruth(telemetry_pb2.GroundTruthRequest(), timeout=5)
            rate = (later.campus_tap_bytes - before) * 8 / (later.sim_time_s - truth.sim_time_s)
            assert 150e6 < rate < 260e6
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.SetCampusRateLimit(telemetry_pb2.CampusRateLimit(rate_bps=-1), timeout=5)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(main())


class _BrokenSource:
    ports = frozenset({1, 2, 3})

    def advance(self, elapsed_s):
        raise RuntimeError("the tap went away")

    def set_activity_rule(self, rule):
        return


def test_a_failing_source_is_reported_not_hidden():
    from scidmz.contract.pipeline import build_p4info
    from scidmz.switch.runner import Target
    from scidmz.testenv.cluster import free_port

    async def main():
        target = Target(build_p4info(), _BrokenSource())
        await target.start(f"127.0.0.1:{free_port()}")
        try:
            error = await asyncio.wait_for(target.failed(), 5)
        finally:
            await target.stop(0)
        assert isinstance(error, RuntimeError) and "tap went away" in str(error)

    asyncio.run(main())


def test_the_actuation_journal_lists_every_rate_set_in_order():
    from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
    from scidmz.switch import runner

    async def main():
        async with (
            running_target() as (_, address),
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = telemetry_pb2_grpc.SimActuatorStub(channel)
            for rate in (300e6, 500e6, 0.0):
                await stub.SetCampusRateLimit(telemetry_pb2.CampusRateLimit(rate_bps=rate))
            await stub.SetDtnRateLimit(telemetry_pb2.RateLimit(rate_bps=600e6))
            with pytest.raises(grpc.aio.AioRpcError):  # refused: not journaled
                await stub.SetCampusRateLimit(telemetry_pb2.CampusRateLimit(rate_bps=math.nan))
            everything = await stub.GetActuations(telemetry_pb2.ActuationsRequest())
            newer = await stub.GetActuations(telemetry_pb2.ActuationsRequest(after=2))
            none = await stub.GetActuations(telemetry_pb2.ActuationsRequest(after=everything.next))
            return everything, newer, none

    everything, newer, none = asyncio.run(main())
    assert [(a.shaper, a.rate_bps) for a in everything.actuations] == [
        ("campus", 300e6), ("campus", 500e6), ("campus", 0.0), ("dtn", 600e6)
    ]  # fmt: skip
    times = [a.monotonic_s for a in everything.actuations]
    assert times == sorted(times) and everything.next == 4
    assert [a.rate_bps for a in newer.actuations] == [0.0, 600e6] and newer.next == 4
    assert not none.actuations and runner.JOURNAL_DEPTH >= 86_400


def test_the_largest_jump_skips_fail_safe_steps_and_target_restarts():
    from scidmz.chaos.faults import max_jump
    from scidmz.chaos.local_loop import Actuation

    mb = 1e6
    journal = [
        Actuation(1.0, 600 * mb, 0), Actuation(2.0, 100 * mb, 0),  # onto the fail-safe
        Actuation(3.0, 300 * mb, 0), Actuation(4.0, 400 * mb, 0),
        Actuation(5.0, 1000 * mb, 1), Actuation(5.5, 100 * mb, 1),  # a new target's journal
        Actuation(6.0, 250 * mb, 1),
    ]  # fmt: skip
    assert max_jump(journal, 1.5, 10.0, 100 * mb) == 200 * mb  # 100 -> 300, from the 600 held
    assert max_jump(journal, 4.5, 10.0, 100 * mb) == 150 * mb  # not 400 -> 1000 across runs
    assert max_jump(journal, 0.0, 10.0, 150 * mb) == 900 * mb  # 1000 -> 100 counts then


def test_the_bottleneck_buffer_is_set_over_grpc_within_its_bounds():
    """The buffer actuator's RPC: the buffer in force comes back and shows in the ground
    truth; one beyond the scenario's maximum is refused naming the bound, and nothing
    changes."""
    from scidmz.netsim.scenario import Bottleneck, Scenario
    from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

    async def main():
        scenario = Scenario(bottleneck=Bottleneck(max_buffer_s=0.2))
        async with (
            running_target(scenario) as (target, address),
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = telemetry_pb2_grpc.SimActuatorStub(channel)
            answer = await stub.SetBottleneckBuffer(telemetry_pb2.BufferSize(bytes=1.25e6))
            assert answer.bytes == pytest.approx(1.25e6)
            await wait_for(lambda: target.source.truth, 5, "a tick")
            truth = await stub.GetGroundTruth(telemetry_pb2.GroundTruthRequest())
            assert truth.bottleneck_buffer_bytes == pytest.approx(1.25e6)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SetBottleneckBuffer(telemetry_pb2.BufferSize(bytes=30e6))
            assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
            assert "25000000] bytes" in refused.value.details()
            assert target.source.sim.bottleneck_buffer_bytes == pytest.approx(1.25e6)

    asyncio.run(main())


def test_the_sim_buffer_actuator_sets_and_reads_back_the_buffer():
    """``SimBufferActuator`` over real gRPC: the buffer in force, read back from the ground
    truth; one above the scenario's maximum is an ``ActuatorError`` naming the bound."""
    from scidmz.control.actuators import ActuatorError
    from scidmz.control.buffer_actuators import SimBufferActuator
    from scidmz.netsim.scenario import Bottleneck, Scenario

    async def main():
        scenario = Scenario(bottleneck=Bottleneck(max_buffer_s=0.2))
        async with running_target(scenario) as (target, address):
            actuator = SimBufferActuator(address)
            try:
                assert await actuator.apply(3.75e6) == pytest.approx(3.75e6)  # 30 ms at 1 Gb/s
                await wait_for(lambda: target.source.truth, 5, "a tick")
                assert await actuator.current() == pytest.approx(3.75e6)
                with pytest.raises(ActuatorError, match=r"OUT_OF_RANGE.*25000000\] bytes"):
                    await actuator.apply(30e6)
                with pytest.raises(ActuatorError, match="at least 1514 bytes"):
                    await actuator.apply(100)
                assert target.source.sim.bottleneck_buffer_bytes == pytest.approx(3.75e6)
                # the queue's own counters (lossSignal actuator): BR1's drops and departures
                # as the simulator counts them, growing as it runs
                first = await actuator.queue_counters()
                await wait_for(lambda: target.source.truth[-1].sim_s > 3.0, 20, "3 s of traffic")
                later = await actuator.queue_counters()
                point = target.source.truth[-1]
            finally:
                await actuator.close()
            return first, later, point

    first, later, point = asyncio.run(main())
    assert first is not None and later is not None
    assert later.passed > first.passed > 0
    assert later.dropped >= first.dropped >= 0
    assert later.passed <= point.dtn_departed_bytes + point.campus_departed_bytes
    assert 0.0 <= drop_ratio(first, later) < 0.2
