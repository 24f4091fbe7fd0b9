"""The closed loop on real TCP beside the simulator's, for the same scenarios.

    .venv/bin/python bench/lab_control.py [--runs 5] [--strategies trivial,pi,mlc]
        [--experiments steady,tracking,transfer] [--cca cubic|bbr] [--write]

The scenario is the paper's testbed: B = 1 Gb/s with a 100 ms drop-tail buffer, 100 Cubic
campus flows over 10 ms, a Cubic DTN with 8 streams over 100 ms, the shipped cubic model and
gains, 20 s of warm-up then 120 s measured. Three experiments, each the simulator
benchmark's (`learn.evaluation`):

- ``steady``: R* = 600 Mb/s throughout (`evaluation.steady`);
- ``tracking``: R*(t) uniform in [300, 800] Mb/s, a new level every 20 s, the schedule of
  seed = run (`evaluation.random_targets`, `evaluation.tracking`). The lab moves R* as a
  user would: the controller's config file is rewritten as the operator renders it and
  the running controller takes it (SIGHUP).
- ``transfer``: paper table 5 at N_s = 100 (`evaluation.transfer`): a 10 GB DTN transfer
  at R* = 600 Mb/s from the start of the flows (no warm-up), ``iperf3 -n`` over the 8
  streams; its FCT is when the kernel's acknowledged DTN bytes reach 10 GB
  (`lab.loop.transfer_fct_s`), the MRAE and DTN/R* over the seconds it ran, as the
  simulator's. A run gives the transfer ``TRANSFER_LIMIT_S`` of traffic.

``--cca bbr``: the DTN runs BBR and every strategy also drives the DTN cap (a tbf on the
DTN's egress, the controller's second filter; `examples/lab/bbr-1G.yaml`), with the shipped
bbr model and gains; the simulator runs the same arms (``trivial+dtn``, ``pi+dtn``,
``mlc+dtn``). Results go to `bench/results/lab_control_bbr.md`.

On the lab: `scidmz lab run` with `examples/lab/cubic-1G.yaml` (target = the packet tap,
the campus tc actuator on the lab's shaper); MRAE from the kernel's delivered DTN rate
(TCP_INFO) and from the collector's measured one. On the simulator: the same controller
code on `SimLoop`, seeds 1..runs. Needs root and ~(runs × strategies × experiments × 2.7)
minutes (a transfer run ~3.2); run it alone (a job beside it takes the cores the 1 Gb/s
lab needs).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

from scidmz.control.settings import default_models_dir
from scidmz.lab import runner
from scidmz.lab.loop import load_loop, run_loop
from scidmz.lab.scenario import lab_scenario
from scidmz.learn.evaluation import (
    MEASURED,
    TRANSFER_BYTES,
    WARMUP,
    Arm,
    load_models,
    random_targets,
    steady,
    tracking,
    transfer,
)
from scidmz.learn.gains import load_gains

RESULTS = {
    "cubic": Path(__file__).parent / "results" / "lab_control.md",
    "bbr": Path(__file__).parent / "results" / "lab_control_bbr.md",
}
POLICY = {
    "cubic": Path(__file__).parents[1] / "examples" / "lab" / "cubic-1G.yaml",
    "bbr": Path(__file__).parents[1] / "examples" / "lab" / "bbr-1G.yaml",
}
SIMULATED = {"steady": steady, "tracking": tracking, "transfer": transfer}
DESCRIBED = {
    "steady": "constant R* = 600 Mb/s",
    "tracking": "R*(t) uniform in [300, 800] Mb/s, a new level every 20 s (schedule of seed = run)",
    "transfer": "a 10 GB DTN transfer at R* = 600 Mb/s, 100 campus flows (table 5, N_s = 100)",
}
TRANSFER_LIMIT_S = 170.0
"""Traffic a transfer run records: the fixed split's 10 GB takes ~140 s on the twin."""

Results = dict[str, dict[str, dict[str, list[float]]]]
"""experiment → strategy → figure → one value per run."""


def arm(strategy: str, cca: str) -> Arm:
    """The arm a strategy runs as: BBR ignores the campus shaper, so with a BBR DTN every
    strategy also drives the DTN cap (as `examples/lab/bbr-1G.yaml` does)."""
    return Arm(strategy, dtn_actuator=cca == "bbr")


