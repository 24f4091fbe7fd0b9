"""The tc actuator sets a real tbf qdisc in a network namespace (netlink via pyroute2)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess

import pytest

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


def test_a_missing_interface_is_refused_at_start(netns):
    with pytest.raises(
        ActuatorError, match=f"interface eth9 does not exist in network namespace {netns}"
    ):
        asyncio.run(TcActuator.open("eth9", netns))
