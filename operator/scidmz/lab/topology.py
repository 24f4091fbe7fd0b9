"""The lab's testbed (paper fig. 2) as network namespaces: names, addresses and the ``ip``/``tc``
commands that build it, as pure data.

::

    sdl-campus ─c0─────s0─ sdl-shaper ─s1 (tbf at u(t))──bc─┐
                                                              sdl-border ─bn (tbf at B, drop-tail
    sdl-dtn ────d0 (DTN cap: tbf)──────────────────────bd─┘         buffer)──r0─ sdl-recv
                                                                  br ◀─x1─ sdl-delay ─x0◀─r1─┘

Data goes campus/DTN → border → bottleneck → receivers in the kernel; the receivers' ACKs
return over a second link through ``sdl-delay``, where the userspace delay line holds each
frame for its class's base RTT (the DTN's or the campus's, by destination prefix), because
this kernel has no netem. The whole base RTT sits on the ACK path: the tap at the border sees
data and its ACK one base RTT plus the bottleneck queue apart, as on the paper's testbed.

The border is where a passive tap reads both sides of the bottleneck queue: ``bc`` and ``bd``
(ingress, before the queue) and ``bn`` (egress, after it); ``br`` carries the ACKs.
"""

from __future__ import annotations

from dataclasses import dataclass

from scidmz.contract.tbf import tbf_size
from scidmz.netsim.scenario import Scenario

PREFIX = "sdl-"
CAMPUS, SHAPER, DTN, BORDER, RECV, DELAY = (
    f"{PREFIX}{role}" for role in ("campus", "shaper", "dtn", "border", "recv", "delay")
)
NAMESPACES = (CAMPUS, SHAPER, DTN, BORDER, RECV, DELAY)

CAMPUS_NET, DTN_NET = "10.71.1.0/24", "10.71.3.0/24"
CAMPUS_ADDR, DTN_ADDR = "10.71.1.1", "10.71.3.1"
# The DTN-r host lies inside the campus flows' remote network, as in the paper: the
# policy's dtn.receiverPrefix (a /32) and campus.remotePrefix (the /24) tell them apart.
CAMPUS_RECV_ADDR, DTN_RECV_ADDR = "10.71.4.2", "10.71.4.10"
DTN_RECEIVER_PREFIX, CAMPUS_REMOTE_PREFIX = f"{DTN_RECV_ADDR}/32", "10.71.4.0/24"
CAMPUS_PORT, DTN_PORT = 5202, 5201

# The ACK path's MACs are fixed because the delay line forwards frames unchanged and the
# receivers reach the border through it with a static neighbour entry (no ARP crosses it).
BORDER_RETURN_MAC = "02:5d:00:00:05:02"

# Where the controller's actuators and the tap bind.
CAMPUS_SHAPER = (SHAPER, "s1")
DTN_CAP = (DTN, "d0")
BOTTLENECK = (BORDER, "bn")
BOTTLENECK_FIFO_HANDLE = 10
"""The handle (major) of the bfifo under ``bn``'s tbf: BR1's buffer."""
TAP_INTERFACES = {"campus": "bc", "dtn": "bd", "bottleneck": "bn", "acks": "br"}


@dataclass(frozen=True)
class Link:
    """A veth pair: ``(namespace, interface, address/len or None)`` at each end."""

    a: tuple[str, str, str | None]
    b: tuple[str, str, str | None]


LINKS = (
    Link((CAMPUS, "c0", "10.71.1.1/24"), (SHAPER, "s0", "10.71.1.2/24")),
    Link((SHAPER, "s1", "10.71.2.1/24"), (BORDER, "bc", "10.71.2.2/24")),
    Link((DTN, "d0", "10.71.3.1/24"), (BORDER, "bd", "10.71.3.2/24")),
    Link((BORDER, "bn", "10.71.4.1/24"), (RECV, "r0", f"{CAMPUS_RECV_ADDR}/24")),
    Link((RECV, "r1", "10.71.5.1/24"), (DELAY, "x0", None)),
    Link((DELAY, "x1", None), (BORDER, "br", "10.71.5.2/24")),
)

ROUTES = (
    (CAMPUS, "default", "10.71.1.2"),
    (SHAPER, "default", "10.71.2.2"),
    (DTN, "default", "10.71.3.2"),
    (BORDER, CAMPUS_NET, "10.71.2.1"),
    (RECV, CAMPUS_NET, "10.71.5.2"),
    (RECV, DTN_NET, "10.71.5.2"),
)


