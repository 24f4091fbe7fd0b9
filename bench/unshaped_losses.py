"""How the bottleneck shares its losses between the DTN and the campus when nothing shapes the
campus: the lab's recordings against the twin (how losses are allocated between the classes).

    .venv/bin/python bench/unshaped_losses.py [--write]

Every case of the lab's matrix whose campus starts unshaped (u = B: the ``-steps`` cases, until
u first drops at 20 s) is measured from 5 s (after slow start) to that first step: per class,
segments lost (the lab: retransmitted; the twin: dropped) per segment delivered, and the DTN's
rate over the campus's. The ratio of the two classes' loss rates is what a drop model
decides; the lab's three recordings of the matrix say how well it repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from netsim_vs_lab import Row, case_mss, lab_rows, sim_rows

RESULTS = Path(__file__).parent / "results" / "unshaped_losses.md"
DATASETS = (Path("data/lab-2026-11-23"), Path("data/lab-2026-11-25"), Path("data/lab-2026-11-25b"))
SETTLED_S = 5.0


@dataclass(frozen=True)
class Shares:
    """Per-class loss rates (lost / delivered segments) and rates over one unshaped phase."""

    dtn_loss: float
    campus_loss: float
    dtn_bps: float
    campus_bps: float

    @property
    def loss_ratio(self) -> float:
        """The DTN's loss rate over the campus's."""
        return self.dtn_loss / self.campus_loss if self.campus_loss > 0 else math.nan


def unshaped_until(case: dict[str, object]) -> float | None:
    """When u first drops below B, for a case that starts with u >= B; else None."""
    schedule = [(float(t), float(u)) for t, u in case["u_schedule"]]  # type: ignore[attr-defined]
    capacity = float(case["scenario"]["bottleneck"]["capacity_bps"])  # type: ignore[index]
    if schedule[0][1] < capacity:
        return None
    later = [t for t, u in schedule if u < capacity]
    return later[0] if later else float(case["duration_s"])  # type: ignore[arg-type]


def shares(rows: list[Row], start_s: float, end_s: float, mss_bytes: float) -> Shares:
    """Loss rates and mean rates of the seconds in (start_s, end_s], with segments of
    ``mss_bytes`` (the case's, ``netsim_vs_lab.case_mss``)."""
    segment_bits = mss_bytes * 8
    inside = [r for r in rows if start_s < r["t_s"] <= end_s]
    bits = {c: sum(r[f"{c}_rate_bps"] for r in inside) for c in ("dtn", "campus")}
    lost = {c: sum(r[f"{c}_losses"] for r in inside) for c in ("dtn", "campus")}
    return Shares(
        dtn_loss=lost["dtn"] / (bits["dtn"] / segment_bits) if bits["dtn"] else math.nan,
        campus_loss=lost["campus"] / (bits["campus"] / segment_bits)
        if bits["campus"]
        else math.nan,
        dtn_bps=bits["dtn"] / max(len(inside), 1),
        campus_bps=bits["campus"] / max(len(inside), 1),
    )


def mean_shares(items: list[Shares]) -> Shares:
    count = len(items)
    return Shares(
        sum(s.dtn_loss for s in items) / count,
        sum(s.campus_loss for s in items) / count,
        sum(s.dtn_bps for s in items) / count,
        sum(s.campus_bps for s in items) / count,
    )


def cell(s: Shares) -> str:
    return (
        f"{100 * s.dtn_loss:.3f} / {100 * s.campus_loss:.3f} % ({s.loss_ratio:.2f}); "
        f"{s.dtn_bps / 1e6:.0f} / {s.campus_bps / 1e6:.0f} Mb/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}.")
    args = parser.parse_args()
    reference = DATASETS[1]
    lines = [
        "# Losses per class while the campus is unshaped",
        "",
        f"`.venv/bin/python bench/unshaped_losses.py --seeds {args.seeds}`: the `-steps` cases "
        f"from {SETTLED_S:.0f} s to u's first step (20 s), where u = B; per cell, DTN / campus "
        "segments lost per segment delivered (their ratio), then DTN / campus rate. Lab: "
        "retransmitted segments (three recordings of the matrix); twin: the cases' scenarios, "
        f"mean of seeds 1-{args.seeds}.",
        "",
        "| case | " + " | ".join(f"lab {d.name[4:]}" for d in DATASETS) + " | twin |",
        "|---|" + "---|" * (len(DATASETS) + 1),
    ]
    print("\n".join(lines), flush=True)
    for case_dir in sorted(p for p in reference.iterdir() if (p / "case.json").exists()):
        case = json.loads((case_dir / "case.json").read_text())
        end = unshaped_until(case)
        if end is None:
            continue
        mss = case_mss(case)
        labs = [
            cell(shares(lab_rows(d / case_dir.name), SETTLED_S, end, mss))
            if (d / case_dir.name / "truth.csv").exists()
            else "—"
            for d in DATASETS
        ]
        twin = mean_shares(
            [shares(sim_rows(case, seed), SETTLED_S, end, mss) for seed in range(1, args.seeds + 1)]
        )
        lines.append(f"| {case_dir.name} | " + " | ".join(labs) + f" | {cell(twin)} |")
        print(lines[-1], flush=True)
    if args.write:
        RESULTS.write_text("\n".join(lines) + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
