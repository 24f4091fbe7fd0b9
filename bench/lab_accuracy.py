"""The collector on real packets against the kernel's ground truth.

    .venv/bin/python bench/lab_accuracy.py [--bottleneck 300Mbps] [--campus-flows 52]
        [--dtn-streams 8] [--duration 105] [--warmup 45] [--write [--report PATH]]

Brings up the lab (needs root), runs `scidmz target --source lab` + collector + a controller
whose actuator is dryRun (so u stays at B and the flows share the link on their own), and
compares the collector's steady-state means (after a 45 s warm-up) with the kernel's:
offered rate per class (the border's rx counters), per-flow srtt (TCP_INFO; the campus one
less its wait in the campus shaper, which happens before the tap), the bottleneck's
backlog / B, and the flows that sent ≥ C_TH segments per second. It also reports what the
tap costs (CPU of the target and its reader) and the capture's kernel drop counters.

The warm-up is as long as the slowest estimator takes to settle: the campus RTT is
algorithm 4's EWMA (α = 0.875 per T, an 8 s time constant at T = 1 s) started from its first
mean, taken while the bottleneck queue is still filling (~80 ms under the full-queue RTT).
At 15 s it is still ~17 ms under the kernel's srtt, from ~30–40 s it stays within 2 ms; the
report gives that second, so the transient is shown, not hidden.

Targets: rates within 2 %, RTTs within 2 ms, queuing delay within 1 ms, active flows exact;
no capture loss at 300 Mb/s with 60 flows. Loss telemetry (P4BS method 1): each class's
resent / sent data packets within 10 % (relative) or 0.02 percentage points of the kernel's
(``ss``: retrans / data_segs_out over the same seconds); the mean queuing delays within 1 ms
of the backlog meter's time mean; method 2 (BR1's own loss) beside the kernel's byte
accounting of BR1 (bytes received on bc/bd, less bytes sent on bn and the backlog's growth).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Any

from scidmz.api.link import Limits
from scidmz.api.units import parse_rate
from scidmz.lab import runner
from scidmz.lab.loop import load_loop, run_loop, settled_at
from scidmz.lab.scenario import lab_scenario

RESULTS = Path(__file__).parent / "results" / "lab_accuracy.md"
POLICY = Path(__file__).parents[1] / "examples" / "lab" / "cubic-300M.yaml"
TARGETS = {
    "dtn_rate_bps": ("relative", 0.02),
    "campus_rate_bps": ("relative", 0.02),
    "dtn_rtt_s": ("absolute", 0.002),
    "campus_rtt_s": ("absolute", 0.002),
    "dtn_queuing_delay_s": ("absolute", 0.001),
    "campus_queuing_delay_s": ("absolute", 0.001),
    "active_flows": ("absolute", 0.0),
    "dtn_retransmission_ratio": ("loss", 0.10),
    "campus_retransmission_ratio": ("loss", 0.10),
    "bottleneck_loss_ratio": ("report", 0.0),
    "dtn_mean_queuing_delay_s": ("absolute", 0.001),
    "campus_mean_queuing_delay_s": ("absolute", 0.001),
}
LOSS_POINTS = 0.0002
"""A loss ratio is also within its target 0.02 percentage points from the kernel's (a
relative error means little on a ratio near 0)."""


def within(key: str, collector: float, kernel: float) -> bool:
    kind, limit = TARGETS[key]
    if kind == "relative":
        return abs(collector - kernel) <= limit * kernel
    if kind == "loss":
        return abs(collector - kernel) <= max(limit * kernel, LOSS_POINTS) + 1e-12
    if kind == "report":
        return True
    return abs(collector - kernel) <= limit + 1e-9


def verdict(key: str, collector: float, kernel: float) -> tuple[str, str]:
    kind, _ = TARGETS[key]
    if not (math.isfinite(collector) and math.isfinite(kernel)):
        return "—", "no data"
    status = "met" if within(key, collector, kernel) else "MISSED"
    if kind == "report":
        status = "reported"
    if kind == "relative":
        return f"{abs(collector - kernel) / kernel:.2%}", status
    if kind in ("loss", "report"):
        relative = f" ({abs(collector - kernel) / kernel:.0%})" if kernel > 0 else ""
        return f"{abs(collector - kernel) * 100:.3f} pts{relative}", status
    error = abs(collector - kernel)
    return (f"{error:.1f}" if key == "active_flows" else f"{error * 1e3:.2f} ms"), status


def fmt(key: str, value: float) -> str:
    if key.endswith("_bps"):
        return f"{value / 1e6:.2f} Mb/s"
    if key.endswith("_s"):
        return f"{value * 1e3:.2f} ms"
    if key.endswith("_ratio"):
        return f"{value:.3%}"
    return f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bottleneck", default="300Mbps")
    parser.add_argument("--campus-flows", type=int, default=52)
    parser.add_argument("--dtn-streams", type=int, default=8)
    parser.add_argument("--duration", type=float, default=105.0)
    parser.add_argument("--warmup", type=float, default=45.0, help="seconds left out of the means")
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-accuracy"))
    parser.add_argument("--no-offloads", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--report", type=Path, default=RESULTS, help="where --write puts the table")
    args = parser.parse_args()
    runner.down()
    scenario = lab_scenario(
        None,
        {
            "bottleneck.capacity_bps": args.bottleneck,
            "campus.long_flows": args.campus_flows,
            "dtn.streams": args.dtn_streams,
        },
    )
    example = load_loop(POLICY)
    loop = example.with_link(
        capacity=args.bottleneck,
        actuator=example.link.actuator.model_copy(update={"type": "dryRun", "tc": None}),
        controller=example.link.controller.model_copy(update={"limits": Limits()}),
    ).retargeted(parse_rate(args.bottleneck) / 2)
    lab = runner.up(scenario, offloads=not args.no_offloads, progress=print)
    try:
        summary = run_loop(loop, lab, args.duration, args.out, progress=print, warmup_s=args.warmup)
    finally:
        runner.down()
    # the last second is the flows' end, which the kernel sees before the collector's T does
    samples = [
        row
        for row in csv.DictReader((args.out / "samples.csv").open())
        if float(row["t_s"]) <= args.duration - 1
    ]
    truth = list(csv.DictReader((args.out / "truth.csv").open()))
    settled = settled_at(samples, truth, "campus_rtt_s", lambda c, k: within("campus_rtt_s", c, k))
    report = render(summary, settled, args)
    print(report)
    if args.write:
        args.report.write_text(report)
        print(f"wrote {args.report}")
    return 0


def render(summary: dict[str, Any], campus_rtt_settled_s: float, args: argparse.Namespace) -> str:
    flows = args.campus_flows + args.dtn_streams
    lines = [
        "# The collector on real packets vs the kernel",
        "",
        f"`python bench/lab_accuracy.py --bottleneck {args.bottleneck} --campus-flows "
        f"{args.campus_flows} --dtn-streams {args.dtn_streams} --duration {args.duration:g} "
        f"--warmup {args.warmup:g}`"
        f"{' --no-offloads' if args.no_offloads else ''}: the lab at {args.bottleneck}, "
        f"{flows} long flows (Cubic, campus 10 ms, DTN 100 ms), u = B (dryRun), steady-state "
        f"means after {args.warmup:g} s. Kernel side: border rx counters (offered rate), "
        "TCP_INFO srtt (campus: less the campus shaper's wait, which is before the tap), "
        "tc backlog / B, flows with ≥ C_TH segments in the second.",
        "",
        "| variable | collector | kernel | difference | target |",
        "|---|---:|---:|---:|---|",
    ]
    for key, pair in summary["accuracy"].items():
        difference, status = verdict(key, pair["collector"], pair["kernel"])
        kind, limit = TARGETS[key]
        target = {
            "relative": f"≤ {limit:.0%}",
            "loss": f"≤ {limit:.0%} or {LOSS_POINTS * 100:g} pts",
            "report": "none (kernel: rx bytes into BR1 − tx out − backlog growth)",
        }.get(kind, "exact" if key == "active_flows" else f"≤ {limit * 1e3:g} ms")
        lines.append(
            f"| {key} | {fmt(key, pair['collector'])} | {fmt(key, pair['kernel'])} | "
            f"{difference} | {target} — {status} |"
        )
    capture = summary["capture"]
    drops = sum(c["kernel_drops"] for c in capture.values())
    frames = sum(c["frames"] for c in capture.values())
    settled = (
        "never" if math.isnan(campus_rtt_settled_s) else f"from {campus_rtt_settled_s:.0f} s on"
    )
    lines += [
        "",
        "The campus RTT is algorithm 4's EWMA (α = 0.875 per T) started from its first mean, "
        "taken while the queue still fills; second by second it is within 2 ms of the "
        f"kernel's {settled} (the warm-up must cover this).",
        "",
        f"Capture: {frames} frames on {len(capture)} interfaces, {drops} dropped by the kernel "
        f"({'met' if drops == 0 else 'MISSED'}: no loss). The tap (target + reader) used "
        f"{summary['tap_cpu_cores']:.0%} of a core.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
