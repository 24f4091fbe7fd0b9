"""The buffer actuators: a real bfifo's limit changed in a network namespace (netlink via
pyroute2), the queue found under a root tbf or at the root, refusals, the dry run."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess

import pytest

from scidmz.control.actuators import TC_H_ROOT, ActuatorError
from scidmz.control.buffer_actuators import (
    DropLedger,
    DryRunBufferActuator,
    FifoQdisc,
    QueueCounters,
    TcBufferActuator,
    drop_ratio,
    find_buffer_fifo,
)
from tests.netns import shaped_port as netns_port
from tests.netns import udp_burst, veth_netns

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _q(kind, handle, parent, limit=0, backlog=0):
    return {"kind": kind, "handle": handle, "parent": parent, "limit": limit, "backlog": backlog}


def test_the_buffer_is_the_root_bfifo_or_the_root_tbfs_bfifo_child():
    assert find_buffer_fifo([_q("bfifo", 0x80000, TC_H_ROOT, 5000, 7)]) == FifoQdisc(
        0x80000, TC_H_ROOT, 5000, 7
    )
    shaped = [_q("tbf", 0x10000, TC_H_ROOT), _q("bfifo", 0x100000, 0x10001, 9000, 3)]
    assert find_buffer_fifo(shaped) == FifoQdisc(0x100000, 0x10001, 9000, 3)


def test_a_port_without_a_changeable_fifo_says_why_and_how():
    assert find_buffer_fifo([]) == "no root qdisc"
    reason = find_buffer_fifo([_q("tbf", 0x10000, TC_H_ROOT)])
    assert "no bfifo child" in reason and "parent 1:1 handle 10: bfifo" in reason
    assert "pfifo_fast, not bfifo" in find_buffer_fifo([_q("pfifo_fast", 0, TC_H_ROOT)])
    other_child = [_q("tbf", 0x10000, TC_H_ROOT), _q("pfifo", 0x100000, 0x10001, 100)]
    assert "no bfifo child" in find_buffer_fifo(other_child)


def test_the_dry_run_keeps_what_it_was_asked_and_refuses_less_than_a_frame():
    async def main():
        actuator = DryRunBufferActuator()
        assert await actuator.current() is None
        assert await actuator.apply(1.25e6) == 1.25e6
        with pytest.raises(ActuatorError, match="at least 1514 bytes"):
            await actuator.apply(1000)
        with pytest.raises(ActuatorError, match="at least 1514 bytes"):
            await actuator.apply(float("nan"))
        assert await actuator.current() == 1.25e6
        assert await actuator.queue_counters() is None  # no queue to count

    asyncio.run(main())


def _tc(netns, *args):
    subprocess.run(["tc", "-n", netns, *args], check=True, capture_output=True)


@pytest.fixture
def shaped_port():
    """``bn0`` as the lab's border port: a 1 Mbit/s tbf with a bfifo child of 200 KB."""
    with veth_netns("bn0") as netns:
        netns_port(netns, "bn0")
        yield netns


@root_only
def test_a_lower_limit_keeps_the_backlog_and_drops_arrivals_until_below_it(shaped_port):
    async def main():
        actuator = await TcBufferActuator.open("bn0", shaped_port)
        try:
            assert await actuator.current() == 200_000
            udp_burst(shaped_port)
            before = await actuator.backlog_bytes()
            assert await actuator.apply(20_000) == 20_000
            after = await actuator.backlog_bytes()
            limit = await actuator.current()
            udp_burst(shaped_port, 10)  # arrivals above the limit are dropped
            refilled = await actuator.backlog_bytes()
        finally:
            await actuator.close()
        return before, after, limit, refilled

    before, after, limit, refilled = asyncio.run(main())
    assert before > 100_000, before  # the queue was full well past the new limit
    assert after >= before - 5_000, (before, after)  # kept: 1 Mbit/s drains ~125 B/ms
    assert limit == 20_000
    assert refilled <= after, (after, refilled)


