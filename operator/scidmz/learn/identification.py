"""System identification on the simulator (paper §3.5): u(t) in, y(t) out, as a table.

y(t) is computed exactly as the collector computes it, on one road: ``SimCollector``
advances the software target's own packet source (``target.netsim_source.NetsimSource``)
at the target's tick and hands what it reports — class byte counters, the per-class
queuing-delay registers, SEQ/ACK RTT matches (at most one per flow per 10 ms, beyond the
RTT horizon dropped), the C_TH/T_TH rule's start/stop transitions — to the collector's
``telemetry.sampling.estimate`` (algorithms 3, 4, 6 and 8), with the policy's telemetry
settings. Only the transport differs: no P4Runtime, no gRPC, and the simulated clock.
Unmeasured values are then filled with ``control.features.fill_missing`` from
``FALLBACK_STATE``, as the controller fills them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address

import numpy as np
import numpy.typing as npt

from scidmz.api.runtime import TelemetryConfig
from scidmz.contract.pipeline import CLASS_CAMPUS, FIRST_DTN_CLASS, QD_SUM_SHIFT
from scidmz.contract.state import STATE_VARIABLES, DtnFigures, PathSignals, StateVector
from scidmz.control.features import FALLBACK_STATE, fill_missing
from scidmz.netsim import layout
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator
from scidmz.switch.netsim_source import NetsimSource, Wiring
from scidmz.switch.observation import ActivityRule
from scidmz.telemetry.classes import ClassCells
from scidmz.telemetry.estimators import FlowEvent, RttBatch
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, estimate

FloatArray = npt.NDArray[np.float64]

IN_PROCESS_WIRING = Wiring(
    campus_port=1,
    dtn_port=2,
    bottleneck_port=3,
    dtn_address=IPv4Address("203.0.113.10"),
    campus_address=IPv4Address("198.51.100.1"),
)
"""Any valid wiring: in-process, classes come straight from the source."""

IN_PROCESS_TICK_S = 0.01
"""The in-process collector's tick: the source's RTT-sample interval. The target ticks
every 5 ms, but a flow yields at most one RTT match per 10 ms either way, so the matches
are the same and a sample costs ~7 ms instead of ~11 ms of CPU."""


@dataclass(frozen=True)
class SimSample:
    """One sample time of an in-process loop: what the collector reports and the truth."""

    measured: StateVector
    """y(t) as the collector would publish it (NaN where not measured)."""
    sim_s: float
    dtn_departed_bps: float
    """Ground truth: DTN goodput leaving the bottleneck over the interval."""
    campus_departed_bps: float
    utilisation: float
    """Eq. 4 from the truth: bytes leaving the bottleneck over B·T."""
    dtn_done_s: tuple[float, ...]
    """Completion times of DTN streams that finished in the interval."""
    short_fct_s: tuple[float, ...]
    """FCTs of short campus flows that finished in the interval."""
    signals: PathSignals = field(default_factory=PathSignals)
    """The loss telemetry as the collector would publish it beside y(t)."""
    dtns: tuple[DtnFigures, ...] = ()
    """Each DTN host's own class as the collector reports it (several DTNs only)."""
    dtn_host_departed_bps: tuple[float, ...] = ()
    """Ground truth: each DTN host's goodput leaving the bottleneck, in scenario order."""