DTN_SOCKET_BUFFER = "4096 131072 268435456"
"""tcp_wmem / tcp_rmem (min, default, max) of the DTN's and the receivers' namespaces."""
LAB_MIN_TSO_SEGMENTS = 16
"""net.ipv4.tcp_min_tso_segs in the senders' namespaces when offloads are on: GSO bursts big
enough for 1 Gb/s on one core."""


def as_built(scenario: Scenario, offloads: bool = True) -> Scenario:
    """The scenario as the lab runs it: with offloads the senders' smallest TSO burst is
    ``LAB_MIN_TSO_SEGMENTS``; without, every segment is its own packet. The simulator needs
    this to drop what the lab's queues drop (whole GSO bursts)."""
    return scenario.model_copy(update={"min_tso_segments": LAB_MIN_TSO_SEGMENTS if offloads else 1})


class LabError(RuntimeError):
    """The lab cannot be built or driven; the message says what to fix."""


def check_scenario(scenario: Scenario) -> None:
    """Refuse what the lab cannot build, naming the field, before anything is created."""
    problems = []
    for field, cca in (
        ("campus.congestion_control", scenario.campus.congestion_control),
        ("dtn.congestion_control", scenario.dtn.congestion_control),
    ):
        if cca == "bbr2":
            problems.append(f"{field}: this kernel has no bbr2 (reno, cubic, bbr)")
    if scenario.campus.short_flows.enabled:
        problems.append("campus.short_flows.enabled: the lab has no short-flow generator yet")
    if scenario.campus.long_flows > 128 or scenario.dtn.streams > 128:
        problems.append("campus.long_flows, dtn.streams: iperf3 runs at most 128 streams each")
    if scenario.dtn.transfer_bytes is not None and scenario.dtn.transfer_split != "pooled":
        problems.append(
            "dtn.transfer_split: iperf3 -n pools the streams' bytes (pooled); a static split "
            "is the simulator's only"
        )
    for field, start_s in (("campus.start_s", scenario.campus.start_s),
                           ("dtn.start_s", scenario.dtn.start_s)):  # fmt: skip
        if start_s > 0:
            problems.append(f"{field}: the lab's flows start when iperf3 has set them up")
    if problems:
        raise LabError("the lab cannot build this scenario:\n  " + "\n  ".join(problems))


def tbf_args(rate_bps: float, burst_bytes: float, limit_bytes: float) -> list[str]:
    """``tc qdisc … tbf`` arguments: rate in bit/s, bucket and drop-tail queue in bytes."""
    return [
        "tbf",
        "rate",
        f"{max(int(rate_bps), 8)}bit",
        "burst",
        str(max(int(burst_bytes), 1600)),
        "limit",
        str(max(int(limit_bytes), 1600)),
    ]


def receiver(dtn: bool) -> tuple[str, int]:
    """(address, port) of a class's iperf3 server."""
    return (DTN_RECV_ADDR, DTN_PORT) if dtn else (CAMPUS_RECV_ADDR, CAMPUS_PORT)


def delay_routes(scenario: Scenario) -> list[str]:
    """The delay line's routes: ACKs to the DTN held its base RTT, to campus senders theirs."""
    return [
        f"{DTN_NET}={round(scenario.dtn.base_rtt_s * 1e6)}",
        f"{CAMPUS_NET}={round(scenario.campus.base_rtt_s * 1e6)}",
    ]


