"""How fast a policy added to (or removed from) a running link reaches its loop, on the
real node, as a user installs scidmz.

The chart installed with the simulated switch (``make test``'s image, a real kubelet and
containerd), the example tenants and a link with two DTN hosts, one policy on ``dtn-1``.
Then, ``--runs`` times: a second policy on ``dtn-2`` is applied (``kubectl apply``, what a
tenant or GitOps does) and later deleted. For each change, measured from the moment
``kubectl`` returns:

* ``controller_s``: until the running controller's ``/state`` holds the new plan (the
  policy listed with its target, or gone) — the operator's pass, the ConfigMap it
  rewrites, the kubelet's projection and the controller's reload;
* ``class_s``: until the controller's latest sample carries the host's class (or no
  longer does) — the collector has programmed or removed the class in the switch;
* ``max_step_bps``: the largest change of u(t) between two consecutive decisions from
  the change until 10 s after it, and ``max_move_beyond_sum_bps`` the largest beyond what
  the new sum of targets explains (a new R* moves u at once by its change, as the fixed
  split does; the filter's own move is bounded by ``maxStep``);
* ``restarts``: the loop's pods restarted or re-created meanwhile (must stay 0).

The target: within T + 2 s (3 s at T = 1 s), without a pod restart and without a step of
u(t) larger than ``maxStep``. ``/state`` is polled every 0.1 s straight from the
controller pod over mutual TLS, so each figure is late by at most ~0.1 s plus one fetch.

    .venv/bin/python bench/node_policy_latency.py --runs 5 --out bench/results/policy_latency

Writes ``episodes.csv`` (one row per change) and ``report.md`` in ``--out``. Needs what
``tests/node`` needs (``make testenv``, the node's tools); takes ~9 min with the image built
(the first image build takes ~5 min more). Run it alone: it times a control plane, a
kubelet and the loop's pods on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from scidmz.api.runtime import ControllerState
from scidmz.auth.identity import WORKLOAD_SERVER_NAME
from scidmz.auth.mtls import http_client_context, load_mutual_tls
from scidmz.demo_loop import CONTROLLER_HTTP_PORT
from scidmz.metrics.http import fetch_state
from scidmz.testenv import image, installed
from scidmz.testenv import node as real_node
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, start_control_plane

EXAMPLES = REPO_ROOT / "examples"
SAMPLE_TIME_S = 1.0
TARGET_S = SAMPLE_TIME_S + 2.0
MAX_STEP_BPS = 200e6
POLL_S = 0.1
AFTER_S = 10.0
"""How long after a change the decisions are watched for a step larger than maxStep."""
SECOND = {"name": "genomics-run", "namespace": "physics", "host": "dtn-2", "target": "200Mbps"}
FIELDS = (
    "run", "change", "controller_s", "class_s", "max_step_bps", "max_move_beyond_sum_bps",
    "restarts",
)  # fmt: skip


def _link() -> dict[str, Any]:
    link = yaml.safe_load((EXAMPLES / "borderlink.yaml").read_text())
    link["spec"]["dtnHosts"].append({"name": "dtn-2", "receiverPrefix": "203.0.113.11/32"})
    return dict(link)


def _second_policy() -> dict[str, Any]:
    return {
        "apiVersion": "scidmz.io/v1alpha1",
        "kind": "DTNTransferPolicy",
        "metadata": {"name": SECOND["name"], "namespace": SECOND["namespace"]},
        "spec": {
            "linkRef": {"name": "campus-border"},
            "dtnHost": SECOND["host"],
            "targetRate": SECOND["target"],
            "congestionControl": "cubic",
        },
    }


def _apply(plane: ControlPlane, document: dict[str, Any], directory: Path) -> None:
    path = directory / f"{document['kind']}-{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    plane.kubectl("apply", "-f", str(path))


class StateReader:
    """The controller's /state straight from its pod (the host routes to the node's pods)."""

    def __init__(self, plane: ControlPlane, reader: Path) -> None:
        self.plane = plane
        self.context = http_client_context(load_mutual_tls(reader))
        self.address = ""

    def pod(self) -> dict[str, Any] | None:
        running = installed.pods(self.plane, "controller")
        return running[0] if len(running) == 1 else None

    def read(self) -> ControllerState | None:
        if not self.address:
            pod = self.pod()
            self.address = (pod or {}).get("status", {}).get("podIP", "")
            if not self.address:
                return None
        url = f"https://{self.address}:{CONTROLLER_HTTP_PORT}/state"
        fetched = fetch_state(url, 2.0, tls=self.context, server_name=WORKLOAD_SERVER_NAME)
        return ControllerState.model_validate(fetched) if fetched else None


def _loop_pods(plane: ControlPlane) -> dict[str, tuple[str, int]]:
    """Each loop pod's uid and restart count, by component."""
    out: dict[str, tuple[str, int]] = {}
    for component in ("collector", "controller"):
        for pod in installed.pods(plane, component):
            restarts = sum(
                c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []
            )
            out[component] = (pod["metadata"]["uid"], restarts)
    return out


