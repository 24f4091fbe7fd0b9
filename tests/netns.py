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
