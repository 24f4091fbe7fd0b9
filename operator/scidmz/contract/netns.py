"""Named network namespaces as iproute2 keeps them.

``ip netns add NAME`` bind-mounts the namespace at ``/run/netns/NAME``; that path is how any
tool finds it. pyroute2's ``IPRoute(netns=NAME)`` *creates* a namespace that is not there,
so a typo in a namespace name would silently leave an empty namespace behind and report a
missing interface instead: check first.
"""

from __future__ import annotations

from pathlib import Path

NETNS_RUN_DIR = Path("/run/netns")


def named_netns_exists(name: str, run_dir: Path = NETNS_RUN_DIR) -> bool:
    """True if ``ip netns`` knows a namespace called ``name``."""
    return "/" not in name and name not in ("", ".", "..") and (run_dir / name).exists()
