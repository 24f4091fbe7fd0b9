"""P4BS buffer sizing against fixed buffers on the twin, with the rate loop on
(``scidmz bench buffer``).

Each episode runs a DTN (``cca``, 8 streams, 100 ms) at R* = 0.6 B beside ``load`` long
campus flows (Cubic, 10 ms) on a 1 Gb/s link (``capacity_bps`` for the Science DMZ case),
the rate loop (``pi``, the pairing seed 003's spec asks for until the inverse model is
identified across buffers; with the DTN host's cap for a BBR DTN) holding the DTN at R*,
and one buffer arm:

* ``bdp``: C·RTT, RTT the mean of the long flows' base RTTs (ours: the authors' code takes
  a measured SRTT; with two RTT populations the flows' mean is the closest reading);
* ``stanford``: BDP / √N, N every long flow (campus and DTN streams);
* ``tiny``: 30 full-size packets;
* ``bloated``: 200 ms at line rate; ``100ms``: the twin's default, the baseline;
* ``p4bs``: :class:`scidmz.control.buffer_search.BufferTuner` from the warm-up's end with the
  product's defaults (``spec.buffer`` unset but its actuator: ``sim``, so the loss it reads
  is the queue's own drop counter), setting the simulator's buffer; ``p4bs-path`` and
  ``p4bs-bottleneck`` read the tap's retransmissions (method 1) and method 2 instead
  (what chose the default).

Two episodes (``episode``): ``transfer``, a 10 GB transfer (100 GB at 10 Gb/s), judged
until it ends; ``steady``, 600 s of continuous DTN traffic with the campus load at N, then
2N from 200 s, then N/2 from 400 s (the change detector's restarts are exercised).

Judged after a 20 s warm-up, every arm the same way, from the twin's ground truth whatever
the search reads: f̄ = the mean over samples of eq. (2) on BR1's own loss (its dropped
bytes over the bytes that reached it) and its mean queuing delay (the sojourns of the bytes
that left); the DTN's MRAE (eq. 3) on the bytes it delivered; the FCT; the campus's mean
queuing delay (collector). ``search_objective`` is the same mean of eq. (2) on what the
search reads (its loss signal, the collector's queuing delay). ``trial_share``: the share
of the judged samples spent in trials (EXPAND and SEARCH); ``trial_objective`` and
``held_objective``: f̄ over those samples and over the rest.

Feasible (ours, :func:`judge_feasible`): in a transfer, the DTN's MRAE within +0.5 points
of the same seed's 100 ms arm and its FCT within 2 % of it; in a steady episode, the DTN's
rate at least 0.95 of its target in every 10 s window after the warm-up.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

from scidmz.api.buffer import BufferActuatorSpec, BufferSpec
from scidmz.api.runtime import buffer_config
from scidmz.control.buffer_actuators import QueueCounters, drop_ratio
from scidmz.control.buffer_loop import tuner_settings
from scidmz.control.buffer_search import (
    SEARCHING,
    BufferTuner,
    LossSignal,
    TunerSettings,
    tuner_sample,
)
from scidmz.control.quality import finite_mean, mrae
from scidmz.control.settings import default_models_dir
from scidmz.learn.closed_loop import SimLoop
from scidmz.learn.evaluation import Arm, make_loop
from scidmz.learn.gains import load_gains
from scidmz.learn.rows_csv import columns, parse_rows, rows_csv
from scidmz.netsim import layout
from scidmz.netsim.scenario import Scenario

FIXED_ARMS = ("bdp", "stanford", "tiny", "bloated", "100ms")
SEARCH_ARMS: dict[str, LossSignal] = {
    "p4bs": "actuator",
    "p4bs-path": "path",
    "p4bs-bottleneck": "bottleneck",
}
ARMS = (*FIXED_ARMS, *SEARCH_ARMS)
DEFAULT_ARMS = (*FIXED_ARMS, "p4bs")
LOADS = (25, 50, 100, 250)
Episode = Literal["transfer", "steady"]
TARGET_SHARE = 0.6
TRANSFER_BYTES = 10e9
"""At 1 Gb/s; the transfer scales with the capacity (100 GB at 10 Gb/s) so that every
episode lasts about as long at any capacity (~135 s at R* = 0.6 B)."""
STEADY_S = 600
STEADY_LOADS = ((0.0, 1.0), (200.0, 2.0), (400.0, 0.5))
"""The steady episode's campus load: from each time on, this multiple of N."""
WARMUP = 20
LIMIT_S = 900.0
DTN_STREAMS = 8
CAMPUS_RTT_S = 0.010
DTN_RTT_S = 0.100
TINY_PACKETS = 30
FRAME_BYTES = 1514
MAX_BUFFER_S = 0.2
FEASIBLE_MRAE_POINTS = 0.005
FEASIBLE_FCT = 1.02
STEADY_WINDOW = 10
STEADY_FLOOR = 0.95
BASELINE = "100ms"


