"""What a packet source hands the software target each tick: the tap's traffic, digested.

A source (the network simulator today, a real tap later) reports what the mirrored copies
of BR1's links carried since the previous tick, already reduced the way the P4 program
reduces packets: bytes and packets per (ingress port, destination), the last BR1 sojourn,
matched SEQ→ACK RTTs and activity-rule transitions per flow. The target's ``Dataplane``
then applies the installed tables to it (classification, tap roles, settings), exactly
where the P4 program would, so an entry the collector forgot really means no data.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Protocol

Address = IPv4Address | IPv6Address


@dataclass(frozen=True)
class Traffic:
    """Data packets to one destination that entered BR1 through one tapped port."""

    port: int
    destination: Address
    bytes: int
    packets: int
    queuing_delay_ns: int
    """BR1 sojourn of the last such packet seen leaving on the bottleneck side; 0: none."""
    retrans_bytes: int = 0
    """Of ``bytes``, those resent: data starting below the SEQ its flow had already sent
    (P4BS loss method 1)."""
    retrans_packets: int = 0
    egress_bytes: int = 0
    """Data of this group seen leaving BR1 on the bottleneck side (method 2)."""
    egress_packets: int = 0
    queuing_delay_sum_ns: int = 0
    """The sum of the BR1 sojourns of those ``egress_packets`` (a mean per sample time)."""


@dataclass(frozen=True)
class RttMatch:
    """An ACK from ``remote`` (seen on the bottleneck side) matched its data's SEQ."""

    flow_hash: int
    remote: Address
    rtt_ns: int


@dataclass(frozen=True)
class FlowChange:
    """The activity rule (algorithm 7) turned a flow active, or ended it (FIN or idle)."""

    flow_hash: int
    port: int
    destination: Address
    started: bool
    reason: int = 0
    """STOP_FIN or STOP_IDLE (``telemetry.pipeline``) when ``started`` is False."""


@dataclass(frozen=True)
class Observation:
    """Everything the tap saw between two ticks; ``bottleneck_port`` carried the
    departures and the returning ACKs."""

    bottleneck_port: int
    traffic: tuple[Traffic, ...] = ()
    rtt_matches: tuple[RttMatch, ...] = ()
    flow_changes: tuple[FlowChange, ...] = ()
    clock_ns: int = 0
    """The tap's clock: the time (ns, the source's own clock) of the last frame counted
    so far, in this tick or before; 0 while it has counted none. The program's
    ``tap_clock_ns`` register."""


@dataclass(frozen=True)
class ActivityRule:
    """The pipeline's settings table, as the source needs them."""

    packets_threshold: int
    window_s: float
    idle_timeout_s: float


class PacketSource(Protocol):
    """Where the target's packets come from."""

    @property
    def ports(self) -> frozenset[int]:
        """The switch ports the tap is wired to (a tap_ports entry for another is refused)."""
        ...

    def advance(self, elapsed_s: float) -> Observation:
        """Let ``elapsed_s`` of wall-clock time pass; report what the tap saw."""
        ...

    def set_activity_rule(self, rule: ActivityRule) -> None:
        """The collector changed C_TH / T_TH / the idle timeout."""
        ...
