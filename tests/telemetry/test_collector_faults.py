"""The collector under mastership changes, switch restarts and bad configuration."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from finsy.proto import p4i

from scidmz.contract.pipeline import build_p4info
from scidmz.telemetry.collector import Collector, CollectorError
from scidmz.testenv.cluster import free_port
from tests.telemetry.harness import (
    PLAN,
    running_collector,
    running_target,
    settings,
    subscribe,
    wait_for,
)


def _fresh(collector: Collector, after: int) -> bool:
    snap = collector.snapshot
    return snap is not None and snap.sequence > after and not snap.stale


def test_a_backup_takes_over_when_the_primary_leaves():
    async def main():
        async with running_target() as (_, address):
            primary_settings = settings(address, election_id=10, sample_time_s=0.2)
            backup_settings = settings(address, election_id=5, sample_time_s=0.2)
            async with running_collector(backup_settings) as backup:
                async with running_collector(primary_settings) as primary:
                    await wait_for(lambda: primary.is_primary, 5, "the primary")
                    await wait_for(lambda: _fresh(primary, 3), 5, "primary samples")
                    assert not backup.is_primary
                    assert not backup.health.ready and "backup" in backup.health.reason
                    assert backup.snapshot is None  # a backup publishes nothing
                await wait_for(lambda: backup.is_primary, 5, "the backup's promotion")
                await wait_for(lambda: _fresh(backup, 2), 5, "samples from the new primary")
                assert backup.health.ready
                assert backup.snapshot.state.active_flows == 108  # seeded from the register

    asyncio.run(main())


def test_the_collector_survives_a_target_restart_and_marks_samples_stale():
    async def main():
        port = free_port()
        address = f"127.0.0.1:{port}"
        async with running_target(port=port):
            collector_ctx = running_collector(settings(address, sample_time_s=0.2))
            collector = await collector_ctx.__aenter__()
            try:
                await wait_for(lambda: _fresh(collector, 3), 5, "first samples")
            except BaseException:
                await collector_ctx.__aexit__(None, None, None)
                raise
        # the target is gone
        try:
            await wait_for(lambda: collector.snapshot.stale, 5, "stale samples")
            stale_at = collector.snapshot.sequence
            assert not collector.health.ready
            latest = collector.stream.latest
            assert latest.stale and list(latest.valid) == [False] * 7
            await asyncio.sleep(0.6)
            assert collector.snapshot.sequence > stale_at  # time keeps passing
            async with running_target(port=port):
                await wait_for(lambda: _fresh(collector, stale_at), 10, "fresh samples again")
                await wait_for(lambda: collector.health.ready, 5, "readiness")
                assert collector.metrics.reconnects.labels("p")._value.get() >= 1
        finally:
            await collector_ctx.__aexit__(None, None, None)

    asyncio.run(main())


def test_subscribers_get_the_stream_over_grpc():
    from scidmz.telemetry.service import CollectorProcess

    async def main():
        async with running_target() as (_, address):
            listen = f"127.0.0.1:{free_port()}"
            process = CollectorProcess(settings(address, sample_time_s=0.2), listen, free_port())
            stop = asyncio.Event()
            task = asyncio.create_task(process.serve(stop))
            try:
                samples = await subscribe(listen, 4, timeout_s=10)
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
        sequences = [s.sequence for s in samples]
        assert sequences == sorted(sequences) and len(set(sequences)) == 4
        last = samples[-1]
        assert last.link == "p" and not last.stale
        assert list(last.valid) == [True] * 7
        assert last.dtn_rate_bps > 0 and last.active_flows == 108
        assert 0.15 < last.interval_s < 0.3
        assert last.measured_at.seconds > 1_700_000_000  # wall-clock time

    asyncio.run(main())


def test_a_port_the_switch_does_not_have_stops_start_up():
    async def main():
        async with running_target() as (_, address):
            bad = settings(address, plan=replace(PLAN, bottleneck_port=9))
            with pytest.raises(CollectorError, match=r"refused the configuration.*port 9"):
                async with running_collector(bad):
                    await asyncio.sleep(5)

    asyncio.run(main())


def test_a_pipeline_missing_an_entity_stops_start_up():
    async def main():
        async with running_target() as (target, address):
            broken = p4i.P4Info()
            broken.CopyFrom(build_p4info())
            del broken.registers[0]  # the switch runs a program without queuing_delay_ns
            target.service.p4info = broken
            with pytest.raises(
                CollectorError, match=r"register ScidmzIngress\.queuing_delay_ns is missing"
            ):
                async with running_collector(settings(address)):
                    await asyncio.sleep(5)
            target.service.p4info = build_p4info()
            pushed = settings(address, pipeline=(broken, b""))
            with pytest.raises(CollectorError, match="the pipeline to push does not fit"):
                async with running_collector(pushed):
                    await asyncio.sleep(5)

    asyncio.run(main())


def test_the_collector_resolves_tofino_p4info_names():
    """bf-p4c's P4Info: pipe-prefixed names, digests named after their extern instance,
    32-bit registers. Everything is found by canonical name or struct."""

    async def main():
        async with (
            running_target(arch="tna") as (_, address),
            running_collector(settings(address, sample_time_s=0.2)) as collector,
        ):
            await wait_for(lambda: _fresh(collector, 3), 10, "samples")
            assert all(collector.snapshot.state.valid())
            assert collector.snapshot.state.active_flows == 108

    asyncio.run(main())


def test_the_collector_pushes_its_pipeline_when_the_switch_runs_another():
    async def main():
        async with running_target() as (target, address):
            other = p4i.P4Info()
            other.CopyFrom(build_p4info())
            other.pkg_info.name = "someone-elses-program"
            target.service._load(other)
            wanted = build_p4info()
            async with running_collector(
                settings(address, sample_time_s=0.2, pipeline=(wanted, b""))
            ) as collector:
                await wait_for(lambda: _fresh(collector, 3), 10, "samples")
                assert target.service.p4info == wanted
                assert all(collector.snapshot.state.valid())

    asyncio.run(main())


def test_entries_left_by_an_earlier_configuration_are_removed():
    from finsy.proto import p4r

    from scidmz.telemetry.program import Ids, desired_entries
    from scidmz.telemetry.session import SwitchSession

    async def main():
        async with running_target() as (target, address):
            old = SwitchSession(address, 1, 50)
            await old.open()
            ids = Ids.from_p4info(await old.get_p4info())
            stale_plan = replace(PLAN, campus_prefix="192.0.2.0/24", dtn_port=3, bottleneck_port=2)
            await old.write(
                [
                    p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=e))
                    for e in desired_entries(ids, stale_plan)
                    if not e.is_default_action
                ]
            )
            await old.close()
            async with running_collector(settings(address, sample_time_s=0.2)) as collector:
                await wait_for(lambda: _fresh(collector, 2), 10, "samples")
            routes = sorted(str(r.network) for r in target.service.dataplane.routes)
            assert routes == ["198.51.100.0/24", "203.0.113.10/32"]
            assert dict(target.service.dataplane.roles) == {1: 1, 2: 2, 3: 3}  # port: role

    asyncio.run(main())


def test_after_a_long_switch_outage_samples_are_fresh_seconds_after_the_switch_accepts():
    """Left to gRPC's own reconnect backoff (up to 120 s, shared by every channel to the same
    address) a collector came back 9–27 s after the switch did; with the collector's own
    policy (retry every 1 s at most) and a first sample 0.25 s after set-up, within ~1–2 s.
    The bound here is 5 s, under the 9 s the old behaviour never beat, because a loaded CI
    machine adds its own second; bench/chaos.py measures the figure (60 s and 5 min outages)."""

    async def main():
        port = free_port()
        address = f"127.0.0.1:{port}"
        production = settings(address, sample_time_s=1.0, backoff_initial_s=0.2,
                              backoff_max_s=1.0)  # fmt: skip
        async with running_target(port=port):
            collector_ctx = running_collector(production)
            collector = await collector_ctx.__aenter__()
            try:
                await wait_for(lambda: _fresh(collector, 2), 10, "first samples")
            except BaseException:
                await collector_ctx.__aexit__(None, None, None)
                raise
        try:
            await asyncio.sleep(20)  # long enough for gRPC's default backoff to grow
            stale_at = collector.snapshot.sequence
            async with running_target(port=port):
                accepting = asyncio.get_running_loop().time()
                await wait_for(lambda: _fresh(collector, stale_at), 10, "fresh samples again")
                return asyncio.get_running_loop().time() - accepting
        finally:
            await collector_ctx.__aexit__(None, None, None)

    back_after = asyncio.run(main())
    assert back_after < 5.0, back_after
