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
    settings = EstimatorSettings(rtt_smoothing=DEFAULT_RTT_SMOOTHING, flow_timeout_s=2.0)
    is_dtn = np.zeros(sim.layout.n_flows, dtype=bool)
    is_dtn[sim.layout.dtn_columns] = True
    state = EstimatorState()
    view = sim.tap_view()
    state, _ = estimate(
        state, Poll(CounterReading(int(view.dtn_bytes), int(view.campus_bytes), 0.0), 0, 0),
        RttBatch.of([]), [], settings,
    )  # fmt: skip
    base = (0.0, 0.0, scenario.dtn.base_rtt_s, scenario.campus.base_rtt_s, 0.0, 0.0, 0.0)
    last: tuple[float, ...] = base
    rows = np.zeros((n, len(STATE_VARIABLES)))
    seen_at = np.full(sim.layout.n_flows, -math.inf)
    for k in range(n):
        sim.set_campus_rate_limit(float(u[k]))
        sim.run_sample()
        view = sim.tap_view()
        fresh = np.isfinite(view.rtt_s) & (view.rtt_at_s > seen_at)
        seen_at = np.where(fresh, view.rtt_at_s, seen_at)
        batch = RttBatch(
            view.serial[fresh].astype(np.int64),
            is_dtn[fresh],
            view.rtt_s[fresh],
            view.rtt_at_s[fresh],
        )
        poll = Poll(
            CounterReading(int(view.dtn_bytes), int(view.campus_bytes), view.time_s),
            round(view.dtn_queuing_delay_s * 1e9) if view.dtn_queuing_delay_s > 0 else 0,
            round(view.campus_queuing_delay_s * 1e9) if view.campus_queuing_delay_s > 0 else 0,
        )
        state, y = estimate(state, poll, batch, [], settings)
        measured = (*y.vector()[:6], float(view.active.sum()))
        last = fill_missing(measured, last)
        rows[k] = last
        if progress is not None:
            progress(k + 1, n)
    return Identification(u_bps=u, y=rows, sample_time_s=period, max_rate_bps=top)


def training_table(data: Identification) -> tuple[FloatArray, FloatArray]:
    """Predictors I = {y(t), y(t−T), y(t−2T), u(t−T)} and target u(t) (paper §3.5), rows
    k ≥ 2. At control time y(t) is replaced by y_d(t)."""
    y, u = data.y, data.u_bps
    x = np.hstack([y[2:], y[1:-1], y[:-2], u[1:-1, None]])
    return x, u[2:].copy()
