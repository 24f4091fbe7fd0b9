"""The closed loop on real TCP beside the simulator's, for the same scenario (issue 12).

    .venv/bin/python bench/lab_control.py [--runs 5] [--strategies trivial,pi,mlc] [--write]

The scenario is the paper's testbed and the benchmark's constant-R* experiment
(`learn.evaluation.steady`): B = 1 Gb/s with a 100 ms drop-tail buffer, 100 Cubic campus
flows over 10 ms, a Cubic DTN with 8 streams over 100 ms, R* = 600 Mb/s, the shipped cubic
model and gains, 20 s of warm-up then 120 s measured. On the lab: `scidmz lab run` with
`examples/lab/cubic-1G.yaml` (target = the packet tap, the campus tc actuator on the lab's
shaper); MRAE from the kernel's delivered DTN rate (TCP_INFO) and from the collector's
measured one. On the simulator: the same controller code on `SimLoop`, seeds 1..runs.
Needs root and ~(runs × strategies × 2.7) minutes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from scidmz.control.settings import default_models_dir
from scidmz.lab import runner
from scidmz.lab.cli import lab_scenario
from scidmz.lab.loop import load_policy, run_loop
from scidmz.learn.evaluation import MEASURED, WARMUP, Arm, load_models, steady
from scidmz.learn.gains import load_gains

RESULTS = Path(__file__).parent / "results" / "lab_control.md"
POLICY = Path(__file__).parents[1] / "examples" / "lab" / "cubic-1G.yaml"


def mean_sd(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    sd = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{statistics.mean(finite):.2%} ± {sd:.2%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--strategies", default="trivial,pi,mlc")
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-control"))
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    models = load_models(default_models_dir())
    gains = load_gains(default_models_dir(), "cubic")
    results: dict[str, dict[str, list[float]]] = {}
    for strategy in strategies:
        sim = [
            steady(Arm(strategy), "cubic", seed, gains, models["cubic"])
            for seed in range(1, args.runs + 1)
        ]
        results[strategy] = {
            "sim_mrae": [e.mrae for e in sim],
            "sim_ratio": [e.rate_ratio for e in sim],
        }
        print(f"sim {strategy}: MRAE {mean_sd(results[strategy]['sim_mrae'])}")
    runner.down()
    scenario = lab_scenario(None, {"bottleneck.capacity_bps": "1Gbps"})
    lab = runner.up(scenario, progress=print)
    try:
        for run in range(1, args.runs + 1):
            for strategy in strategies:
                policy = load_policy(POLICY, strategy)
                summary = run_loop(
                    policy, lab, WARMUP + MEASURED, args.out / f"{strategy}-{run}",
                    warmup_s=WARMUP,
                )  # fmt: skip
                entry = results[strategy]
                entry.setdefault("lab_mrae", []).append(summary["mrae_delivered"])
                entry.setdefault("lab_mrae_measured", []).append(summary["mrae_measured"])
                entry.setdefault("lab_ratio", []).append(
                    summary["mean_dtn_delivered_bps"] / summary["target_rate_bps"]
                )
                entry.setdefault("lab_u", []).append(summary["mean_u_bps"])
                print(
                    f"lab {strategy} run {run}: DTN {summary['mean_dtn_delivered_bps'] / 1e6:.1f}"
                    f" Mb/s, MRAE {summary['mrae_delivered']:.2%} (collector "
                    f"{summary['mrae_measured']:.2%}), u {summary['mean_u_bps'] / 1e6:.0f} Mb/s"
                )
    finally:
        runner.down()
    report = render(results, args)
    print(report)
    if args.write:
        RESULTS.write_text(report)
        print(f"wrote {RESULTS}")
    return 0


def render(results: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> str:
    def ratio(values: list[float]) -> str:
        return f"{statistics.mean(values):.3f}" if values else "—"

    lines = [
        "# The closed loop on real TCP and on the simulator (issue 12)",
        "",
        f"`python bench/lab_control.py --runs {args.runs} --strategies {args.strategies}`: "
        "B = 1 Gb/s, 100 Cubic campus flows (10 ms), a Cubic DTN with 8 streams (100 ms), "
        f"R* = 600 Mb/s, {WARMUP} s warm-up + {MEASURED} s measured; mean ± sd over the runs "
        "(lab) or seeds (simulator). Lab MRAE from the kernel's delivered DTN rate; the "
        "collector's own in brackets. DTN/R* is the mean DTN rate over R*.",
        "",
        "| strategy | MRAE, lab | MRAE, simulator | DTN/R*, lab | DTN/R*, simulator "
        "| mean u, lab |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for strategy, entry in results.items():
        lab_u = entry.get("lab_u", [])
        lines.append(
            f"| {strategy} | {mean_sd(entry.get('lab_mrae', []))} "
            f"({mean_sd(entry.get('lab_mrae_measured', []))}) | {mean_sd(entry['sim_mrae'])} | "
            f"{ratio(entry.get('lab_ratio', []))} | {ratio(entry['sim_ratio'])} | "
            f"{statistics.mean(lab_u) / 1e6:.0f} Mb/s |"
            if lab_u
            else f"| {strategy} | — | {mean_sd(entry['sim_mrae'])} | — | "
            f"{ratio(entry['sim_ratio'])} | — |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
