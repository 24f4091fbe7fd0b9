"""Where the tracking error of `scidmz bench control`'s R*(t) experiment comes from.

    .venv/bin/python bench/tracking_anatomy.py [--cca cubic] [--seeds 1-10]
        [--arms trivial,pi,mlc] [--workers 2] [--write]

Runs the tracking episodes of the control benchmark (`learn.evaluation`: R*(t) uniform in
[300, 800] Mb/s, a new level every 20 s, 100 campus flows, 120 s measured after 20 s) and
splits each arm's MRAE (eq. 3) into the seconds after an R* step, by the step's direction
and the seconds since it: second 0 is judged against a target set at its end, so no
controller can act on it; seconds 1-5 after a step are the transient; the rest is settled.
Each phase's share is its summed relative error over all measured seconds, so the shares
add up to the MRAE. For the seconds after a fall it also prints the mean DTN rate, campus
rate and u(t) against the new level: a fall is where the arms lose most, and it shows
whether u or the campus flows set the pace. Writes bench/results/tracking_anatomy.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from scidmz.control.settings import default_models_dir
from scidmz.learn.evaluation import (
    CAPACITY_BPS,
    MEASURED,
    WARMUP,
    Arm,
    load_models,
    make_loop,
    random_targets,
    scenario_for,
)
from scidmz.learn.gains import load_gains

RESULTS = Path(__file__).parent / "results" / "tracking_anatomy.md"
TRANSIENT_S = 5
PHASES = ("step second", "fall, 1-5 s", "rise, 1-5 s", "settled")


@dataclass(frozen=True)
class Second:
    """One measured second of an episode, against the level in force at its end."""

    target_bps: float
    dtn_bps: float
    campus_bps: float
    u_bps: float


def phases(targets: Sequence[float]) -> list[tuple[str, int]]:
    """Per second: its phase (``PHASES``) and the seconds since the last step (-1 before the
    first). A step at second k is a second whose target differs from second k-1's."""
    labelled: list[tuple[str, int]] = []
    last_step, rising = -1, False
    for k, target in enumerate(targets):
        if k > 0 and target != targets[k - 1]:
            last_step, rising = k, target > targets[k - 1]
        since = k - last_step if last_step >= 0 else -1
        if since == 0:
            phase = PHASES[0]
        elif 1 <= since <= TRANSIENT_S:
            phase = PHASES[2] if rising else PHASES[1]
        else:
            phase = PHASES[3]
        labelled.append((phase, since))
    return labelled


def shares(episodes: Sequence[Sequence[Second]]) -> dict[str, float]:
    """Each phase's share of the MRAE over all ``episodes`` (the shares add up to it)."""
    total: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    count = 0
    for seconds in episodes:
        for second, (phase, _) in zip(
            seconds, phases([s.target_bps for s in seconds]), strict=True
        ):
            total[phase] += abs(second.dtn_bps - second.target_bps) / second.target_bps
            count += 1
    return {phase: value / count for phase, value in total.items()}


def after_falls(episodes: Sequence[Sequence[Second]]) -> dict[int, tuple[float, float, float]]:
    """Seconds 0..TRANSIENT_S+2 after a fall: mean (DTN − R*, campus − (B − R*), u − (B − R*))
    in bit/s, R* the new level."""
    rows: dict[int, list[tuple[float, float, float]]] = {}
    for seconds in episodes:
        targets = [s.target_bps for s in seconds]
        for k in range(1, len(seconds)):
            if targets[k] < targets[k - 1]:
                level = targets[k]
                for since in range(0, TRANSIENT_S + 3):
                    if k + since < len(seconds) and targets[k + since] == level:
                        s = seconds[k + since]
                        share = CAPACITY_BPS - level
                        rows.setdefault(since, []).append(
                            (s.dtn_bps - level, s.campus_bps - share, s.u_bps - share)
                        )
    return {
        since: tuple(statistics.mean(v[i] for v in values) for i in range(3))  # type: ignore[misc]
        for since, values in sorted(rows.items())
    }


def episode(job: tuple[str, str, int]) -> list[Second]:
    """The measured seconds of one tracking episode (as `evaluation.tracking` runs it)."""
    strategy, cca, seed = job
    models = load_models(default_models_dir())
    gains = load_gains(default_models_dir(), cca)
    targets = random_targets(seed, WARMUP + MEASURED)
    loop = make_loop(
        Arm(strategy), cca, scenario_for(cca, seed, 100, None), targets[0], gains, models[cca]
    )
    return [
        Second(
            step.target_bps,
            step.sample.measured.dtn_rate_bps,
            step.sample.measured.campus_rate_bps,
            step.decision.u_bps if step.decision is not None else float("nan"),
        )
        for step in loop.run(targets)[WARMUP:]
    ]


def seed_range(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def render(by_arm: dict[str, list[list[Second]]], args: argparse.Namespace) -> str:
    lines = [
        "# Where the tracking error comes from",
        "",
        f"`python bench/tracking_anatomy.py --cca {args.cca} --seeds {args.seeds} "
        f"--arms {args.arms}`: the control benchmark's tracking episodes (R*(t) uniform in "
        "[300, 800] Mb/s, a new level every 20 s, 100 campus flows, 120 s measured), each "
        "arm's MRAE split by the seconds after an R* step (shares add up to the MRAE; "
        "second 0 is judged against a target set at its end).",
        "",
        "| arm | MRAE | " + " | ".join(PHASES) + " |",
        "|---|---:|" + "---:|" * len(PHASES),
    ]
    for name, episodes in by_arm.items():
        split = shares(episodes)
        lines.append(
            f"| {name} | {sum(split.values()):.2%} | "
            + " | ".join(f"{split[p]:.2%}" for p in PHASES)
            + " |"
        )
    lines += [
        "",
        "After a fall of R* (mean over the falls; Mb/s against the new level R*, and B − R*):",
        "",
        "| arm | second | DTN − R* | campus − (B − R*) | u − (B − R*) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, episodes in by_arm.items():
        for since, (dtn, campus, u) in after_falls(episodes).items():
            lines.append(
                f"| {name} | {since} | {dtn / 1e6:+.1f} | {campus / 1e6:+.1f} | {u / 1e6:+.1f} |"
            )
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cca", choices=("cubic", "bbr"), default="cubic")
    parser.add_argument("--seeds", default="1-10", help="A range, e.g. 1-10 or 11-20.")
    parser.add_argument("--arms", default="trivial,pi,mlc")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - {"trivial", "pi", "mlc"})
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose from trivial, pi, mlc")
    try:
        seeds = seed_range(args.seeds)
    except ValueError:
        parser.error(f"--seeds: {args.seeds!r} is not a range like 1-10")
    jobs = [(arm, args.cca, seed) for arm in arms for seed in seeds]
    print(f"{len(jobs)} tracking episodes on {args.workers} workers", file=sys.stderr)
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(episode, jobs))
    by_arm: dict[str, list[list[Second]]] = {}
    for (arm, _, _), seconds in zip(jobs, results, strict=True):
        by_arm.setdefault(arm, []).append(seconds)
    report = render(by_arm, args)
    print(report)
    if args.write:
        RESULTS.write_text(report)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