@root_only
def test_the_queues_own_counters_count_its_tail_drops_as_tc_does(shaped_port):
    async def main():
        actuator = await TcBufferActuator.open("bn0", shaped_port)
        try:
            assert await actuator.apply(20_000) == 20_000  # ~14 datagrams of 1,442 bytes
            before = await actuator.queue_counters()
            udp_burst(shaped_port, 150)
            after = await actuator.queue_counters()
        finally:
            await actuator.close()
        return before, after

    before, after = asyncio.run(main())
    assert before is not None and after is not None
    shown = subprocess.run(
        ["tc", "-n", shaped_port, "-s", "qdisc", "show", "dev", "bn0"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    drops = int(shown.split("bfifo")[1].split("dropped ")[1].split(",")[0])
    # 150 sent at once into 20 KB at 1 Mbit/s: most are dropped at the tail, each a
    # 1,442-byte frame (1,400 bytes of payload), as tc counts them
    assert 100 <= drops <= 150, shown
    assert after.dropped - before.dropped == pytest.approx(drops * 1442, abs=1442), shown
    assert 0.6 < drop_ratio(before, after) < 1.0


@pytest.fixture
def gso_port():
    """``bn0`` as a border port whose bfifo receives GSO skbs whole (a 64 KB bucket)."""
    with veth_netns("bn0") as netns:
        netns_port(netns, "bn0", burst_bytes=65536)
        yield netns


@root_only
def test_a_gso_burst_dropped_whole_counts_its_bytes_not_one_packet(gso_port):
    """The kernel counts a dropped GSO skb as one drop and a sent one as its segments;
    the actuator's loss is in bytes all the same."""

    async def main():
        actuator = await TcBufferActuator.open("bn0", gso_port)
        try:
            before = await actuator.queue_counters()
            udp_burst(gso_port, 60, segments=16)  # 60 skbs of 16 × 1,400 bytes
            queued = await actuator.queue_counters()  # finds the queue: skbs of ~23 KB
            await asyncio.sleep(2.0)  # 200 KB drain at 1 Mbit/s
            after = await actuator.queue_counters()
        finally:
            await actuator.close()
        return before, queued, after

    before, queued, after = asyncio.run(main())
    assert before is not None and queued is not None and after is not None
    stats = json.loads(
        subprocess.run(
            ["tc", "-n", gso_port, "-s", "-j", "qdisc", "show", "dev", "bn0"],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    fifo = next(q for q in stats if q["kind"] == "bfifo")
    skb = 16 * 1400 + 15 * 42 + 42 + 14  # payload, each segment's headers (qdisc_pkt_len)
    assert fifo["drops"] >= 40, fifo  # most of the 60 skbs did not fit in 200 KB
    assert fifo["packets"] > fifo["drops"], fifo  # ... yet drops < sent "packets"
    assert after.dropped - before.dropped == pytest.approx(fifo["drops"] * skb, rel=0.02)
    truth = fifo["drops"] * skb / (fifo["drops"] * skb + fifo["bytes"])
    assert drop_ratio(before, after) == pytest.approx(truth, rel=0.02)
    assert drop_ratio(before, after) > 0.7  # drops over sent packets would say < 0.5


def _fifo(drops, sent_bytes, backlog=0, queued=0, sent_packets=None):
    return FifoQdisc(
        0x100000, 0x10001, 200_000, backlog, drops,
        sent_bytes // 1448 if sent_packets is None else sent_packets, sent_bytes, queued,
    )  # fmt: skip


def test_drops_are_weighed_by_the_running_mean_queued_skb():
    ledger, first = DropLedger().read(_fifo(0, 1_000_000, backlog=60_000, queued=3))
    assert ledger.skb_bytes == 20_000 and first.dropped == 0
    ledger, second = ledger.read(_fifo(10, 2_000_000, backlog=30_000, queued=1))
    assert ledger.skb_bytes == pytest.approx(20_000 + 0.2 * (30_000 - 20_000))
    assert second.dropped == pytest.approx(10 * 22_000)
    assert drop_ratio(first, second) == pytest.approx(220_000 / (220_000 + 1_000_000))
    # an empty queue keeps the size it knew; the drops in between are weighed by it
    ledger, third = ledger.read(_fifo(15, 3_000_000))
    assert third.dropped == pytest.approx(15 * 22_000)


def test_before_any_queue_is_seen_a_drop_weighs_one_sent_packet():
    _, counters = DropLedger().read(_fifo(4, 1_448_000, sent_packets=1000))
    assert counters.dropped == pytest.approx(4 * 1448)
    _, idle = DropLedger().read(_fifo(0, 0, sent_packets=0))
    assert idle == QueueCounters(0.0, 0.0)


def test_a_replaced_qdisc_restarts_the_account_and_the_ratio_refuses_it_once():
    ledger, first = DropLedger().read(_fifo(100, 5_000_000, backlog=20_000, queued=1))
    ledger, replaced = ledger.read(_fifo(2, 10_000, backlog=20_000, queued=1))
    assert replaced.dropped == pytest.approx(2 * 20_000)
    assert math.isnan(drop_ratio(first, replaced))
    _, later = ledger.read(_fifo(3, 110_000, backlog=20_000, queued=1))
    assert drop_ratio(replaced, later) == pytest.approx(20_000 / (20_000 + 100_000))


def test_a_drop_ratio_needs_two_reads_and_counters_that_only_grow():
    assert drop_ratio(QueueCounters(10, 990), QueueCounters(20, 1980)) == pytest.approx(0.01)
    assert math.isnan(drop_ratio(None, QueueCounters(20, 1980)))
    assert math.isnan(drop_ratio(QueueCounters(10, 990), None))
    assert math.isnan(drop_ratio(QueueCounters(10, 990), QueueCounters(0, 5)))  # a new qdisc
    assert math.isnan(drop_ratio(QueueCounters(10, 990), QueueCounters(10, 990)))  # idle


@root_only
def test_a_root_bfifo_is_sized_in_place():
    with veth_netns("bn0") as netns:
        _tc(netns, "qdisc", "add", "dev", "bn0", "root", "handle", "5:", "bfifo", "limit", "9000")

        async def main():
            actuator = await TcBufferActuator.open("bn0", netns)
            try:
                await actuator.apply(64_000)
                return await actuator.current()
            finally:
                await actuator.close()

        assert asyncio.run(main()) == 64_000
        shown = subprocess.run(
            ["tc", "-n", netns, "qdisc", "show", "dev", "bn0"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert "qdisc bfifo 5: root" in shown and "limit 64000b" in shown, shown


@root_only
def test_a_port_that_cannot_be_sized_is_refused_at_start_with_the_fix():
    with veth_netns("bn0") as netns:
        _tc(netns, "qdisc", "add", "dev", "bn0", "root", "handle", "1:", "tbf", "rate", "1mbit",
            "burst", "1600", "limit", "200000")  # fmt: skip
        with pytest.raises(ActuatorError, match=r"bn0 in network namespace .* no bfifo child.*"
                           r"tc qdisc add dev IFACE parent 1:1 handle 10: bfifo"):  # fmt: skip
            asyncio.run(TcBufferActuator.open("bn0", netns))
        with pytest.raises(
            ActuatorError, match=r"interface nope0 does not exist in network namespace scidmz-"
        ):
            asyncio.run(TcBufferActuator.open("nope0", netns))
    with pytest.raises(ActuatorError, match="network namespace scidmz-gone does not exist"):
        asyncio.run(TcBufferActuator.open("bn0", "scidmz-gone"))


@root_only
def test_a_buffer_below_one_frame_changes_nothing(shaped_port):
    async def main():
        actuator = await TcBufferActuator.open("bn0", shaped_port)
        try:
            with pytest.raises(ActuatorError, match="at least 1514 bytes"):
                await actuator.apply(512)
            return await actuator.current()
        finally:
            await actuator.close()

    assert asyncio.run(main()) == 200_000