def _watch(
    state: StateReader, done: Callable[[ControllerState], bool], timeout_s: float
) -> tuple[float | None, list[ControllerState]]:
    """Seconds until ``done`` holds for a fresh /state, and every /state read meanwhile."""
    start = time.monotonic()
    seen: list[ControllerState] = []
    while time.monotonic() - start < timeout_s:
        now = state.read()
        if now is not None:
            seen.append(now)
            if done(now):
                return time.monotonic() - start, seen
        time.sleep(POLL_S)
    return None, seen


def _has_policy(now: ControllerState) -> bool:
    return any(p.name == SECOND["name"] for p in now.policies)


def _has_class(now: ControllerState) -> bool:
    return now.state is not None and any(h.host == SECOND["host"] for h in now.state.dtn_hosts)


def _steps(seen: list[ControllerState]) -> tuple[float, float]:
    """The largest change of u(t) between consecutive decisions, and the largest beyond
    what the change of the targets' sum explains (a new R* moves u at once, as the fixed
    split would: ``control.antiwindup.follow_setpoint``). A decision's R* is the one its
    first /state read shows; a reload can land between a decision and that read (0.1 s
    of each T), so a move is also matched against the neighbouring pairs' change of R*."""
    decisions: dict[int, tuple[float, float]] = {}
    for s in seen:
        if (
            s.state is not None
            and s.campus_rate_limit_bps is not None
            and s.target_rate_bps is not None
            and not s.failsafe_active
            and s.state.sequence not in decisions  # its first read
        ):
            decisions[s.state.sequence] = (s.campus_rate_limit_bps, s.target_rate_bps)
    ordered = [decisions[k] for k in sorted(decisions)]
    moves = [b[0] - a[0] for a, b in itertools.pairwise(ordered)]
    shifts = [b[1] - a[1] for a, b in itertools.pairwise(ordered)]
    raw = max((abs(m) for m in moves), default=0.0)
    beyond = 0.0
    for k, move in enumerate(moves):
        near = [shifts[j] for j in (k - 1, k, k + 1) if 0 <= j < len(shifts)]
        beyond = max(beyond, min(abs(move + shift) for shift in [0.0, *near]))
    return raw, beyond


def _change(
    plane: ControlPlane, state: StateReader, run: int, change: str, act: Callable[[], None]
) -> dict[str, Any]:
    before = _loop_pods(plane)
    _watch(state, lambda _: True, 5.0)
    act()
    present = change == "add"
    controller_s, seen = _watch(state, lambda s: _has_policy(s) == present, 60.0)
    class_s, more = _watch(state, lambda s: _has_class(s) == present, 60.0)
    if class_s is not None and controller_s is not None:
        class_s += controller_s
    _, after = _watch(state, lambda _: False, AFTER_S)
    raw, beyond = _steps([*seen, *more, *after])
    restarted = sum(
        1 for k, (uid, count) in _loop_pods(plane).items()
        if before.get(k, ("", 0))[0] != uid or before[k][1] != count
    )  # fmt: skip
    row = {
        "run": run,
        "change": change,
        "controller_s": "" if controller_s is None else round(controller_s, 2),
        "class_s": "" if class_s is None else round(class_s, 2),
        "max_step_bps": round(raw),
        "max_move_beyond_sum_bps": round(beyond),
        "restarts": restarted,
    }
    print(row, flush=True)
    return row


