"""The network simulator as the software target's packet source.

The simulator advances with the wall clock (times ``speedup``); after each tick its tap view
becomes an ``Observation``: bytes per class since the last tick (DTN data to the DTN-r
address through the DTN-side port, campus data to a remote-network address through the
campus-side port), each class's last BR1 sojourn, per-flow RTT matches and the activity
rule's transitions. Rate changes from the sim actuator go straight to the campus shaper.

Two simplifications, both documented for users of ``scidmz target``:

* every campus flow goes to one remote address and every DTN stream to the DTN-r address
  (the simulator models classes, not hosts);
* a flow yields at most one RTT match per ``rtt_sample_interval_s``: the P4 program matches
  every data packet, which at 1 Gb/s is ~80,000 digests per second that no software
  collector should be asked to eat.

It also keeps ``truth``: the simulator's own figures at each tick, for tests and demos
that compare what the collector computed with what really happened.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scidmz.contract.pipeline import STOP_FIN, STOP_IDLE
from scidmz.netsim import layout
from scidmz.netsim.records import BoolArray, FloatArray, IntArray, TapView
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator
from scidmz.switch.observation import (
    ActivityRule,
    Address,
    FlowChange,
    Observation,
    RttMatch,
    Traffic,
)


@dataclass(frozen=True)
class Wiring:
    """Which switch port sees which side of BR1, and the addresses the flows go to."""

    campus_port: int
    dtn_port: int
    bottleneck_port: int
    dtn_address: Address
    campus_address: Address
    more_dtn_addresses: tuple[Address, ...] = ()
    """The receivers of the scenario's ``more_dtns``, in order (each its own class)."""

    def dtn_addresses(self) -> tuple[Address, ...]:
        return (self.dtn_address, *self.more_dtn_addresses)

    def problems(self) -> list[str]:
        found = []
        ports = (self.campus_port, self.dtn_port, self.bottleneck_port)
        if len(set(ports)) != 3:
            found.append(f"ports must be distinct, got {ports}")
        if any(not 0 <= p < 512 for p in ports):
            found.append(f"ports must fit the 9-bit port number (0..511), got {ports}")
        addresses = (*self.dtn_addresses(), self.campus_address)
        if len(set(addresses)) != len(addresses):
            found.append("the DTN and campus addresses must all differ")
        return found


@dataclass(frozen=True)
class TruthPoint:
    """The simulator's ground truth at the end of one tick."""

    wall_s: float
    sim_s: float
    dtn_tap_bytes: float
    campus_tap_bytes: float
    dtn_departed_bytes: float
    campus_departed_bytes: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    dtn_rtt_s: float
    campus_rtt_s: float
    active_flows: int
    campus_rate_limit_bps: float
    dtn_rate_limit_bps: float | None = None
    dtn_resent_bytes: float = 0.0
    """Cumulative bytes sent again after being declared lost (what the tap counts as
    retransmissions) ..."""
    campus_resent_bytes: float = 0.0
    dtn_sojourn_sum_s: float = 0.0
    """... and the BR1 sojourns of the packets that left, summed (cumulative)."""
    campus_sojourn_sum_s: float = 0.0
    bottleneck_dropped_bytes: float = 0.0
    """Cumulative bytes BR1 dropped, both classes."""
    dtn_host_tap_bytes: tuple[float, ...] = ()
    """Each DTN host's bytes at the tap (cumulative), in scenario order."""


