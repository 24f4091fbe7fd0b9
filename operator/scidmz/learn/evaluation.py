"""The paper's §4 experiments, and the ones it lacks, on the simulator (``scidmz bench control``).

Every episode closes the loop with the production controller on the simulated clock
(``learn.closed_loop.SimLoop``). The arms under test are a strategy (``trivial``, ``pi``,
``mlc``) with or without the DTN actuator; ``trivial`` with the DTN actuator is the fixed
baseline an ESnet-style site would run (campus token bucket at B − R*, DTN paced at R*).

* ``tracking`` — R*(t) uniform in [300, 800] Mb/s, a new level every 20 s, 120 samples
  after a 20 s warm-up, 100 campus flows: MRAE (eq. 3), ρ (eq. 4), the DTN's mean rate
  against R*'s.
* ``transfer`` — paper table 5: a 10 GB DTN transfer at R* = 600 Mb/s against N_s campus
  long flows: FCT, ρ, the mean DTN rate against R* (the overshoot), MRAE while it runs.
  The streams share one pool of bytes (the scenario's default ``transfer_split: pooled``,
  as ``iperf3 -n``), so the FCT is the aggregate's, not the slowest stream's.
* ``short_flows`` — paper §4.5: R* = 600 Mb/s, 100 long campus flows plus table 6's short
  flows for 120 s: the short flows' median FCT, MRAE, ρ.
* ``demand`` — campus demand that drops below B − R* part of the time (application-limited
  campus senders: 40 s at 150 Mb/s, 40 s unlimited, 40 s at 300 Mb/s) under a time-varying
  R*: MRAE, ρ, campus goodput. Where the campus takes less than B − R*, a fixed split
  leaves capacity idle unless the DTN may use it.
* ``steady`` — constant R* = 600 Mb/s for 140 s: the standard deviation of u(t) over the
  last 100 samples as a fraction of B_max (a limit cycle shows here), and MRAE.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scidmz.api.runtime import default_integral_band_bps
from scidmz.control.model import InverseModel
from scidmz.control.quality import mrae
from scidmz.learn.closed_loop import LoopStep, SimLoop, bench_settings
from scidmz.learn.gains import TunedGains, load_gains
from scidmz.netsim.scenario import Scenario

CAPACITY_BPS = 1e9
TRANSFER_TARGET_BPS = 600e6
TRANSFER_BYTES = 10e9
TRANSFER_FLOWS = (50, 100, 150, 200)
WARMUP = 20
MEASURED = 120


@dataclass(frozen=True)
class Arm:
    """One controller configuration under test."""

    strategy: str
    dtn_actuator: bool = False
    desired_state_mode: str = "reachable"

    @property
    def name(self) -> str:
        name = self.strategy + ("+dtn" if self.dtn_actuator else "")
        return name + (" (table 3 y_d)" if self.desired_state_mode == "table3" else "")


CAMPUS_ARMS = (Arm("trivial"), Arm("pi"), Arm("mlc"))
DTN_ARMS = (Arm("trivial", True), Arm("pi", True), Arm("mlc", True))
ABLATION_ARMS = (Arm("mlc", desired_state_mode="table3"),)


@dataclass(frozen=True)
class Episode:
    experiment: str
    arm: str
    cca: str
    seed: int
    campus_flows: int
    mrae: float = math.nan
    fct_s: float = math.nan
    utilisation: float = math.nan
    rate_ratio: float = math.nan
    """The DTN's mean rate over the mean R* (1.05 = 5 % over target on average)."""
    short_fct_p50_s: float = math.nan
    u_std_fraction: float = math.nan
    campus_goodput_bps: float = math.nan


def scenario_for(
    cca: str, seed: int, campus_flows: int, transfer_bytes: float | None, shorts: bool = False
) -> Scenario:
    return Scenario.model_validate(
        {
            "seed": seed,
            "dtn": {"congestion_control": cca, "transfer_bytes": transfer_bytes},
            "campus": {"long_flows": campus_flows, "short_flows": {"enabled": shorts}},
        }
    )


def make_loop(
    arm: Arm,
    cca: str,
    scenario: Scenario,
    target_bps: float,
    gains: TunedGains,
    model: InverseModel | None,
) -> SimLoop:
    strategy_gains = gains.mlc if arm.strategy == "mlc" else gains.pi
    capacity = scenario.bottleneck.capacity_bps
    settings = bench_settings(
        arm.strategy, target_bps, capacity, strategy_gains.as_tuple(),
        scenario.sample_time_s,
        dtn_gains=gains.dtn.as_tuple() if arm.dtn_actuator else None,
        desired_state_mode=arm.desired_state_mode,
        integral_band_bps=default_integral_band_bps(cca, capacity),
    )  # fmt: skip
    if arm.strategy == "mlc" and model is None:
        raise ValueError(f"the mlc arm needs the {cca} inverse model")
    return SimLoop(scenario, settings, model)


