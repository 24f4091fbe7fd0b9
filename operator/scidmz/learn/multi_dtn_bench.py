"""Several DTNs on one link, on the twin (``scidmz bench multi-dtn``).

Three DTN hosts share a 1 Gb/s link with 100 long Cubic campus flows (10 ms) for 180 s:
``dtn-1`` Cubic 100 ms at 300 Mb/s, ``dtn-2`` Cubic 50 ms at 200 Mb/s (its policy admitted
at 60 s, its transfer from then to 120 s, when the policy goes), ``dtn-3`` BBR 80 ms at
150 Mb/s; 8 streams each. The campus loop holds the admitted targets' sum; each DTN host
with a shaper has its own cap loop (``control.dtn_caps``). Cases:

* ``capped``: every DTN host has a shaper;
* ``bbr-uncapped``: ``dtn-3`` has none, and is held only through the sum.

Arms: ``static`` (the campus tbf at B − ΣR*, each shaped DTN capped at its R*: the
``trivial`` strategy), ``pi``, and ``mlc`` on the Cubic inverse model (the link's choice
here: the campus and two of the three DTNs are Cubic; no model is identified on mixes,
which is why a link's default for mixed congestion control is ``pi``).

Per DTN per episode, over its own active time after a 20 s warm-up: its rate and MRAE
(eq. 3) on the collector's per-host figures; the episode's sum ratio (Σ R_i / Σ R*_i of
the DTNs sending), utilisation (eq. 4 from the truth) and campus mean queuing delay; and
``worst_disturbance``: over the 10 s after another DTN starts or stops, the largest
deviation of this DTN's per-T rate from its mean over the 10 s before, as a share of its
target, the first 2 T ignored.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from scidmz.api.runtime import default_integral_band_bps
from scidmz.control.antiwindup import Gains
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import PolicyTarget, Setpoint
from scidmz.control.loop import ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.quality import finite_mean, mrae
from scidmz.control.settings import default_models_dir
from scidmz.learn.closed_loop import SimLoop, bench_settings
from scidmz.learn.gains import load_gains
from scidmz.learn.rows_csv import columns, parse_rows, rows_csv
from scidmz.netsim.scenario import Scenario

ARMS = ("static", "pi", "mlc")
CASES = ("capped", "bbr-uncapped")
CAPACITY_BPS = 1e9
CAMPUS_FLOWS = 100
EPISODE_S = 180
WARMUP_S = 20
WINDOW_S = 10
IGNORED_SAMPLES = 2
STREAMS = 8
LINK_MODEL = "cubic"
"""The inverse model and campus gains the link runs for this mix (see the docstring)."""


@dataclass(frozen=True)
class BenchDtn:
    name: str
    cca: str
    rtt_s: float
    target_bps: float
    start_s: float = 0.0
    stop_s: float | None = None


DTNS = (
    BenchDtn("dtn-1", "cubic", 0.100, 300e6),
    BenchDtn("dtn-2", "cubic", 0.050, 200e6, start_s=60.0, stop_s=120.0),
    BenchDtn("dtn-3", "bbr", 0.080, 150e6),
)


@dataclass(frozen=True)
class MultiDtnEpisode:
    """One row of episodes.csv: one DTN in one episode."""

    arm: str
    case: str
    seed: int
    dtn: str
    cca: str
    target_mbps: float
    rate_mbps: float
    mrae: float
    sum_ratio: float
    utilisation: float
    campus_qd_ms: float
    worst_disturbance: float


def scenario(seed: int, dtns: Sequence[BenchDtn] = DTNS) -> Scenario:
    """The episode's network (the lab builds the same one, ``bench/lab_multi_dtn.py``)."""

    def dtn(d: BenchDtn) -> dict[str, object]:
        return {
            "name": d.name, "congestion_control": d.cca, "streams": STREAMS,
            "base_rtt_s": d.rtt_s, "start_s": d.start_s, "stop_s": d.stop_s,
        }  # fmt: skip

    return Scenario.model_validate(
        {
            "seed": seed,
            "bottleneck": {"capacity_bps": CAPACITY_BPS},
            "campus": {"long_flows": CAMPUS_FLOWS},
            "dtn": dtn(dtns[0]),
            "more_dtns": [dtn(d) for d in dtns[1:]],
        }
    )


def admitted_at(t_s: float, dtns: Sequence[BenchDtn] = DTNS) -> list[BenchDtn]:
    """The DTNs whose policy is admitted at ``t_s`` (dtn-2's only while it transfers)."""
    return [d for d in dtns if d.start_s <= t_s and (d.stop_s is None or t_s < d.stop_s)]


def plan(arm: str, case: str, t_s: float, models_dir: Path) -> ControllerSettings:
    """The controller's settings for the policies admitted at ``t_s``, as the operator
    renders them: R* their sum, a cap per shaped host on its own target."""
    admitted = admitted_at(t_s)
    target = sum(d.target_bps for d in admitted)
    strategy = "trivial" if arm == "static" else arm
    link_gains = load_gains(models_dir, LINK_MODEL)
    campus = link_gains.mlc if arm == "mlc" else link_gains.pi
    base = bench_settings(
        strategy, target, CAPACITY_BPS, campus.as_tuple(), 1.0,
        integral_band_bps=default_integral_band_bps(LINK_MODEL, CAPACITY_BPS),
    )  # fmt: skip
    shaped = [d for d in admitted if not (case == "bbr-uncapped" and d.cca == "bbr")]
    caps = [
        DtnControl(
            Gains(*load_gains(models_dir, d.cca).dtn.as_tuple()),
            replace(base.limits, integral_band_bps=math.inf, slew_in_windup=True),
            failsafe_rate_bps=None,
            host=d.name,
            target_bps=d.target_bps,
        )
        for d in shaped
    ]
    return replace(
        base,
        setpoint=Setpoint(target, CAPACITY_BPS),
        dtn=caps[0] if caps else None,
        more_dtns=tuple(caps[1:]),
        policies=tuple(PolicyTarget("bench", d.name, d.name, d.target_bps) for d in admitted),
    )


