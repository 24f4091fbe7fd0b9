"""The node's facts judged against what runs there: pure, one finding per check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scidmz.preflight.facts import InterfaceFacts, NodeFacts
from scidmz.preflight.roles import Role

Level = Literal["ok", "warn", "fail"]
SHAPING = ("campus-shaper", "dtn-shaper", "buffer")
DEFAULT_ROOTS = frozenset({"noqueue", "pfifo_fast", "fq_codel", "fq", "mq", "pfifo", "noop"})
"""Root qdiscs a kernel or a distribution installs by itself (nothing an administrator set
up would be lost when scidmz's tbf takes their place)."""
KERNEL_OPTIONS = {
    "campus-shaper": ("CONFIG_NET_SCH_TBF", "the tbf qdisc the campus rate u(t) is set on"),
    "dtn-shaper": ("CONFIG_NET_SCH_TBF", "the tbf qdisc a DTN host's cap is set on"),
    "buffer": ("CONFIG_NET_SCH_FIFO", "the bfifo qdisc BR1's buffer is sized with"),
    "tap": ("CONFIG_PACKET", "packet sockets, which the tap reads the mirror ports with"),
}


@dataclass(frozen=True)
class Finding:
    level: Level
    subject: str
    check: str
    detail: str


def evaluate(roles: Sequence[Role], facts: NodeFacts) -> list[Finding]:
    """Every check for ``roles`` on a node with ``facts``, node-wide ones first."""
    kinds: set[str] = {role.kind for role in roles}
    found = [*_capabilities(kinds, facts), *_kernel(kinds, facts)]
    if "tap" in kinds:
        found += _tap_node(facts)
    for role in roles:
        found += _interface(role, facts.interfaces[role.interface], facts)
    return found


def _capabilities(kinds: set[str], facts: NodeFacts) -> list[Finding]:
    wanted = []
    if kinds & set(SHAPING):
        wanted.append(("NET_ADMIN", "scidmz's shaping pods set qdiscs with it"))
    if "tap" in kinds:
        wanted.append(("NET_RAW", "the tap opens packet sockets with it"))
    found = []
    for capability, why in wanted:
        if capability in facts.capabilities:
            found.append(Finding("ok", "this check", f"CAP_{capability}", f"held ({why})"))
        else:
            found.append(
                Finding(
                    "warn", "this check", f"CAP_{capability}",
                    f"not held here, so what needs it was not seen as the pods will see it "
                    f"({why}): run preflight as root, or in a pod with `kubectl debug "
                    f"node/NODE --profile=netadmin`",
                )
            )  # fmt: skip
    return found


def _kernel(kinds: set[str], facts: NodeFacts) -> list[Finding]:
    found = []
    for option, why in sorted({KERNEL_OPTIONS[k] for k in kinds if k in KERNEL_OPTIONS}):
        subject = f"kernel {facts.kernel_release}"
        if facts.kernel_config is None:
            found.append(
                Finding(
                    "warn", subject, option,
                    f"not checked: neither /proc/config.gz nor /boot/config-"
                    f"{facts.kernel_release} is readable ({why})",
                )
            )  # fmt: skip
        elif option in facts.kernel_config:
            built = "built in" if facts.kernel_config[option] == "y" else "a module"
            found.append(Finding("ok", subject, option, f"{built} ({why})"))
        else:
            found.append(Finding("fail", subject, option, f"not in this kernel ({why})"))
    return found


def _tap_node(facts: NodeFacts) -> list[Finding]:
    found = []
    if facts.packet_socket_error is None:
        found.append(Finding("ok", "the tap", "packet socket", "opens"))
    else:
        found.append(
            Finding(
                "fail", "the tap", "packet socket",
                f"cannot be opened: {facts.packet_socket_error} (the tap needs CAP_NET_RAW)",
            )
        )  # fmt: skip
    if facts.prebuilt_reader is not None:
        found.append(Finding("ok", "the tap", "frame reader", f"{facts.prebuilt_reader}"))
    elif facts.compiler is not None:
        found.append(Finding("ok", "the tap", "gcc", f"{facts.compiler} builds its reader"))
    else:
        found.append(
            Finding(
                "warn", "the tap", "gcc",
                "missing: a tap started by hand (`scidmz target --source packets`) compiles "
                "its frame reader (tapreader.c) on first use; install gcc, or let the "
                "operator run it (spec.switch.tap: the image carries it prebuilt)",
            )
        )  # fmt: skip
    return found


def _interface(role: Role, interface: InterfaceFacts, facts: NodeFacts) -> list[Finding]:
    subject = f"{role.what} ({role.interface})"
    if not interface.exists:
        present = ", ".join(facts.available_interfaces) or "none readable"
        return [
            Finding(
                "fail", subject, "interface",
                f"no interface {role.interface} on this node (it has: {present})",
            )
        ]  # fmt: skip
    found = [
        Finding("ok", subject, "interface", f"present, MTU {interface.mtu}")
        if interface.up
        else Finding(
            "fail", subject, "interface",
            f"down: `ip link set {role.interface} up` (nothing passes it)",
        )
    ]  # fmt: skip
    if role.kind in SHAPING:
        found.append(_root_qdisc(role, subject, interface))
    if role.kind == "tap":
        found.append(
            Finding(
                "ok", subject, "promiscuous",
                "on" if interface.promiscuous
                else "off now; the tap asks for it while it reads (a mirror port's frames are "
                "addressed to other hosts)",
            )
        )  # fmt: skip
    found.append(_offloads(role, subject, interface))
    return found


def _root_qdisc(role: Role, subject: str, interface: InterfaceFacts) -> Finding:
    root = interface.root_qdisc
    kind = "bfifo" if role.kind == "buffer" else "tbf"
    if root is None:
        return Finding("warn", subject, "root qdisc", "not readable (netlink refused)")
    if root in DEFAULT_ROOTS:
        return Finding(
            "ok", subject, "root qdisc", f"{root} (the kernel's; scidmz's {kind} replaces it)"
        )
    if root == kind:
        return Finding(
            "warn", subject, "root qdisc",
            f"already a {kind}: another shaper, or a scidmz that did not stop cleanly, holds "
            "this interface; scidmz will replace its settings",
        )  # fmt: skip
    return Finding(
        "warn", subject, "root qdisc",
        f"{root}, set up by someone: scidmz's {kind} replaces the root qdisc and what it "
        "holds (shape elsewhere, or move that configuration to another interface)",
    )  # fmt: skip


def _offloads(role: Role, subject: str, interface: InterfaceFacts) -> Finding:
    if interface.offloads is None:
        return Finding("ok", subject, "offloads", "not readable with ethtool (not needed)")
    on = [name for name, enabled in interface.offloads.items() if enabled]
    state = f"{', '.join(on)} on" if on else "gso, tso, gro off"
    if role.kind == "tap" and interface.offloads.get("gro"):
        return Finding(
            "ok", subject, "offloads",
            f"{state}: the tap reads GRO's merged frames and counts the segments each holds",
        )  # fmt: skip
    if role.kind == "tap":
        return Finding("ok", subject, "offloads", state)
    return Finding("ok", subject, "offloads", f"{state} (the tbf's bucket is sized for GSO)")
