"""What the node has, read without changing anything: sysfs and procfs files, netlink and
ethtool reads, and a packet socket opened and closed again."""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CAPABILITIES = {"NET_ADMIN": 12, "NET_RAW": 13}
"""The capabilities scidmz's node workloads use, by their bit in CapEff."""
OFFLOAD_FEATURES = {
    "gso": "tx-generic-segmentation",
    "tso": "tx-tcp-segmentation",
    "gro": "rx-gro",
}
IFF_UP, IFF_PROMISC = 0x1, 0x100
TC_H_ROOT = 0xFFFFFFFF


@dataclass(frozen=True)
class InterfaceFacts:
    name: str
    exists: bool
    up: bool = False
    promiscuous: bool = False
    mtu: int = 0
    offloads: Mapping[str, bool] | None = None
    """gso, tso, gro on or off (None: ethtool could not read them)."""
    root_qdisc: str | None = None
    """The root qdisc's kind (None: none, or not readable)."""


@dataclass(frozen=True)
class NodeFacts:
    kernel_release: str
    interfaces: Mapping[str, InterfaceFacts]
    available_interfaces: tuple[str, ...] = ()
    capabilities: frozenset[str] = frozenset()
    kernel_config: Mapping[str, str] | None = None
    """CONFIG_* options set to y or m (None: the configuration could not be read)."""
    congestion_controls: tuple[str, ...] = ()
    packet_socket_error: str | None = None
    """Why a packet socket could not be opened (None: it could)."""
    compiler: str | None = None
    prebuilt_reader: str | None = None
    """The tap's frame reader as the image carries it ($SCIDMZ_NATIVE_DIR), if here."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def parse_capabilities(status: str) -> frozenset[str]:
    """The effective capabilities scidmz cares about, from /proc/self/status."""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    if match is None:
        return frozenset()
    bits = int(match.group(1), 16)
    return frozenset(name for name, bit in CAPABILITIES.items() if bits >> bit & 1)


def parse_kernel_config(text: str) -> dict[str, str]:
    """``CONFIG_X=y|m`` lines (what is not set is absent)."""
    return dict(re.findall(r"^(CONFIG_\w+)=([ym])$", text, re.MULTILINE))


def kernel_config(release: str, root: Path = Path("/")) -> dict[str, str] | None:
    """The running kernel's configuration, from /proc/config.gz or /boot/config-RELEASE."""
    packed = root / "proc" / "config.gz"
    with contextlib.suppress(OSError, EOFError, gzip.BadGzipFile):
        return parse_kernel_config(gzip.decompress(packed.read_bytes()).decode())
    text = _read(root / "boot" / f"config-{release}")
    return parse_kernel_config(text) if text is not None else None


def _offloads(name: str) -> dict[str, bool] | None:
    try:
        from pyroute2.ethtool import Ethtool

        ethtool = Ethtool()
        try:
            features = ethtool.get_features(name).features
        finally:
            ethtool.close()
        return {short: bool(features[long].enable) for short, long in OFFLOAD_FEATURES.items()}
    except Exception:  # a driver without these features: not readable
        return None


def _root_qdisc(index: int) -> str | None:
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for qdisc in ipr.get_qdiscs(index=index):
                if qdisc["parent"] == TC_H_ROOT:
                    kind = qdisc.get_attr("TCA_KIND")
                    return str(kind) if kind is not None else None
    except Exception:  # netlink refused: not readable
        return None
    return None


def interface_facts(name: str, sys_net: Path = Path("/sys/class/net")) -> InterfaceFacts:
    base = sys_net / name
    if not base.is_dir():
        return InterfaceFacts(name, exists=False)
    flags = int((_read(base / "flags") or "0").strip() or "0", 16)
    mtu = int((_read(base / "mtu") or "0").strip() or "0")
    index = int((_read(base / "ifindex") or "0").strip() or "0")
    return InterfaceFacts(
        name,
        exists=True,
        up=bool(flags & IFF_UP),
        promiscuous=bool(flags & IFF_PROMISC),
        mtu=mtu,
        offloads=_offloads(name),
        root_qdisc=_root_qdisc(index) if index else None,
    )


def _packet_socket_error() -> str | None:
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    except OSError as error:
        return error.strerror or str(error)
    sock.close()
    return None


def read_facts(interfaces: Iterable[str]) -> NodeFacts:
    """Everything the checks judge, for these interfaces, from this node as it is."""
    release = os.uname().release
    status = _read(Path("/proc/self/status")) or ""
    available = _read(Path("/proc/sys/net/ipv4/tcp_available_congestion_control")) or ""
    sys_net = Path("/sys/class/net")
    present = tuple(sorted(p.name for p in sys_net.iterdir())) if sys_net.is_dir() else ()
    return NodeFacts(
        kernel_release=release,
        interfaces={name: interface_facts(name) for name in sorted(set(interfaces))},
        available_interfaces=present,
        capabilities=parse_capabilities(status),
        kernel_config=kernel_config(release),
        congestion_controls=tuple(available.split()),
        packet_socket_error=_packet_socket_error(),
        compiler=shutil.which("gcc"),
        prebuilt_reader=_prebuilt_reader(),
    )


def _prebuilt_reader() -> str | None:
    """The image's prebuilt ``tapreader-<digest>`` (``scidmz.lab.native``), if any."""
    directory = os.environ.get("SCIDMZ_NATIVE_DIR")
    found = sorted(Path(directory).glob("tapreader-*")) if directory else []
    return str(found[0]) if found else None
