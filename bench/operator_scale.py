"""Operator scale: links and tenants' policies applied at once; the time until every policy
is decided and every admitted one is Ready, and the operator's peak RSS.

Target: 1,000 policies on 10 links decided in under 60 s with operator RSS under 300 MB,
30 admitted per link. A scale link has up to 30 DTN hosts and admits one policy per host
(targets of ~750/30 Mb/s fit in the tenants' share); the rest wait (``DtnHostInUse``):
"decided" means every policy carries an ``Accepted`` condition for its current generation,
True or False.

Each row runs on a fresh local control plane (etcd, kube-apiserver, kcm, scheduler, kwok)
with a fresh operator process; pods become Running through kwok.

    make bench-operator
    .venv/bin/python bench/operator_scale.py --shapes 1x1 10x10 100x100 10x1000
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from scidmz.k8s.status import condition_true, find_condition
from scidmz.testenv.cluster import ControlPlane, start_control_plane
from scidmz.testenv.identities import OPERATOR_NAMESPACE
from scidmz.testenv.operator_process import start_operator
from scidmz.testenv.policies import scale_manifest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "operator_scale.md"
TARGET = (10, 1000)
TARGET_S, TARGET_RSS_MB = 60.0, 300.0


class PeakRss:
    """The process's highest resident set size, sampled every 50 ms."""

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


@dataclass(frozen=True)
class Row:
    links: int
    policies: int
    decided: int
    admitted: int
    admitted_ready: int
    links_ready: int
    apply_s: float
    decided_s: float | None
    ready_s: float | None
    idle_rss_mb: float
    peak_rss_mb: float
    reasons: dict[str, int]


