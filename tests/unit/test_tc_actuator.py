"""The tc actuator sets a real tbf qdisc in a network namespace (netlink via pyroute2)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess

import pytest

from scidmz.contract.netns import named_netns_exists
from scidmz.contract.tbf import TBF_MAX_RATE_BPS
from scidmz.control.actuators import ActuatorError, TcActuator
from tests.netns import veth_netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def netns():
    with veth_netns("campus0") as name:
        yield name


def _qdisc(netns: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", netns, "tc", "-s", "qdisc", "show", "dev", "campus0"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def test_tbf_is_created_then_changed_in_place(netns):
    async def main():
        actuator = await TcActuator.open("campus0", netns)
        try:
            assert await actuator.apply(400e6) == 400e6
            first = _qdisc(netns)
            await actuator.apply(150e6)
            second = _qdisc(netns)
            await actuator.apply(0)
            third = _qdisc(netns)
        finally:
            await actuator.close()
        return first, second, third

    first, second, third = asyncio.run(main())
    assert re.search(r"qdisc tbf (\w+): root .*rate 400Mbit burst 250000b lat 10ms", first), first
    handle = re.search(r"qdisc tbf (\w+):", first).group(1)
    assert f"qdisc tbf {handle}: root" in second and "rate 150Mbit" in second  # replaced
    assert "rate 8Kbit" in third  # u = 0: tbf's floor


def test_the_bucket_holds_the_largest_packet_an_interface_may_queue(netns):
    """A tbf bucket smaller than a queued packet never sends it again (see
    ``contract.tbf.LARGEST_PACKET_BYTES``): at a low rate the bucket is 64 KiB, and more
    where an interface of the namespace allows bigger GRO packets (BIG TCP)."""

    async def bucket_at(rate_bps):
        actuator = await TcActuator.open("campus0", netns)
        try:
            await actuator.apply(rate_bps)
        finally:
            await actuator.close()
        shown = subprocess.run(
            ["ip", "netns", "exec", netns, "tc", "-j", "qdisc", "show", "dev", "campus0"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return json.loads(shown)[0]["options"]["burst"]

    # the kernel keeps the bucket as time at the rate: it reads back a few bytes short
    assert asyncio.run(bucket_at(30e6)) == pytest.approx(65_536, abs=8)  # 5 ms: 18,750 B
    _ip = ["ip", "netns", "exec", netns, "ip", "link", "set", "dev", "campus0"]
    subprocess.run([*_ip, "gro_max_size", "185000"], check=True, capture_output=True)
    assert asyncio.run(bucket_at(30e6)) == pytest.approx(185_000, abs=8)
    assert asyncio.run(bucket_at(1e9)) == pytest.approx(625_000, abs=8)  # 5 ms at the rate


def test_a_missing_interface_is_refused_at_start(netns):
    with pytest.raises(
        ActuatorError, match=f"interface eth9 does not exist in network namespace {netns}"
    ):
        asyncio.run(TcActuator.open("eth9", netns))


def test_a_missing_namespace_is_refused_and_not_created():
    # pyroute2's IPRoute(netns=...) creates a namespace that is not there
    with pytest.raises(ActuatorError, match="network namespace scidmz-typo0 does not exist"):
        asyncio.run(TcActuator.open("campus0", "scidmz-typo0"))
    assert not named_netns_exists("scidmz-typo0")


def _tc(netns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "tc", *args], check=True, capture_output=True)


def test_the_rate_in_force_is_read_back_from_the_kernel(netns):
    """What a restarted controller adopts: the root tbf's rate as the kernel holds it (set
    here by tc itself, above 2^32 B/s too), and nothing for another root qdisc."""

    async def main():
        actuator = await TcActuator.open("campus0", netns)
        try:
            default = await actuator.current()  # a veth's default root qdisc is not a tbf
            _tc(netns, "qdisc", "replace", "dev", "campus0", "root", "tbf",
                "rate", "730mbit", "burst", "200000", "limit", "400000")  # fmt: skip
            held = await actuator.current()
            _tc(netns, "qdisc", "replace", "dev", "campus0", "root", "tbf",
                "rate", "40gbit", "burst", "9000000", "limit", "20000000")  # fmt: skip
            fast = await actuator.current()
            _tc(netns, "qdisc", "replace", "dev", "campus0", "root", "pfifo", "limit", "100")
            other = await actuator.current()
            await actuator.apply(123e6)
            applied = await actuator.current()
        finally:
            await actuator.close()
        return default, held, fast, other, applied

    default, held, fast, other, applied = asyncio.run(main())
    assert default is None and other is None
    assert held == 730e6
    assert fast == TBF_MAX_RATE_BPS  # the 32-bit field saturates: the most tc here applies
    assert applied == 123e6