@dataclass(frozen=True)
class BufferEpisode:
    """One row of episodes.csv."""

    arm: str
    cca: str
    load: int
    seed: int
    objective: float
    """The judging f̄: eq. (2) on the ground truth (BR1's own loss and queuing delay)."""
    loss: float
    """BR1's own loss (ground truth)."""
    campus_qd_ms: float
    dtn_mrae: float
    fct_s: float
    buffer_ms: float
    capacity_bps: float = 1e9
    episode: str = "transfer"
    search_objective: float = math.nan
    """eq. (2) on what the search reads (its loss signal, the collector's delay)."""
    path_loss: float = math.nan
    """Method 1 (the tap's retransmissions, both classes): what P4BS's paper reads."""
    mean_qd_ms: float = math.nan
    """BR1's mean queuing delay (ground truth), the d of the judging f̄."""
    trial_share: float = 0.0
    trial_objective: float = math.nan
    held_objective: float = math.nan
    min_window_ratio: float = math.nan
    """The DTN's lowest 10 s mean rate over its target after the warm-up."""
    searches: int = 0
    feasible: bool | None = None
    """Ours (module docstring); None until judged (:func:`judge_feasible`)."""
    tap_border_loss: float = math.nan
    """Method 2 (the tap's bytes into BR1 less out and queued, ``lossSignal: bottleneck``),
    the mean of the collector's samples: set beside ``loss`` to judge the estimator."""


def fixed_buffer_s(arm: str, load: int, capacity_bps: float) -> float:
    """The buffer of a fixed arm, in seconds at line rate."""
    flows = load + DTN_STREAMS
    rtt = (load * CAMPUS_RTT_S + DTN_STREAMS * DTN_RTT_S) / flows
    return {
        "bdp": rtt,
        "stanford": rtt / math.sqrt(flows),
        "tiny": TINY_PACKETS * FRAME_BYTES * 8 / capacity_bps,
        "bloated": MAX_BUFFER_S,
        "100ms": 0.100,
    }[arm]


def scenario(
    cca: str,
    load: int,
    seed: int,
    buffer_s: float,
    capacity_bps: float,
    kind: Episode = "transfer",
) -> Scenario:
    steady = kind == "steady"
    most = max(round(load * m) for _, m in STEADY_LOADS) if steady else load
    return Scenario.model_validate(
        {
            "seed": seed,
            "bottleneck": {
                "capacity_bps": capacity_bps,
                "buffer_s": buffer_s,
                "max_buffer_s": max(buffer_s, MAX_BUFFER_S),
            },
            "dtn": {
                "congestion_control": cca,
                "streams": DTN_STREAMS,
                "transfer_bytes": None if steady else TRANSFER_BYTES * capacity_bps / 1e9,
            },
            "campus": {"long_flows": most},
        }
    )


def search_settings(capacity_bps: float, sample_time_s: float, signal: LossSignal) -> TunerSettings:
    """The product's defaults (an unset ``spec.buffer`` but its sim actuator), reading
    ``signal``."""
    spec = BufferSpec(actuator=BufferActuatorSpec(type="sim"), loss_signal=signal)
    return tuner_settings(buffer_config(spec, "localhost:50051"), capacity_bps, sample_time_s)


