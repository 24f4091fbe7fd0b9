"""Simulator speed and memory: prints the speed-up over real time and peak memory.

    .venv/bin/python bench/netsim_speed.py                 # speed, default and short flows
    .venv/bin/python bench/netsim_speed.py --hours 8       # + an 8 h run streamed to disk
    .venv/bin/python bench/netsim_speed.py --against REF   # + interleaved against git REF

Targets: >= 600x real time for the default scenario (1 Gb/s, 100 campus + 8 DTN flows, 1 ms
step) on one core after the calibration against real TCP (the floor), and the 1000x goal
that it asks to try for; >= 100x with short flows on; < 500 MB for an 8-hour run streamed to
disk. Each speed figure is the median of ``--repeats`` runs of ``--seconds``
simulated seconds after a warm-up that also compiles the kernel. The memory figure is the
peak RSS of a child process running ``scidmz sim run`` (the whole CLI path: CSV streaming,
events, summary); the kernel reports the largest child so far, so a later row is an upper
bound that includes the earlier ones.

This VM's speed swings by up to 2x between minutes (other tenants), so a figure from one
moment says little about a change. ``--against REF`` runs the simulator of git ``REF`` (its
package extracted and imported under another name) and this tree's in one process, half a
simulated second each in turn, and prints the median of the paired ratios (this tree's
speed over REF's) with its quartiles: both see the same moments of the machine. The
comparison has a bias of its own that changes from process to process (the same code
against itself gave 0.99-1.09x), so a difference under ~10 % needs several runs.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from scidmz.netsim.scenario import Scenario, parse_scenario
from scidmz.netsim.simulator import Simulator

RESULTS = Path(__file__).parent / "results" / "netsim_speed.md"
REPO = Path(__file__).resolve().parents[1]
_IMPORT_LINE = re.compile(r"^(\s*)(from|import) scidmz\b", re.MULTILINE)


def speedup(scenario: Scenario, seconds: float, repeats: int) -> tuple[float, float]:
    """Median and best speed-up over real time of ``seconds`` simulated seconds."""
    figures = []
    for _ in range(repeats):
        sim = Simulator(scenario)
        sim.advance(round(2.0 / scenario.step_s))  # warm-up (and JIT compile on the first)
        steps = round(seconds / scenario.step_s)
        started = time.perf_counter()
        for _ in range(steps // 1000):
            sim.advance(1000)
        figures.append(seconds / (time.perf_counter() - started))
    figures.sort()
    return figures[len(figures) // 2], figures[-1]


def import_at(ref: str, into: Path) -> str:
    """Extract the package of git ``ref`` under ``into`` as ``scidmz_ref``; its name."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "operator/scidmz"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    name = "scidmz_ref"
    package = into / name
    (into / "operator" / "scidmz").rename(package)
    for module in package.rglob("*.py"):
        text = module.read_text()
        module.write_text(_IMPORT_LINE.sub(rf"\1\2 {name}", text))
    sys.path.insert(0, str(into))
    return name


def interleaved(
    ref_package: str, overrides: dict[str, Any], rounds: int
) -> tuple[float, float, float, float, float]:
    """Paired ratios of this tree's speed over the reference's, half a simulated second
    each in turn (order alternating): (median, lower quartile, upper quartile, reference
    median speed-up, this tree's median speed-up)."""
    ref_scenario = importlib.import_module(f"{ref_package}.netsim.scenario")
    ref_simulator = importlib.import_module(f"{ref_package}.netsim.simulator")
    ref = ref_simulator.Simulator(ref_scenario.parse_scenario(overrides))
    ours = Simulator(parse_scenario(overrides))
    steps = round(0.5 / ours.scenario.step_s)
    for sim in (ref, ours):
        sim.advance(4 * steps)  # warm-up (and JIT compile)
    times: dict[str, list[float]] = {"ref": [], "ours": []}
    for index in range(rounds):
        order = (("ref", ref), ("ours", ours))
        for label, sim in order if index % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            sim.advance(steps)
            times[label].append(time.perf_counter() - started)
    ratios = sorted(r / o for r, o in zip(times["ref"], times["ours"], strict=True))
    quartile = statistics.quantiles(ratios, n=4)
    return (
        statistics.median(ratios),
        quartile[0],
        quartile[2],
        0.5 / statistics.median(times["ref"]),
        0.5 / statistics.median(times["ours"]),
    )


_PLACED = ("flow_f", "flow_i", "scratch", "ack_bytes", "bn_slots", "sh_slots")
"""The simulator's large arrays, each allocated on its own before netsim/arena.py."""