def mean_sd(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    sd = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{statistics.mean(finite):.2%} ± {sd:.2%}"


def schedule(experiment: str, run: int) -> list[float] | None:
    """R* per second of traffic (None: the policy's constant 600 Mb/s)."""
    return random_targets(run, WARMUP + MEASURED) if experiment == "tracking" else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--strategies", default="trivial,pi,mlc")
    parser.add_argument("--experiments", default="steady,tracking")
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-control"))
    parser.add_argument("--cca", choices=sorted(POLICY), default="cubic")
    parser.add_argument("--write", action="store_true")
    parser.add_argument(
        "--results", type=Path, default=None,
        help="Where --write puts the report (default bench/results/lab_control[_bbr].md).",
    )  # fmt: skip
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    experiments = args.experiments.split(",")
    unknown = sorted(set(experiments) - set(SIMULATED))
    if unknown:
        parser.error(f"--experiments: unknown {unknown}; choose from {sorted(SIMULATED)}")
    models = load_models(default_models_dir())
    gains = load_gains(default_models_dir(), args.cca)
    results: Results = {}
    for experiment in experiments:
        for strategy in strategies:
            sim = [
                SIMULATED[experiment](
                    arm(strategy, args.cca), args.cca, seed, gains, models[args.cca]
                )
                for seed in range(1, args.runs + 1)
            ]
            results.setdefault(experiment, {})[strategy] = {
                "sim_mrae": [e.mrae for e in sim],
                "sim_ratio": [e.rate_ratio for e in sim],
                "sim_fct": [e.fct_s for e in sim],
            }
            print(f"sim {experiment} {strategy}: MRAE {mean_sd([e.mrae for e in sim])}")
    runner.down()
    scenario = lab_scenario(
        None, {"bottleneck.capacity_bps": "1Gbps", "dtn.congestion_control": args.cca}
    )
    lab = runner.up(scenario, progress=print)
    try:
        for run in range(1, args.runs + 1):
            for experiment in experiments:
                for strategy in strategies:
                    finite = experiment == "transfer"
                    summary = run_loop(
                        load_loop(POLICY[args.cca], strategy),
                        transferring(lab) if finite else lab,
                        TRANSFER_LIMIT_S if finite else WARMUP + MEASURED,
                        args.out / f"{experiment}-{strategy}-{run}",
                        warmup_s=0.0 if finite else WARMUP,
                        targets_bps=schedule(experiment, run),
                    )
                    entry = results[experiment][strategy]
                    entry.setdefault("lab_fct", []).append(summary["fct_s"])
                    entry.setdefault("lab_mrae", []).append(summary["mrae_delivered"])
                    entry.setdefault("lab_mrae_measured", []).append(summary["mrae_measured"])
                    entry.setdefault("lab_ratio", []).append(
                        summary["mean_dtn_delivered_bps"] / summary["target_rate_bps"]
                    )
                    entry.setdefault("lab_u", []).append(summary["mean_u_bps"])
                    print(
                        f"lab {experiment} {strategy} run {run}: DTN "
                        f"{summary['mean_dtn_delivered_bps'] / 1e6:.1f} Mb/s (R* "
                        f"{summary['target_rate_bps'] / 1e6:.0f}), MRAE "
                        f"{summary['mrae_delivered']:.2%} (collector "
                        f"{summary['mrae_measured']:.2%}), u {summary['mean_u_bps'] / 1e6:.0f} Mb/s"
                        + (f", FCT {summary['fct_s']:.2f} s" if finite else "")
                    )
    finally:
        runner.down()
    report = render(results, args)
    print(report)
    if args.write:
        path = args.results or RESULTS[args.cca]
        path.write_text(report)
        print(f"wrote {path}")
    return 0


def fct(
    values: list[float], strategies: dict[str, dict[str, list[float]]], key: str = "lab_fct"
) -> str:
    """Mean ± sd of the FCTs, then the change of the mean against trivial's (same key)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—" if not values else f"unfinished ({len(values)})"
    sd = statistics.stdev(finite) if len(finite) > 1 else 0.0
    text = f"{statistics.mean(finite):.2f} ± {sd:.2f} s"
    if finite and any(not math.isfinite(v) for v in values):
        text += f" ({len(values) - len(finite)} unfinished)"
    baseline = [v for v in strategies.get("trivial", {}).get(key, []) if math.isfinite(v)]
    if finite and baseline and values is not strategies.get("trivial", {}).get(key):
        text += f" ({statistics.mean(finite) / statistics.mean(baseline) - 1:+.1%})"
    return text


def transferring(lab: runner.Lab) -> runner.Lab:
    """The lab with its DTN sending ``TRANSFER_BYTES`` in all (pooled, as iperf3 -n)."""
    dtn = lab.scenario.dtn.model_copy(update={"transfer_bytes": TRANSFER_BYTES})
    return dataclasses.replace(lab, scenario=lab.scenario.model_copy(update={"dtn": dtn}))


def paired_wins(lab: list[float], baseline: list[float]) -> str:
    """How many runs beat the baseline's run on the same schedule (lower MRAE)."""
    pairs = [(a, b) for a, b in zip(lab, baseline, strict=False) if math.isfinite(a + b)]
    return f"{sum(a < b for a, b in pairs)}/{len(pairs)}" if pairs else "—"


def render(results: Results, args: argparse.Namespace) -> str:
    def ratio(values: list[float]) -> str:
        return f"{statistics.mean(values):.3f}" if values else "—"

    dtn = (
        "a BBR DTN with 8 streams (100 ms), every strategy also driving the DTN cap "
        "(the `+dtn` arms: a tbf on the DTN's egress)"
        if args.cca == "bbr"
        else "a Cubic DTN with 8 streams (100 ms)"
    )
    lines = [
        "# The closed loop on real TCP and on the simulator",
        "",
        f"`python bench/lab_control.py --runs {args.runs} --strategies {args.strategies} "
        f"--experiments {args.experiments} --cca {args.cca}`: B = 1 Gb/s, 100 Cubic campus "
        f"flows (10 ms), {dtn}, {WARMUP} s warm-up + {MEASURED} s measured; "
        "mean ± sd over the runs (lab) or seeds (simulator). Lab MRAE from the kernel's "
        "delivered DTN rate; the collector's own in brackets. DTN/R* is the mean DTN rate "
        "over the mean R*. 'Beats trivial' ('beats pi') counts the lab runs whose MRAE is "
        "below trivial's (pi's) run on the same schedule.",
    ]
    for experiment, strategies in results.items():
        lines += [
            "",
            f"## {experiment}: {DESCRIBED[experiment]}",
            "",
            "| strategy | MRAE, lab | MRAE, simulator | beats trivial, lab | beats pi, lab "
            "| DTN/R*, lab | DTN/R*, simulator | mean u, lab |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        if experiment == "transfer":
            lines[-2] = lines[-2].replace(
                "| mean u, lab |", "| mean u, lab | FCT, lab | FCT, simulator |"
            )
            lines[-1] += "---:|---:|"
        baselines = {
            name: strategies.get(name, {}).get("lab_mrae", []) for name in ("trivial", "pi")
        }
        for strategy, entry in strategies.items():
            lab_u = entry.get("lab_u", [])
            wins = [
                paired_wins(entry.get("lab_mrae", []), baselines[name])
                if strategy != name and baselines[name]
                else ""
                for name in ("trivial", "pi")
            ]
            lines.append(
                f"| {arm(strategy, args.cca).name} | {mean_sd(entry.get('lab_mrae', []))} "
                f"({mean_sd(entry.get('lab_mrae_measured', []))}) | {mean_sd(entry['sim_mrae'])} "
                f"| {wins[0]} | {wins[1]} | {ratio(entry.get('lab_ratio', []))} "
                f"| {ratio(entry['sim_ratio'])} | "
                + (f"{statistics.mean(lab_u) / 1e6:.0f} Mb/s |" if lab_u else "— |")
                + (
                    f" {fct(entry.get('lab_fct', []), strategies)} "
                    f"| {fct(entry['sim_fct'], strategies, 'sim_fct')} |"
                    if experiment == "transfer"
                    else ""
                )
            )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