def build_commands(scenario: Scenario, offloads: bool = True) -> list[list[str]]:
    """Every ``ip``/``tc``/``sysctl`` command that builds the lab, in order.

    The bottleneck is a tbf at B whose ``limit`` is the scenario's drop-tail buffer; the
    campus shaper a tbf at u(0) with the scenario's bucket and queue; the DTN's egress starts
    unshaped unless the scenario caps it.
    """
    commands: list[list[str]] = [["ip", "netns", "add", ns] for ns in NAMESPACES]
    for link in LINKS:
        (ns_a, if_a, _), (ns_b, if_b, _) = link.a, link.b
        commands.append(
            [
                "ip",
                "-n",
                ns_a,
                "link",
                "add",
                if_a,
                "type",
                "veth",
                "peer",
                "name",
                if_b,
                "netns",
                ns_b,
            ]
        )
    commands.append(["ip", "-n", BORDER, "link", "set", "dev", "br", "address", BORDER_RETURN_MAC])
    for link in LINKS:
        for ns, interface, address in (link.a, link.b):
            if address is not None:
                commands.append(["ip", "-n", ns, "addr", "add", address, "dev", interface])
            commands.append(["ip", "-n", ns, "link", "set", "dev", interface, "up"])
            if not offloads:
                commands.append(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "ethtool",
                        "-K",
                        interface,
                        "tso",
                        "off",
                        "gso",
                        "off",
                        "gro",
                        "off",
                    ]
                )
    commands.append(["ip", "-n", RECV, "addr", "add", f"{DTN_RECV_ADDR}/24", "dev", "r0"])
    for ns in NAMESPACES:
        commands.append(["ip", "-n", ns, "link", "set", "lo", "up"])
    for ns in (SHAPER, BORDER):
        commands.append(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    # ACKs arrive at the border on br while the receivers' prefix routes out of bn.
    for key in ("all", "default", "br"):
        commands.append(
            ["ip", "netns", "exec", BORDER, "sysctl", "-qw", f"net.ipv4.conf.{key}.rp_filter=0"]
        )
    # The delay line copies frames verbatim: ACKs must leave r1 with their checksums done.
    commands.append(
        [
            "ip",
            "netns",
            "exec",
            RECV,
            "ethtool",
            "-K",
            "r1",
            "tx",
            "off",
            "tso",
            "off",
            "gso",
            "off",
        ]
    )
    commands.append(
        [
            "ip",
            "-n",
            RECV,
            "neigh",
            "add",
            "10.71.5.2",
            "lladdr",
            BORDER_RETURN_MAC,
            "dev",
            "r1",
            "nud",
            "permanent",
        ]
    )
    # The delay line's ends carry no addresses: keep IPv6 from chattering through it.
    for ns in (DELAY, RECV, BORDER):
        commands.append(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]
        )
    for ns, destination, via in ROUTES:
        commands.append(["ip", "-n", ns, "route", "add", destination, "via", via])
    # A DTN is a tuned host (ESnet fasterdata): with the kernel's 4 MB send buffer, each
    # stream at 1 Gb/s and ~170 ms stalls at ~1.8 MB in flight, and the host, not the
    # network, would set the DTN's share.
    for ns, key in ((DTN, "net.ipv4.tcp_wmem"), (RECV, "net.ipv4.tcp_rmem")):
        commands.append(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={DTN_SOCKET_BUFFER}"])
    if offloads:
        # With GSO on, senders keep super-packets big enough for 1 Gb/s on one core.
        for ns in (CAMPUS, DTN):
            commands.append(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    f"net.ipv4.tcp_min_tso_segs={LAB_MIN_TSO_SEGMENTS}",
                ]
            )
    bottleneck = scenario.bottleneck
    commands.append(
        [
            "tc",
            "-n",
            BORDER,
            "qdisc",
            "add",
            "dev",
            "bn",
            "root",
            "handle",
            "1:",
            *tbf_args(
                bottleneck.capacity_bps,
                max(64e3, bottleneck.capacity_bps / 8 / 1000),
                bottleneck.buffer_size_bytes,
            ),
        ]
    )
    # The tbf's own fifo has no handle; a named bfifo child of the same size is the same
    # queue, and its limit can change while packets wait (control.buffer_actuators).
    commands.append(
        [
            "tc", "-n", BORDER, "qdisc", "add", "dev", "bn", "parent", "1:1",
            "handle", f"{BOTTLENECK_FIFO_HANDLE}:", "bfifo",
            "limit", str(max(int(bottleneck.buffer_size_bytes), 1600)),
        ]
    )  # fmt: skip
    shaper = scenario.shaper
    initial_u = (
        shaper.initial_rate_bps if shaper.initial_rate_bps is not None else bottleneck.capacity_bps
    )
    shaper_size = tbf_size(initial_u)
    commands.append(
        [
            "tc",
            "-n",
            SHAPER,
            "qdisc",
            "add",
            "dev",
            "s1",
            "root",
            *tbf_args(
                initial_u,
                shaper.burst_bytes or shaper_size.burst_bytes,
                shaper.queue_bytes or shaper_size.limit_bytes,
            ),
        ]
    )
    if scenario.dtn.rate_limit_bps is not None:
        cap_size = tbf_size(scenario.dtn.rate_limit_bps)
        commands.append(
            [
                "tc",
                "-n",
                DTN,
                "qdisc",
                "add",
                "dev",
                "d0",
                "root",
                *tbf_args(scenario.dtn.rate_limit_bps, cap_size.burst_bytes, cap_size.limit_bytes),
            ]
        )
    return commands