def _items(plane: ControlPlane, resource: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", resource, "-A", "-o", "json").stdout
    return list(json.loads(out)["items"])


def _count(plane: ControlPlane) -> dict[str, Any]:
    policies, links = _items(plane, "dtp"), _items(plane, "borderlinks")
    decided, admitted, ready, reasons = 0, 0, 0, {}
    for policy in policies:
        accepted = find_condition(policy, "Accepted")
        if accepted is None:
            continue
        if accepted.get("observedGeneration") != policy["metadata"]["generation"]:
            continue
        decided += 1
        reasons[accepted["reason"]] = reasons.get(accepted["reason"], 0) + 1
        if accepted["status"] == "True":
            admitted += 1
            ready += condition_true(policy, "Ready")
    links_ready = sum(condition_true(link, "Ready") for link in links)
    return {
        "decided": decided, "admitted": admitted, "admitted_ready": ready,
        "links_ready": links_ready, "reasons": reasons,
    }  # fmt: skip


def run_one(links: int, policies: int, timeout_s: float, apply_workers: int) -> Row:
    plane = start_control_plane(crds=(REPO / "crds",), log=lambda _: None)
    operator = start_operator(plane, plane.workdir / "operator.log")
    try:
        rss = PeakRss(operator.proc.pid)
        idle_rss = psutil.Process(operator.proc.pid).memory_info().rss
        documents = list(yaml.safe_load_all(scale_manifest(links, policies, OPERATOR_NAMESPACE)))
        first = [d for d in documents if d["kind"] != "DTNTransferPolicy"]
        rest = [d for d in documents if d["kind"] == "DTNTransferPolicy"]
        chunks = [rest[k::apply_workers] for k in range(apply_workers)]
        started = time.monotonic()
        plane.kubectl("apply", "--server-side", "-f", "-", input_text=yaml.safe_dump_all(first))
        with ThreadPoolExecutor(apply_workers) as pool:
            list(pool.map(lambda chunk: plane.kubectl(
                "apply", "--server-side", "-f", "-", input_text=yaml.safe_dump_all(chunk)
            ), [c for c in chunks if c]))  # fmt: skip
        apply_s = time.monotonic() - started
        print(f"  kubectl apply took {apply_s:.1f} s", flush=True)
        decided_s = ready_s = None
        counts = _count(plane)
        last_print = 0.0
        while time.monotonic() - started < timeout_s:
            counts = _count(plane)
            now = time.monotonic() - started
            if decided_s is None and counts["decided"] == policies:
                decided_s = now
            if (
                ready_s is None
                and counts["links_ready"] == links
                and counts["admitted"] > 0
                and counts["admitted_ready"] == counts["admitted"]
            ):
                ready_s = now
            if decided_s is not None and ready_s is not None:
                break
            if now - last_print >= 5.0:
                print(
                    f"  {now:5.1f} s: {counts['decided']}/{policies} decided, "
                    f"{counts['admitted_ready']}/{counts['admitted']} admitted Ready, "
                    f"{counts['links_ready']}/{links} links Ready",
                    flush=True,
                )
                last_print = now
            time.sleep(0.5)
        peak = rss.stop()
        return Row(
            links=links, policies=policies, decided=counts["decided"],
            admitted=counts["admitted"], admitted_ready=counts["admitted_ready"],
            links_ready=counts["links_ready"], apply_s=apply_s, decided_s=decided_s,
            ready_s=ready_s,
            idle_rss_mb=idle_rss / 2**20, peak_rss_mb=peak / 2**20, reasons=counts["reasons"],
        )  # fmt: skip
    finally:
        operator.stop()
        plane.stop()


def _shape(text: str) -> tuple[int, int]:
    links, _, policies = text.partition("x")
    return int(links), int(policies)


def _s(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def render(rows: list[Row]) -> str:
    lines = [
        "| links | policies | decided | admitted (Ready) | links Ready | kubectl apply (s) "
        "| all decided (s) | admitted all Ready (s) | RSS idle (MB) | peak RSS (MB) | reasons |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r.reasons.items()))
        lines.append(
            f"| {r.links} | {r.policies} | {r.decided} | {r.admitted} ({r.admitted_ready}) "
            f"| {r.links_ready} | {r.apply_s:.1f} | {_s(r.decided_s)} | {_s(r.ready_s)} "
            f"| {r.idle_rss_mb:.1f} "
            f"| {r.peak_rss_mb:.1f} | {reasons} |"
        )
    verdicts = []
    for r in rows:
        if (r.links, r.policies) != TARGET:
            continue
        slowest = max(r.decided_s or float("inf"), r.ready_s or float("inf"))
        met = slowest < TARGET_S and r.peak_rss_mb < TARGET_RSS_MB
        verdicts.append(
            f"Target ({TARGET[1]:,} policies on {TARGET[0]} links decided and the admitted "
            f"Ready < {TARGET_S:.0f} s, RSS < {TARGET_RSS_MB:.0f} MB): "
            f"**{'met' if met else 'missed'}** ({_s(slowest)} s, {r.peak_rss_mb:.0f} MB)"
        )
    return "\n".join(lines) + ("\n\n" + "\n".join(verdicts) if verdicts else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--shapes", nargs="+", default=["1x1", "10x10", "100x100", "10x1000"],
        help="LINKSxPOLICIES, one fresh control plane each",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--apply-workers", type=int, default=4,
        help="kubectl processes applying the policies at once (as a GitOps tool would)",
    )  # fmt: skip
    parser.add_argument("--no-write", action="store_true", help="do not update bench/results")
    args = parser.parse_args()
    rows = []
    for text in args.shapes:
        links, policies = _shape(text)
        print(f"{policies} policies on {links} links: applying ...", flush=True)
        row = run_one(links, policies, args.timeout, args.apply_workers)
        rows.append(row)
        print(
            f"{policies} on {links}: decided {row.decided}/{policies} in {_s(row.decided_s)} s, "
            f"admitted {row.admitted} Ready in {_s(row.ready_s)} s, "
            f"peak RSS {row.peak_rss_mb:.1f} MB",
            flush=True,
        )
    table = render(rows)
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "# Operator scale\n\n"
            "`.venv/bin/python bench/operator_scale.py` (`make bench-operator`). A fresh local "
            "control plane per row (etcd, kube-apiserver, kcm, scheduler, kwok fast stages), "
            "one `scidmz operator` process, 2 cores. A tenant namespace, the switch Secret "
            "and the links go in with one `kubectl apply --server-side`, then the policies "
            "with four at once (`--apply-workers`), as a GitOps tool applies; the *kubectl "
            "apply* column is how long that took (the API server stores one object per "
            "request), and times count from its start. A policy is *decided* when its "
            "`Accepted` condition is written for its generation. A link has up to 30 DTN "
            "hosts and admits one policy per host (targets of ~750/30 Mb/s, within the "
            "tenants' 900 Mb/s); the rest wait (`DtnHostInUse`); *admitted all Ready* is when "
            "every link and every admitted "
            "policy is Ready (both Deployments of each loop available under kwok). The "
            "poll itself (`kubectl get -A -o json` every 0.5 s) shares the two cores.\n\n"
            + table
            + "\n"
        )
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