@dataclass
class _Truth:
    """BR1's ground truth between two samples (cumulative reads of the twin)."""

    loop: SimLoop
    dropped: float = 0.0
    departed: float = 0.0
    waited: float = 0.0

    def read(self) -> tuple[float, float]:
        """(BR1's loss, its mean queuing delay) since the last read. The loss is what the
        sim buffer actuator's queue counters give (``drop_ratio``), so the judge and a
        search reading ``lossSignal: actuator`` read the same figure."""
        source = self.loop.collector.source
        dropped = float(self.loop.sim.glob_f[layout.BOTTLENECK_DROPPED])
        departed = sum(source.departed_bytes)
        waited = source.sojourn_byte_seconds
        loss = drop_ratio(
            QueueCounters(self.dropped, self.departed), QueueCounters(dropped, departed)
        )
        d_dep = departed - self.departed
        delay = (waited - self.waited) / d_dep if d_dep > 0 else math.nan
        self.dropped, self.departed, self.waited = dropped, departed, waited
        return loss, delay


def episode(
    arm: str,
    cca: str,
    load: int,
    seed: int,
    capacity_bps: float = 1e9,
    kind: Episode = "transfer",
) -> BufferEpisode:
    """One episode (see the module docstring)."""
    signal = SEARCH_ARMS.get(arm)
    start_s = 0.100 if signal is not None else fixed_buffer_s(arm, load, capacity_bps)
    sim_scenario = scenario(cca, load, seed, start_s, capacity_bps, kind)
    target = TARGET_SHARE * capacity_bps
    # a BBR DTN ignores the campus's shaping: its host's cap holds it (the control bench's
    # pi+dtn arm); shaping the campus alone pins u at 0 and every trial fails
    arm_loop = Arm("pi", dtn_actuator=cca == "bbr")
    loop = make_loop(
        arm_loop, cca, sim_scenario, target, load_gains(default_models_dir(), cca), None
    )
    settings = search_settings(capacity_bps, sim_scenario.sample_time_s, signal or "actuator")
    tuner = BufferTuner(settings) if signal is not None else None
    steady = kind == "steady"
    schedule = [(round(at / sim_scenario.sample_time_s), round(load * m)) for at, m in STEADY_LOADS]
    truth = _Truth(loop)
    streams = loop.sim.layout.n_dtn
    done: list[float] = []
    judged: list[float] = []
    searched: list[float] = []
    losses: list[float] = []
    path_losses: list[float] = []
    tap_losses: list[float] = []
    delays: list[float] = []
    campus_qd: list[float] = []
    buffers: list[float] = []
    rates: list[float] = []
    trial: list[bool] = []

    async def run() -> None:
        limit = STEADY_S if steady else int(LIMIT_S / sim_scenario.sample_time_s)
        for k in range(limit):
            if steady:
                for at, count in schedule:
                    if k == at:
                        loop.sim.set_campus_long_flows(count)
            step = await loop.step()
            done.extend(step.sample.dtn_done_s)
            if not steady and len(done) >= streams:
                return
            loss, delay = truth.read()
            measured, signals = step.sample.measured, step.sample.signals
            sample = tuner_sample(
                measured, signals, target, capacity_bps,
                saturated=step.decision is not None and step.decision.campus_starved_for_dtn,
                loss_signal=signal or "actuator",
                queue_loss=loss,
            )  # fmt: skip
            searching = tuner is not None and tuner.phase in SEARCHING
            if tuner is not None and k >= WARMUP:
                chosen = tuner.observe(sample)
                if chosen is not None:
                    loop.sim.set_bottleneck_buffer(chosen * capacity_bps / 8)
            if k < WARMUP:
                continue
            judged.append(settings.objective(loss, delay))
            searched.append(settings.objective(sample.loss, sample.mean_delay_s))
            losses.append(loss)
            path_losses.append(tuner_sample(measured, signals, target, capacity_bps, False).loss)
            tap_losses.append(signals.bottleneck_loss_ratio)
            delays.append(delay)
            campus_qd.append(signals.campus_mean_queuing_delay_s)
            buffers.append(loop.sim.bottleneck_buffer_bytes * 8 / capacity_bps)
            rates.append(step.sample.dtn_departed_bps)
            trial.append(searching)

    asyncio.run(run())
    fct = max(done) if len(done) >= streams else math.nan
    in_trials = [f for f, t in zip(judged, trial, strict=True) if t]
    held = [f for f, t in zip(judged, trial, strict=True) if not t]
    return BufferEpisode(
        arm=arm, cca=cca, load=load, seed=seed,
        objective=finite_mean(judged), loss=finite_mean(losses),
        campus_qd_ms=finite_mean(campus_qd) * 1e3,
        dtn_mrae=mrae([target] * len(rates), rates) if rates else math.nan,
        fct_s=fct if not steady else math.nan,
        buffer_ms=finite_mean(buffers) * 1e3, capacity_bps=capacity_bps, episode=kind,
        search_objective=finite_mean(searched), path_loss=finite_mean(path_losses),
        mean_qd_ms=finite_mean(delays) * 1e3,
        trial_share=len(in_trials) / len(trial) if trial else 0.0,
        trial_objective=finite_mean(in_trials), held_objective=finite_mean(held),
        min_window_ratio=min_window_ratio(rates, target),
        searches=tuner.searches if tuner is not None else 0,
        tap_border_loss=finite_mean(tap_losses),
    )  # fmt: skip


