"""The simulator's Python API: build from a ``Scenario``, set u(t), advance, read results.

>>> sim = Simulator(Scenario())
>>> sim.set_campus_rate_limit(400e6)           # the actuator hook, between steps
>>> sample = sim.run_sample()                  # one sample time T of ground truth
>>> view = sim.tap_view()                      # what the P4 pipeline would hold now
>>> events = sim.drain_events()                # flow start/stop/FCT since the last drain
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scidmz.contract.tbf import tbf_size
from scidmz.netsim import layout
from scidmz.netsim.arena import Part, carve
from scidmz.netsim.kernel import (
    POOL_BLOCK_BYTES,
    SCRATCH_ROWS,
    advance,
    init_flow,
    settle_all_resent,
)
from scidmz.netsim.records import FlowEvent, FlowTable, Sample, TapView
from scidmz.netsim.scenario import Scenario, ScenarioError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_MAX_QUEUE_SLOTS = 200_000
_SHAPER_SLOTS = 4096
_RANDOM_BLOCK = 4096
_BW_FILTER_ROUNDS = 10


@dataclass(frozen=True)
class FlowLayout:
    """Which columns hold which flows (campus long, short-flow pool, DTN streams)."""

    n_long: int
    n_pool: int
    dtn_streams: tuple[int, ...]
    """Each DTN host's streams, in scenario order."""

    @property
    def n_dtn(self) -> int:
        return sum(self.dtn_streams)

    @property
    def n_campus(self) -> int:
        return self.n_long + self.n_pool

    @property
    def n_flows(self) -> int:
        return self.n_campus + self.n_dtn

    @property
    def dtn_columns(self) -> slice:
        return slice(self.n_campus, self.n_flows)

    @property
    def long_columns(self) -> slice:
        return slice(0, self.n_long)

    def group_columns(self, group: int) -> slice:
        """DTN host ``group``'s stream columns."""
        first = self.n_campus + sum(self.dtn_streams[:group])
        return slice(first, first + self.dtn_streams[group])