class SimCollector:
    """The collector's arithmetic over an in-process simulator, on the simulated clock."""

    def __init__(
        self,
        scenario: Scenario,
        telemetry: TelemetryConfig | None = None,
        tick_s: float = IN_PROCESS_TICK_S,
    ) -> None:
        settings = telemetry or TelemetryConfig()
        extra = tuple(IPv4Address(f"203.0.113.{11 + g}") for g in range(len(scenario.more_dtns)))
        self.source = NetsimSource(scenario, replace(IN_PROCESS_WIRING, more_dtn_addresses=extra))
        self.source.set_activity_rule(
            ActivityRule(
                settings.active_flow_packets,
                settings.active_flow_window_s,
                settings.idle_timeout_s,
            )
        )
        self.tick_s = tick_s
        self.ticks_per_sample = max(1, round(scenario.sample_time_s / tick_s))
        self.sample_time_s = scenario.sample_time_s
        self._rtt_horizon_ns = round(settings.rtt_horizon_s * 1e9)
        self._estimator = EstimatorSettings(
            settings.rtt_smoothing,
            settings.flow_timeout_s,
            capacity_bps=scenario.bottleneck.capacity_bps,
        )
        self._counters = [0, 0]
        self._registers = [0, 0]
        # the loss counters and sojourn sums, per class, as the P4 program keeps them (its
        # ingress bytes are _counters; its sojourn count adds one per departure, as
        # egress_packets does)
        self._loss: dict[str, list[int]] = {
            name: [0, 0]
            for name in (
                "ingress_packets", "retrans_packets", "egress_packets", "egress_bytes",
                "sojourn_sum",
            )
        }  # fmt: skip
        # several DTN hosts: each its own class (2 + its index), as the operator numbers
        # them; one DTN keeps the pipeline's first DTN class for all DTN flows
        self._hosts = [d.name for d in scenario.dtns] if len(scenario.dtns) > 1 else []
        columns = self.sim.layout
        classes = np.full(columns.n_flows, CLASS_CAMPUS, dtype=np.int64)
        for g in range(len(scenario.dtns)):
            classes[columns.group_columns(g)] = FIRST_DTN_CLASS + (g if self._hosts else 0)
        self._class_of_column = classes
        self._state, _ = estimate(
            EstimatorState(), self._poll(self.sim.now), RttBatch.of([]), [], self._estimator
        )

    @property
    def sim(self) -> Simulator:
        return self.source.sim

    def _poll(self, now_s: float) -> Poll:
        """The twin's one DTN as the pipeline's first DTN class."""
        loss = self._loss

        def cells(index: int) -> ClassCells:
            return ClassCells(
                bytes=self._counters[index],
                queuing_delay_ns=self._registers[index],
                ingress_packets=loss["ingress_packets"][index],
                ingress_bytes=self._counters[index],
                retrans_packets=loss["retrans_packets"][index],
                egress_packets=loss["egress_packets"][index],
                egress_bytes=loss["egress_bytes"][index],
                sojourn_sum=loss["sojourn_sum"][index],
                sojourn_count=loss["egress_packets"][index],
            )

        if not self._hosts:
            return Poll(at_s=now_s, campus=cells(1), dtns={FIRST_DTN_CLASS: cells(0)})
        classes = {FIRST_DTN_CLASS + g: self._group_cells(g) for g in range(len(self._hosts))}
        hosts = {FIRST_DTN_CLASS + g: host for g, host in enumerate(self._hosts)}
        return Poll(at_s=now_s, campus=cells(1), dtns=classes, dtn_hosts=hosts)

    def _group_cells(self, group: int) -> ClassCells:
        """DTN host ``group``'s cells as its class's counters and registers hold them,
        from the simulator's per-host totals (packets as MSS-sized segments)."""
        sim = self.sim
        mss = float(sim.params[layout.P_MSS])
        g = sim.groups[:, group]
        resent = sim.group_resent_bytes(group)
        tap, departed = int(g[layout.G_TAP_BYTES]), int(g[layout.G_DEPARTED])
        qd = float(g[layout.G_QD_LAST])
        egress_packets = int(departed / mss)
        return ClassCells(
            bytes=tap,
            queuing_delay_ns=round(qd * 1e9) if math.isfinite(qd) and qd > 0 else 0,
            ingress_packets=int(tap / mss),
            ingress_bytes=tap,
            retrans_packets=int(resent / mss),
            egress_packets=egress_packets,
            egress_bytes=departed,
            sojourn_sum=int(float(g[layout.G_SOJOURN_W]) / mss * 1e9) >> QD_SUM_SHIFT,
            sojourn_count=egress_packets,
        )

    def measure(self) -> SimSample:
        """Advance one sample time T and return y(t) as the collector computes it."""
        started = self.sim.now
        departed_before = self.source.departed_bytes
        hosts_before = self.sim.groups[layout.G_DEPARTED].copy()
        batches: list[RttBatch] = []
        flow_events: list[FlowEvent] = []
        dtn_done: list[float] = []
        short_done: list[float] = []
        horizon = self._rtt_horizon_ns
        for _ in range(self.ticks_per_sample):
            tick = self.source.advance_tick(self.tick_s, record_truth=False)
            loss = self._loss
            for index in (0, 1):
                self._counters[index] += tick.new_bytes[index]
                if tick.queuing_delay_ns[index] > 0:
                    self._registers[index] = tick.queuing_delay_ns[index]
                loss["ingress_packets"][index] += tick.new_packets[index]
                loss["retrans_packets"][index] += tick.resent_packets[index]
                loss["egress_packets"][index] += tick.egress_packets[index]
                loss["egress_bytes"][index] += tick.egress_bytes[index]
                loss["sojourn_sum"][index] += tick.queuing_delay_sum_ns[index] >> QD_SUM_SHIFT
            kept = (tick.rtt_ns >= 0) & (tick.rtt_ns < horizon)
            if kept.any():
                count = int(kept.sum())
                batches.append(
                    RttBatch(
                        tick.rtt_flow[kept],
                        self._class_of_column[tick.rtt_column[kept]],
                        tick.rtt_ns[kept] / 1e9,
                        np.full(count, tick.sim_s),
                    )
                )
            flow_events.extend(
                FlowEvent(int(flow), bool(began), tick.sim_s, self._flow_class(int(column)))
                for flow, began, column in zip(
                    tick.change_flow, tick.change_started, tick.change_column, strict=True
                )
            )
            if tick.events.shape[1]:
                done = tick.events[layout.EV_KIND] == layout.FLOW_DONE
                columns = tick.events[layout.EV_COLUMN].astype(np.int64)
                is_dtn = columns >= self.sim.layout.n_campus
                dtn_done.extend(tick.events[layout.EV_TIME][done & is_dtn].tolist())
                pool = self.sim.layout
                shorts = done & (columns >= pool.n_long) & (columns < pool.n_campus)
                short_done.extend(tick.events[layout.EV_VALUE][shorts].tolist())
        now = self.sim.now
        self._state, state = estimate(
            self._state, self._poll(now), RttBatch.concat(batches), flow_events, self._estimator
        )
        elapsed = now - started
        departed = self.source.departed_bytes
        dtn_bps = (departed[0] - departed_before[0]) * 8 / elapsed
        campus_bps = (departed[1] - departed_before[1]) * 8 / elapsed
        capacity = self.sim.scenario.bottleneck.capacity_bps
        return SimSample(
            measured=state.vector(),
            sim_s=now,
            dtn_departed_bps=dtn_bps,
            campus_departed_bps=campus_bps,
            utilisation=(dtn_bps + campus_bps) / capacity,
            dtn_done_s=tuple(dtn_done),
            short_fct_s=tuple(short_done),
            signals=state.signals,
            dtns=state.dtns,
            dtn_host_departed_bps=tuple(
                (self.sim.groups[layout.G_DEPARTED] - hosts_before) * 8 / elapsed
            ),
        )

    def _flow_class(self, column: int) -> int:
        """A flow digest's class: its DTN host's with several (one DTN: unknown, 0, as
        the single-class collector has always counted them)."""
        return int(self._class_of_column[column]) if self._hosts else 0


