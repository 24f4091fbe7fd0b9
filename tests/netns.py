"""A throwaway network namespace with one veth pair, for tests of real qdiscs."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def veth_netns(interface: str) -> Iterator[str]:
    """A new namespace holding ``interface`` (up) and its peer ``<interface>-peer``; both
    go with the namespace."""
    name = f"scidmz-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "add", interface, "type", "veth", "peer", "name", f"{interface}p")
        ip("-n", name, "link", "set", interface, "up")
        yield name
    finally:
        ip("netns", "del", name)


BURST_PEER = "10.99.0.2"


def shaped_port(
    netns: str, interface: str, limit_bytes: int = 200_000, burst_bytes: int = 1600
) -> None:
    """``interface`` as the lab's border port: a 1 Mbit/s tbf with a bfifo child (handle
    10:) of ``limit_bytes``, addressed, its peer up and a permanent neighbour (so nothing
    waits on ARP). Replaces what a previous call left. A ``burst_bytes`` above a GSO skb
    lets GSO skbs reach the bfifo whole (a smaller bucket makes the tbf segment them)."""
    for command in (
        ["addr", "replace", "10.99.0.1/24", "dev", interface],
        ["link", "set", f"{interface}p", "up"],
        ["neigh", "replace", BURST_PEER, "lladdr", "02:00:00:00:00:02", "nud", "permanent",
         "dev", interface],
    ):  # fmt: skip
        ip("-n", netns, *command)
    subprocess.run(  # a previous call's qdiscs, if any
        ["tc", "-n", netns, "qdisc", "del", "dev", interface, "root"],
        check=False, capture_output=True,
    )  # fmt: skip
    for args in (
        [
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            "1mbit",
            "burst",
            str(burst_bytes),
            "limit",
            "200000",
        ],
        ["parent", "1:1", "handle", "10:", "bfifo", "limit", str(limit_bytes)],
    ):
        subprocess.run(
            ["tc", "-n", netns, "qdisc", "add", "dev", interface, *args],
            check=True, capture_output=True,
        )  # fmt: skip


def udp_burst(netns: str, packets: int = 150, segments: int = 1) -> None:
    """``packets`` datagrams of 1,400 bytes at once towards the shaped port's peer; with
    ``segments`` > 1, each a GSO skb of that many datagrams (UDP_SEGMENT)."""
    gso = "s.setsockopt(socket.SOL_UDP, 103, 1400)\n" if segments > 1 else ""
    script = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)\n"
        f"{gso}"
        f"for _ in range({packets}): s.sendto(b'x' * {1400 * segments}, ('{BURST_PEER}', 9))\n"
    )
    subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", script], check=True)
