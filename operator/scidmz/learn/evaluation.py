"""The paper's §4 experiments on the simulator, for each strategy (``scidmz bench control``).

Every episode runs the real controller code (``control.loop.Controller``: y_d, features,
ONNX, anti-windup, saturator) against the simulator in-process: each sample T, the
simulator advances, ``TapCollector`` computes y(t) as the collector would, the controller
decides u(t) and a direct actuator sets it on the simulated shaper for the next interval.
No gRPC, so hundreds of simulated minutes take seconds.

* tracking (a): follow a pseudo-random R*(t) for 120 s (a new level every 20 s) → MRAE
  (eq. 3) and ρ (eq. 4);
* transfer (b, c): a 10 GB DTN transfer against N_s campus long flows at R* = 600 Mb/s →
  FCT, ρ; (d) repeats (b) for N_s ∈ {1, 10, 100, 1000}.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from scidmz.api.runtime import PAPER_GAINS
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.quality import mrae
from scidmz.learn.identification import TapCollector
from scidmz.netsim import layout
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator
from scidmz.telemetry.stream import state_message

STRATEGIES = ("trivial", "pi", "mlc")
CAPACITY_BPS = 1e9


class DirectActuator:
    """u(t) straight into the in-process simulator."""

    name = "sim-direct"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def apply(self, rate_bps: float) -> float:
        self.sim.set_campus_rate_limit(max(rate_bps, 0.0))
        return rate_bps

    async def close(self) -> None:
        return


@dataclass(frozen=True)
class Episode:
    experiment: str
    strategy: str
    cca: str
    seed: int
    campus_flows: int
    mrae: float = math.nan
    fct_s: float = math.nan
    utilisation: float = math.nan


def _controller(
    strategy: str, cca: str, sim: Simulator, target_bps: float, model: InverseModel | None
) -> Controller:
    kp, ki, kw = PAPER_GAINS[cca]
    settings = ControllerSettings(
        policy="bench", namespace="bench", strategy=strategy,
        setpoint=Setpoint(target_bps, CAPACITY_BPS), gains=Gains(kp, ki, kw),
        limits=Limits(0.0, CAPACITY_BPS, 0.2 * CAPACITY_BPS),
        sample_time_s=sim.scenario.sample_time_s, stale_after_s=3.0,
        failsafe_rate_bps=CAPACITY_BPS - target_bps, collector_address="in-process",
    )  # fmt: skip
    return Controller(settings, DirectActuator(sim), model if strategy == "mlc" else None)


def _scenario(cca: str, seed: int, campus_flows: int, transfer_bytes: float | None) -> Scenario:
    base = Scenario()
    return base.model_copy(
        update={
            "seed": seed,
            "dtn": base.dtn.model_copy(
                update={"congestion_control": cca, "transfer_bytes": transfer_bytes}
            ),
            "campus": base.campus.model_copy(update={"long_flows": campus_flows}),
        }
    )


def tracking(strategy: str, cca: str, seed: int, model: InverseModel | None) -> Episode:
    """(a): R*(t) uniform in [300, 800] Mb/s, a new level every 20 s, for 120 s after a
    20 s warm-up at the first level. MRAE over the 120 samples, ρ over the same."""
    sim = Simulator(_scenario(cca, seed, 100, None))
    levels = np.random.default_rng(seed + 1000).uniform(300e6, 800e6, size=7)
    controller = _controller(strategy, cca, sim, float(levels[0]), model)
    tap = TapCollector(sim)
    targets, rates, used = [], [], []

    async def run() -> None:
        for k in range(140):
            target = float(levels[0] if k < 20 else levels[(k - 20) // 20])
            controller.settings = replace(
                controller.settings, setpoint=Setpoint(target, CAPACITY_BPS)
            )
            sample = sim.run_sample()
            raw, _ = tap.measure()
            if k >= 20:
                targets.append(target)
                rates.append(raw[0])
                used.append(sample.utilisation)
            await controller.on_sample(state_message(raw, k + 1))

    asyncio.run(run())
    return Episode(
        "tracking", strategy, cca, seed, 100,
        mrae=mrae(targets, rates), utilisation=statistics.mean(used),
    )  # fmt: skip


def transfer(
    strategy: str,
    cca: str,
    seed: int,
    model: InverseModel | None,
    campus_flows: int = 100,
    size_bytes: float = 10e9,
    target_bps: float = 600e6,
    limit_s: float = 900.0,
) -> Episode:
    """(b)/(c)/(d): FCT of a ``size_bytes`` DTN transfer at R* = ``target_bps``."""
    sim = Simulator(_scenario(cca, seed, campus_flows, size_bytes))
    controller = _controller(strategy, cca, sim, target_bps, model)
    tap = TapCollector(sim)
    used: list[float] = []
    done_at: list[float] = []
    streams = sim.layout.n_dtn

    async def run() -> None:
        for k in range(int(limit_s / sim.scenario.sample_time_s)):
            sample = sim.run_sample()
            used.append(sample.utilisation)
            events = sim.drain_event_array()
            finished = events[layout.EV_KIND] == layout.FLOW_DONE
            dtn = events[layout.EV_COLUMN] >= sim.layout.n_campus
            done_at.extend(events[layout.EV_TIME][finished & dtn].tolist())
            if len(done_at) >= streams:
                return
            raw, _ = tap.measure()
            await controller.on_sample(state_message(raw, k + 1))

    asyncio.run(run())
    fct = max(done_at) if len(done_at) >= streams else math.nan
    return Episode(
        "transfer", strategy, cca, seed, campus_flows,
        fct_s=fct, utilisation=statistics.mean(used) if used else math.nan,
    )  # fmt: skip


def load_models(models_dir: Path) -> dict[str, InverseModel | None]:
    found: dict[str, InverseModel | None] = {}
    for cca in ("cubic", "bbr"):
        path = models_dir / cca / "inverse.onnx"
        found[cca] = InverseModel(path) if path.is_file() else None
    return found


def run_all(
    models_dir: Path,
    seeds: int,
    scale_flows: tuple[int, ...],
    progress: Callable[[str], None] | None = None,
) -> list[Episode]:
    models = load_models(models_dir)
    episodes = []
    for cca in ("cubic", "bbr"):
        strategies = [s for s in STRATEGIES if s != "mlc" or models[cca] is not None]
        for strategy in strategies:
            for seed in range(1, seeds + 1):
                if progress is not None:
                    progress(f"{cca} {strategy} seed {seed}")
                model = models[cca]
                episodes.append(tracking(strategy, cca, seed, model))
                for flows in scale_flows:
                    episodes.append(transfer(strategy, cca, seed, model, campus_flows=flows))
    return episodes


def mean_interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (Student t)."""
    from scipy import stats

    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    mean = statistics.mean(finite)
    if len(finite) < 2:
        return mean, math.nan
    half = stats.t.ppf(0.975, len(finite) - 1) * statistics.stdev(finite) / math.sqrt(len(finite))
    return mean, float(half)