@dataclass(frozen=True)
class Identification:
    """Row k: u(k) (and the DTN cap, NaN for none) applied during interval k, y(k)
    measured over it, unmeasured values filled (SI units)."""

    u_bps: FloatArray  # (n,)
    y: FloatArray  # (n, 7), STATE_VARIABLES order
    sample_time_s: float
    max_rate_bps: float
    dtn_cap_bps: FloatArray | None = None  # (n,), NaN where the DTN was not capped
    campus_flows: npt.NDArray[np.int64] | None = None
    """(n,) campus long flows sending in each interval, when the load varied."""


def random_steps(n: int, max_rate_bps: float, seed: int) -> FloatArray:
    """The paper's excitation: a uniform random level in [0, max] every sample time."""
    return np.random.default_rng(seed).uniform(0.0, max_rate_bps, size=n)


def random_caps(n: int, max_rate_bps: float, seed: int, uncapped_share: float) -> FloatArray:
    """The DTN actuator's excitation: a uniform level in [0.1·max, max] every sample time,
    or no cap (NaN) with probability ``uncapped_share``."""
    rng = np.random.default_rng(seed + 7_919)
    caps = rng.uniform(0.1 * max_rate_bps, max_rate_bps, size=n)
    caps[rng.uniform(size=n) < uncapped_share] = math.nan
    return caps


@dataclass(frozen=True)
class CampusLoad:
    """How the campus load varies during identification: piecewise constant, a new level
    every ``hold_s`` (uniform in the range) seconds.

    The paper identifies at one load (100 senders). A model that never saw another load
    extrapolates in the active-flow input: the first load-blind model, fed AF = 58 at
    N_s = 50, answered û ≈ 2 Gb/s for a link of 1 Gb/s (docs/design/control.md). So the number of
    sending campus long flows is drawn log-uniformly from ``min_flows..max_flows`` (as many
    holds at 10–50 flows as at 50–250), and a ``limited_share`` of the holds also caps the
    campus's demand (application-limited senders, uniform in 5–60 % of B): the state where
    the shaper does not bind at any u above the demand."""

    min_flows: int
    max_flows: int
    hold_s: tuple[float, float] = (60.0, 300.0)
    limited_share: float = 0.2

    def __post_init__(self) -> None:
        if not 1 <= self.min_flows <= self.max_flows:
            raise ValueError(
                f"campus flows must satisfy 1 <= min <= max, got {self.min_flows}..{self.max_flows}"
            )
        low, high = self.hold_s
        if not 0 < low <= high:
            raise ValueError(f"hold times must satisfy 0 < low <= high, got {self.hold_s}")
        if not 0 <= self.limited_share <= 1:
            raise ValueError(f"limited_share must be within 0..1, got {self.limited_share}")

    @classmethod
    def fixed(cls, flows: int) -> CampusLoad:
        """The paper's identification: ``flows`` senders, never limited."""
        return cls(flows, flows, limited_share=0.0)

    @property
    def varies(self) -> bool:
        return self.min_flows < self.max_flows or self.limited_share > 0

    def describe(self) -> str:
        if not self.varies:
            return f"{self.max_flows} campus long flows throughout"
        low, high = self.hold_s
        return (
            f"{self.min_flows}–{self.max_flows} campus long flows (log-uniform, a new level "
            f"every {low:g}–{high:g} s), {self.limited_share:.0%} of the levels "
            "application-limited to 5–60 % of B"
        )


