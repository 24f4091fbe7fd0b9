"""status.state and status.tracking come from the policy's running controller.

kwok runs no containers, so the policy's workloads run here as real processes, from the
runtime config the operator rendered into the policy's ConfigMap: `scidmz target` (the
switch), `scidmz collector` and `scidmz controller` (sim actuator). The operator reads the
controller's /state (its URL template points at this test's port) into the status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import yaml

from scidmz.api.runtime import CONFIG_KEY, RuntimeConfig, dump_runtime_config
from scidmz.demo_loop import local_config
from scidmz.testenv.cluster import free_port
from scidmz.testenv.processes import stop_all
from scidmz.testenv.projection import project_like_kubelet
from tests.k8s.conftest import wait_for


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_status_shows_the_controllers_live_state_and_a_new_target_taken_live(
    operator, kube, example_policy, tmp_path
):
    policy = {**example_policy, "metadata": {"name": "live"}}
    policy["spec"] = {
        **policy["spec"],
        "sampleTime": "500ms",
        "campus": {"remotePrefix": "198.51.100.0/24"},
        "controller": {"strategy": "pi"},
        "actuator": {"type": "sim"},
    }
    kube.apply(policy)
    config_map = wait_for(lambda: kube.get("configmap", "live-config"), 30, "the ConfigMap")
    # the ConfigMap as the kubelet mounts it: a spec change reaches the running controller
    # through this volume, as in a pod
    volume = tmp_path / "config"

    def mount(config_map: dict[str, Any]) -> None:
        rendered = RuntimeConfig.model_validate(yaml.safe_load(config_map["data"][CONFIG_KEY]))
        local = local_config(rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}")
        project_like_kubelet(volume, {CONFIG_KEY: dump_runtime_config(local)})

    switch, grpc_port = free_port(), free_port()
    mount(config_map)
    path = volume / CONFIG_KEY
    processes = [
        _run(["target", "--listen", f"127.0.0.1:{switch}"]),
        _run(["collector", "--config", str(path), "--http-port", str(free_port())]),
        _run(["controller", "--config", str(path), "--http-port", str(operator.state_port)]),
    ]
    try:
        live = wait_for(
            lambda: (
                ((kube.get("dtp", "live") or {}).get("status") or {}).get("tracking")
                and kube.get("dtp", "live")["status"]
            ),
            60,
            "status.state and status.tracking",
            interval=0.5,
        )
        state = live["state"]
        assert state["dtnRate"].endswith("bps") and state["campusRateLimit"].endswith("bps")
        assert state["dtnRtt"].endswith("ms") and state["activeFlows"] == 108
        assert state["sampledAt"].endswith("Z")
        assert 0 <= live["tracking"]["mrae"] < 1 and live["tracking"]["window"].endswith("s")
        printed = operator.plane.kubectl("get", "dtp", "live", "-n", kube.namespace).stdout
        assert "bps" in printed  # the DTN RATE and CAMPUS LIMIT printer columns fill in
        assert state["targetRate"] == "600Mbps"

        # a new R*: the operator rewrites the ConfigMap (the pods stay), the kubelet
        # projects it, the same controller process takes it, and the status says so
        template = kube.get("deployment", "live-controller")["spec"]["template"]
        kube.apply({**policy, "spec": {**policy["spec"], "targetRate": "700Mbps"}})
        changed = wait_for(
            lambda: (
                (c := kube.get("configmap", "live-config"))
                and "700000000.0" in c["data"][CONFIG_KEY]
                and c
            ),
            10,
            "the ConfigMap rewritten",
        )
        mount(changed)
        wait_for(
            lambda: kube.get("dtp", "live")["status"]["state"].get("targetRate") == "700Mbps",
            10,
            "status.state.targetRate = 700Mbps",
            interval=0.5,
        )
        controller = processes[2]
        assert controller.poll() is None  # taken live, not by a restart
        assert kube.get("deployment", "live-controller")["spec"]["template"] == template
    finally:
        # the controller first: it restores its fail-safe through the switch's sim shaper
        stop_all(list(zip(("target", "collector", "controller"), processes, strict=True)))
