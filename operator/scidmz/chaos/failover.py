"""Operator fail-over: the active replica killed with every link's policy Ready."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from scidmz.k8s.status import condition_true
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, start_control_plane
from scidmz.testenv.identities import OPERATOR_NAMESPACE
from scidmz.testenv.operator_process import start_operator
from scidmz.testenv.policies import TENANT_NAMESPACE, link_name, policy_name, scale_manifest


@dataclass(frozen=True)
class FailoverResult:
    policies: int
    lifetime_s: int
    ready_before: int
    takeover_s: float | None
    """From SIGKILL of the active replica to the standby resuming (its log says so)."""
    reconciled_s: float | None
    """From SIGKILL to a spec change made right after it reaching the policy's ConfigMap."""
    ready_after: int
    standby_rss_mb: float


def _ready_count(plane: ControlPlane) -> int:
    items = json.loads(plane.kubectl("get", "dtp", "-A", "-o", "json").stdout)["items"]
    return sum(condition_true(p, "Ready") for p in items)


def run_operator_failover(
    policies: int, lifetime_s: int, ready_timeout_s: float = 240.0,
    log: Callable[[str], None] = print,
) -> FailoverResult:  # fmt: skip
    """Two operator replicas with ``policies`` links of one Ready policy each; SIGKILL the
    active one, then change one policy's target rate at once and time the standby's
    takeover and that change reaching its link's ConfigMap."""
    plane = start_control_plane(crds=(REPO_ROOT / "crds",), log=lambda _: None)
    env = {"SCIDMZ_PEERING_LIFETIME_S": str(lifetime_s)}
    active = start_operator(
        plane, plane.workdir / "active.log", {**env, "SCIDMZ_PEERING_PRIORITY": "100"}
    )
    standby = start_operator(
        plane, plane.workdir / "standby.log", {**env, "SCIDMZ_PEERING_PRIORITY": "50"}
    )
    try:
        manifest = scale_manifest(policies, policies, OPERATOR_NAMESPACE)
        plane.kubectl("apply", "-f", "-", input_text=manifest)
        deadline = time.monotonic() + ready_timeout_s
        while (ready := _ready_count(plane)) < policies and time.monotonic() < deadline:
            time.sleep(1.0)
        log(f"  {ready}/{policies} policies Ready; SIGKILL of the active replica")
        name, link = policy_name(policies // 2), link_name(policies // 2)
        killed = time.monotonic()
        active.proc.kill()
        active.proc.wait(timeout=10)
        plane.kubectl(
            "patch", "dtp", name, "-n", TENANT_NAMESPACE, "--type=merge",
            "-p", '{"spec":{"targetRate":"777Mbps"}}',
        )  # fmt: skip
        takeover = reconciled = None
        while time.monotonic() - killed < 120 and (takeover is None or reconciled is None):
            if takeover is None and "Resuming operations" in standby.log_path.read_text():
                takeover = time.monotonic() - killed
            if reconciled is None:
                config = plane.kubectl(
                    "get", "configmap", f"{link}-config", "-n", OPERATOR_NAMESPACE,
                    "-o", "jsonpath={.data}", check=False,
                ).stdout  # fmt: skip
                if "777000000" in config:
                    reconciled = time.monotonic() - killed
            time.sleep(0.1)
        time.sleep(3.0)
        return FailoverResult(
            policies=policies,
            lifetime_s=lifetime_s,
            ready_before=ready,
            takeover_s=takeover,
            reconciled_s=reconciled,
            ready_after=_ready_count(plane),
            standby_rss_mb=psutil.Process(standby.proc.pid).memory_info().rss / 2**20,
        )
    finally:
        for replica in (active, standby):
            if replica.alive():
                replica.stop()
        plane.stop()
