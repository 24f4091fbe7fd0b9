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

from scidmz.netsim import layout
from scidmz.netsim.records import BoolArray, TapView
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator
from scidmz.target.observation import (
    ActivityRule,
    Address,
    FlowChange,
    Observation,
    RttMatch,
    Traffic,
)
from scidmz.telemetry.pipeline import STOP_FIN, STOP_IDLE


@dataclass(frozen=True)
class Wiring:
    """Which switch port sees which side of BR1, and the addresses the flows go to."""

    campus_port: int
    dtn_port: int
    bottleneck_port: int
    dtn_address: Address
    campus_address: Address

    def problems(self) -> list[str]:
        found = []
        ports = (self.campus_port, self.dtn_port, self.bottleneck_port)
        if len(set(ports)) != 3:
            found.append(f"ports must be distinct, got {ports}")
        if any(not 0 <= p < 512 for p in ports):
            found.append(f"ports must fit the 9-bit port number (0..511), got {ports}")
        if self.dtn_address == self.campus_address:
            found.append("the DTN and campus addresses must differ")
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


def flow_hash(serial: int) -> int:
    """A stable, non-zero 32-bit flow id from the simulator's flow serial number."""
    return ((serial * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF) or 1


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
        self._pending_steps = 0.0
        self._tap_bytes = (0.0, 0.0)
        self._tap_packets = (0.0, 0.0)
        self._departed = [0.0, 0.0]
        self.truth: deque[TruthPoint] = deque(maxlen=max(1, int(history_s / 0.001)))

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
        self._pending_steps += max(elapsed_s, 0.0) * self.speedup / self.sim.dt
        steps = int(self._pending_steps)
        self._pending_steps -= steps
        out = self.sim.advance(steps)
        self._departed[0] += float(out[layout.OUT_DEP_DTN].sum())
        self._departed[1] += float(out[layout.OUT_DEP_CAMPUS].sum())
        view = self.sim.tap_view()
        events = self.sim.drain_event_array()
        w = self.wiring
        traffic = []
        for is_dtn, port, address, total, packets, qd in (
            (True, w.dtn_port, w.dtn_address, view.dtn_bytes, view.dtn_packets,
             view.dtn_queuing_delay_s),
            (False, w.campus_port, w.campus_address, view.campus_bytes, view.campus_packets,
             view.campus_queuing_delay_s),
        ):  # fmt: skip
            index = 0 if is_dtn else 1
            new_bytes = int(total) - int(self._tap_bytes[index])
            new_packets = int(packets) - int(self._tap_packets[index])
            if new_bytes > 0:
                qd_ns = round(qd * 1e9) if math.isfinite(qd) and qd > 0 else 0
                traffic.append(Traffic(port, address, new_bytes, new_packets, qd_ns))
        self._tap_bytes = (view.dtn_bytes, view.campus_bytes)
        self._tap_packets = (view.dtn_packets, view.campus_packets)

        due = (view.rtt_at_s > self._rtt_sent_at) & (
            view.rtt_at_s - self._rtt_sent_at >= self.rtt_sample_interval_s
        )
        matches = []
        for column in np.flatnonzero(due & np.isfinite(view.rtt_s) & (view.rtt_s > 0)):
            address = w.dtn_address if self._is_dtn[column] else w.campus_address
            rtt_ns = round(float(view.rtt_s[column]) * 1e9)
            matches.append(RttMatch(flow_hash(int(view.serial[column])), address, rtt_ns))
            self._rtt_sent_at[column] = view.rtt_at_s[column]

        changes = []
        stop_reasons = {layout.TAP_STOP_FIN: STOP_FIN, layout.TAP_STOP_IDLE: STOP_IDLE}
        for row in events.T:
            kind = int(row[layout.EV_KIND])
            if kind != layout.TAP_START and kind not in stop_reasons:
                continue
            is_dtn = bool(self._is_dtn[int(row[layout.EV_COLUMN])])
            changes.append(
                FlowChange(
                    flow_hash=flow_hash(int(row[layout.EV_SERIAL])),
                    port=w.dtn_port if is_dtn else w.campus_port,
                    destination=w.dtn_address if is_dtn else w.campus_address,
                    started=kind == layout.TAP_START,
                    reason=stop_reasons.get(kind, 0),
                )
            )
        self._record_truth(view.time_s, view)
        return Observation(
            bottleneck_port=w.bottleneck_port,
            traffic=tuple(traffic),
            rtt_matches=tuple(matches),
            flow_changes=tuple(changes),
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
            )
        )
