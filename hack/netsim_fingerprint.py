"""A fingerprint of the simulator's output: one sha256 per scenario, over every step's outputs,
every flow event and the final flow state.

A change meant only to make the kernel faster must leave every fingerprint as it was:

    .venv/bin/python hack/netsim_fingerprint.py > /tmp/before.txt   # on the old code
    .venv/bin/python hack/netsim_fingerprint.py | diff /tmp/before.txt -

``--outputs-only`` leaves the final state out: for a change that adds state (a new row in
``netsim.layout``) and must not change what the simulator puts out.

The scenarios cover every model path of the kernel (Cubic, Reno, BBR, BBRv2-like, short flows,
a pooled and a static finite transfer, the DTN cap, HyStart, PRR, a shaper that binds and one
that moves, campus demand and load changes, a tiny buffer that forces the proportional drop).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

Driver = Callable[[Simulator, int], None]


def _fixed(rate_bps: float) -> Driver:
    def drive(sim: Simulator, second: int) -> None:
        if second == 0:
            sim.set_campus_rate_limit(rate_bps)

    return drive


def _moving(sim: Simulator, second: int) -> None:
    sim.set_campus_rate_limit(150e6 + 70e6 * (second % 7))
    if second == 9:
        sim.set_campus_demand(250e6)
    if second == 14:
        sim.set_campus_demand(None)
        sim.set_campus_long_flows(40)
    if second == 18:
        sim.set_campus_long_flows(100)


def _dtn_cap(sim: Simulator, second: int) -> None:
    sim.set_campus_rate_limit(400e6)
    sim.set_dtn_rate_limit(None if second % 6 == 5 else 500e6 + 20e6 * (second % 4))


CASES: dict[str, tuple[dict[str, Any], Driver, int]] = {
    "default": ({}, _fixed(1e9), 30),
    "default-shaped": ({}, _fixed(400e6), 30),
    "moving-u": ({"seed": 3}, _moving, 24),
    "short-flows": ({"campus": {"short_flows": {"enabled": True}}}, _fixed(400e6), 20),
    "bbr-dtn": ({"dtn": {"congestion_control": "bbr"}}, _fixed(400e6), 25),
    "bbr2-dtn-cap": ({"dtn": {"congestion_control": "bbr2"}}, _dtn_cap, 20),
    "reno-campus": ({"campus": {"congestion_control": "reno"}, "seed": 5}, _fixed(350e6), 20),
    "bbr-campus": ({"campus": {"congestion_control": "bbr", "long_flows": 30}}, _fixed(5e8), 20),
    "pooled-transfer": ({"dtn": {"transfer_bytes": "600MB"}}, _fixed(400e6), 15),
    "static-transfer": (
        {"dtn": {"transfer_bytes": "400MB", "transfer_split": "static"}},
        _fixed(400e6),
        12,
    ),
    "hystart-prr": (
        {"cubic_hystart": True, "proportional_rate_reduction": True, "seed": 7},
        _fixed(400e6),
        20,
    ),
    "tiny-buffer": ({"bottleneck": {"buffer_bytes": "30kB"}, "seed": 2}, _fixed(1e9), 10),
    "starts": ({"campus": {"start_s": 0.2}, "dtn": {"start_s": 0.35}}, _fixed(300e6), 10),
}


def fingerprint(
    overrides: dict[str, Any], drive: Driver, seconds: int, with_state: bool = True
) -> str:
    """sha256 over every step's outputs, the flow events and (``with_state``) the final
    flow state."""
    sim = Simulator(parse_scenario(overrides))
    digest = hashlib.sha256()
    for second in range(seconds):
        drive(sim, second)
        steps = sim.advance(sim.steps_per_sample)
        digest.update(np.ascontiguousarray(steps).tobytes())
        digest.update(np.ascontiguousarray(sim.drain_event_array()).tobytes())
    if with_state:
        for state in (sim.flow_f, sim.flow_i, sim.glob_f, sim.glob_i, sim.bw_filter):
            digest.update(np.ascontiguousarray(state).tobytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"Some of: {', '.join(CASES)} (default all).")
    parser.add_argument(
        "--outputs-only", action="store_true", help="Leave the final flow state out."
    )
    args = parser.parse_args()
    for name in args.cases or list(CASES):
        overrides, drive, seconds = CASES[name]
        digest = fingerprint(overrides, drive, seconds, not args.outputs_only)
        print(f"{name:16s} {digest}", flush=True)


if __name__ == "__main__":
    main()
