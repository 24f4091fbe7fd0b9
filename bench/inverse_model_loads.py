"""Is the inverse model's feed-forward right at every campus load?

    .venv/bin/python bench/inverse_model_loads.py [--models models] [--seeds 3] [--write]

For each campus load N_s and target R*, a `pi` loop holds a Cubic DTN near R* on the
simulator for 140 s (shipped pi gains); over its last 100 samples the rate limit u it
settles on is the one that holds the DTN there. On the same samples the cubic inverse
model is asked (the controller's own y_d, `reachable` mode, and features) what u it
would set. Their difference is the bias the MLC's filter has to remove with its integral
on every step of R* or of the load: a model that never saw a load extrapolates there.
Prints a Markdown table (mean over seeds); `--write` saves it to
bench/results/inverse_model_loads.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

from scidmz.control.features import desired_state, features
from scidmz.control.model import InverseModel
from scidmz.control.settings import default_models_dir
from scidmz.learn.evaluation import Arm, make_loop, scenario_for
from scidmz.learn.gains import load_gains

RESULTS = Path(__file__).parent / "results" / "inverse_model_loads.md"
LOADS = (20, 50, 100, 150, 200)
TARGETS_BPS = (400e6, 600e6)
WARMUP, SAMPLES = 40, 140


def settle(models: Path, flows: int, target_bps: float, seed: int) -> tuple[float, float, float]:
    """(u held by pi, the model's û on the same states, DTN rate / R*), means in bit/s."""
    model = InverseModel(models / "cubic" / "inverse.onnx")
    gains = load_gains(models, "cubic")
    loop = make_loop(
        Arm("pi"), "cubic", scenario_for("cubic", seed, flows, None), target_bps, gains, None
    )
    held, predicted, rates = [], [], []

    async def run() -> None:
        for k in range(SAMPLES):
            await loop.step()
            c = loop.controller
            if k < WARMUP or len(c.history) < 2 or c.applied_bps is None:
                continue
            y, before = c.history[-1], c.history[-2]
            wanted = desired_state(c.settings.setpoint, y, c.base_rtts, "reachable", c.link_goodput)
            predicted.append(model.predict(features(wanted, y, before, c.applied_bps)))
            held.append(c.applied_bps)
            rates.append(y.dtn_rate_bps)

    asyncio.run(run())
    return statistics.mean(held), statistics.mean(predicted), statistics.mean(rates) / target_bps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=default_models_dir())
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    lines = [
        "# The cubic inverse model's feed-forward across campus loads",
        "",
        f"`bench/inverse_model_loads.py --seeds {args.seeds}`: u held by `pi` with the DTN near "
        f"R* (mean of samples {WARMUP}–{SAMPLES}, {args.seeds} seeds) against the model's û "
        "on the same states (`reachable` y_d).",
        "",
        "| N_s | R* | u held by pi | model û | û − u | DTN / R* under pi |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for flows in LOADS:
        for target in TARGETS_BPS:
            runs = [settle(args.models, flows, target, seed) for seed in range(1, args.seeds + 1)]
            held = statistics.mean(r[0] for r in runs)
            predicted = statistics.mean(r[1] for r in runs)
            ratio = statistics.mean(r[2] for r in runs)
            lines.append(
                f"| {flows} | {target / 1e6:.0f} Mb/s | {held / 1e6:.1f} Mb/s | "
                f"{predicted / 1e6:.1f} Mb/s | {(predicted - held) / 1e6:+.1f} Mb/s | {ratio:.3f} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