def campus_loads(
    load: CampusLoad, n: int, period_s: float, max_rate_bps: float, seed: int
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Per sample: the number of sending campus long flows, and their aggregate demand
    (NaN: unlimited)."""
    rng = np.random.default_rng(seed + 104_729)
    flows = np.zeros(n, dtype=np.int64)
    demand = np.full(n, math.nan)
    k = 0
    while k < n:
        hold = max(1, round(rng.uniform(*load.hold_s) / period_s))
        level = math.exp(rng.uniform(math.log(load.min_flows), math.log(load.max_flows)))
        flows[k : k + hold] = min(load.max_flows, max(load.min_flows, round(level)))
        if rng.uniform() < load.limited_share:
            demand[k : k + hold] = rng.uniform(0.05, 0.6) * max_rate_bps
        k += hold
    return flows, demand


def identify(
    scenario: Scenario,
    duration_s: float,
    seed: int,
    max_rate_bps: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    telemetry: TelemetryConfig | None = None,
    dtn_cap_excitation: bool = False,
    campus_load: CampusLoad | None = None,
) -> Identification:
    """Run ``duration_s`` of simulated time; ``progress(done, total)`` after each sample.

    With ``dtn_cap_excitation`` the DTN's sending-rate cap is excited too (``random_caps``,
    a quarter of the samples uncapped): a BBR DTN left alone takes the link whatever u is,
    so without it the campus shaper hardly ever binds and u cannot be identified. With a
    varying ``campus_load`` the scenario's campus long flows are the slots it draws from
    (``CampusLoad``); by default all of them send throughout (the paper's)."""
    collector = SimCollector(scenario, telemetry)
    period = scenario.sample_time_s
    n = math.ceil(duration_s / period)
    top = max_rate_bps if max_rate_bps is not None else scenario.bottleneck.capacity_bps
    u = random_steps(n, top, seed)
    caps = random_caps(n, top, seed, 0.25) if dtn_cap_excitation else None
    slots = scenario.campus.long_flows
    load = campus_load or CampusLoad.fixed(max(slots, 1))
    if load.max_flows > slots:
        raise ValueError(
            f"the campus load reaches {load.max_flows} flows but the scenario has {slots}"
        )
    flows, demand = campus_loads(load, n, period, top, seed)
    rows = np.zeros((n, len(STATE_VARIABLES)))
    last = FALLBACK_STATE
    for k in range(n):
        sim = collector.sim
        if load.varies and (k == 0 or flows[k] != flows[k - 1] or demand[k] != demand[k - 1]):
            sim.set_campus_long_flows(int(flows[k]))
            sim.set_campus_demand(float(demand[k]) if math.isfinite(demand[k]) else None)
        collector.sim.set_campus_rate_limit(float(u[k]))
        if caps is not None:
            cap = float(caps[k])
            collector.sim.set_dtn_rate_limit(cap if math.isfinite(cap) else None)
        last = fill_missing(collector.measure().measured, last)
        rows[k] = last
        if progress is not None:
            progress(k + 1, n)
    return Identification(
        u_bps=u, y=rows, sample_time_s=period, max_rate_bps=top, dtn_cap_bps=caps,
        campus_flows=flows if load.varies else None,
    )  # fmt: skip


def training_table(data: Identification) -> tuple[FloatArray, FloatArray]:
    """Predictors I = {y(t), y(t−T), y(t−2T), u(t−T)} and target u(t) (paper §3.5), rows
    k ≥ 2. At control time y(t) is replaced by y_d(t)."""
    y, u = data.y, data.u_bps
    x = np.hstack([y[2:], y[1:-1], y[:-2], u[1:-1, None]])
    return x, u[2:].copy()