class Simulator:
    """One simulated testbed. Not thread-safe; deterministic for a given scenario seed."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        dt = scenario.step_s
        self.dt = dt
        self.steps_per_sample = round(scenario.sample_time_s / dt)
        shorts = scenario.campus.short_flows
        self.layout = FlowLayout(
            n_long=scenario.campus.long_flows,
            n_pool=shorts.max_concurrent if shorts.enabled else 0,
            dtn_streams=tuple(d.streams for d in scenario.dtns),
        )
        n = self.layout.n_flows
        # The link, the shaper and the DTN cap count frames; the kernel counts payload, so
        # every rate and byte size in frames is scaled by payload / frame once, here.
        self.payload_fraction = scenario.payload_fraction
        capacity = scenario.bottleneck.capacity_bps / 8.0 * self.payload_fraction
        buffer_bytes = scenario.bottleneck.buffer_size_bytes * self.payload_fraction
        # the FIFO holds the largest buffer the run may set (set_bottleneck_buffer); by
        # default that is the buffer itself, so the arrays, and every output, stay as they were
        self._max_buffer_bytes = scenario.bottleneck.max_buffer_size_bytes * self.payload_fraction
        queue_slots = math.ceil(self._max_buffer_bytes / (capacity * dt)) + 4
        if queue_slots > _MAX_QUEUE_SLOTS:
            raise ScenarioError(
                f"bottleneck.buffer: {self._max_buffer_bytes:.0f} bytes hold {queue_slots} "
                f"steps of traffic at capacity; at most {_MAX_QUEUE_SLOTS} are supported"
            )
        longest_rtt = max(scenario.campus.base_rtt_s, *(d.base_rtt_s for d in scenario.dtns))
        ring = round(longest_rtt / dt) + 2
        n_groups = len(scenario.dtns)

        # One block, per-flow rows first (arena.py: where the arrays lie sets the speed).
        width = max(n, 1)
        arrays = carve(
            [
                Part("flow_f", (layout.N_FLOW_F, n), np.float64),
                Part("flow_i", (layout.N_FLOW_I, n), np.int64),
                Part("scratch", (SCRATCH_ROWS, width), np.float64),
                Part("ack_bytes", (ring, n), np.float64),
                Part("bn_slots", (queue_slots, width), np.float64),
                Part("sh_slots", (_SHAPER_SLOTS, max(self.layout.n_campus, 1)), np.float64),
                Part("glob_f", (layout.N_GLOB_F,), np.float64),
                Part("glob_i", (layout.N_GLOB_I,), np.int64),
                Part("bw_filter", (n, _BW_FILTER_ROUNDS), np.float64),
                Part("ack_delay", (ring, layout.ACK_GROUP0 + n_groups), np.float64),
                Part("groups", (layout.N_GROUP_F, n_groups), np.float64),
                Part("bn_step", (queue_slots,), np.int64),
                Part("bn_total", (queue_slots,), np.float64),
                Part("bn_cursor", (2,), np.int64),
                Part("sh_step", (_SHAPER_SLOTS,), np.int64),
                Part("sh_total", (_SHAPER_SLOTS,), np.float64),
                Part("sh_cursor", (2,), np.int64),
                Part("events", (layout.N_EV, max(65_536, 8 * n)), np.float64),
            ]
        )
        self.flow_f: FloatArray = arrays["flow_f"]
        self.flow_i: IntArray = arrays["flow_i"]
        self.glob_f: FloatArray = arrays["glob_f"]
        self.glob_i: IntArray = arrays["glob_i"]
        self.bw_filter: FloatArray = arrays["bw_filter"]
        self.ack_bytes: FloatArray = arrays["ack_bytes"]
        self.ack_delay: FloatArray = arrays["ack_delay"]
        self.groups: FloatArray = arrays["groups"]
        """Each DTN host's columns, cap, pool and tap counts (rows ``layout.G_*``)."""
        self.bn_slots: FloatArray = arrays["bn_slots"]
        self.bn_step: IntArray = arrays["bn_step"]
        self.bn_total: FloatArray = arrays["bn_total"]
        self.bn_cursor: IntArray = arrays["bn_cursor"]
        self.sh_slots: FloatArray = arrays["sh_slots"]
        self.sh_step: IntArray = arrays["sh_step"]
        self.sh_total: FloatArray = arrays["sh_total"]
        self.sh_cursor: IntArray = arrays["sh_cursor"]
        self.events: FloatArray = arrays["events"]
        self.scratch: FloatArray = arrays["scratch"]
        self.step_out: FloatArray = np.zeros((layout.N_OUT, self.steps_per_sample))
        self._rng = np.random.default_rng(scenario.seed)
        self.rand_gap: FloatArray = np.zeros(0)
        self.rand_size: FloatArray = np.zeros(0)
        self._pending_events: list[FloatArray] = []

        self._campus_demand_bps: float | None = None
        self._active_long = self.layout.n_long
        # Classes still in connection set-up: the step their data starts (scenario start_s);
        # DTN hosts by group index. And the step each DTN transfer with a stop_s ends.
        starts: dict[str | int, float] = {"campus": scenario.campus.start_s}
        starts.update({g: d.start_s for g, d in enumerate(scenario.dtns)})
        self._start_steps = {
            name: round(start_s / dt) for name, start_s in starts.items() if round(start_s / dt) > 0
        }
        self._stop_steps = {
            g: round(d.stop_s / dt) for g, d in enumerate(scenario.dtns) if d.stop_s is not None
        }
        self._paused_at: FloatArray = np.full(self.layout.n_long, np.inf)
        self.glob_i[layout.RNG_STATE] = (scenario.seed * 2654435761 + 1) % 4294967291 or 1
        self.params = self._params(capacity, buffer_bytes)
        self._init_flows()
        self._apply_lines()
        rate_limit = scenario.shaper.initial_rate_bps
        self.set_campus_rate_limit(
            scenario.bottleneck.capacity_bps if rate_limit is None else rate_limit
        )
        self.glob_f[layout.TOKENS] = self.params[layout.P_BURST]
        for g, dtn in enumerate(scenario.dtns):
            self.set_dtn_rate_limit(dtn.rate_limit_bps, g)
        if shorts.enabled:
            self._refill_random()
            self.glob_f[layout.NEXT_ARRIVAL] = self.rand_gap[0]
            self.glob_i[layout.RAND_CURSOR] = 1

    # ---- construction ------------------------------------------------------------------
    def _params(self, capacity: float, buffer_bytes: float) -> FloatArray:
        s = self.scenario
        params = np.zeros(layout.N_PARAMS)
        params[layout.P_DT] = self.dt
        params[layout.P_CAPACITY] = capacity
        params[layout.P_BUFFER] = buffer_bytes
        if s.shaper.burst_bytes is not None:
            params[layout.P_BURST] = s.shaper.burst_bytes * self.payload_fraction
        if s.shaper.queue_bytes is not None:
            params[layout.P_SHAPER_LIMIT] = s.shaper.queue_bytes * self.payload_fraction
        params[layout.P_PAYLOAD] = self.payload_fraction
        params[layout.P_MIN_TSO] = s.min_tso_segments
        params[layout.P_HYSTART] = 1.0 if s.cubic_hystart else 0.0
        params[layout.P_PRR] = 1.0 if s.proportional_rate_reduction else 0.0
        params[layout.P_BBR_RECOVERY] = 1.0 if s.bbr_loss_recovery else 0.0
        params[layout.P_PACED_DROP_WEIGHT] = s.paced_drop_weight
        params[layout.P_MSS] = s.mss_bytes
        params[layout.P_IW] = s.initial_window_segments
        params[layout.P_C_TH] = s.activity.packets_threshold
        params[layout.P_T_TH] = s.activity.window_s
        params[layout.P_IDLE] = s.activity.idle_timeout_s
        params[layout.P_POOL_START] = self.layout.n_long
        params[layout.P_POOL_END] = self.layout.n_campus
        params[layout.P_N_CAMPUS] = self.layout.n_campus
        params[layout.P_SHORT_CC] = layout.CC_CODES[s.campus.short_flows.congestion_control]
        params[layout.P_SHORT_RTT] = s.campus.base_rtt_s
        params[layout.P_SHORT_LINE] = self._line_bytes(s.campus.line_rate_bps)
        params[layout.P_SHORTS_ON] = 1.0 if s.campus.short_flows.enabled else 0.0
        return params

    def _line_bytes(self, line_rate_bps: float | None) -> float:
        rate = self.scenario.bottleneck.capacity_bps if line_rate_bps is None else line_rate_bps
        return rate / 8.0 * self.payload_fraction * self.dt

    def _init_flows(self) -> None:
        s = self.scenario
        serial = 0
        for column in range(self.layout.n_long):
            init_flow(
                self.flow_f, self.flow_i, self.bw_filter, column, layout.CAMPUS,
                layout.CC_CODES[s.campus.congestion_control], layout.LONG, s.campus.base_rtt_s,
                self._line_bytes(s.campus.line_rate_bps), np.inf, 0.0, self.dt,
                float(s.initial_window_segments), serial, float(s.mss_bytes), s.cubic_hystart,
            )  # fmt: skip
            serial += 1
        for g, dtn in enumerate(s.dtns):
            columns = self.layout.group_columns(g)
            self.groups[layout.G_FIRST, g] = columns.start
            self.groups[layout.G_END, g] = columns.stop
            per_stream = (
                np.inf if dtn.transfer_bytes is None else dtn.transfer_bytes / max(dtn.streams, 1)
            )
            if dtn.transfer_bytes is not None and dtn.transfer_split == "pooled":
                # a block each to start; the kernel hands out the rest (kernel._draw_from_pool)
                per_stream = min(per_stream, POOL_BLOCK_BYTES)
                self.groups[layout.G_POOL, g] = dtn.transfer_bytes - per_stream * dtn.streams
            for column in range(columns.start, columns.stop):
                init_flow(
                    self.flow_f, self.flow_i, self.bw_filter, column, layout.DTN,
                    layout.CC_CODES[dtn.congestion_control], layout.DTN_STREAM, dtn.base_rtt_s,
                    self._line_bytes(dtn.line_rate_bps), per_stream, 0.0, self.dt,
                    float(s.initial_window_segments), serial, float(s.mss_bytes), s.cubic_hystart,
                )  # fmt: skip
                self.flow_i[layout.GROUP, column] = g
                serial += 1
        self.glob_i[layout.NEXT_SERIAL] = serial

    def _refill_random(self) -> None:
        """Draw the next block of short-flow gaps and sizes (paper table 6, clipped Weibull)."""
        shorts = self.scenario.campus.short_flows
        cursor = int(self.glob_i[layout.RAND_CURSOR])
        gap = self.rand_gap[cursor:]
        size = self.rand_size[cursor:]
        gaps = shorts.inter_departure_s
        sizes = shorts.size_bytes
        new_gap = np.clip(
            gaps.scale * self._rng.weibull(gaps.shape, _RANDOM_BLOCK), gaps.minimum, gaps.maximum
        )
        new_size = np.clip(
            sizes.scale * self._rng.weibull(sizes.shape, _RANDOM_BLOCK),
            sizes.minimum,
            sizes.maximum,
        )
        self.rand_gap = np.concatenate([gap, new_gap])
        self.rand_size = np.concatenate([size, new_size])
        self.glob_i[layout.RAND_CURSOR] = 0

    # ---- control -------------------------------------------------------------------------
    def set_campus_rate_limit(self, rate_bps: float) -> None:
        """The actuator hook: the campus token bucket's rate u(t), from the next step on."""
        if not math.isfinite(rate_bps) or rate_bps < 0:
            raise ValueError(f"campus rate limit must be a finite rate >= 0, got {rate_bps!r}")
        self.glob_f[layout.CAMPUS_RATE_LIMIT] = rate_bps / 8.0
        # The tc actuator resizes the tbf's bucket and queue with its rate; so does the twin,
        # unless the scenario fixes them.
        shaper = self.scenario.shaper
        size = tbf_size(rate_bps)
        if shaper.burst_bytes is None:
            self.params[layout.P_BURST] = size.burst_bytes * self.payload_fraction
            # tc's change refills the bucket to its new depth (Linux tbf_change)
            self.glob_f[layout.TOKENS] = self.params[layout.P_BURST]
        if shaper.queue_bytes is None:
            self.params[layout.P_SHAPER_LIMIT] = size.limit_bytes * self.payload_fraction

    def set_bottleneck_buffer(self, buffer_bytes: float) -> None:
        """The buffer actuator's hook: BR1's drop-tail buffer, in frame bytes, from the next
        step on, up to ``bottleneck.max_buffer_*``. A smaller buffer than the queue keeps
        the backlog and drops arrivals until the queue is below it (as a bfifo's limit
        change does); nothing is flushed."""
        limit = self._max_buffer_bytes / self.payload_fraction
        if not (math.isfinite(buffer_bytes) and 0 < buffer_bytes <= limit * (1 + 1e-12)):
            raise ValueError(
                f"bottleneck buffer must be in (0, {limit:.0f}] bytes (bottleneck.max_buffer_"
                f"bytes or max_buffer_s), got {buffer_bytes!r}"
            )
        self.params[layout.P_BUFFER] = min(buffer_bytes * self.payload_fraction,
                                           self._max_buffer_bytes)  # fmt: skip

    @property
    def bottleneck_buffer_bytes(self) -> float:
        """BR1's buffer in force, in frame bytes."""
        return float(self.params[layout.P_BUFFER] / self.payload_fraction)

    @property
    def max_bottleneck_buffer_bytes(self) -> float:
        return float(self._max_buffer_bytes / self.payload_fraction)

    def set_dtn_rate_limit(self, rate_bps: float | None, group: int = 0) -> None:
        """The DTN actuator's hook: cap DTN host ``group``'s aggregate sending rate
        (``None`` lifts the cap), from the next step on. The bucket is as deep as the tc
        actuator makes a tbf at that rate, and starts full."""
        if not 0 <= group < self.groups.shape[1]:
            raise ValueError(f"no DTN host {group}: the scenario has {self.groups.shape[1]}")
        if rate_bps is None:
            self.groups[layout.G_RATE_LIMIT, group] = np.inf
            return
        if not math.isfinite(rate_bps) or rate_bps < 0:
            raise ValueError(f"DTN rate limit must be a finite rate >= 0, got {rate_bps!r}")
        burst = tbf_size(rate_bps).burst_bytes * self.payload_fraction
        if not math.isfinite(self.groups[layout.G_RATE_LIMIT, group]):
            self.groups[layout.G_TOKENS, group] = burst
        self.groups[layout.G_RATE_LIMIT, group] = rate_bps / 8.0
        self.groups[layout.G_BURST, group] = burst

    def set_campus_demand(self, rate_bps: float | None) -> None:
        """Application-limit the active campus long flows to ``rate_bps`` in aggregate (each
        gets an equal share as its sending limit), from the next step on; ``None`` restores
        the scenario's NIC rates. Lets an experiment vary campus demand around B − R*."""
        if rate_bps is not None and not (math.isfinite(rate_bps) and rate_bps >= 0):
            raise ValueError(f"campus demand must be a finite rate >= 0, got {rate_bps!r}")
        self._campus_demand_bps = rate_bps
        self._apply_campus_lines()

    def set_campus_long_flows(self, count: int) -> None:
        """Let only the first ``count`` campus long flows send, from the next step on; the
        others pause (application-idle: they keep their connection and send nothing). How
        identification and the benchmarks vary the campus load N_s within one run.

        A flow that resumes restarts its window as Linux does after an idle period
        (``tcp_cwnd_restart``, net.ipv4.tcp_slow_start_after_idle = 1): ssthresh becomes
        max(ssthresh, ¾·cwnd), cwnd halves for every RTO of idleness down to the initial
        window, and Cubic starts a new epoch. Without it a flow back from a long pause
        would send its old window in one burst."""
        n_long = self.layout.n_long
        if not 0 <= count <= n_long:
            raise ValueError(f"campus long flows must be within 0..{n_long}, got {count!r}")
        now = self.now
        for column in range(self._active_long, count):
            self._restart_after_idle(column, now - self._paused_at[column])
        for column in range(count, self._active_long):
            self._paused_at[column] = now
        self._active_long = count
        self._apply_campus_lines()

    @property
    def campus_long_flows(self) -> int:
        """How many campus long flows may send now."""
        return self._active_long

    def _restart_after_idle(self, column: int, idle_s: float) -> None:
        f = self.flow_f
        cwnd = float(f[layout.CWND, column])
        restart = min(float(self.scenario.initial_window_segments), cwnd)
        f[layout.SSTHRESH, column] = max(float(f[layout.SSTHRESH, column]), 0.75 * cwnd)
        # Linux's RTO: srtt + 4·rttvar, at least 200 ms; srtt + 200 ms stands in for it
        rto = max(float(f[layout.SRTT, column]), 0.0) + 0.2
        while idle_s > rto and cwnd > restart:
            idle_s -= rto
            cwnd /= 2.0
        f[layout.CWND, column] = max(cwnd, restart)
        f[layout.EPOCH_T, column] = -1.0

    def _apply_lines(self) -> None:
        """Each class's sending limit per step: 0 while it sets up its connections."""
        self._apply_campus_lines()
        for g, dtn in enumerate(self.scenario.dtns):
            line = self._line_bytes(dtn.line_rate_bps)
            self.flow_f[layout.LINE_BYTES, self.layout.group_columns(g)] = (
                0.0 if g in self._start_steps else line
            )

    def _apply_campus_lines(self) -> None:
        active = self._active_long
        n_long = self.layout.n_long
        demand = self._campus_demand_bps
        if "campus" in self._start_steps:
            line = 0.0  # still setting up its connections
        elif demand is None:
            line = self._line_bytes(self.scenario.campus.line_rate_bps)
        else:
            line = demand / 8.0 / max(active, 1) * self.dt
        self.flow_f[layout.LINE_BYTES, :active] = line
        self.flow_f[layout.LINE_BYTES, active:n_long] = 0.0

    @property
    def dtn_rate_limit_bps(self) -> float | None:
        """The first DTN host's cap now (bit/s), or ``None`` when it sends uncapped."""
        return self.group_rate_limit_bps(0)

    def group_rate_limit_bps(self, group: int) -> float | None:
        """DTN host ``group``'s cap now (bit/s), or ``None`` when it sends uncapped."""
        cap = float(self.groups[layout.G_RATE_LIMIT, group])
        return cap * 8.0 if math.isfinite(cap) else None

    def set_activity_rule(
        self, packets_threshold: int, window_s: float, idle_timeout_s: float
    ) -> None:
        """The tap's C_TH / T_TH rule and idle timeout (algorithm 7), from the next step on
        (the P4 pipeline's settings table: the collector may change them)."""
        if packets_threshold < 1 or not window_s > 0 or not idle_timeout_s > 0:
            raise ValueError(
                "activity rule needs packets_threshold >= 1 and positive window and timeout"
            )
        self.params[layout.P_C_TH] = packets_threshold
        self.params[layout.P_T_TH] = window_s
        self.params[layout.P_IDLE] = idle_timeout_s

    @property
    def campus_rate_limit_bps(self) -> float:
        return float(self.glob_f[layout.CAMPUS_RATE_LIMIT] * 8.0)

    @property
    def now(self) -> float:
        """Simulated time (s) at the start of the next step."""
        return float(self.glob_i[layout.STEP] * self.dt)

    @property
    def step_index(self) -> int:
        return int(self.glob_i[layout.STEP])

    # ---- running ---------------------------------------------------------------------------
    def advance(self, n_steps: int) -> FloatArray:
        """Run ``n_steps`` steps; returns their per-step outputs (rows in ``layout.OUT_*``).

        The returned array is reused by the next call; copy it to keep it.
        """
        if n_steps < 0:
            raise ValueError("n_steps must be >= 0")
        if self.step_out.shape[1] < n_steps:
            self.step_out = np.zeros((layout.N_OUT, n_steps))
        self._advance_into(n_steps, 0)
        return self.step_out[:, :n_steps]

    def _advance_into(self, n_steps: int, offset: int) -> None:
        done = 0
        while done < n_steps:
            chunk = n_steps - done
            if self._start_steps or self._stop_steps:
                self._start_classes()
                self._stop_transfers()
                upcoming = [
                    at - self.step_index
                    for at in (*self._start_steps.values(), *self._stop_steps.values())
                ]
                chunk = min([chunk, *upcoming])
            done += advance(
                self.flow_f, self.flow_i, self.glob_f, self.glob_i, self.params,
                self.bw_filter, self.ack_bytes, self.ack_delay,
                self.bn_slots, self.bn_step, self.bn_total, self.bn_cursor,
                self.sh_slots, self.sh_step, self.sh_total, self.sh_cursor,
                self.rand_gap, self.rand_size, self.step_out, offset + done, self.events,
                self.scratch, self.groups, chunk,
            )  # fmt: skip
            self._collect_events()
            if (
                self.params[layout.P_SHORTS_ON] > 0
                and self.glob_i[layout.RAND_CURSOR] > self.rand_gap.shape[0] - 64
            ):
                self._refill_random()

    def _start_classes(self) -> None:
        """Let a class whose set-up time has come send (its NIC rate back)."""
        for name, at in list(self._start_steps.items()):
            if self.step_index < at:
                continue
            del self._start_steps[name]
        self._apply_lines()

    def _stop_transfers(self) -> None:
        """End the transfer of a DTN host whose stop time has come: its streams send nothing
        new, and finish once what they have in flight is acknowledged (what of it is lost is
        resent first, as TCP delivers its last data), then FIN at the tap."""
        for g, at in list(self._stop_steps.items()):
            if self.step_index < at:
                continue
            del self._stop_steps[g]
            columns = self.layout.group_columns(g)
            f = self.flow_f
            self.groups[layout.G_POOL, g] = 0.0
            f[layout.REMAINING, columns] = 0.0
            f[layout.SIZE, columns] = f[layout.ACKED, columns] + f[layout.INFLIGHT, columns]

    def _collect_events(self) -> None:
        count = int(self.glob_i[layout.N_EVENTS])
        if count:
            self._pending_events.append(self.events[:, :count].copy())
            self.glob_i[layout.N_EVENTS] = 0

    def run_sample(self, rate_changes: Sequence[tuple[float, float]] = ()) -> Sample:
        """Advance one sample time T and summarise it as ground truth (see ``Sample``).

        ``rate_changes`` are ``(time_s, rate_bps)`` pairs inside this interval; each takes
        effect at the first step starting at or after its time.
        """
        n = self.steps_per_sample
        if self.step_out.shape[1] < n:
            self.step_out = np.zeros((layout.N_OUT, n))
        start_step = self.step_index
        done = 0
        for time_s, rate_bps in sorted(rate_changes):
            at = min(max(math.ceil(time_s / self.dt - 1e-9) - start_step, 0), n)
            if at > done:
                self._advance_into(at - done, done)
                done = at
            self.set_campus_rate_limit(rate_bps)
        self._advance_into(n - done, done)
        out = self.step_out[:, :n]
        sample = Sample.from_steps(
            end_s=self.now,
            sample_time_s=self.scenario.sample_time_s,
            step_out=out,
            flows=self.flow_table(),
            capacity_bps=self.scenario.bottleneck.capacity_bps,
        )
        self.flow_f[layout.SAMPLE_ACKED] = 0.0
        self.flow_f[layout.SAMPLE_RTT_W] = 0.0
        return sample

    # ---- reading -------------------------------------------------------------------------
    def flow_table(self) -> FlowTable:
        """Per-flow state now, and per-flow throughput/RTT since the last sample."""
        f, i = self.flow_f, self.flow_i
        acked = f[layout.SAMPLE_ACKED]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_rtt = np.where(acked > 0, f[layout.SAMPLE_RTT_W] / acked, np.nan)
        return FlowTable(
            serial=i[layout.SERIAL].copy(),
            traffic_class=i[layout.CLASS].copy(),
            kind=i[layout.KIND].copy(),
            running=i[layout.RUNNING].astype(bool),
            base_rtt_s=f[layout.BASE_RTT].copy(),
            cwnd_segments=f[layout.CWND].copy(),
            acked_bytes=f[layout.ACKED].copy(),
            sent_bytes=f[layout.SENT].copy(),
            dropped_bytes=f[layout.DROPPED].copy(),
            sample_acked_bytes=acked.copy(),
            sample_rtt_s=mean_rtt,
            srtt_s=f[layout.SRTT].copy(),
        )

    def resent_bytes(self) -> tuple[float, float]:
        """(DTN, campus) bytes sent again after being declared lost, so far (cumulative)."""
        settle_all_resent(self.flow_f, self.glob_f, self.layout.n_campus)
        return float(self.glob_f[layout.RESENT_DTN]), float(self.glob_f[layout.RESENT_CAMPUS])

    def group_resent_bytes(self, group: int) -> float:
        """DTN host ``group``'s bytes sent again after being declared lost, so far."""
        settle_all_resent(self.flow_f, self.glob_f, self.layout.n_campus)
        return float(self.flow_f[layout.RESENT_TOTAL, self.layout.group_columns(group)].sum())

    def tap_view(self) -> TapView:
        """What the P4 pipeline at the tap holds now (counters, registers, per-flow RTT)."""
        f, g = self.flow_f, self.glob_f
        resent = self.resent_bytes()
        return TapView(
            time_s=self.now,
            dtn_bytes=float(g[layout.TAP_BYTES_DTN]),
            campus_bytes=float(g[layout.TAP_BYTES_CAMPUS]),
            dtn_packets=float(g[layout.TAP_PACKETS_DTN]),
            campus_packets=float(g[layout.TAP_PACKETS_CAMPUS]),
            dtn_queuing_delay_s=float(g[layout.QD_DTN_LAST]),
            campus_queuing_delay_s=float(g[layout.QD_CAMPUS_LAST]),
            dtn_resent_bytes=resent[0],
            campus_resent_bytes=resent[1],
            serial=self.flow_i[layout.SERIAL].copy(),
            traffic_class=self.flow_i[layout.CLASS].copy(),
            active=self.flow_i[layout.TAP_ACTIVE].astype(bool),
            rtt_s=f[layout.TAP_RTT].copy(),
            rtt_at_s=f[layout.TAP_RTT_AT].copy(),
        )

    def drain_events(self) -> list[FlowEvent]:
        """Flow events since the last drain, in time order."""
        return [FlowEvent.from_row(row) for row in self.drain_event_array().T]

    def drain_event_array(self) -> FloatArray:
        """The same events as a ``(layout.N_EV, n)`` array (cheap for long runs)."""
        self._collect_events()
        blocks, self._pending_events = self._pending_events, []
        if not blocks:
            return np.zeros((layout.N_EV, 0))
        return np.concatenate(blocks, axis=1)

    def conservation(self) -> dict[str, float]:
        """Byte accounting: sent = delivered + dropped + queued (shaper, bottleneck)."""
        f, g = self.flow_f, self.glob_f
        sent = float(f[layout.SENT].sum() + g[layout.RETIRED_SENT])
        acked = float(f[layout.ACKED].sum() + g[layout.RETIRED_ACKED])
        in_ack_ring = float(self.ack_bytes.sum())
        dropped = float(f[layout.DROPPED].sum() + g[layout.RETIRED_DROPPED])
        queued = float(self.glob_f[layout.QUEUE] + self.glob_f[layout.SHAPER_QUEUE])
        return {
            "sent_bytes": sent,
            "delivered_bytes": acked + in_ack_ring,
            "dropped_bytes": dropped,
            "queued_bytes": queued,
            "residual_bytes": sent - (acked + in_ack_ring + dropped + queued),
        }
