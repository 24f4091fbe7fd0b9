"""P4BS's buffer search against fixed buffers on real TCP, beside the twin.

    sudo .venv/bin/python bench/lab_buffer.py [--runs 3] [--arms 100ms,p4bs,bdp,...] [--write]
    .venv/bin/python bench/lab_buffer.py --from-csv bench/results/lab_buffer/episodes.csv

The buffer bench's Cubic episode at N = 100 (`scidmz bench buffer`,
`scidmz.learn.buffer_bench`) on the lab: B = 1 Gb/s, 100 Cubic campus flows (10 ms), a
Cubic DTN (8 streams, 100 ms) sending 10 GB at R* = 600 Mb/s, the rate loop on `pi`. The
fixed arms (BDP, Stanford, Tiny, Bloated 200 ms, the 100 ms baseline) set the limit of the
bfifo under the lab's bottleneck tbf before the run (`TcBufferActuator`, the change the
search makes); `p4bs` runs `examples/lab/cubic-1G-buffer.yaml`, whose controller searches
and sets that bfifo itself (`spec.buffer`, tc); `p4bs-bottleneck` the same search reading
method 2 (`lossSignal: bottleneck`). Each run records ``LIMIT_S`` of traffic.

Per run, over the transfer after a 20 s warm-up, the twin's figures
(`scidmz.learn.buffer_lab`): f̄ (eq. 2 on the collector's loss and mean queuing delay),
the loss (method 1), the campus's mean queuing delay (collector), the DTN's MRAE and the
FCT (kernel: TCP_INFO's acknowledged bytes), the mean buffer in force. The twin runs the
same arms on seeds 1..runs. "Same direction" compares, for each fixed arm, the sign of
P4BS minus the arm on f̄ and on the campus queuing delay, lab against twin.

Needs root and ~runs × arms × 3.1 minutes (~56 min for 3 × 6); run it alone. Episodes go to
``--out``/episodes.csv as each run ends (``--from-csv`` renders a partial or whole set).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from lab_control import transferring
from scidmz.control.buffer_actuators import TcBufferActuator
from scidmz.control.quality import finite_mean
from scidmz.lab import runner, topology
from scidmz.lab.loop import load_loop, run_loop
from scidmz.lab.scenario import lab_scenario
from scidmz.learn.buffer_bench import (
    FIXED_ARMS,
    WARMUP,
    BufferEpisode,
    episodes_csv,
    fixed_buffer_s,
    judge_feasible,
    parse_episodes,
    run_all,
)
from scidmz.learn.buffer_lab import lab_episode

EXAMPLES = Path(__file__).parents[1] / "examples" / "lab"
FIXED_POLICY = EXAMPLES / "cubic-1G.yaml"
SEARCH_POLICY = EXAMPLES / "cubic-1G-buffer.yaml"
RESULTS = Path(__file__).parent / "results" / "lab_buffer"
LOAD = 100
LIMIT_S = 170.0
"""Traffic per run: the 10 GB take ~135 s at R*; an arm slower than this is 'unfinished'."""
LAB_ORDER = ("100ms", "p4bs", "p4bs-bottleneck", "bdp", "stanford", "bloated", "tiny")
SEARCHES = {"p4bs": None, "p4bs-bottleneck": "bottleneck"}
"""The searching arms and the ``lossSignal`` each sets (None: the example's default)."""
FIGURES = (
    ("objective", "f̄", "{:.3f}"),
    ("search_objective", "tap's f̄", "{:.3f}"),
    ("loss", "BR1 loss", "{:.2%}"),
    ("tap_border_loss", "method 2", "{:.2%}"),
    ("path_loss", "path loss", "{:.2%}"),
    ("campus_qd_ms", "campus QD ms", "{:.1f}"),
    ("dtn_mrae", "DTN MRAE", "{:.2%}"),
    ("fct_s", "FCT s", "{:.1f}"),
    ("buffer_ms", "buffer ms", "{:.1f}"),
    ("trial_share", "in trials", "{:.0%}"),
)
WITHIN = 0.10
"""Target: P4BS's f̄ within 10 % of the best feasible fixed arm's."""
CAMPUS_QD_MS = 30.0


async def set_lab_buffer(buffer_s: float, capacity_bps: float) -> float:
    """BR1's bfifo limit, as the search would set it; returns the bytes in force."""
    actuator = await TcBufferActuator.open(topology.BOTTLENECK[1], topology.BOTTLENECK[0])
    try:
        return await actuator.apply(buffer_s * capacity_bps / 8)
    finally:
        await actuator.close()


def search_policy(signal: str | None, out: Path) -> Path:
    """The searching example, reading ``signal`` (a copy under ``out``) or as shipped."""
    if signal is None:
        return SEARCH_POLICY
    anchor = "      tc: {nodeName: lab, interface: bn}\n"
    text = SEARCH_POLICY.read_text()
    if anchor not in text:
        raise SystemExit(f"{SEARCH_POLICY}: no buffer actuator line to add lossSignal after")
    path = out / f"{SEARCH_POLICY.stem}-{signal}.yaml"
    path.write_text(text.replace(anchor, f"{anchor}    lossSignal: {signal}\n"))
    return path


def run_lab(arms: Sequence[str], runs: int, out: Path) -> list[BufferEpisode]:
    scenario = lab_scenario(
        None,
        {
            "bottleneck.capacity_bps": "1Gbps",
            "dtn.congestion_control": "cubic",
            "campus.long_flows": LOAD,
        },
    )
    capacity = scenario.bottleneck.capacity_bps
    episodes: list[BufferEpisode] = []
    csv_path = out / "episodes.csv"
    out.mkdir(parents=True, exist_ok=True)
    runner.down()
    lab = runner.up(scenario, progress=print)
    try:
        for run in range(1, runs + 1):
            for arm in [a for a in LAB_ORDER if a in arms]:
                search = arm in SEARCHES
                fixed = None if search else fixed_buffer_s(arm, LOAD, capacity)
                in_force = asyncio.run(
                    set_lab_buffer(fixed if fixed is not None else 0.1, capacity)
                )
                print(f"[run {run}] {arm}: bfifo limit {in_force / 1e3:.0f} KB", flush=True)
                where = out / f"{arm}-{run}"
                summary = run_loop(
                    load_loop(
                        search_policy(SEARCHES[arm], out) if search else FIXED_POLICY, "pi"
                    ),
                    transferring(lab), LIMIT_S, where, warmup_s=WARMUP,
                )  # fmt: skip
                with (where / "samples.csv").open() as handle:
                    samples = list(csv.DictReader(handle))
                with (where / "truth.csv").open() as handle:
                    truth = list(csv.DictReader(handle))
                episode = lab_episode(
                    arm, run, samples, summary, WARMUP, LIMIT_S, fixed, truth=truth
                )
                episodes = judge_feasible([*episodes, episode])
                csv_path.write_text(episodes_csv(episodes))
                print(
                    f"[run {run}] {arm}: f̄ {episode.objective:.3f}, loss {episode.loss:.2%}, "
                    f"campus QD {episode.campus_qd_ms:.1f} ms, MRAE {episode.dtn_mrae:.2%}, "
                    f"FCT {episode.fct_s:.1f} s, buffer {episode.buffer_ms:.1f} ms",
                    flush=True,
                )
    finally:
        runner.down()
    return episodes


def _stats(values: Sequence[float], form: str) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "unfinished" if values else "—"
    text = form.format(statistics.mean(finite))
    if len(finite) > 1:
        text += " ± " + form.format(statistics.stdev(finite))
    if len(finite) < len(values):
        text += f" ({len(values) - len(finite)} unfinished)"
    return text


def _of(episodes: Sequence[BufferEpisode], arm: str, field: str) -> list[float]:
    return [float(getattr(e, field)) for e in episodes if e.arm == arm]


def direction(lab: Sequence[BufferEpisode], twin: Sequence[BufferEpisode], arm: str) -> str:
    """Whether P4BS minus ``arm`` has the same sign on the lab and on the twin, for f̄ and
    for the campus's queuing delay (means over runs and seeds)."""
    verdicts = []
    for field, name in (("objective", "f̄"), ("campus_qd_ms", "campus QD")):
        signs = []
        for episodes in (lab, twin):
            gap = finite_mean(_of(episodes, "p4bs", field)) - finite_mean(_of(episodes, arm, field))
            signs.append(math.copysign(1.0, gap) if math.isfinite(gap) and gap != 0 else 0.0)
        same = signs[0] == signs[1] and signs[0] != 0
        word = {1.0: "higher", -1.0: "lower", 0.0: "equal"}
        verdict = "same" if same else "DIFFERENT"
        verdicts.append(f"{name}: lab {word[signs[0]]}, twin {word[signs[1]]} — {verdict}")
    return "; ".join(verdicts)


def verdicts(lab: Sequence[BufferEpisode]) -> list[str]:
    """The lab's targets: P4BS's f̄ above the same run's 100 ms buffer's in every run, and
    within 10 % of the same run's best feasible fixed arm's (feasibility is judged per run
    against that run's 100 ms arm, as per seed on the twin), the campus's queuing delay at
    most 30 ms; and the DTN's MRAE against the 100 ms buffer's."""
    runs = sorted({e.seed for e in lab if e.arm == "p4bs"})
    by = {(e.arm, e.seed): e for e in lab}
    above = sum(
        (run_ := by.get(("100ms", run))) is not None
        and by[("p4bs", run)].objective > run_.objective
        for run in runs
    )
    within, met = [], 0
    for run in runs:
        feasible = [by[(a, run)] for a in FIXED_ARMS if (a, run) in by and by[(a, run)].feasible]
        best = max(feasible, key=lambda e: e.objective, default=None)
        if best is None:
            within.append(f"run {run}: no feasible fixed arm")
            continue
        p4bs_run = by[("p4bs", run)].objective
        gap = (p4bs_run - best.objective) / abs(best.objective) if best.objective else math.nan
        met += gap >= -WITHIN
        within.append(
            f"run {run}: {best.arm} {best.objective:.3f}, P4BS {p4bs_run:.3f} ({gap:+.0%})"
        )
    p4bs_f = finite_mean(_of(lab, "p4bs", "objective"))
    qd = finite_mean(_of(lab, "p4bs", "campus_qd_ms"))
    rise = finite_mean(_of(lab, "p4bs", "dtn_mrae")) - finite_mean(_of(lab, "100ms", "dtn_mrae"))
    lines = [
        f"- P4BS's f̄ above the same run's 100 ms buffer: {above}/{len(runs)} runs — "
        f"{_verdict(bool(runs) and above == len(runs))}.",
        f"- P4BS within {WITHIN:.0%} of the same run's best feasible fixed arm (ours, per run "
        f"as on the twin's seeds): {met}/{len(runs)} runs — "
        f"{_verdict(bool(runs) and met == len(runs))} ({'; '.join(within)}); P4BS's mean "
        f"f̄ {p4bs_f:.3f}.",
    ]
    lines += [
        f"- Campus queuing delay with P4BS: {qd:.1f} ms (target ≤ {CAMPUS_QD_MS:.0f}) — "
        f"{_verdict(qd <= CAMPUS_QD_MS)}.",
        f"- DTN MRAE, P4BS over the 100 ms buffer: {rise * 100:+.2f} points; P4BS feasible in "
        f"{sum(bool(e.feasible) for e in lab if e.arm == 'p4bs')}/{len(runs)} runs (ours: MRAE "
        "within +0.5 points and FCT within 2 % of the same run's 100 ms arm).",
    ]
    return lines


def signals(lab: Sequence[BufferEpisode]) -> list[str]:
    """Per run, BR1's own loss as the kernel counts it beside what each signal reads."""
    rows = sorted(lab, key=lambda e: (LAB_ORDER.index(e.arm), e.seed))
    lines = [
        "",
        "## The loss each signal reads on real TCP",
        "",
        "BR1's own loss by the kernel (bytes into BR1 less bytes out and queued) beside the "
        "tap's method 2 (`lossSignal: bottleneck`, the mean of the collector's samples) and "
        "the classes' retransmissions (`path`, method 1), after the warm-up.",
        "",
        "| run | BR1 loss, kernel | method 2 (tap) | path, method 1 (tap) |",
        "|---|---:|---:|---:|",
    ]
    for e in rows:
        lines.append(
            f"| {e.arm}-{e.seed} | {e.loss:.3%} | {e.tap_border_loss:.3%} | {e.path_loss:.3%} |"
        )
    pairs = [(e.loss, e.tap_border_loss) for e in rows if math.isfinite(e.tap_border_loss)]
    if pairs:
        error = statistics.mean(abs(t - k) for k, t in pairs)
        lines += [
            "",
            f"Method 2 against the kernel over {len(pairs)} runs: mean absolute error "
            f"{error * 100:.3f} points (ε_p, the search's loss threshold, is 0.25 %).",
        ]
    return lines


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render(lab: Sequence[BufferEpisode], twin: Sequence[BufferEpisode], command: str) -> str:
    arms = [a for a in LAB_ORDER if any(e.arm == a for e in lab)]
    runs = sorted({e.seed for e in lab})
    lines = [
        "# Buffer sizing on real TCP: P4BS against fixed buffers, beside the twin",
        "",
        f"`{command}`: the lab at 1 Gb/s, a 10 GB Cubic DTN transfer (8 streams, 100 ms) at "
        f"R* = 600 Mb/s, {LOAD} Cubic campus flows (10 ms), the rate loop on `pi`; BR1 is "
        "the lab's tbf with a bfifo child whose limit the arm (or P4BS's search, in the "
        f"controller) sets. Runs {runs[0] if runs else '—'}–{runs[-1] if runs else '—'} on the "
        "lab (mean ± sd), seeds 1–3 on the twin (`scidmz bench buffer --loads 100 --cca cubic "
        f"--seeds 3`). Figures after a {WARMUP} s warm-up and over the transfer. f̄ judges "
        "every arm from the ground truth (P4BS eq. 2 on BR1's own loss and mean queuing "
        "delay: the kernel's on the lab, the simulator's on the twin); the tap's f̄ is eq. 2 "
        "on the collector's method-1 loss and mean queuing delay; the campus queuing delay is "
        "the collector's; MRAE and FCT are the kernel's (lab) and the simulator's (twin). "
        "P4BS runs the product's defaults (`lossSignal` actuator: the bfifo's own drops, "
        "weighed in bytes by the size of the skbs it queues); `p4bs-bottleneck` reads method "
        f"2 instead. A transfer unfinished in {LIMIT_S:.0f} s is 'unfinished' (its other "
        "figures stand).",
        "",
        "| arm | " + " | ".join(f"{name}, lab | twin" for _, name, _ in FIGURES) + " |",
        "|---|" + "---:|---:|" * len(FIGURES),
    ]
    for arm in arms:
        cells = []
        for field, _, form in FIGURES:
            cells += [_stats(_of(lab, arm, field), form), _stats(_of(twin, arm, field), form)]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if "p4bs" in arms:
        lines += ["", "## P4BS against each fixed arm: same direction as the twin?", ""]
        lines += [f"- {arm}: {direction(lab, twin, arm)}" for arm in arms if arm not in SEARCHES]
        lines += ["", "## Targets", "", *verdicts(lab)]
    lines += signals(lab)
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", default=",".join(LAB_ORDER))
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-buffer"))
    parser.add_argument("--from-csv", type=Path, default=None, help="Render these lab episodes.")
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}/.")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(LAB_ORDER))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose from {', '.join(LAB_ORDER)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(f"twin: {len(arms)} arms × {args.runs} seeds", flush=True)
    twin = run_all(range(1, args.runs + 1), (LOAD,), ("cubic",), arms, progress=print)
    if args.from_csv is not None:
        lab = judge_feasible(parse_episodes(args.from_csv.read_text()))
    else:
        lab = run_lab(arms, args.runs, args.out)
    command = f"python bench/lab_buffer.py --runs {args.runs} --arms {args.arms}"
    report = render(lab, twin, command)
    print(report)
    if args.write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "episodes.csv").write_text(episodes_csv(lab))
        (RESULTS / "twin_episodes.csv").write_text(episodes_csv(twin))
        (RESULTS / "report.md").write_text(report)
        print(f"wrote {RESULTS}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
