"""``make demo``: the local control plane, the operator and ``examples/*.yaml`` until they
are Ready; then the loop of ``examples/dtntransferpolicy.yaml`` running for real (software
switch + simulator, collector, controller, Prometheus) with a live view, and a report with
plots at the end. Cleans up after itself; on failure the logs are kept and their location
printed."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from scidmz.api.runtime import RuntimeConfig
from scidmz.demo_loop import (
    Workloads,
    dashboard_pictures,
    start_workloads,
    watch,
    write_report,
)
from scidmz.k8s.reconcile import STATE_URL_ANNOTATION
from scidmz.testenv.cluster import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    free_port,
    start_control_plane,
)
from scidmz.testenv.operator_process import OperatorProcess, start_operator

EXAMPLES = REPO_ROOT / "examples"
LOOP_EXAMPLE = "dtntransferpolicy.yaml"
CRDS = REPO_ROOT / "crds"


class DemoError(RuntimeError):
    """The demo could not run; the message says what to look at."""


def _ready_condition(policy: dict[str, Any]) -> dict[str, Any]:
    for condition in (policy.get("status") or {}).get("conditions", []):
        if condition["type"] == "Ready":
            return dict(condition)
    return {"status": "Unknown", "reason": "Pending", "message": "not reconciled yet"}


def _policy_table(policies: list[dict[str, Any]], elapsed_s: float) -> Table:
    table = Table(title=f"DTNTransferPolicies ({elapsed_s:.1f}s after apply)")
    for column in (
        "namespace/name",
        "target",
        "capacity",
        "strategy",
        "actuator",
        "Ready",
        "reason",
    ):
        table.add_column(column)
    for policy in policies:
        spec, meta = policy["spec"], policy["metadata"]
        ready = _ready_condition(policy)
        colour = {"True": "green", "False": "yellow"}.get(ready["status"], "white")
        table.add_row(
            f"{meta['namespace']}/{meta['name']}",
            spec["targetRate"],
            spec["bottleneckCapacity"],
            (spec.get("controller") or {}).get("strategy", "mlc"),
            (spec.get("actuator") or {}).get("type", "dryRun"),
            f"[{colour}]{ready['status']}[/]",
            ready.get("reason", ""),
        )
    return table


def _example_name(filename: str) -> str:
    document = yaml.safe_load((EXAMPLES / filename).read_text())
    return str(document["metadata"]["name"])


def _policies(plane: ControlPlane) -> list[dict[str, Any]]:
    out = plane.kubectl("get", "dtp", "-A", "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def run_demo(
    keep: bool = False,
    timeout_s: float = 60.0,
    duration_s: float = 60.0,
    report_dir: Path = Path("demo-report"),
) -> None:
    console = Console()
    examples = sorted(EXAMPLES.glob("*.yaml"))
    if not examples:
        raise DemoError(f"no examples in {EXAMPLES}: run the demo from a clone of the repo")
    workdir = Path(tempfile.mkdtemp(prefix="scidmz-demo-"))
    failed = True
    operator: OperatorProcess | None = None
    plane: ControlPlane | None = None
    workloads: Workloads | None = None
    try:
        console.rule("[bold]1/5 local Kubernetes control plane")
        try:
            plane = start_control_plane(
                workdir=workdir / "cluster",
                crds=(CRDS,),
                nodes=("kwok-node-0", "edge-1", "dtn-1"),
                log=lambda m: console.print(f"  {m}"),
            )
        except ControlPlaneError as error:
            raise DemoError(str(error)) from error
        console.print(f"  CRDs installed from {CRDS.relative_to(REPO_ROOT)}/")

        console.rule("[bold]2/5 scidmz operator")
        log_path = workdir / "operator.log"
        controller_port = free_port()
        try:
            operator = start_operator(
                plane,
                log_path,
                extra_env={"SCIDMZ_STATE_POLL_S": "2"},
            )
        except ControlPlaneError as error:
            raise DemoError(
                f"the operator did not become healthy: {error}; log: {log_path}"
            ) from error
        console.print(f"  operator healthy (pid {operator.proc.pid}, log {log_path})")

        console.rule("[bold]3/5 kubectl apply -f examples/")
        applied = plane.kubectl("apply", *[a for e in examples for a in ("-f", str(e))])
        console.print("  " + applied.stdout.strip().replace("\n", "\n  "))

        console.rule("[bold]4/5 status")
        started = time.monotonic()
        with Live(console=console, refresh_per_second=4) as live:
            while True:
                policies = _policies(plane)
                elapsed = time.monotonic() - started
                live.update(_policy_table(policies, elapsed))
                if policies and all(_ready_condition(p)["status"] == "True" for p in policies):
                    break
                if elapsed > timeout_s:
                    raise DemoError(
                        f"policies not Ready after {timeout_s:.0f}s; operator log: {log_path}"
                    )
                time.sleep(0.25)
        console.print(plane.kubectl("get", "dtp", "-A").stdout)
        console.print(
            plane.kubectl(
                "get", "deploy,svc,cm", "-A", "-l", "app.kubernetes.io/part-of=scidmz"
            ).stdout
        )
        policy = next(
            p for p in _policies(plane) if p["metadata"]["name"] == _example_name(LOOP_EXAMPLE)
        )
        name, namespace = policy["metadata"]["name"], policy["metadata"]["namespace"]
        # no kubelet here: the example's controller runs locally; tell the operator where
        plane.kubectl(
            "annotate", "dtp", name, "-n", namespace, "--overwrite",
            f"{STATE_URL_ANNOTATION}=http://127.0.0.1:{controller_port}/state",
        )  # fmt: skip
        rendered = RuntimeConfig.model_validate(
            yaml.safe_load(
                plane.kubectl(
                    "get", "configmap", f"{name}-config", "-n", namespace,
                    "-o", "jsonpath={.data.config\\.yaml}",
                ).stdout
            )
        )  # fmt: skip
        console.rule(f"[bold]5/5 the loop of {LOOP_EXAMPLE}, for {duration_s:.0f} s")
        console.print(
            "  kwok runs no containers, so the workloads run here, with the config the "
            f"operator rendered into ConfigMap {namespace}/{name}-config:"
        )
        workloads = start_workloads(rendered, workdir, controller_port, console.print)
        started = time.time()
        rows = watch(workloads, f"{namespace}/{name}", rendered.target_rate_bps, duration_s,
                     console)  # fmt: skip
        console.print(plane.kubectl("get", "dtp", "-A").stdout)
        written = write_report(rows, report_dir, f"{namespace}/{name}")
        written += dashboard_pictures(
            workloads.prometheus_port, started, time.time(), report_dir, console.print
        )
        console.print("  report: " + ", ".join(str(p) for p in written))
        if keep:
            console.print(
                f"[bold]Still running.[/] export KUBECONFIG={plane.kubeconfig}\n"
                "Try: kubectl explain dtp.spec.controller; Ctrl-C cleans up."
            )
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            stop.wait()
        failed = False
    finally:
        if workloads is not None:
            workloads.stop()
        if operator is not None:
            operator.stop()
        if plane is not None:
            plane.stop()
        if failed:
            console.print(f"[red]demo failed; logs kept in {workdir}[/]")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            console.print("[green]demo finished; everything was stopped and removed[/]")