def random_targets(seed: int, samples: int, hold: int = 20) -> list[float]:
    """R*(t): uniform in [300, 800] Mb/s, a new level every ``hold`` samples; the first
    level also covers the warm-up."""
    count = samples // hold + 2
    levels = np.random.default_rng(seed + 1000).uniform(300e6, 800e6, size=count)
    return [
        float(levels[0] if k < WARMUP else levels[(k - WARMUP) // hold]) for k in range(samples)
    ]


def _tracked(steps: Sequence[LoopStep]) -> tuple[float, float, float]:
    """MRAE, ρ and the rate ratio over ``steps``."""
    targets = [s.target_bps for s in steps]
    rates = [s.sample.measured.dtn_rate_bps for s in steps]
    finite = [r for r in rates if math.isfinite(r)]
    ratio = statistics.mean(finite) / statistics.mean(targets) if finite else math.nan
    used = statistics.mean(s.sample.utilisation for s in steps)
    return mrae(targets, rates), used, ratio


def tracking(
    arm: Arm, cca: str, seed: int, gains: TunedGains, model: InverseModel | None
) -> Episode:
    targets = random_targets(seed, WARMUP + MEASURED)
    loop = make_loop(arm, cca, scenario_for(cca, seed, 100, None), targets[0], gains, model)
    steps = loop.run(targets)[WARMUP:]
    error, used, ratio = _tracked(steps)
    return Episode(
        "tracking", arm.name, cca, seed, 100, mrae=error, utilisation=used, rate_ratio=ratio
    )


def transfer(
    arm: Arm,
    cca: str,
    seed: int,
    gains: TunedGains,
    model: InverseModel | None,
    campus_flows: int = 100,
    size_bytes: float = TRANSFER_BYTES,
    target_bps: float = TRANSFER_TARGET_BPS,
    limit_s: float = 900.0,
) -> Episode:
    """Table 5: the FCT of a ``size_bytes`` DTN transfer at a constant R*."""
    scenario = scenario_for(cca, seed, campus_flows, size_bytes)
    loop = make_loop(arm, cca, scenario, target_bps, gains, model)
    streams = loop.sim.layout.n_dtn
    done: list[float] = []
    steps: list[LoopStep] = []

    async def run() -> None:
        for _ in range(int(limit_s / scenario.sample_time_s)):
            step = await loop.step()
            done.extend(step.sample.dtn_done_s)
            if len(done) >= streams:
                return
            steps.append(step)

    import asyncio

    asyncio.run(run())
    fct = max(done) if len(done) >= streams else math.nan
    error, used, _ = _tracked(steps) if steps else (math.nan, math.nan, math.nan)
    return Episode(
        "transfer", arm.name, cca, seed, campus_flows, mrae=error, fct_s=fct, utilisation=used,
        rate_ratio=size_bytes * 8 / fct / target_bps if math.isfinite(fct) else math.nan,
    )  # fmt: skip


def short_flows(
    arm: Arm, cca: str, seed: int, gains: TunedGains, model: InverseModel | None
) -> Episode:
    """§4.5: the median FCT of table 6's short flows next to 100 long ones at R* = 600."""
    scenario = scenario_for(cca, seed, 100, None, shorts=True)
    loop = make_loop(arm, cca, scenario, TRANSFER_TARGET_BPS, gains, model)
    steps = loop.run([TRANSFER_TARGET_BPS] * (WARMUP + MEASURED))[WARMUP:]
    fcts = [f for s in steps for f in s.sample.short_fct_s]
    error, used, ratio = _tracked(steps)
    return Episode(
        "short_flows", arm.name, cca, seed, 100, mrae=error, utilisation=used, rate_ratio=ratio,
        short_fct_p50_s=float(np.median(fcts)) if fcts else math.nan,
    )  # fmt: skip


DEMAND_PHASES_BPS: tuple[float | None, ...] = (150e6, None, 300e6)
"""The campus's application limit in three 40 s phases (None: unlimited)."""


def demand(arm: Arm, cca: str, seed: int, gains: TunedGains, model: InverseModel | None) -> Episode:
    """Varying campus demand under a time-varying R* (see the module docstring)."""
    targets = random_targets(seed, WARMUP + MEASURED)
    loop = make_loop(arm, cca, scenario_for(cca, seed, 100, None), targets[0], gains, model)
    phase = MEASURED // len(DEMAND_PHASES_BPS)

    async def run() -> list[LoopStep]:
        steps = []
        for k, target in enumerate(targets):
            measured = k - WARMUP
            if measured >= 0 and measured % phase == 0:
                loop.sim.set_campus_demand(DEMAND_PHASES_BPS[measured // phase])
            steps.append(await loop.step(target))
        return steps[WARMUP:]

    import asyncio

    steps = asyncio.run(run())
    error, used, ratio = _tracked(steps)
    goodput = statistics.mean(s.sample.campus_departed_bps for s in steps)
    return Episode(
        "demand", arm.name, cca, seed, 100, mrae=error, utilisation=used, rate_ratio=ratio,
        campus_goodput_bps=goodput,
    )  # fmt: skip


def steady(arm: Arm, cca: str, seed: int, gains: TunedGains, model: InverseModel | None) -> Episode:
    """Constant R*: u(t)'s standard deviation after settling, as a fraction of B_max."""
    loop = make_loop(
        arm, cca, scenario_for(cca, seed, 100, None), TRANSFER_TARGET_BPS, gains, model
    )
    steps = loop.run([TRANSFER_TARGET_BPS] * (WARMUP + MEASURED))
    settled = steps[-100:]
    u = [s.decision.u_bps for s in settled if s.decision is not None]
    error, used, ratio = _tracked(steps[WARMUP:])
    return Episode(
        "steady", arm.name, cca, seed, 100, mrae=error, utilisation=used, rate_ratio=ratio,
        u_std_fraction=float(np.std(u)) / CAPACITY_BPS,
    )  # fmt: skip


EXPERIMENTS: dict[str, Callable[[Arm, str, int, TunedGains, InverseModel | None], Episode]] = {
    "tracking": tracking,
    "short_flows": short_flows,
    "demand": demand,
    "steady": steady,
}


def load_models(models_dir: Path) -> dict[str, InverseModel | None]:
    found: dict[str, InverseModel | None] = {}
    for cca in ("cubic", "bbr"):
        path = models_dir / cca / "inverse.onnx"
        found[cca] = InverseModel(path) if path.is_file() else None
    return found


def arms_for(cca: str, models: dict[str, InverseModel | None]) -> list[Arm]:
    arms = [*CAMPUS_ARMS, *DTN_ARMS, *ABLATION_ARMS]
    return [a for a in arms if a.strategy != "mlc" or models.get(cca) is not None]


@dataclass(frozen=True)
class Case:
    """One (CCA, arm, seed): every experiment for it, in one worker."""

    cca: str
    arm: Arm
    seed: int
    transfer_flows: tuple[int, ...]
    models_dir: Path


_MODELS: dict[Path, dict[str, InverseModel | None]] = {}


def run_case(case: Case) -> list[Episode]:
    """Every experiment of one case (models load once per process)."""
    if case.models_dir not in _MODELS:
        _MODELS[case.models_dir] = load_models(case.models_dir)
    model = _MODELS[case.models_dir][case.cca]
    gains = load_gains(case.models_dir, case.cca)
    episodes = [
        experiment(case.arm, case.cca, case.seed, gains, model)
        for experiment in EXPERIMENTS.values()
    ]
    episodes += [
        transfer(case.arm, case.cca, case.seed, gains, model, campus_flows=flows)
        for flows in case.transfer_flows
    ]
    return episodes


def run_all(
    models_dir: Path,
    seeds: int,
    transfer_flows: tuple[int, ...],
    progress: Callable[[str], None] | None = None,
    ccas: tuple[str, ...] = ("cubic", "bbr"),
    workers: int = 1,
) -> list[Episode]:
    """Every case, on ``workers`` processes; the result does not depend on their number."""
    models = load_models(models_dir)
    cases = [
        Case(cca, arm, seed, transfer_flows, models_dir)
        for cca in ccas
        for arm in arms_for(cca, models)
        for seed in range(1, seeds + 1)
    ]
    if workers <= 1:
        results = []
        for case in cases:
            if progress is not None:
                progress(f"{case.cca} {case.arm.name} seed {case.seed}")
            results.append(run_case(case))
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            results = []
            for case, done in zip(cases, pool.map(run_case, cases), strict=True):
                if progress is not None:
                    progress(f"{case.cca} {case.arm.name} seed {case.seed}")
                results.append(done)
    return [episode for result in results for episode in result]


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