def _report(rows: list[dict[str, Any]]) -> str:
    def figures(key: str, change: str) -> list[float]:
        return [float(r[key]) for r in rows if r["change"] == change and r[key] != ""]

    lines = [
        "# A policy added to or removed from a running link, on the real node",
        "",
        "`bench/node_policy_latency.py` (the chart with the simulated switch on a real "
        f"kubelet, T = {SAMPLE_TIME_S:g} s, maxStep 200 Mb/s, a second policy of 200 Mb/s "
        "on a second DTN host). Seconds from `kubectl apply`/`delete` returning until the "
        "running controller holds the new plan, and until its samples carry (or drop) the "
        f"host's class. Target: within T + 2 s = {TARGET_S:g} s, no pod restarted, no step "
        "of u(t) above maxStep.",
        "",
        "| change | runs | plan median (s) | plan max (s) | class median (s) | class max (s) "
        "| largest u step (Mb/s) | beyond the sum's change (Mb/s) | pods restarted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for change in ("add", "remove"):
        mine = [r for r in rows if r["change"] == change]
        ctrl, cls = figures("controller_s", change), figures("class_s", change)
        step = max(float(r["max_step_bps"]) for r in mine) / 1e6
        beyond = max(float(r["max_move_beyond_sum_bps"]) for r in mine) / 1e6
        restarts = sum(int(r["restarts"]) for r in mine)
        n = len(mine)

        def cell(values: list[float], pick: Callable[[list[float]], float], n: int) -> str:
            return f"{pick(values):.2f}" if len(values) == n else "never"

        lines.append(
            f"| {change} | {n} | {cell(ctrl, statistics.median, n)} | {cell(ctrl, max, n)} "
            f"| {cell(cls, statistics.median, n)} | {cell(cls, max, n)} | {step:.1f} "
            f"| {beyond:.1f} "
            f"| {restarts} |"
        )
    every = [float(r[k]) for r in rows for k in ("controller_s", "class_s") if r[k] != ""]
    timely = len(every) == 2 * len(rows) and max(every) <= TARGET_S
    no_restart = all(int(r["restarts"]) == 0 for r in rows)
    raw = max(float(r["max_step_bps"]) for r in rows)
    beyond = max(float(r["max_move_beyond_sum_bps"]) for r in rows)
    lines += [
        "",
        f"- Within T + 2 s: **{'met' if timely else 'missed'}**"
        f" (slowest {max(every, default=math.nan):.2f} s).",
        f"- No pod restarted: **{'met' if no_restart else 'missed'}**.",
        f"- No step of u(t) above maxStep: **{'met' if raw <= MAX_STEP_BPS else 'missed'}** "
        f"({raw / 1e6:.1f} Mb/s); beyond the sum's own change "
        f"**{'met' if beyond <= MAX_STEP_BPS else 'missed'}** ({beyond / 1e6:.1f} Mb/s): a "
        "new sum moves u(t) at once by its change, as the fixed split does "
        "(`follow_setpoint`), and the filter by at most maxStep.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="add/remove cycles")
    parser.add_argument("--quick", action="store_true", help="2 runs")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/policy_latency")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    missing = [*real_node.missing_tools(), *image.missing_tools()]
    if missing:
        sys.exit(f"needs {', '.join(missing)} (README, 'Quick start': make testenv)")
    print("building or reusing the image ...", flush=True)
    archive = installed.image_archive()
    plane = start_control_plane(
        node_reachable=True, nodes=(), crds=(REPO_ROOT / "crds",), log=lambda _: None
    )
    node = real_node.start_real_node(plane, "node-0", log=lambda _: None)
    rows: list[dict[str, Any]] = []
    try:
        node.import_image(archive)
        installed.helm_install(plane, "simulatedSwitch.enabled=true")
        with tempfile.TemporaryDirectory() as work:
            directory = Path(work)
            plane.kubectl("apply", "-f", str(EXAMPLES / "tenants.yaml"))
            _apply(plane, _link(), directory)
            plane.kubectl("apply", "-f", str(EXAMPLES / "dtntransferpolicy.yaml"))
            reader = installed.metrics_reader(plane, directory / "reader")
            state = StateReader(plane, reader)
            waited, _ = _watch(state, lambda s: s.state is not None and not s.failsafe_active, 300)
            if waited is None:
                sys.exit("the loop never controlled: " + plane.kubectl("get", "pods", "-A").stdout)
            policy_path = directory / "second.yaml"
            policy_path.write_text(yaml.safe_dump(_second_policy()))
            add = ("apply", "-f", str(policy_path))
            remove = ("delete", "-f", str(policy_path), "--wait=false")
            for run in range(runs):
                rows.append(_change(plane, state, run, "add", lambda: plane.kubectl(*add)))
                rows.append(_change(plane, state, run, "remove", lambda: plane.kubectl(*remove)))
    finally:
        node.stop()
        plane.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "episodes.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    report = _report(rows)
    (args.out / "report.md").write_text(report)
    print(report)
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
