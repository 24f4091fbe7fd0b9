"""Controller loop latency: sample received → actuator called, and ONNX inference alone.

    .venv/bin/python bench/control_latency.py [--samples 5000] [--write]

Targets: loop p99 < 5 ms, inference < 0.5 ms. The controller's real
per-sample path (``Controller.on_sample``: y_d, features by name, onnxruntime, both
anti-windup filters, saturators) runs with the shipped cubic model, the shipped gains and
two dry-run actuators (campus and DTN cap), on samples replayed from a simulated
identification run; one core, no other load.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np

from scidmz.contract.codec import state_message
from scidmz.control.actuators import DryRunActuator
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.settings import default_models_dir
from scidmz.learn.gains import load_gains
from scidmz.learn.identification import identify
from scidmz.netsim.scenario import Scenario

RESULTS = Path(__file__).parent / "results" / "control_latency.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    model = InverseModel(default_models_dir() / "cubic" / "inverse.onnx")
    data = identify(Scenario(), args.samples, seed=11)
    gains = load_gains(default_models_dir(), "cubic")
    limits = Limits(0.0, 1e9, 2e8)
    settings = ControllerSettings(
        link="bench", strategy="mlc",
        setpoint=Setpoint(600e6, 1e9), gains=Gains(*gains.mlc.as_tuple()),
        limits=limits, sample_time_s=1.0, stale_after_s=3.0,
        failsafe_rate_bps=4e8, collector_address="bench",
        dtn=DtnControl(Gains(*gains.dtn.as_tuple()), limits, None),
    )  # fmt: skip
    controller = Controller(settings, DryRunActuator(), model, dtn_actuator=DryRunActuator())
    messages = [state_message(y, k + 1) for k, y in enumerate(data.y)]

    async def run() -> list[float]:
        latencies = []
        for message in messages:
            started = time.perf_counter()
            await controller.on_sample(message)
            latencies.append(time.perf_counter() - started)
        return latencies

    loop = np.array(asyncio.run(run())[10:]) * 1e3
    row = np.zeros((1, 22), dtype=np.float32)
    row[0] = np.concatenate([data.y[5], data.y[4], data.y[3], [data.u_bps[3]]])
    for _ in range(100):
        model.predict(row)
    inference = []
    for _ in range(args.samples):
        started = time.perf_counter()
        model.predict(row)
        inference.append(time.perf_counter() - started)
    infer = np.array(inference) * 1e3
    lines = [
        "# Controller loop latency",
        "",
        f"`.venv/bin/python bench/control_latency.py --samples {args.samples}`; "
        "shipped cubic model and gains, both filters, two dry-run actuators (campus, DTN cap).",
        "",
        "| figure | p50 | p99 | max | target |",
        "|---|---:|---:|---:|---|",
        f"| sample received → actuator called | {np.percentile(loop, 50):.3f} ms | "
        f"{np.percentile(loop, 99):.3f} ms | {loop.max():.3f} ms | p99 < 5 ms — "
        f"{'met' if np.percentile(loop, 99) < 5 else '**MISSED**'} |",
        f"| ONNX inference | {np.percentile(infer, 50):.3f} ms | {np.percentile(infer, 99):.3f} ms "
        f"| {infer.max():.3f} ms | < 0.5 ms — "
        f"{'met' if np.percentile(infer, 99) < 0.5 else '**MISSED**'} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
