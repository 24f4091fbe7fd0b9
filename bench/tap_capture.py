"""The software tap's capture rate: wire-size frames on mirror ports, and what one core of
the tap keeps up with without losing a frame.

    sudo .venv/bin/python bench/tap_capture.py [--runs 2] [--quick] [--out DIR]

Four veth pairs into a namespace stand for BR1's mirror ports. On CPU 0, ``framegen``
(``scidmz/lab/framegen.c``) offers the same 1514-byte TCP data frames on the campus port
and on the bottleneck port (each packet's copies entering and leaving BR1, so the tap
matches sojourns as it does on a real border) and the 66-byte ACKs, one per two data
frames, on the acks port; 1,000 flows. On CPU 1, ``scidmz target --source packets
--mirror-ports`` reads them: ``tapreader`` and the target's reduction, both counted in the
tap's CPU. Offloads are off on every interface (no GRO aggregates: one frame is one
segment). For each step of the data rate: the frames offered, the frames captured, the
kernel's drops on the tap's sockets, and the tap's CPU seconds. The highest step with no
drop in any run is what one core keeps up with; its data rate × 1514 B × 8 is the link rate
the tap follows. Writes ``episodes.csv`` (a row per run and step) and ``report.md``.

Run it alone: the generator and the tap each take a whole core.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from scidmz.lab import native
from scidmz.lab.loop import tree_cpu_s
from scidmz.testenv.cluster import free_port

OUT = Path(__file__).parent / "results" / "tap_capture"
NETNS = "scidmz-capture"
PORTS = {"campus": "cap-c", "dtn": "cap-d", "bottleneck": "cap-b", "acks": "cap-a"}
"""Each side of BR1 and the tap's end of its veth pair (the generator's end: ``g`` + it)."""
STEPS_FPS = (25_000, 50_000, 75_000, 100_000, 150_000)
QUICK_STEPS_FPS = (50_000, 100_000, 150_000)
DATA_FRAME_BYTES = 1514
FLOWS = 1000
EPPING_PPS = 1_000_000
"""ePPing (Sundberg et al., PAM 2023, doi:10.1007/978-3-031-28486-1_9): over 1 Mpps on one
core, about 10 Gb/s, matching RTTs only."""


@dataclass(frozen=True)
class Step:
    run: int
    data_fps: int
    seconds: float
    offered_frames: int
    captured_frames: int
    kernel_drops: int
    tap_cpu_s: float
    wall_s: float
    """From the generators' start until the tap's counters stopped moving (its CPU's span)."""

    @property
    def offered_fps(self) -> float:
        return self.offered_frames / self.seconds

    @property
    def frames_per_cpu_s(self) -> float:
        return self.captured_frames / self.tap_cpu_s if self.tap_cpu_s > 0 else float("nan")


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def setup() -> None:
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    sh("ip", "netns", "add", NETNS)
    sh("ip", "-n", NETNS, "link", "set", "lo", "up")
    for tap in PORTS.values():
        gen = "g" + tap
        subprocess.run(["ip", "link", "del", gen], capture_output=True, check=False)
        sh("ip", "link", "add", gen, "type", "veth", "peer", "name", tap, "netns", NETNS)
        sh("ip", "link", "set", gen, "up")
        sh("ip", "-n", NETNS, "link", "set", tap, "up")
        for where in ([], ["ip", "netns", "exec", NETNS]):
            name = gen if not where else tap
            sh(*where, "ethtool", "-K", name, "gro", "off", "gso", "off", "tso", "off")


def teardown() -> None:
    for tap in PORTS.values():
        subprocess.run(["ip", "link", "del", "g" + tap], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)


def capture_totals(stats: Path) -> tuple[int, int]:
    data = json.loads(stats.read_text())
    return sum(v["frames"] for v in data.values()), sum(v["kernel_drops"] for v in data.values())


def wait_stats(stats: Path, settle_s: float = 2.5) -> tuple[int, int]:
    """The counters once the reader has written them twice without a change (it writes
    them every second)."""
    last = capture_totals(stats)
    while True:
        time.sleep(settle_s)
        now = capture_totals(stats)
        if now == last:
            return now
        last = now


def step(framegen: Path, target_pid: int, stats: Path, run: int, data_fps: int,
         seconds: float) -> Step:  # fmt: skip
    before, drops_before = wait_stats(stats)
    cpu_before, started = tree_cpu_s(target_pid), time.monotonic()
    offered = [
        ("g" + PORTS["campus"], "data", data_fps),
        ("g" + PORTS["bottleneck"], "data", data_fps),
        ("g" + PORTS["acks"], "acks", data_fps // 2),
    ]
    generators = [
        subprocess.Popen(
            ["taskset", "-c", "0", str(framegen), port, kind, str(rate), str(seconds), str(FLOWS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for port, kind, rate in offered
    ]
    sent = sum(json.loads(g.communicate(timeout=seconds + 30)[0])["sent"] for g in generators)
    after, drops_after = wait_stats(stats, settle_s=1.2)
    cpu, wall = tree_cpu_s(target_pid) - cpu_before, time.monotonic() - started
    return Step(run, data_fps, seconds, sent, after - before, drops_after - drops_before,
                cpu, wall)  # fmt: skip


def report(steps: list[Step], command: str) -> str:
    rates = sorted({s.data_fps for s in steps})
    runs = sorted({s.run for s in steps})
    lines = [
        "# The software tap's capture rate on one core",
        "",
        f"`{command}`: {len(runs)} run(s). Data frames of {DATA_FRAME_BYTES} B on the campus "
        "and bottleneck mirror ports (the same packets), ACKs of 66 B (one per two) on the "
        f"acks port, {FLOWS} flows, offloads off; the generator on CPU 0, the tap (tapreader "
        "and `scidmz target --source packets --mirror-ports`) on CPU 1. Means over the runs; "
        "the tap's CPU is over the span from the generators' start until its counters stopped "
        "moving (the backlog it drains after them included).",
        "",
        "| data rate (link) | frames offered / s | captured / offered | kernel drops "
        "| tap CPU (cores) | frames per CPU-second |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    clean = []
    for rate in rates:
        at = [s for s in steps if s.data_fps == rate]
        offered = sum(s.offered_frames for s in at)
        captured = sum(s.captured_frames for s in at)
        drops = sum(s.kernel_drops for s in at)
        seconds = sum(s.seconds for s in at)
        cpu = sum(s.tap_cpu_s for s in at)
        wall = sum(s.wall_s for s in at)
        link = rate * DATA_FRAME_BYTES * 8 / 1e9
        if drops == 0 and captured >= offered:
            clean.append(rate)
        lines.append(
            f"| {rate / 1e3:.0f} k/s ({link:.2f} Gb/s) | {offered / seconds / 1e3:.0f} k "
            f"| {captured / offered:.1%} | {drops} | {cpu / wall:.2f} "
            f"| {captured / cpu / 1e3:.0f} k |"
        )
    lines.append("")
    if clean:
        best = max(clean)
        at = [s for s in steps if s.data_fps == best]
        per_core = sum(s.captured_frames for s in at) / sum(s.tap_cpu_s for s in at)
        frames = sum(s.captured_frames for s in at) / sum(s.seconds for s in at)
        lines += [
            f"**Kept up with, no frame lost:** {best / 1e3:.0f} k data frames/s, a "
            f"{best * DATA_FRAME_BYTES * 8 / 1e9:.2f} Gb/s link ({frames / 1e3:.0f} k frames/s "
            f"at the tap, {per_core / 1e3:.0f} k frames per CPU-second).",
            "",
            f"ePPing (Sundberg et al., PAM 2023) reports over {EPPING_PPS / 1e6:.0f} Mpps, about "
            "10 Gb/s, on one core, matching RTTs only; this tap matches RTTs and sojourns and "
            f"keeps up with {frames / EPPING_PPS:.1%} of that packet rate here.",
        ]
    else:
        lines.append("**No step without a lost frame.**")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="3 steps of 5 s")
    parser.add_argument("--seconds", type=float, default=None, help="per step (default 10)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, packet sockets)", file=sys.stderr)
        return 2
    rates = QUICK_STEPS_FPS if args.quick else STEPS_FPS
    seconds = args.seconds or (5.0 if args.quick else 10.0)
    framegen = native.binary("framegen")
    args.out.mkdir(parents=True, exist_ok=True)
    stats = args.out / "capture.json"
    steps: list[Step] = []
    setup()
    try:
        taps = ",".join(f"{role}={interface}" for role, interface in PORTS.items())
        target = subprocess.Popen(
            ["taskset", "-c", "1", str(Path(sys.executable).with_name("scidmz")), "target",
             "--source", "packets", "--mirror-ports", "--netns", NETNS, "--taps", taps,
             "--capture-stats", str(stats), "--listen", f"127.0.0.1:{free_port()}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not stats.exists():
                if target.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the tap did not start: {target.stderr.read()}")  # type: ignore[union-attr]
                time.sleep(0.2)
            for run in range(1, args.runs + 1):
                for rate in rates:
                    done = step(framegen, target.pid, stats, run, rate, seconds)
                    steps.append(done)
                    share = done.captured_frames / max(done.offered_frames, 1)
                    print(f"run {run} {rate / 1e3:.0f} k/s: offered {done.offered_fps / 1e3:.0f} "
                          f"k frames/s, captured {share:.1%}, drops {done.kernel_drops}, "
                          f"tap {done.tap_cpu_s / done.wall_s:.2f} cores", flush=True)  # fmt: skip
        finally:
            os.killpg(target.pid, signal.SIGTERM)
            target.wait(timeout=30)
    finally:
        teardown()
    with (args.out / "episodes.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f.name for f in fields(Step)])
        writer.writerows([list(asdict(s).values()) for s in steps])
    command = "sudo .venv/bin/python bench/tap_capture.py" + (" --quick" if args.quick else "")
    command += f" --runs {args.runs}"
    text = report(steps, command)
    (args.out / "report.md").write_text(text)
    stats.unlink(missing_ok=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
