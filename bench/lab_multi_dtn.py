"""Several DTNs on one link on real TCP, beside the twin (`scidmz bench multi-dtn`).

    sudo .venv/bin/python bench/lab_multi_dtn.py [--runs 3] [--arms static,pi,mlc]
        [--cases capped,bbr-uncapped] [--quick] [--out DIR] [--write]
    .venv/bin/python bench/lab_multi_dtn.py --from-csv bench/results/lab_multi_dtn/episodes.csv

The twin bench's episode (`scidmz.learn.multi_dtn_bench`) on the lab at 1 Gb/s: 100 Cubic
campus flows (10 ms); dtn-1 Cubic 100 ms at 300 Mb/s, dtn-2 Cubic 50 ms at 200 Mb/s (its
policy admitted and its transfer sent from 60 s to 120 s), dtn-3 BBR 80 ms at 150 Mb/s;
8 streams each, each DTN host its own namespace, RTT, receiver and cap. The loop is
`examples/lab/three-dtns-1G.yaml` as the operator renders it, run by `scidmz lab run`'s
machinery (`scidmz.lab.loop.run_loop`): dtn-2's policy comes and goes by a config rewrite
and SIGHUP, as the operator's live config does. Arms: `static` (strategy trivial: campus tbf
at B − ΣR*, each shaped DTN capped at its R*), `pi`, `mlc` on the Cubic model (the link's
`controller.model`; the twin's choice). Case `bbr-uncapped` takes dtn-3's shaper away.

Figures per DTN per episode, as the twin's (rates are the kernel's: TCP_INFO's acknowledged
bytes per second on each host's sockets): rate and MRAE over its own active time after the
warm-up, the sum ratio, utilisation (BR1's bytes sent / B), the campus's mean queuing delay
(BR1's backlog meter), the worst disturbance; and the collector's per-host accuracy: its
per-host rate beside the kernel's bytes on that host's link into BR1, the same seconds
(target: within 2 %).

Needs root, a quiet machine and ~runs × arms × cases × 3.4 minutes; run it alone.
``--quick``: 60 s episodes (dtn-2 from 20 s to 40 s, 10 s warm-up), one run, a smoke test.
Episodes go to ``--out``/episodes.csv as each ends; ``--from-csv`` renders a set again.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from scidmz.api.loop_file import LoopFile
from scidmz.lab import runner
from scidmz.lab.loop import load_loop, run_loop
from scidmz.learn.multi_dtn_bench import (
    ARMS,
    CAPACITY_BPS,
    CASES,
    DTNS,
    EPISODE_S,
    LINK_MODEL,
    WARMUP_S,
    BenchDtn,
    MultiDtnEpisode,
    dtn_rows,
    scenario,
)
from scidmz.learn.multi_dtn_bench import admitted_at as admitted
from scidmz.learn.multi_dtn_report import markdown
from scidmz.learn.rows_csv import parse_rows, rows_csv
from scidmz.netsim.scenario import Scenario

LOOP = Path(__file__).parents[1] / "examples" / "lab" / "three-dtns-1G.yaml"
RESULTS = Path(__file__).parent / "results" / "lab_multi_dtn"
TWIN = Path(__file__).parent / "results" / "multi_dtn" / "episodes.csv"
ACCURACY_TARGET = 0.02


@dataclass(frozen=True)
class LabMultiDtnEpisode(MultiDtnEpisode):
    """The twin's row and the collector's per-host accuracy."""

    collector_mbps: float
    kernel_offered_mbps: float
    rate_error: float


@dataclass(frozen=True)
class Timing:
    episode_s: int
    warmup_s: int
    dtns: tuple[BenchDtn, ...]


FULL = Timing(EPISODE_S, WARMUP_S, DTNS)
QUICK = Timing(
    60, 10, tuple(BenchDtn(d.name, d.cca, d.rtt_s, d.target_bps,
                           d.start_s / 3, d.stop_s / 3 if d.stop_s else None) for d in DTNS),
)  # fmt: skip


def lab_scenario(timing: Timing) -> Scenario:
    return scenario(1, timing.dtns)


def arm_loop(arm: str, case: str) -> LoopFile:
    """The example link as the arm and case set it (the administrator's choices)."""
    loop = load_loop(LOOP)
    controller = loop.link.controller.model_copy(
        update={"strategy": "trivial" if arm == "static" else arm}
        | ({"model": LINK_MODEL} if arm == "mlc" else {})
    )
    hosts = [
        h.model_copy(update={"shaper": None}) if case == "bbr-uncapped" and h.name == "dtn-3" else h
        for h in loop.link.dtn_hosts
    ]
    return loop.with_link(controller=controller, dtn_hosts=hosts)


def admitted_at(timing: Timing, t_s: float) -> list[BenchDtn]:
    return admitted(t_s, timing.dtns)


def episode_rows(
    arm: str, case: str, run: int, timing: Timing, truth: list[dict[str, str]],
    hosts: dict[str, dict[str, float]],
) -> list[LabMultiDtnEpisode]:  # fmt: skip
    """One episode's rows from its truth.csv and the run's per-host accuracy."""
    delivered = {d.name: [float(r[f"host_{d.name}_rate_bps"]) for r in truth] for d in timing.dtns}
    sums, used, queue = [], [], []
    for k, row in enumerate(truth):
        t_s = float(row["t_s"])
        if t_s <= timing.warmup_s:
            continue
        held = admitted_at(timing, t_s - 1)
        sums.append(sum(delivered[d.name][k] for d in held) / sum(d.target_bps for d in held))
        used.append(float(row["bottleneck_sent_rate_bps"]) / CAPACITY_BPS)
        queue.append(float(row["queuing_delay_mean_s"]))
    twin_rows = dtn_rows(
        arm, case, run, timing.dtns, timing.episode_s, timing.warmup_s, delivered,
        (sums, used, queue),
    )  # fmt: skip
    return [
        LabMultiDtnEpisode(
            **asdict(row),
            collector_mbps=hosts.get(row.dtn, {}).get("collector_rate_bps", math.nan) / 1e6,
            kernel_offered_mbps=(
                hosts.get(row.dtn, {}).get("kernel_offered_rate_bps", math.nan) / 1e6
            ),
            rate_error=hosts.get(row.dtn, {}).get("rate_error", math.nan),
        )
        for row in twin_rows
    ]


def run_lab(
    arms: Sequence[str], cases: Sequence[str], runs: int, timing: Timing, out: Path
) -> list[LabMultiDtnEpisode]:
    episodes: list[LabMultiDtnEpisode] = []
    out.mkdir(parents=True, exist_ok=True)
    scenario = lab_scenario(timing)
    for case in cases:
        for run in range(1, runs + 1):
            for arm in arms:
                where = out / f"{case}-{arm}-{run}"
                print(f"== {case} {arm} run {run}", flush=True)
                loop = arm_loop(arm, case)
                # one plan per set of admitted hosts: a new plan is a config rewrite + SIGHUP
                sets: dict[frozenset[str], LoopFile] = {}
                plans = []
                for t in range(timing.episode_s + 1):
                    on = frozenset(d.name for d in admitted_at(timing, float(t)))
                    plans.append(sets.setdefault(on, loop.with_policies_on(on)))
                runner.down()
                lab = runner.up(scenario, state_dir=where / "lab-state")
                try:
                    summary = run_loop(
                        plans[0], lab, float(timing.episode_s), where, progress=print,
                        warmup_s=float(timing.warmup_s), plans=plans,
                    )  # fmt: skip
                finally:
                    runner.down(where / "lab-state")
                truth = list(csv.DictReader((where / "truth.csv").open()))
                episodes += episode_rows(arm, case, run, timing, truth, summary["hosts"])
                (out / "episodes.csv").write_text(rows_csv(episodes, LabMultiDtnEpisode))
    return episodes


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


def accuracy_lines(episodes: Sequence[LabMultiDtnEpisode]) -> list[str]:
    lines = [
        "## The collector per DTN host against the kernel",
        "",
        "Each host's rate as the collector measured it (its own class) beside the bytes the "
        "kernel counted on that host's link into BR1, the same seconds (the host's active "
        "time after the warm-up). Target: within 2 %.",
        "",
        "| case | DTN | episodes | collector Mb/s | kernel Mb/s | mean error | worst error "
        "| verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for case, d in ((c, d) for c in CASES for d in DTNS):
        mine = [
            e for e in episodes
            if e.case == case and e.dtn == d.name and math.isfinite(e.rate_error)
        ]  # fmt: skip
        if not mine:
            continue
        worst = max(e.rate_error for e in mine)
        lines.append(
            f"| {case} | {d.name} ({d.cca}) | {len(mine)} "
            f"| {_mean([e.collector_mbps for e in mine]):.1f} "
            f"| {_mean([e.kernel_offered_mbps for e in mine]):.1f} "
            f"| {_mean([e.rate_error for e in mine]):.2%} | {worst:.2%} "
            f"| {'met' if worst <= ACCURACY_TARGET else '**missed**'} |"
        )
    return [*lines, ""]


def direction_lines(lab: Sequence[MultiDtnEpisode], twin: Sequence[MultiDtnEpisode]) -> list[str]:
    """For pi and mlc against static, per DTN: the sign of the MRAE difference (and of the
    sum ratio's distance from 1), lab beside twin."""
    lines = [
        "## Same direction as the twin (against `static`)",
        "",
        "| case | arm | figure | lab | twin | same |",
        "|---|---|---|---:|---:|---|",
    ]

    def mean_of(rows: Sequence[MultiDtnEpisode], case: str, arm: str, name: str | None,
                field: str) -> float:  # fmt: skip
        return _mean([getattr(e, field) for e in rows if e.case == case and e.arm == arm
                      and (name is None or e.dtn == name)])  # fmt: skip

    for case in CASES:
        for arm in ("pi", "mlc"):
            for name in [*(d.name for d in DTNS), None]:
                field = "mrae" if name else "sum_ratio"
                label = f"{name} MRAE" if name else "|sum ratio − 1|"

                def delta(rows: Sequence[MultiDtnEpisode]) -> float:
                    a = mean_of(rows, case, arm, name, field)  # noqa: B023
                    b = mean_of(rows, case, "static", name, field)  # noqa: B023
                    return (abs(a - 1) - abs(b - 1)) if field == "sum_ratio" else a - b  # noqa: B023

                here, there = delta(lab), delta(twin)
                if not (math.isfinite(here) and math.isfinite(there)):
                    continue
                same = "yes" if (here < 0) == (there < 0) else "**no**"
                lines.append(f"| {case} | {arm} | {label} | {here:+.3f} | {there:+.3f} | {same} |")
    return [*lines, ""]


def render(lab: Sequence[LabMultiDtnEpisode], command: str) -> str:
    twin = parse_rows(TWIN.read_text(), MultiDtnEpisode) if TWIN.exists() else []
    text = markdown(lab, command, where="lab, real TCP at 1 Gb/s", runs="runs")
    return "\n".join([text, *accuracy_lines(lab), *direction_lines(lab, twin)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--quick", action="store_true", help="60 s episodes, one run.")
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-multi-dtn"))
    parser.add_argument("--from-csv", type=Path, default=None, help="Render these episodes.")
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}/.")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(arms) - set(ARMS)) + sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown arm or case: {', '.join(unknown)} (arms {ARMS}, cases {CASES})")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.from_csv is not None:
        episodes = parse_rows(args.from_csv.read_text(), LabMultiDtnEpisode)
    else:
        timing = QUICK if args.quick else FULL
        episodes = run_lab(arms, cases, 1 if args.quick else args.runs, timing, args.out)
    command = "sudo .venv/bin/python bench/lab_multi_dtn.py " + " ".join(sys.argv[1:])
    report = render(episodes, command.strip())
    print(report)
    (args.out / "report.md").parent.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(report)
    if args.write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "episodes.csv").write_text(rows_csv(episodes, LabMultiDtnEpisode))
        (RESULTS / "report.md").write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
