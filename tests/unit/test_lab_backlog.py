"""The lab's backlog meter reads a real qdisc's backlog over netlink (pyroute2), many times
per sample, for the interval's mean queuing delay."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scidmz.contract.netns import named_netns_exists
from scidmz.lab.topology import LabError
from scidmz.lab.truth import BacklogMean, BacklogMeter, qdisc_stats
from tests.netns import ip, veth_netns

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

# 200 datagrams of 1400 bytes to a static neighbour, sent without blocking: what the socket
# buffer lets through waits in the tbf, which drains at 1 Mbit/s (~125 kB/s).
_BLAST = (
    "import socket\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        s.sendto(b'x' * 1400, socket.MSG_DONTWAIT, ('10.77.0.9', 9))\n"
    "    except OSError:  # the socket buffer is full\n"
    "        break\n"
)


def test_the_mean_is_over_successful_readings_and_restarts_after_take() -> None:
    mean = BacklogMean()
    for backlog in (100.0, None, 300.0):
        mean.add(backlog)
    assert mean.take() == (200.0, 2)
    assert mean.missed == 1
    value, readings = mean.take()
    assert math.isnan(value) and readings == 0


@needs_root
def test_the_meter_reads_what_tc_shows_of_a_filling_queue() -> None:
    with veth_netns("bn0") as netns:
        ip("-n", netns, "link", "set", "bn0p", "up")
        ip("-n", netns, "addr", "add", "10.77.0.1/24", "dev", "bn0")
        # a static neighbour: no ARP, every datagram goes straight into bn0's qdisc
        ip("-n", netns, "neigh", "add", "10.77.0.9", "lladdr", "02:00:00:00:00:09", "dev", "bn0")
        subprocess.run(
            ["tc", "-n", netns, "qdisc", "add", "dev", "bn0", "root", "tbf", "rate", "1mbit",
             "burst", "1600", "limit", "1000000"],
            check=True, capture_output=True,
        )  # fmt: skip
        meter = BacklogMeter(netns, "bn0").open()
        try:
            meter.read()
            empty, _ = meter.mean.take()
            subprocess.run(
                ["ip", "netns", "exec", netns, sys.executable, "-c",
                 _BLAST],
                check=True, capture_output=True,
            )  # fmt: skip
            meter.read()
            shown = qdisc_stats(
                subprocess.run(
                    ["tc", "-n", netns, "-s", "-j", "qdisc", "show", "dev", "bn0"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )["backlog_bytes"]
            meter.read()
            full, readings = meter.mean.take()
        finally:
            meter.close()
    assert empty == 0.0
    assert readings == 2
    # ~125 kB/s drain: a few ms between the reads moves the backlog by a few kB
    assert shown > 50_000
    assert full == pytest.approx(shown, abs=10_000)


@needs_root
def test_a_missing_interface_is_refused_by_name() -> None:
    with veth_netns("bn0") as netns, pytest.raises(LabError, match="nosuch0"):
        BacklogMeter(netns, "nosuch0").open()


@needs_root
def test_a_missing_namespace_is_a_lab_error_and_is_not_created() -> None:
    with pytest.raises(LabError, match="namespace scidmz-absent0: no such namespace"):
        BacklogMeter("scidmz-absent0", "bn").open()
    assert not named_netns_exists("scidmz-absent0")


def test_a_namespace_name_is_a_name_not_a_path(tmp_path: Path) -> None:
    (tmp_path / "lab").touch()
    assert named_netns_exists("lab", tmp_path)
    assert not named_netns_exists("other", tmp_path)
    assert not named_netns_exists("../lab", tmp_path / "sub")
    assert not named_netns_exists("", tmp_path)
