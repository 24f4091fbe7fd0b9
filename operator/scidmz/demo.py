"""``make demo``: the local control plane, the operator and ``examples/*.yaml`` (tenants'
namespaces, two BorderLinks, their policies) until they are Ready; then the loop of
BorderLink campus-border running for real (software switch + simulator, collector,
controller, Prometheus, all over mutual TLS) with a live view, and a report with plots at
the end. Cleans up after itself; on failure the logs are kept and their location
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
    LocalTls,
    Workloads,
    dashboard_pictures,
    start_workloads,
    watch,
    write_report,
)
from scidmz.k8s.status import condition_true, find_condition
from scidmz.testenv.cluster import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    free_port,
    start_control_plane,
)
from scidmz.testenv.identities import (
    OPERATOR_NAMESPACE,
    create_switch_secret,
    ensure_namespace,
    secret_to_directory,
)
from scidmz.testenv.operator_process import OperatorProcess, start_operator

EXAMPLES = REPO_ROOT / "examples"
APPLY_ORDER = ("tenants.yaml", "borderlink.yaml", "bbr-edge-tc.yaml", "dtntransferpolicy.yaml")
"""Namespaces before the policies in them; links before the policies that name them."""
LOOP_LINK = "campus-border"
SWITCH_SECRETS = {"campus-switch-tls": "scidmz-target", "edge-switch-tls": "edge-switch"}
"""The examples' switch TLS Secrets (what an administrator creates) and the switches' names."""
CRDS = REPO_ROOT / "crds"


class DemoError(RuntimeError):
    """The demo could not run; the message says what to look at."""


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return find_condition(obj, kind) or {
        "status": "Unknown", "reason": "Pending", "message": "not reconciled yet",
    }  # fmt: skip


def _coloured(condition: dict[str, Any]) -> str:
    colour = {"True": "green", "False": "yellow"}.get(condition["status"], "white")
    return f"[{colour}]{condition['status']}[/]"


def status_tables(
    links: list[dict[str, Any]], policies: list[dict[str, Any]], elapsed_s: float
) -> Table:
    table = Table(title=f"BorderLinks and DTNTransferPolicies ({elapsed_s:.1f}s after apply)")
    for column in ("object", "link / capacity", "target", "Accepted", "Ready", "reason"):
        table.add_column(column)
    for link in links:
        spec, ready = link["spec"], _condition(link, "Ready")
        admitted = (link.get("status") or {}).get("policies") or {}
        table.add_row(
            f"BorderLink {link['metadata']['name']}",
            spec["capacity"],
            admitted.get("admittedTarget", "—"),
            "",
            _coloured(ready),
            ready.get("reason", ""),
        )
    for policy in policies:
        spec, meta = policy["spec"], policy["metadata"]
        accepted, ready = _condition(policy, "Accepted"), _condition(policy, "Ready")
        table.add_row(
            f"dtp {meta['namespace']}/{meta['name']}",
            spec["linkRef"]["name"],
            spec["targetRate"],
            _coloured(accepted),
            _coloured(ready),
            ready.get("reason", "") if accepted["status"] == "True" else accepted.get("reason", ""),
        )
    return table


def items(plane: ControlPlane, kind: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", kind, "-A", "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def hold_until_interrupted(console: Console, kubeconfig: Path, hint: str) -> None:
    """``--keep``: say how to reach the cluster and wait for Ctrl-C (or SIGTERM)."""
    console.print(f"[bold]Still running.[/] export KUBECONFIG={kubeconfig}\n"
                  f"Try: {hint}; Ctrl-C cleans up.")  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def say_how_it_ended(console: Console, workdir: Path, failed: bool, removed: str) -> None:
    """A failed demo keeps its logs and says where; a finished one removes them."""
    if failed:
        console.print(f"[red]demo failed; logs kept in {workdir}[/]")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        console.print(f"[green]demo finished; {removed}[/]")


def wait_until_ready(plane: ControlPlane, console: Console, timeout_s: float, hint: str) -> None:
    """The links' and policies' status, live, until every one is Ready. Raises
    ``DemoError`` (with ``hint``: where to look) after ``timeout_s``."""
    started = time.monotonic()
    with Live(console=console, refresh_per_second=4) as live:
        while True:
            links, policies = items(plane, "borderlinks"), items(plane, "dtp")
            elapsed = time.monotonic() - started
            live.update(status_tables(links, policies, elapsed))
            if (
                policies
                and all(condition_true(p, "Ready") for p in policies)
                and all(condition_true(x, "Ready") for x in links)
            ):
                console.print()
                return
            if elapsed > timeout_s:
                raise DemoError(f"links and policies not Ready after {timeout_s:.0f}s; {hint}")
            time.sleep(0.25)


def _local_tls(plane: ControlPlane, workdir: Path, switch: Any) -> LocalTls:
    """The operator's certificates for the loop's processes, as pods would mount them."""
    identity = workdir / "identity"

    def secret(name: str) -> Path:
        return secret_to_directory(plane, OPERATOR_NAMESPACE, name, identity / name)

    return LocalTls(
        collector=secret(f"{LOOP_LINK}-collector-tls"),
        controller=secret(f"{LOOP_LINK}-controller-tls"),
        reader=secret("scidmz-metrics-reader"),
        switch_client=switch.collector_dir,
        switch_cert=switch.switch_cert,
        switch_key=switch.switch_key,
    )


def run_demo(
    keep: bool = False,
    timeout_s: float = 60.0,
    duration_s: float = 60.0,
    report_dir: Path = Path("demo-report"),
) -> None:
    console = Console()
    missing = [name for name in APPLY_ORDER if not (EXAMPLES / name).exists()]
    if missing:
        raise DemoError(f"{', '.join(missing)} missing in {EXAMPLES}: run the demo from a clone")
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
                nodes=("kwok-node-0", "edge-1", "dtn-2"),
                log=lambda m: console.print(f"  {m}"),
            )
        except ControlPlaneError as error:
            raise DemoError(str(error)) from error
        console.print(f"  CRDs installed from {CRDS.relative_to(REPO_ROOT)}/")

        console.rule("[bold]2/5 scidmz operator")
        ensure_namespace(plane, OPERATOR_NAMESPACE)
        switches = {
            name: create_switch_secret(plane, OPERATOR_NAMESPACE, name, workdir / name, host)
            for name, host in SWITCH_SECRETS.items()
        }
        console.print(
            f"  switch TLS Secrets {', '.join(SWITCH_SECRETS)} created in {OPERATOR_NAMESPACE} "
            "(what an administrator does)"
        )
        log_path = workdir / "operator.log"
        controller_port = free_port()
        try:
            operator = start_operator(
                plane,
                log_path,
                extra_env={
                    "SCIDMZ_STATE_POLL_S": "2",
                    # no kubelet here: the loop's controller runs locally; tell the
                    # operator where (an operator setting, never a tenant's)
                    "SCIDMZ_CONTROLLER_STATE_URL": f"https://127.0.0.1:{controller_port}/state",
                },
            )
        except ControlPlaneError as error:
            raise DemoError(
                f"the operator did not become healthy: {error}; log: {log_path}"
            ) from error
        console.print(f"  operator healthy (pid {operator.proc.pid}, log {log_path})")

        console.rule("[bold]3/5 kubectl apply -f examples/")
        for name in APPLY_ORDER:
            applied = plane.kubectl("apply", "-f", str(EXAMPLES / name))
            console.print("  " + applied.stdout.strip().replace("\n", "\n  "))

        console.rule("[bold]4/5 status")
        wait_until_ready(plane, console, timeout_s, f"operator log: {log_path}")
        console.print(plane.kubectl("get", "borderlinks").stdout)
        console.print(plane.kubectl("get", "dtp", "-A").stdout)
        console.print(
            plane.kubectl(
                "get", "deploy,svc,cm,secret,networkpolicy", "-n", OPERATOR_NAMESPACE,
                "-l", "app.kubernetes.io/part-of=scidmz",
            ).stdout
        )  # fmt: skip
        rendered = RuntimeConfig.model_validate(
            yaml.safe_load(
                plane.kubectl(
                    "get", "configmap", f"{LOOP_LINK}-config", "-n", OPERATOR_NAMESPACE,
                    "-o", "jsonpath={.data.config\\.yaml}",
                ).stdout
            )
        )  # fmt: skip
        console.rule(f"[bold]5/5 the loop of BorderLink {LOOP_LINK}, for {duration_s:.0f} s")
        console.print(
            "  kwok runs no containers, so the workloads run here, with the config the "
            f"operator rendered into ConfigMap {OPERATOR_NAMESPACE}/{LOOP_LINK}-config and "
            "the certificates it issued them:"
        )
        tls = _local_tls(plane, workdir, switches["campus-switch-tls"])
        workloads = start_workloads(
            rendered, workdir, controller_port, console.print, tls,
            operator_metrics_port=operator.metrics_port if operator else None,
        )  # fmt: skip
        started = time.time()
        policy = rendered.policies[0]
        label = f"{policy.namespace}/{policy.name} on {LOOP_LINK}"
        try:
            rows = watch(workloads.state, label, duration_s, console)
        except TimeoutError as error:
            raise DemoError(f"the loop did not start: {error}; logs: {workdir}") from None
        console.print(plane.kubectl("get", "dtp", "-A").stdout)
        written = write_report(rows, report_dir, label)
        prometheus = workloads.prometheus_port
        written += dashboard_pictures(
            f"http://127.0.0.1:{prometheus}" if prometheus else None, started, time.time(),
            report_dir, console.print,
        )  # fmt: skip
        console.print("  report: " + ", ".join(str(p) for p in written))
        if keep:
            hold_until_interrupted(console, plane.kubeconfig,
                                   "kubectl explain borderlink.spec.tenants")  # fmt: skip
        failed = False
    finally:
        if workloads is not None:
            workloads.stop()
        if operator is not None:
            operator.stop()
        if plane is not None:
            plane.stop()
        say_how_it_ended(console, workdir, failed, "everything was stopped and removed")