def disturbance(rates: Sequence[float], event: int, target_bps: float) -> float:
    """The largest |R(k) − mean before| / R* over the ``WINDOW_S`` samples after sample
    ``event``, its first ``IGNORED_SAMPLES`` left out (NaN without data on both sides)."""
    before = [r for r in rates[max(0, event - WINDOW_S) : event] if math.isfinite(r)]
    after = [r for r in rates[event + IGNORED_SAMPLES : event + WINDOW_S] if math.isfinite(r)]
    if not before or not after:
        return math.nan
    mean = statistics.fmean(before)
    return max(abs(r - mean) for r in after) / target_bps


def episode(
    arm: str, case: str, seed: int, models_dir: Path | None = None
) -> list[MultiDtnEpisode]:
    """One episode: a row per DTN (see the module docstring)."""
    models = models_dir or default_models_dir()
    model = InverseModel(models / LINK_MODEL / "inverse.onnx") if arm == "mlc" else None
    loop = SimLoop(scenario(seed), plan(arm, case, 0.0, models), model)
    rates: dict[str, list[float]] = {d.name: [] for d in DTNS}
    sums: list[float] = []
    utilisation: list[float] = []
    campus_qd: list[float] = []

    async def run() -> None:
        current = {d.name for d in admitted_at(0.0)}
        for k in range(EPISODE_S):
            admitted = {d.name for d in admitted_at(float(k))}
            if admitted != current:
                loop.replan(plan(arm, case, float(k), models))
                current = admitted
            step = await loop.step()
            measured = {f.host: f.rate_bps for f in step.sample.dtns}
            for d in DTNS:
                rates[d.name].append(measured.get(d.name, math.nan))
            if k < WARMUP_S:
                continue
            held = admitted_at(float(k))
            total = sum(measured.get(d.name, math.nan) for d in held)
            sums.append(total / sum(d.target_bps for d in held))
            utilisation.append(step.sample.utilisation)
            campus_qd.append(step.sample.signals.campus_mean_queuing_delay_s)

    asyncio.run(run())
    return dtn_rows(
        arm, case, seed, DTNS, EPISODE_S, WARMUP_S, rates, (sums, utilisation, campus_qd)
    )


def dtn_rows(
    arm: str,
    case: str,
    seed: int,
    dtns: Sequence[BenchDtn],
    episode_s: int,
    warmup_s: int,
    rates: Mapping[str, Sequence[float]],
    link: tuple[Sequence[float], Sequence[float], Sequence[float]],
) -> list[MultiDtnEpisode]:
    """A row per DTN from each one's per-T rates (sample k at index k) and the link's
    per-T sum ratios, utilisations and campus mean queuing delays after the warm-up: its
    rate and MRAE over its own active time after ``warmup_s``, its worst disturbance when
    another DTN starts or stops (the twin's episode and the lab's, ``bench/lab_multi_dtn.py``)."""
    sums, utilisation, campus_qd = link
    events = sorted({int(t) for d in dtns for t in (d.start_s, d.stop_s) if t})
    rows = []
    for d in dtns:
        first = int(d.start_s) + warmup_s
        last = int(d.stop_s) if d.stop_s is not None else episode_s
        mine = list(rates[d.name][first:last])
        others = [e for e in events if e not in (d.start_s, d.stop_s)]
        hits = [disturbance(rates[d.name], e, d.target_bps) for e in others if first <= e < last]
        rows.append(
            MultiDtnEpisode(
                arm=arm, case=case, seed=seed, dtn=d.name, cca=d.cca,
                target_mbps=d.target_bps / 1e6, rate_mbps=finite_mean(mine) / 1e6,
                mrae=mrae([d.target_bps] * len(mine), mine),
                sum_ratio=finite_mean(sums), utilisation=finite_mean(utilisation),
                campus_qd_ms=finite_mean(campus_qd) * 1e3,
                worst_disturbance=max((h for h in hits if math.isfinite(h)), default=math.nan),
            )
        )  # fmt: skip
    return rows


def _one(job: tuple[str, str, int]) -> list[MultiDtnEpisode]:
    return episode(*job)


def run_all(
    seeds: Sequence[int],
    arms: Sequence[str] = ARMS,
    cases: Sequence[str] = CASES,
    workers: int = 2,
    progress: Callable[[str], None] = lambda _: None,
) -> list[MultiDtnEpisode]:
    """Every (arm, case, seed), in a process pool (results do not depend on it)."""
    jobs = [(arm, case, seed) for case in cases for seed in seeds for arm in arms]
    results: list[MultiDtnEpisode] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for number, rows in enumerate(pool.map(_one, jobs), start=1):
            results.extend(rows)
            progress(f"{number}/{len(jobs)} episodes")
    return results


COLUMNS = columns(MultiDtnEpisode)


def episodes_csv(episodes: Sequence[MultiDtnEpisode]) -> str:
    return rows_csv(episodes, MultiDtnEpisode)


def parse_episodes(text: str) -> list[MultiDtnEpisode]:
    """episodes.csv back into episodes (a wrong header is a ValueError naming it)."""
    return parse_rows(text, MultiDtnEpisode)
