"""BBR's bandwidth estimate against what it delivers, on real Linux TCP and in the twin.

    scidmz lab record --matrix examples/lab/matrix.yaml --out DIR       # root, ~20 min
    .venv/bin/python bench/bbr_bandwidth.py --dataset DIR [--seeds 3] [--write]

A paced sender in a full drop-tail FIFO loses what it sends beyond the share it gets
through, and BBR v1 paces at its max-filtered bandwidth estimate (times a gain cycle that
averages 1). So for each BBR case of a ``scidmz lab record`` dataset, over the seconds after
the first 10: the DTN's delivered rate (goodput), the sum of its streams' bandwidth
estimates (lab: ``ss``'s ``bbr:(bw:…)`` in flows.csv, recorded from 2026-11-25's third
session on; twin: its streams' BTL_BW), their ratio, the streams' mean min-RTT estimate and
the DTN's losses per segment delivered. The twin's BBR DTN loses ~1.5× what
Linux's does; this says whether its estimate runs further above what it delivers.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from netsim_vs_lab import WINDOW_S, case_mss, case_run, lab_rows, mean_run, sim_rows

RESULTS = Path(__file__).parent / "results" / "bbr_bandwidth.md"
ACTIVE_SEGMENTS = 10
"""A stream counts in a second if it got this many segments acknowledged (iperf3's control
connection, also BBR, does not)."""


@dataclass(frozen=True)
class Estimate:
    delivered_bps: float
    bandwidth_estimate_bps: float
    min_rtt_s: float
    loss_per_segment: float

    @property
    def ratio(self) -> float:
        return self.bandwidth_estimate_bps / self.delivered_bps


def lab_estimate(case_dir: Path, case: dict[str, Any]) -> Estimate | None:
    """The lab's figures for one case, or None if its flows.csv has no BBR state."""
    flows = case_dir / "flows.csv.gz"
    if not flows.exists():
        return None
    with gzip.open(flows, "rt", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["class"] == "dtn"]
    if not rows or "bbr_bandwidth_bps" not in rows[0]:
        return None
    mss = case_mss(case)
    acked: dict[str, float] = {}
    per_second: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        t_s, flow = float(row["t_s"]), row["flow"]
        got = float(row["bytes_acked"]) - acked.get(flow, 0.0)
        acked[flow] = float(row["bytes_acked"])
        if t_s > WINDOW_S and got >= ACTIVE_SEGMENTS * mss:
            per_second[t_s].append((float(row["bbr_bandwidth_bps"]), float(row["bbr_min_rtt_s"])))
    truth = lab_rows(case_dir)
    return Estimate(
        float(np.mean([r["dtn_rate_bps"] for r in truth if r["t_s"] > WINDOW_S])),
        float(np.mean([sum(bw for bw, _ in streams) for streams in per_second.values()])),
        float(np.mean([rtt for streams in per_second.values() for _, rtt in streams])),
        case_run(truth, case).dtn_loss_per_segment,
    )


def twin_estimate(case: dict[str, Any], seeds: int) -> Estimate:
    """The twin's figures for one case, the mean of seeds 1..N."""
    runs = [sim_rows(case, seed) for seed in range(1, seeds + 1)]
    measured = [r for rows in runs for r in rows if r["t_s"] > WINDOW_S]
    return Estimate(
        float(np.mean([r["dtn_rate_bps"] for r in measured])),
        float(np.mean([r["dtn_bandwidth_estimate_bps"] for r in measured])),
        float(np.mean([r["dtn_min_rtt_estimate_s"] for r in measured])),
        mean_run([case_run(rows, case) for rows in runs]).dtn_loss_per_segment,
    )


def table(dataset: Path, seeds: int) -> list[str]:
    index = json.loads((dataset / "index.json").read_text())
    lines = [
        "| case | delivered lab / twin Mb/s | estimate lab / twin Mb/s | estimate / delivered "
        "lab / twin | min-RTT estimate lab / twin ms | loss per segment lab / twin |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, entry in index["cases"].items():
        case_dir = dataset / name
        if entry.get("status") != "ok":
            continue
        case = json.loads((case_dir / "case.json").read_text())
        if case["scenario"]["dtn"]["congestion_control"] != "bbr":
            continue
        lab = lab_estimate(case_dir, case)
        if lab is None:
            raise ValueError(
                f"{case_dir}: flows.csv.gz has no BBR state; record the dataset again "
                "(`scidmz lab record`, 2026-11-25's third session on)"
            )
        twin = twin_estimate(case, seeds)
        print(f"{name}: lab {lab.ratio:.3f}, twin {twin.ratio:.3f}", file=sys.stderr, flush=True)
        lines.append(
            f"| {name} | {lab.delivered_bps / 1e6:.1f} / {twin.delivered_bps / 1e6:.1f} "
            f"| {lab.bandwidth_estimate_bps / 1e6:.1f} / {twin.bandwidth_estimate_bps / 1e6:.1f} "
            f"| {lab.ratio:.3f} / {twin.ratio:.3f} "
            f"| {lab.min_rtt_s * 1e3:.1f} / {twin.min_rtt_s * 1e3:.1f} "
            f"| {lab.loss_per_segment:.2%} / {twin.loss_per_segment:.2%} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}.")
    args = parser.parse_args()
    if not (args.dataset / "index.json").exists():
        print(f"{args.dataset}: no index.json; record one with `scidmz lab record`")
        return 2
    try:
        rows = table(args.dataset, args.seeds)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    report = "\n".join(
        [
            "# BBR's bandwidth estimate against what it delivers: Linux and the twin",
            "",
            f"`.venv/bin/python bench/bbr_bandwidth.py --dataset {args.dataset} --seeds "
            f"{args.seeds}`: every BBR case, the seconds after the first {WINDOW_S:.0f}; twin "
            f"the mean of seeds 1–{args.seeds}. Estimate: the DTN streams' max-filtered "
            "bandwidth, summed (lab: `ss` bbr:(bw), per second; twin: BTL_BW).",
            "",
            *rows,
            "",
        ]
    )
    print(report)
    if args.write:
        RESULTS.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
