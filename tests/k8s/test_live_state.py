"""status.state and status.tracking come from the policy's running controller.

kwok runs no containers, so the policy's workloads run here as real processes, from the
runtime config the operator rendered into the policy's ConfigMap: `scidmz target` (the
switch), `scidmz collector` and `scidmz controller` (sim actuator). The operator reads the
controller's /state (its URL template points at this test's port) into the status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml

from scidmz.api.runtime import RuntimeConfig
from scidmz.demo_loop import local_config
from scidmz.testenv.cluster import free_port
from tests.k8s.conftest import wait_for


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_status_shows_the_controllers_live_state(operator, kube, example_policy, tmp_path):
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
    rendered = RuntimeConfig.model_validate(yaml.safe_load(config_map["data"]["config.yaml"]))
    switch, grpc_port = free_port(), free_port()
    local = local_config(rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(local.model_dump(mode="json")))
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
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=15)
