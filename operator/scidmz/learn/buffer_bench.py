"""P4BS buffer sizing against fixed buffers on the twin, with the rate loop on
(``scidmz bench buffer``).

Each episode: a 10 GB DTN transfer (``cca``, 8 streams, 100 ms; 100 GB at 10 Gb/s) at
R* = 0.6 B beside ``load`` long campus flows (Cubic, 10 ms) on a 1 Gb/s link
(``capacity_bps`` for the Science DMZ case), the rate loop (``pi``, the pairing seed
003's spec asks for until the inverse model is identified across buffers; with the DTN
host's cap for a BBR DTN) holding the DTN at R*, and one buffer arm:

* ``bdp``: C·RTT, RTT the mean of the long flows' base RTTs (ours: the authors' code takes
  a measured SRTT; with two RTT populations the flows' mean is the closest reading);
* ``stanford``: BDP / √N, N every long flow (campus and DTN streams);
* ``tiny``: 30 full-size packets;
* ``bloated``: 200 ms at line rate; ``100ms``: the twin's default, the baseline;
* ``p4bs``: :class:`scidmz.control.buffer_search.BufferTuner` from the warm-up's end, on
  the collector's loss telemetry, setting the simulator's buffer.

Per episode, over the transfer after a 20 s warm-up: f̄ (the mean of eq. (2) on the
telemetry, the objective P4BS maximises), the loss (method 1, both classes), the campus's
mean queuing delay, the DTN's MRAE (eq. 3), the FCT, and the mean buffer in force.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from scidmz.control.buffer_search import BufferTuner, TunerSettings, tuner_sample
from scidmz.control.quality import finite_mean, mrae
from scidmz.control.settings import default_models_dir
from scidmz.learn.evaluation import Arm, make_loop
from scidmz.learn.gains import load_gains
from scidmz.learn.rows_csv import columns, parse_rows, rows_csv
from scidmz.netsim.scenario import Scenario

ARMS = ("bdp", "stanford", "tiny", "bloated", "100ms", "p4bs")
LOADS = (25, 50, 100, 250)
TARGET_BPS = 600e6
TRANSFER_BYTES = 10e9
"""At 1 Gb/s; the transfer scales with the capacity (100 GB at 10 Gb/s) so that every
episode lasts about as long as the search needs (~135 s at R* = 0.6 B)."""
WARMUP = 20
LIMIT_S = 900.0
DTN_STREAMS = 8
CAMPUS_RTT_S = 0.010
DTN_RTT_S = 0.100
TINY_PACKETS = 30
FRAME_BYTES = 1514
MAX_BUFFER_S = 0.2


@dataclass(frozen=True)
class BufferEpisode:
    """One row of episodes.csv."""

    arm: str
    cca: str
    load: int
    seed: int
    objective: float
    loss: float
    campus_qd_ms: float
    dtn_mrae: float
    fct_s: float
    buffer_ms: float
    capacity_bps: float = 1e9


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


def scenario(cca: str, load: int, seed: int, buffer_s: float, capacity_bps: float) -> Scenario:
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
                "transfer_bytes": TRANSFER_BYTES * capacity_bps / 1e9,
            },
            "campus": {"long_flows": load},
        }
    )


def episode(arm: str, cca: str, load: int, seed: int, capacity_bps: float = 1e9) -> BufferEpisode:
    """One episode (see the module docstring)."""
    start_s = 0.100 if arm == "p4bs" else fixed_buffer_s(arm, load, capacity_bps)
    sim_scenario = scenario(cca, load, seed, start_s, capacity_bps)
    target = TARGET_BPS * capacity_bps / 1e9
    # a BBR DTN ignores the campus's shaping: its host's cap holds it (the control bench's
    # pi+dtn arm); shaping the campus alone pins u at 0 and every trial fails
    arm_loop = Arm("pi", dtn_actuator=cca == "bbr")
    loop = make_loop(
        arm_loop, cca, sim_scenario, target, load_gains(default_models_dir(), cca), None
    )
    search = TunerSettings(capacity_bps=capacity_bps)
    tuner = BufferTuner(search) if arm == "p4bs" else None
    streams = loop.sim.layout.n_dtn
    done: list[float] = []
    scores: list[float] = []
    losses: list[float] = []
    campus_qd: list[float] = []
    buffers: list[float] = []
    targets: list[float] = []
    rates: list[float] = []

    async def run() -> None:
        for k in range(int(LIMIT_S / sim_scenario.sample_time_s)):
            step = await loop.step()
            done.extend(step.sample.dtn_done_s)
            if len(done) >= streams:
                return
            measured, signals = step.sample.measured, step.sample.signals
            sample = tuner_sample(
                measured, signals, target, capacity_bps,
                saturated=bool(step.decision and step.decision.output
                               and step.decision.output.saturated),
            )  # fmt: skip
            if tuner is not None and k >= WARMUP:
                chosen = tuner.observe(sample)
                if chosen is not None:
                    loop.sim.set_bottleneck_buffer(chosen * capacity_bps / 8)
            if k < WARMUP:
                continue
            scores.append(search.objective(sample.loss, sample.mean_delay_s))
            losses.append(sample.loss)
            campus_qd.append(signals.campus_mean_queuing_delay_s)
            buffers.append(loop.sim.bottleneck_buffer_bytes * 8 / capacity_bps)
            targets.append(target)
            rates.append(measured.dtn_rate_bps)

    asyncio.run(run())
    fct = max(done) if len(done) >= streams else math.nan
    return BufferEpisode(
        arm=arm, cca=cca, load=load, seed=seed,
        objective=finite_mean(scores), loss=finite_mean(losses),
        campus_qd_ms=finite_mean(campus_qd) * 1e3,
        dtn_mrae=mrae(targets, rates) if targets else math.nan, fct_s=fct,
        buffer_ms=finite_mean(buffers) * 1e3, capacity_bps=capacity_bps,
    )  # fmt: skip


def _one(job: tuple[str, str, int, int, float]) -> BufferEpisode:
    return episode(*job)


def run_all(
    seeds: Sequence[int],
    loads: Sequence[int] = LOADS,
    ccas: Sequence[str] = ("cubic", "bbr"),
    arms: Sequence[str] = ARMS,
    capacity_bps: float = 1e9,
    workers: int = 2,
    progress: Callable[[str], None] = lambda _: None,
) -> list[BufferEpisode]:
    """Every (arm, cca, load, seed), in a process pool (results do not depend on it)."""
    jobs = [
        (arm, cca, load, seed, capacity_bps)
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
    return results


COLUMNS = columns(BufferEpisode)


def episodes_csv(episodes: Sequence[BufferEpisode]) -> str:
    return rows_csv(episodes, BufferEpisode)


def parse_episodes(text: str) -> list[BufferEpisode]:
    """episodes.csv back into episodes (a wrong header is a ValueError naming it)."""
    return parse_rows(text, BufferEpisode)