def scattered(sim: Simulator, rng: random.Random, keep: list[Any]) -> Simulator:
    """Move ``sim``'s large arrays to separate blocks at random 16-byte offsets within a
    4 KiB page, as separate numpy allocations land (``keep`` holds the blocks)."""
    for name in _PLACED:
        array = getattr(sim, name)
        block = np.zeros(array.nbytes + 8192, dtype=np.uint8)
        keep.append(block)
        start = (rng.randrange(256) * 16 - block.ctypes.data) % 4096
        moved = block[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
        moved[...] = array
        setattr(sim, name, moved)
    return sim


def placements(count: int, rounds: int, seed: int) -> tuple[list[float], list[float]]:
    """Speed-ups of ``count`` default simulators laid out as one block (netsim/arena.py)
    and ``count`` with their arrays scattered (``scattered``), all in one process and run
    in turn, half a simulated second each for ``rounds`` rounds: (block, scattered), each
    sorted, every simulator's median. Every simulator runs the same trajectory, so what
    differs is where its arrays lie."""
    rng = random.Random(seed)
    keep: list[Any] = []
    sims = [Simulator(Scenario()) for _ in range(count)]
    sims += [scattered(Simulator(Scenario()), rng, keep) for _ in range(count)]
    steps = round(0.5 / sims[0].scenario.step_s)
    for sim in sims:
        sim.advance(4 * steps)  # warm-up (and JIT compile on the first)
    times: list[list[float]] = [[] for _ in sims]
    for _ in range(rounds):
        for index, sim in enumerate(sims):
            started = time.perf_counter()
            sim.advance(steps)
            times[index].append(time.perf_counter() - started)
    speeds = [0.5 / statistics.median(each) for each in times]
    return sorted(speeds[:count]), sorted(speeds[count:])


def verdicts(speed: float, targets: tuple[tuple[int, str], ...]) -> tuple[str, str]:
    """The target column and the verdicts of ``speed`` against each ``(floor, source)``."""
    column = ", ".join(f">= {floor}x ({source})" for floor, source in targets)
    marks = ", ".join(f"{floor}x {'met' if speed >= floor else 'MISSED'}" for floor, _ in targets)
    return column, marks


def streamed_run(hours: float, short_flows: bool) -> tuple[float, float, float]:
    """(simulated s, wall s, peak RSS MB) of ``scidmz sim run`` in a child process."""
    duration = hours * 3600
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "-m", "scidmz.cli", "sim", "run", "--duration", str(duration),
                "--out", str(Path(tmp) / "out")]  # fmt: skip
        if short_flows:
            scenario = Path(tmp) / "s.yaml"
            scenario.write_text("campus: {short_flows: {enabled: true}}\n")
            args += ["--scenario", str(scenario)]
        started = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return duration, wall, peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hours", type=float, default=0.0, help="Also stream a run this long.")
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}.")
    parser.add_argument(
        "--against", metavar="REF", help="Also run git REF's simulator interleaved with this one."
    )
    parser.add_argument("--rounds", type=int, default=200, help="Pairs for --against.")
    parser.add_argument(
        "--placements",
        type=int,
        default=0,
        metavar="N",
        help="Also run N default simulators as one block and N with scattered arrays.",
    )
    args = parser.parse_args()

    default = Scenario()
    shorts = parse_scenario({"campus": {"short_flows": {"enabled": True}}})
    lines = [
        "| scenario | target | median speed-up | best |",
        "|---|---|---|---|",
    ]
    default_targets = ((600, "floor"), (1000, "goal"))
    for name, scenario, targets in (
        ("default (1 Gb/s, 100 campus + 8 DTN, 1 ms)", default, default_targets),
        ("default + short flows (table 6)", shorts, ((100, "floor"),)),
    ):
        median, best = speedup(scenario, args.seconds, args.repeats)
        column, marks = verdicts(median, targets)
        lines.append(f"| {name} | {column} | {median:.0f}x ({marks}) | {best:.0f}x |")
        print(lines[-1], flush=True)
    if args.hours > 0:
        lines += ["", "| streamed run | simulated | wall | speed-up | peak RSS | target |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for label, short in (("default", False), ("short flows", True)):
            simulated, wall, peak = streamed_run(args.hours, short)
            verdict = "met" if peak < 500 else "MISSED"
            lines.append(
                f"| {label} | {simulated / 3600:g} h | {wall:.0f} s | {simulated / wall:.0f}x | "
                f"{peak:.0f} MB | < 500 MB ({verdict}) |"
            )
            print(lines[-1], flush=True)
    if args.placements > 0:
        block, scatter = placements(args.placements, 40, seed=1)
        lines += [
            "",
            f"Where the arrays lie: {args.placements} default simulators laid out as one block "
            f"(netsim/arena.py) and {args.placements} with their large arrays scattered at "
            "random 16-byte offsets (as separate numpy allocations land), in turn in one "
            "process, 40 rounds of half a simulated second; each simulator's median.",
            "",
            "| layout | slowest | median | fastest |",
            "|---|---|---|---|",
        ]
        for label, speeds in (("one block", block), ("scattered", scatter)):
            lines.append(
                f"| {label} | {speeds[0]:.0f}x | {statistics.median(speeds):.0f}x | "
                f"{speeds[-1]:.0f}x |"
            )
            print(lines[-1], flush=True)
    if args.against:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", args.against],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        lines += [
            "",
            f"Interleaved with `{args.against}` ({commit}) in one process, {args.rounds} pairs of "
            "half a simulated second: this tree's speed over REF's.",
            "",
            "| scenario | paired ratio, median (quartiles) | REF | this tree |",
            "|---|---|---|---|",
        ]
        with tempfile.TemporaryDirectory() as tmp:
            package = import_at(args.against, Path(tmp))
            for name, overrides in (
                ("default", {}),
                ("short flows", {"campus": {"short_flows": {"enabled": True}}}),
                ("BBR DTN", {"dtn": {"congestion_control": "bbr"}}),
            ):
                ratio, low, high, ref_speed, speed = interleaved(package, overrides, args.rounds)
                lines.append(
                    f"| {name} | {ratio:.2f}x ({low:.2f}-{high:.2f}) | {ref_speed:.0f}x | "
                    f"{speed:.0f}x |"
                )
                print(lines[-1], flush=True)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        header = [
            "# netsim speed",
            "",
            f"One core ({os.cpu_count()} on the machine), Python {sys.version.split()[0]}, "
            f"{args.seconds:g} simulated s per figure, median of {args.repeats}.",
            "Reproduce: `.venv/bin/python bench/netsim_speed.py "
            f"--hours {args.hours:g} --repeats {args.repeats}"
            + (f" --against {args.against}" if args.against else "")
            + (f" --placements {args.placements}" if args.placements else "")
            + " --write`.",
            "",
        ]
        RESULTS.write_text("\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()