def min_window_ratio(rates_bps: Sequence[float], target_bps: float) -> float:
    """The lowest mean rate over ``target_bps`` across the consecutive 10-sample windows
    (a last, shorter window counts only if it has half the samples)."""
    ratios = []
    for start in range(0, len(rates_bps), STEADY_WINDOW):
        window = [r for r in rates_bps[start : start + STEADY_WINDOW] if math.isfinite(r)]
        if len(window) >= STEADY_WINDOW / 2:
            ratios.append(sum(window) / len(window) / target_bps)
    return min(ratios) if ratios else math.nan


def judge_feasible(episodes: Sequence[BufferEpisode]) -> list[BufferEpisode]:
    """Each episode with ``feasible`` set (ours, the module docstring): a transfer against
    its seed's 100 ms arm (unjudged, None, without one), a steady episode on its own
    windows."""
    baseline = {
        (e.episode, e.cca, e.load, e.seed, e.capacity_bps): e for e in episodes if e.arm == BASELINE
    }
    judged = []
    for e in episodes:
        if e.episode == "steady":
            ok: bool | None = e.min_window_ratio >= STEADY_FLOOR
        else:
            base = baseline.get((e.episode, e.cca, e.load, e.seed, e.capacity_bps))
            ok = None if base is None else (
                e.dtn_mrae <= base.dtn_mrae + FEASIBLE_MRAE_POINTS
                and e.fct_s <= FEASIBLE_FCT * base.fct_s
            )  # fmt: skip
        judged.append(replace(e, feasible=ok))
    return judged


def _one(job: tuple[str, str, int, int, float, Episode]) -> BufferEpisode:
    return episode(*job)


def run_all(
    seeds: Sequence[int],
    loads: Sequence[int] = LOADS,
    ccas: Sequence[str] = ("cubic", "bbr"),
    arms: Sequence[str] = DEFAULT_ARMS,
    capacity_bps: float = 1e9,
    workers: int = 2,
    progress: Callable[[str], None] = lambda _: None,
    kind: Episode = "transfer",
) -> list[BufferEpisode]:
    """Every (arm, cca, load, seed), in a process pool (results do not depend on it),
    judged for feasibility."""
    jobs = [
        (arm, cca, load, seed, capacity_bps, kind)
        for cca in ccas
        for load in loads
        for seed in seeds
        for arm in arms
    ]
    results: list[BufferEpisode] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for number, result in enumerate(pool.map(_one, jobs), start=1):
            results.append(result)
            if number % 10 == 0 or number == len(jobs):
                progress(f"{number}/{len(jobs)} episodes")
    return judge_feasible(results)


COLUMNS = columns(BufferEpisode)


def episodes_csv(episodes: Sequence[BufferEpisode]) -> str:
    return rows_csv(episodes, BufferEpisode)


def parse_episodes(text: str) -> list[BufferEpisode]:
    """episodes.csv back into episodes (a wrong header is a ValueError naming it)."""
    return parse_rows(text, BufferEpisode)