def flow_hash(serial: int) -> int:
    """A stable, non-zero 32-bit flow id from the simulator's flow serial number."""
    return ((serial * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF) or 1


def flow_hashes(serials: IntArray) -> IntArray:
    """``flow_hash`` over an array of serial numbers."""
    hashed: IntArray = (serials.astype(np.int64) * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    hashed[hashed == 0] = 1
    return hashed


@dataclass(frozen=True)
class TapTick:
    """What the tap saw in one tick, as arrays: the same facts an ``Observation`` carries
    as objects, for in-process collectors (``learn.identification.SimCollector``) that
    skip gRPC but must see exactly what the target would report."""

    sim_s: float
    new_bytes: tuple[int, int]
    """(DTN, campus) data bytes that entered BR1 in this tick."""
    new_packets: tuple[int, int]
    queuing_delay_ns: tuple[int, int]
    """(DTN, campus) BR1 sojourn of the class's last departure; 0 when it sent nothing."""
    resent_bytes: tuple[int, int]
    """(DTN, campus) of ``new_bytes``, those sent again after being declared lost (counted
    as the sender sends them: for the campus, before its shaper)."""
    resent_packets: tuple[int, int]
    egress_bytes: tuple[int, int]
    """(DTN, campus) data bytes that left BR1 in this tick ..."""
    egress_packets: tuple[int, int]
    queuing_delay_sum_ns: tuple[int, int]
    """... and the sum of their packets' BR1 sojourns."""
    rtt_flow: IntArray
    """Flow hashes of this tick's RTT matches (at most one per flow per sample interval)."""
    rtt_is_dtn: BoolArray
    rtt_ns: IntArray
    change_flow: IntArray
    """Flow hashes of the activity rule's transitions, in order."""
    change_is_dtn: BoolArray
    change_started: BoolArray
    change_reason: IntArray
    events: FloatArray
    """Every simulator event of the tick (``netsim.layout.EV_*`` rows), FCTs included."""
    rtt_column: IntArray
    """The simulator columns of the RTT matches ..."""
    change_column: IntArray
    """... and of the transitions (which DTN host a flow belongs to)."""


_NO_INTS: IntArray = np.zeros(0, dtype=np.int64)
_NO_BOOLS: BoolArray = np.zeros(0, dtype=bool)


def _register_ns(departed_bytes: float, sojourn_s: float) -> int:
    """The queuing-delay register a class's traffic writes: its last departure's sojourn,
    or 0 (no write) when none of its bytes left BR1. Written at departure, as the P4
    programs write it at egress: a class may send nothing new for a few ms (a Cubic DTN
    after a loss) while its queued packets still leave, and their sojourns still change."""
    good = departed_bytes > 0 and math.isfinite(sojourn_s) and sojourn_s > 0
    return round(sojourn_s * 1e9) if good else 0


def _per(values: tuple[float, float], unit: float) -> tuple[float, float]:
    return values[0] / unit, values[1] / unit


def _deltas(now: tuple[float, float], before: tuple[float, float]) -> tuple[int, int]:
    return int(now[0]) - int(before[0]), int(now[1]) - int(before[1])


def _class_traffic(tick: TapTick, index: int, port: int, address: Address) -> list[Traffic]:
    """A class of the tick (0: the DTN, 1: the campus) as the data to one destination, or
    nothing when it neither entered nor left BR1."""
    if tick.new_bytes[index] <= 0 and tick.egress_packets[index] <= 0:
        return []
    return [
        Traffic(
            port, address, tick.new_bytes[index], tick.new_packets[index],
            tick.queuing_delay_ns[index],
            retrans_bytes=tick.resent_bytes[index],
            retrans_packets=tick.resent_packets[index],
            egress_bytes=tick.egress_bytes[index],
            egress_packets=tick.egress_packets[index],
            queuing_delay_sum_ns=tick.queuing_delay_sum_ns[index],
        )
    ]  # fmt: skip


class NetsimSource:
    """A ``PacketSource`` over a ``Simulator``."""

    def __init__(
        self,
        scenario: Scenario,
        wiring: Wiring,
        speedup: float = 1.0,
        rtt_sample_interval_s: float = 0.01,
        history_s: float = 300.0,
        truth_flow_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problems = wiring.problems()
        if len(wiring.dtn_addresses()) != len(scenario.dtns):
            problems.append(
                f"the scenario has {len(scenario.dtns)} DTN hosts and the wiring "
                f"{len(wiring.dtn_addresses())} DTN addresses"
            )
        if problems:
            raise ValueError("; ".join(problems))
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.sim = Simulator(scenario)
        self.wiring = wiring
        self.speedup = speedup
        self.rtt_sample_interval_s = rtt_sample_interval_s
        self._clock = clock
        self.truth_flow_timeout_s = truth_flow_timeout_s
        n = self.sim.layout.n_flows
        self._rtt_sent_at = np.full(n, -math.inf)
        self._is_dtn = np.zeros(n, dtype=bool)
        self._is_dtn[self.sim.layout.dtn_columns] = True
        addresses = wiring.dtn_addresses()
        self._destination = [
            addresses[int(g)] if dtn else wiring.campus_address
            for g, dtn in zip(self.sim.flow_i[layout.GROUP], self._is_dtn, strict=True)
        ]
        self._groups_before = np.zeros((4, self.sim.groups.shape[1]))
        """Each DTN host's tap bytes, departed bytes, sojourn x bytes and resent bytes at the
        last tick (several DTN hosts: each its own Traffic)."""
        self._pending_steps = 0.0
        self._tap_bytes = (0.0, 0.0)
        self._tap_packets = (0.0, 0.0)
        self._departed = [0.0, 0.0]
        self._resent = (0.0, 0.0)
        self._waited = (0.0, 0.0)
        self.truth: deque[TruthPoint] = deque(maxlen=max(1, int(history_s / 0.001)))

    @property
    def departed_bytes(self) -> tuple[float, float]:
        """(DTN, campus) bytes that have left the bottleneck so far (ground truth)."""
        return self._departed[0], self._departed[1]

    @property
    def sojourn_byte_seconds(self) -> float:
        """Ground truth: the BR1 sojourns of every byte that has left, summed (s·bytes):
        its growth over the departed bytes' is the interval's mean queuing delay."""
        mss = float(self.sim.params[layout.P_MSS])
        return (self._waited[0] + self._waited[1]) * mss

    @property
    def ports(self) -> frozenset[int]:
        w = self.wiring
        return frozenset({w.campus_port, w.dtn_port, w.bottleneck_port})

    def set_activity_rule(self, rule: ActivityRule) -> None:
        self.sim.set_activity_rule(rule.packets_threshold, rule.window_s, rule.idle_timeout_s)

    def set_campus_rate_limit(self, rate_bps: float) -> None:
        """The sim actuator's hook: u(t) for the campus shaper."""
        self.sim.set_campus_rate_limit(rate_bps)

    def advance(self, elapsed_s: float) -> Observation:
        tick = self.advance_tick(elapsed_s)
        w = self.wiring
        traffic = (
            self._dtn_host_traffic()
            if len(w.dtn_addresses()) > 1
            else _class_traffic(tick, 0, w.dtn_port, w.dtn_address)
        )
        traffic += _class_traffic(tick, 1, w.campus_port, w.campus_address)
        matches = tuple(
            RttMatch(int(flow), self._destination[column], int(rtt_ns))
            for flow, column, rtt_ns in zip(
                tick.rtt_flow, tick.rtt_column, tick.rtt_ns, strict=True
            )
        )
        changes = tuple(
            FlowChange(
                flow_hash=int(flow),
                port=w.dtn_port if is_dtn else w.campus_port,
                destination=self._destination[column],
                started=bool(started),
                reason=int(reason),
            )
            for flow, column, is_dtn, started, reason in zip(
                tick.change_flow, tick.change_column, tick.change_is_dtn, tick.change_started,
                tick.change_reason, strict=True,
            )
        )  # fmt: skip
        return Observation(
            bottleneck_port=w.bottleneck_port,
            traffic=tuple(traffic),
            rtt_matches=matches,
            flow_changes=changes,
            clock_ns=self.sim.step_index * round(self.sim.dt * 1e9),
        )

    def _dtn_host_traffic(self) -> list[Traffic]:
        """Several DTN hosts: each one's data at the tap as its own destination, from the
        simulator's per-host counts. Its queuing-delay register is its last departure's
        sojourn; its retransmissions are its streams' resent bytes."""
        sim, mss = self.sim, float(self.sim.params[layout.P_MSS])
        groups = sim.groups
        resent = np.array([sim.group_resent_bytes(g) for g in range(groups.shape[1])])
        now = np.vstack(
            [groups[layout.G_TAP_BYTES], groups[layout.G_DEPARTED],
             groups[layout.G_SOJOURN_W], resent]
        )  # fmt: skip
        before, self._groups_before = self._groups_before, now
        traffic = []
        for g, address in enumerate(self.wiring.dtn_addresses()):
            new = int(now[0, g]) - int(before[0, g])
            left = int(now[1, g]) - int(before[1, g])
            if new <= 0 and left <= 0:
                continue
            resent_bytes = int(now[3, g]) - int(before[3, g])
            traffic.append(
                Traffic(
                    self.wiring.dtn_port, address, new,
                    int(now[0, g] / mss) - int(before[0, g] / mss),
                    _register_ns(now[1, g] - before[1, g], float(groups[layout.G_QD_LAST, g])),
                    retrans_bytes=resent_bytes,
                    retrans_packets=int(now[3, g] / mss) - int(before[3, g] / mss),
                    egress_bytes=left,
                    egress_packets=int(now[1, g] / mss) - int(before[1, g] / mss),
                    queuing_delay_sum_ns=int(now[2, g] / mss * 1e9)
                    - int(before[2, g] / mss * 1e9),
                )
            )  # fmt: skip
        return traffic

    def advance_tick(self, elapsed_s: float, record_truth: bool = True) -> TapTick:
        """Advance the simulator by ``elapsed_s`` (times ``speedup``) and report the tick.

        ``record_truth`` False skips the ground-truth history (in-process loops that do
        not read it)."""
        self._pending_steps += max(elapsed_s, 0.0) * self.speedup / self.sim.dt
        steps = int(self._pending_steps)
        self._pending_steps -= steps
        sim = self.sim
        out = sim.advance(steps)
        mss = float(sim.params[layout.P_MSS])
        # cumulative figures, and each tick the difference of their whole parts: rounding
        # per tick would lose a few hundred resent bytes a millisecond altogether
        departed_before = (self._departed[0], self._departed[1])
        self._departed[0] += float(out[layout.OUT_DEP_DTN].sum())
        self._departed[1] += float(out[layout.OUT_DEP_CAMPUS].sum())
        departed = (self._departed[0], self._departed[1])
        waited_before = self._waited
        self._waited = (  # seconds x packets: sojourn x bytes / mss
            waited_before[0] + float(out[layout.OUT_QD_DTN_W].sum()) / mss,
            waited_before[1] + float(out[layout.OUT_QD_CAMPUS_W].sum()) / mss,
        )
        events = sim.drain_event_array()
        g, f = sim.glob_f, sim.flow_f  # read in place: this runs every few ms
        totals = (float(g[layout.TAP_BYTES_DTN]), float(g[layout.TAP_BYTES_CAMPUS]))
        packets = (float(g[layout.TAP_PACKETS_DTN]), float(g[layout.TAP_PACKETS_CAMPUS]))
        new_bytes = _deltas(totals, self._tap_bytes)
        new_packets = _deltas(packets, self._tap_packets)
        self._tap_bytes = totals
        self._tap_packets = packets
        resent = sim.resent_bytes()
        resent_before, self._resent = self._resent, resent
        delays = (
            _register_ns(departed[0] - departed_before[0], float(g[layout.QD_DTN_LAST])),
            _register_ns(departed[1] - departed_before[1], float(g[layout.QD_CAMPUS_LAST])),
        )
        rtt_s, rtt_at = f[layout.TAP_RTT], f[layout.TAP_RTT_AT]
        due = (rtt_at - self._rtt_sent_at >= self.rtt_sample_interval_s) & (rtt_s > 0)
        columns = np.flatnonzero(due)
        self._rtt_sent_at[columns] = rtt_at[columns]
        serial = sim.flow_i[layout.SERIAL]

        if events.shape[1]:
            kinds = events[layout.EV_KIND].astype(np.int64)
            tap = (
                (kinds == layout.TAP_START)
                | (kinds == layout.TAP_STOP_FIN)
                | (kinds == layout.TAP_STOP_IDLE)
            )
            tap_kinds = kinds[tap]
            reasons = np.where(
                tap_kinds == layout.TAP_STOP_FIN,
                STOP_FIN,
                np.where(tap_kinds == layout.TAP_STOP_IDLE, STOP_IDLE, 0),
            ).astype(np.int64)
            change_flow = flow_hashes(events[layout.EV_SERIAL][tap].astype(np.int64))
            change_column = events[layout.EV_COLUMN][tap].astype(np.int64)
            change_is_dtn = self._is_dtn[change_column]
            change_started = tap_kinds == layout.TAP_START
        else:
            reasons = change_flow = change_column = _NO_INTS
            change_is_dtn = change_started = _NO_BOOLS
        now = sim.now
        if record_truth:
            self._record_truth(now, sim.tap_view())
        return TapTick(
            sim_s=now,
            new_bytes=new_bytes,
            new_packets=new_packets,
            queuing_delay_ns=delays,
            resent_bytes=_deltas(resent, resent_before),
            resent_packets=_deltas(_per(resent, mss), _per(resent_before, mss)),
            egress_bytes=_deltas(departed, departed_before),
            egress_packets=_deltas(_per(departed, mss), _per(departed_before, mss)),
            queuing_delay_sum_ns=_deltas(_per(self._waited, 1e-9), _per(waited_before, 1e-9)),
            rtt_flow=flow_hashes(serial[columns]),
            rtt_is_dtn=self._is_dtn[columns],
            rtt_ns=np.round(rtt_s[columns] * 1e9).astype(np.int64),
            change_flow=change_flow,
            change_is_dtn=change_is_dtn,
            change_started=change_started,
            change_reason=reasons,
            events=events,
            rtt_column=columns,
            change_column=change_column,
        )

    def _record_truth(self, sim_s: float, view: TapView) -> None:
        # algorithm 4's per-flow vector: each flow's latest sample, until its flow timeout
        recent = np.isfinite(view.rtt_s) & (sim_s - view.rtt_at_s <= self.truth_flow_timeout_s)

        def mean(mask: BoolArray) -> float:
            values = view.rtt_s[mask & recent]
            return float(values.mean()) if values.size else math.nan

        self.truth.append(
            TruthPoint(
                wall_s=self._clock(),
                sim_s=sim_s,
                dtn_tap_bytes=view.dtn_bytes,
                campus_tap_bytes=view.campus_bytes,
                dtn_departed_bytes=self._departed[0],
                campus_departed_bytes=self._departed[1],
                dtn_queuing_delay_s=view.dtn_queuing_delay_s,
                campus_queuing_delay_s=view.campus_queuing_delay_s,
                dtn_rtt_s=mean(self._is_dtn),
                campus_rtt_s=mean(~self._is_dtn),
                active_flows=int(view.active.sum()),
                campus_rate_limit_bps=self.sim.campus_rate_limit_bps,
                dtn_rate_limit_bps=self.sim.dtn_rate_limit_bps,
                dtn_resent_bytes=view.dtn_resent_bytes,
                campus_resent_bytes=view.campus_resent_bytes,
                dtn_sojourn_sum_s=self._waited[0],
                campus_sojourn_sum_s=self._waited[1],
                bottleneck_dropped_bytes=float(self.sim.glob_f[layout.BOTTLENECK_DROPPED]),
                dtn_host_tap_bytes=tuple(self.sim.groups[layout.G_TAP_BYTES].tolist()),
            )
        )
