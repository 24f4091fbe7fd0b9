"""System identification on the simulator (paper §3.5): u(t) in, y(t) out, as a table.

``identify`` drives netsim with a pseudo-random step u(t) ∈ [0, B] changed every T and
records, per sample, u(t) and y(t) as the collector would report them: the tap's class
counters over the interval (algorithm 3), each flow's latest RTT seen at the tap fed to
algorithm 4 (campus smoothed by α, DTN averaged), the last per-class queuing delay
(algorithm 6) and the tap's active flows (algorithms 7/8). The same estimator functions
as the collector compute them, so the model learns the quantities it will be fed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scidmz.control.features import fill_missing
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator
from scidmz.telemetry.estimators import DEFAULT_RTT_SMOOTHING, CounterReading, RttBatch
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, estimate
from scidmz.telemetry.state import STATE_VARIABLES

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Identification:
    """Row k: u(k) applied during interval k, y(k) measured over it (SI units)."""

    u_bps: FloatArray  # (n,)
    y: FloatArray  # (n, 7), STATE_VARIABLES order, missing values filled
    sample_time_s: float
    max_rate_bps: float


def random_steps(n: int, max_rate_bps: float, seed: int) -> FloatArray:
    """The paper's excitation: a uniform random level in [0, max] every sample time."""
    return np.random.default_rng(seed).uniform(0.0, max_rate_bps, size=n)


class TapCollector:
    """The collector's arithmetic over an in-process simulator: y(t) per sample from the
    tap view, through the same estimator functions (no gRPC, for speed)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.settings = EstimatorSettings(rtt_smoothing=DEFAULT_RTT_SMOOTHING, flow_timeout_s=2.0)
        self._is_dtn = np.zeros(sim.layout.n_flows, dtype=bool)
        self._is_dtn[sim.layout.dtn_columns] = True
        self._seen_at = np.full(sim.layout.n_flows, -math.inf)
        view = sim.tap_view()
        first = Poll(CounterReading(int(view.dtn_bytes), int(view.campus_bytes), view.time_s), 0, 0)
        self.state, _ = estimate(EstimatorState(), first, RttBatch.of([]), [], self.settings)
        scenario = sim.scenario
        self.last: tuple[float, ...] = (
            0.0, 0.0, scenario.dtn.base_rtt_s, scenario.campus.base_rtt_s, 0.0, 0.0, 0.0,
        )  # fmt: skip

    def measure(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(raw y(t) with NaN where unmeasured, y(t) filled as at control time), now."""
        view = self.sim.tap_view()
        fresh = np.isfinite(view.rtt_s) & (view.rtt_at_s > self._seen_at)
        self._seen_at = np.where(fresh, view.rtt_at_s, self._seen_at)
        batch = RttBatch(
            view.serial[fresh].astype(np.int64),
            self._is_dtn[fresh],
            view.rtt_s[fresh],
            view.rtt_at_s[fresh],
        )
        poll = Poll(
            CounterReading(int(view.dtn_bytes), int(view.campus_bytes), view.time_s),
            round(view.dtn_queuing_delay_s * 1e9) if view.dtn_queuing_delay_s > 0 else 0,
            round(view.campus_queuing_delay_s * 1e9) if view.campus_queuing_delay_s > 0 else 0,
        )
        self.state, y = estimate(self.state, poll, batch, [], self.settings)
        raw = (*y.vector()[:6], float(view.active.sum()))
        self.last = fill_missing(raw, self.last)
        return raw, self.last


def identify(
    scenario: Scenario,
    duration_s: float,
    seed: int,
    max_rate_bps: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Identification:
    """Run ``duration_s`` of simulated time; ``progress(done, total)`` after each sample."""
    sim = Simulator(scenario)
    period = scenario.sample_time_s
    n = math.ceil(duration_s / period)
    top = max_rate_bps if max_rate_bps is not None else scenario.bottleneck.capacity_bps
    u = random_steps(n, top, seed)
    tap = TapCollector(sim)
    rows = np.zeros((n, len(STATE_VARIABLES)))
    for k in range(n):
        sim.set_campus_rate_limit(float(u[k]))
        sim.run_sample()
        rows[k] = tap.measure()[1]
        if progress is not None:
            progress(k + 1, n)
    return Identification(u_bps=u, y=rows, sample_time_s=period, max_rate_bps=top)


def training_table(data: Identification) -> tuple[FloatArray, FloatArray]:
    """Predictors I = {y(t), y(t−T), y(t−2T), u(t−T)} and target u(t) (paper §3.5), rows
    k ≥ 2. At control time y(t) is replaced by y_d(t)."""
    y, u = data.y, data.u_bps
    x = np.hstack([y[2:], y[1:-1], y[:-2], u[1:-1, None]])
    return x, u[2:].copy()
