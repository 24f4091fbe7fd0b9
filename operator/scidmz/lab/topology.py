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

Several DTN hosts (a scenario's ``more_dtns``): host k ≥ 2 is namespace ``sdl-dtnK`` on its
own sender network ``10.71.(9+K).0/24``, linked to the border by ``d0``–``bdK``, with its own
receiver address ``10.71.4.(9+K)`` and iperf3 port, its own ACK delay and its own cap on its
``d0``; the tap reads every ``bd*`` as the switch's DTN port, as a border router's several
DTN-facing links would be mirrored onto one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


LAB_MAX_DTNS = 4
"""DTN hosts a lab holds: the tap reader's and the delay line's tables, and two cores."""


@dataclass(frozen=True)
class DtnSite:
    """One DTN host of the lab: where it sends from and whom it sends to."""

    name: str
    namespace: str
    net: str
    sender: str
    border_interface: str
    border: str
    receiver: str
    port: int

    @property
    def cap(self) -> tuple[str, str]:
        """(namespace, interface) of the host's egress, where its cap (a tbf) sits."""
        return (self.namespace, "d0")


FIRST_DTN = DtnSite("dtn", DTN, DTN_NET, DTN_ADDR, "bd", "10.71.3.2", DTN_RECV_ADDR, DTN_PORT)
"""The testbed's DTN host (the paper's one DTN), whatever the scenario calls it."""


def dtn_sites(scenario: Scenario) -> list[DtnSite]:
    """The scenario's DTN hosts in the lab, ``dtn`` first (the paper's one DTN)."""
    sites = []
    for k, dtn in enumerate(scenario.dtns, start=1):
        if k == 1:
            sites.append(replace(FIRST_DTN, name=dtn.name))
            continue
        sites.append(
            DtnSite(
                name=dtn.name,
                namespace=f"{DTN}{k}",
                net=f"10.71.{9 + k}.0/24",
                sender=f"10.71.{9 + k}.1",
                border_interface=f"bd{k}",
                border=f"10.71.{9 + k}.2",
                receiver=f"10.71.4.{9 + k}",
                port=DTN_PORT + 10 * k,
            )
        )
    return sites


def namespaces(scenario: Scenario) -> tuple[str, ...]:
    """Every namespace the scenario's lab has."""
    return (*NAMESPACES, *(s.namespace for s in dtn_sites(scenario)[1:]))


def tap_interfaces(scenario: Scenario) -> dict[str, list[str]]:
    """The border's interfaces per tap role (``dtn``: every DTN host's link)."""
    return {
        role: [s.border_interface for s in dtn_sites(scenario)] if role == "dtn" else [name]
        for role, name in TAP_INTERFACES.items()
    }


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


def links(scenario: Scenario) -> list[Link]:
    """The veth pairs: the testbed's, then one per further DTN host."""
    more = [
        Link((s.namespace, "d0", f"{s.sender}/24"), (BORDER, s.border_interface, f"{s.border}/24"))
        for s in dtn_sites(scenario)[1:]
    ]
    return [*LINKS, *more]


def routes(scenario: Scenario) -> list[tuple[str, str, str]]:
    """(namespace, destination, via): the testbed's, then each further DTN host's default
    route and the receivers' route back to it over the ACK path."""
    more = []
    for site in dtn_sites(scenario)[1:]:
        more += [(site.namespace, "default", site.border), (RECV, site.net, "10.71.5.2")]
    return [*ROUTES, *more]


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
    if scenario.campus.congestion_control == "bbr2":
        problems.append("campus.congestion_control: this kernel has no bbr2 (reno, cubic, bbr)")
    if scenario.campus.short_flows.enabled:
        problems.append("campus.short_flows.enabled: the lab has no short-flow generator yet")
    if scenario.campus.long_flows > 128:
        problems.append("campus.long_flows: iperf3 runs at most 128 streams each")
    if scenario.campus.start_s > 0:
        problems.append("campus.start_s: the lab's flows start when iperf3 has set them up")
    if len(scenario.dtns) > LAB_MAX_DTNS:
        problems.append(f"more_dtns: the lab holds at most {LAB_MAX_DTNS} DTN hosts")
    for k, dtn in enumerate(scenario.dtns):
        field = "dtn" if k == 0 else f"more_dtns[{k - 1}]"
        if k > 0 and dtn.name in ("dtn", "campus"):
            problems.append(f"{field}.name: {dtn.name!r} names the lab's first DTN or campus logs")
        if dtn.congestion_control == "bbr2":
            problems.append(
                f"{field}.congestion_control: this kernel has no bbr2 (reno, cubic, bbr)"
            )
        if dtn.streams > 128:
            problems.append(f"{field}.streams: iperf3 runs at most 128 streams each")
        if dtn.transfer_bytes is not None and dtn.transfer_split != "pooled":
            problems.append(
                f"{field}.transfer_split: iperf3 -n pools the streams' bytes (pooled); a static "
                "split is the simulator's only"
            )
        if dtn.transfer_bytes is not None and (dtn.start_s > 0 or dtn.stop_s is not None):
            problems.append(
                f"{field}: a lab transfer (transfer_bytes) starts at once and runs to its end "
                "(no start_s, stop_s)"
            )
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
    """(address, port) of a class's iperf3 server (the first DTN host's)."""
    return (DTN_RECV_ADDR, DTN_PORT) if dtn else (CAMPUS_RECV_ADDR, CAMPUS_PORT)


def delay_routes(scenario: Scenario) -> list[str]:
    """The delay line's routes: ACKs to each DTN host held its base RTT, to campus senders
    theirs."""
    return [
        *(
            f"{site.net}={round(dtn.base_rtt_s * 1e6)}"
            for site, dtn in zip(dtn_sites(scenario), scenario.dtns, strict=True)
        ),
        f"{CAMPUS_NET}={round(scenario.campus.base_rtt_s * 1e6)}",
    ]


def build_commands(scenario: Scenario, offloads: bool = True) -> list[list[str]]:
    """Every ``ip``/``tc``/``sysctl`` command that builds the lab, in order.

    The bottleneck is a tbf at B whose ``limit`` is the scenario's drop-tail buffer; the
    campus shaper a tbf at u(0) with the scenario's bucket and queue; the DTN's egress starts
    unshaped unless the scenario caps it.
    """
    sites = dtn_sites(scenario)
    every_namespace = namespaces(scenario)
    commands: list[list[str]] = [["ip", "netns", "add", ns] for ns in every_namespace]
    for link in links(scenario):
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
    for link in links(scenario):
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
    for site in sites:
        commands.append(["ip", "-n", RECV, "addr", "add", f"{site.receiver}/24", "dev", "r0"])
    for ns in every_namespace:
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
    for ns, destination, via in routes(scenario):
        commands.append(["ip", "-n", ns, "route", "add", destination, "via", via])
    # A DTN is a tuned host (ESnet fasterdata): with the kernel's 4 MB send buffer, each
    # stream at 1 Gb/s and ~170 ms stalls at ~1.8 MB in flight, and the host, not the
    # network, would set the DTN's share.
    tuned = [*((s.namespace, "net.ipv4.tcp_wmem") for s in sites), (RECV, "net.ipv4.tcp_rmem")]
    for ns, key in tuned:
        commands.append(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={DTN_SOCKET_BUFFER}"])
    if offloads:
        # With GSO on, senders keep super-packets big enough for 1 Gb/s on one core.
        for ns in (CAMPUS, *(s.namespace for s in sites)):
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
    for site, dtn in zip(sites, scenario.dtns, strict=True):
        if dtn.rate_limit_bps is None:
            continue
        cap_size = tbf_size(dtn.rate_limit_bps)
        namespace, interface = site.cap
        commands.append(
            [
                "tc", "-n", namespace, "qdisc", "add", "dev", interface, "root",
                *tbf_args(dtn.rate_limit_bps, cap_size.burst_bytes, cap_size.limit_bytes),
            ]
        )  # fmt: skip
    return commands
