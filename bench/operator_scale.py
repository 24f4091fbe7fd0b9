"""Operator scale: time from applying N policies to all Ready, and the operator's peak RSS.

Target: 100 policies Ready in under 60 s with operator RSS under 200 MB.
Each N runs on a fresh local control plane (etcd, kube-apiserver, kcm, scheduler, kwok) with
a fresh operator process; pods become Running through kwok.

    make bench-operator            # or: .venv/bin/python bench/operator_scale.py --sizes 1 10 100
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import psutil

from scidmz.testenv.cluster import start_control_plane
from scidmz.testenv.operator_process import start_operator
from scidmz.testenv.policies import example_policies

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "operator_scale.md"


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self.thread.join()
        return self.peak


def run_one(n: int, timeout_s: float) -> dict[str, float]:
    plane = start_control_plane(crds=(REPO / "crds",), log=lambda _: None)
    operator = start_operator(plane, plane.workdir / "operator.log")
    try:
        rss = PeakRss(operator.proc.pid)
        idle_rss = psutil.Process(operator.proc.pid).memory_info().rss
        started = time.monotonic()
        plane.kubectl("apply", "-f", "-", input_text=example_policies(n))
        ready = 0
        while time.monotonic() - started < timeout_s:
            items = json.loads(plane.kubectl("get", "dtp", "-o", "json").stdout)["items"]
            ready = sum(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (p.get("status") or {}).get("conditions", [])
                )
                for p in items
            )
            if ready == n:
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - started
        peak = rss.stop()
        return {
            "n": n,
            "ready": ready,
            "seconds": elapsed,
            "peak_rss_mb": peak / 2**20,
            "idle_rss_mb": idle_rss / 2**20,
        }
    finally:
        operator.stop()
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--no-write", action="store_true", help="do not update bench/results")
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        print(f"N={n}: applying ...", flush=True)
        row = run_one(n, args.timeout)
        rows.append(row)
        print(
            f"N={n}: {row['ready']}/{n} Ready in {row['seconds']:.2f}s, "
            f"peak RSS {row['peak_rss_mb']:.1f} MB",
            flush=True,
        )
    lines = [
        "| policies | Ready | time to all Ready (s) | operator RSS idle (MB) | peak RSS (MB) |",
        "|---:|---:|---:|---:|---:|",
        *[
            f"| {r['n']} | {r['ready']} | {r['seconds']:.2f} | {r['idle_rss_mb']:.1f} | "
            f"{r['peak_rss_mb']:.1f} |"
            for r in rows
        ],
    ]
    big = [r for r in rows if r["n"] == 100]
    verdict = ""
    if big:
        r = big[0]
        ok = r["ready"] == 100 and r["seconds"] < 60 and r["peak_rss_mb"] < 200
        verdict = (
            f"\nTarget (100 Ready < 60 s, RSS < 200 MB): {'MET' if ok else 'MISSED'} "
            f"({r['seconds']:.1f} s, {r['peak_rss_mb']:.0f} MB)"
        )
    table = "\n".join(lines)
    print(table + verdict)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "# Operator scale (bench/operator_scale.py)\n\n"
            "Fresh local control plane per row (etcd 3.7, kube-apiserver/kcm/scheduler "
            "v1.37.1, kwok 0.8 fast stages), one `scidmz operator` process, 2-core machine. "
            "Time is from `kubectl apply` of N policies to all `Ready=True` (which needs both "
            "Deployments available).\n\n" + table + "\n" + verdict.strip() + "\n"
        )


if __name__ == "__main__":
    main()
