"""status.state and status.tracking come from the link's running controller, over mutual
TLS, into the link's status and its admitted policy's.

kwok runs no containers, so the link's workloads run here as real processes, from the
runtime config the operator rendered into the link's ConfigMap and the certificates it
issued them: `scidmz target` (the switch), `scidmz collector` and `scidmz controller` (sim
actuator). The operator reads the controller's /state (its URL template points at this
test's port; it checks the certificate against the Service's name) into both statuses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import yaml

from scidmz.api.runtime import CONFIG_KEY, RuntimeConfig, dump_runtime_config
from scidmz.demo_loop import local_config
from scidmz.k8s.status import condition_true, find_condition
from scidmz.testenv.cluster import free_port
from scidmz.testenv.identities import OPERATOR_NAMESPACE, secret_to_directory
from scidmz.testenv.processes import stop_all
from scidmz.testenv.projection import project_like_kubelet
from tests.k8s.conftest import wait_for
from tests.loops import link_object, plaintext_link_spec, policy_object


def _run(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_status_shows_the_controllers_live_state_and_a_new_target_taken_live(
    operator, kube, links, tmp_path
):
    name = links.name("live")
    spec = plaintext_link_spec(
        sampleTime="500ms",
        campus={"remotePrefix": "198.51.100.0/24"},
        controller={"strategy": "pi"},
    )
    links.apply({**link_object(name), "spec": spec})
    kube.apply(policy_object("live", linkRef={"name": name}))
    # the config with the policy admitted (a link's first pass may render it idle)
    config_map = wait_for(
        lambda: (c := links.child("configmap", f"{name}-config"))
        and "target_rate_bps: 600000000.0" in c["data"][CONFIG_KEY] and c,
        30,
        "the ConfigMap holding the policy",
    )  # fmt: skip
    identities = {
        component: secret_to_directory(
            operator.plane, OPERATOR_NAMESPACE, f"{name}-{component}-tls", tmp_path / component
        )
        for component in ("collector", "controller")
    }
    switch, grpc_port = free_port(), free_port()

    # the ConfigMap as the kubelet mounts it, one volume per pod (each its own identity):
    # a target change reaches the running controller through this volume, as in a pod
    def mount(config_map: dict[str, Any]) -> None:
        rendered = RuntimeConfig.model_validate(yaml.safe_load(config_map["data"][CONFIG_KEY]))
        for component, identity in identities.items():
            local = local_config(
                rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}", identity
            )
            project_like_kubelet(
                tmp_path / f"{component}-config", {CONFIG_KEY: dump_runtime_config(local)}
            )

    mount(config_map)
    processes = [
        _run(["target", "--listen", f"127.0.0.1:{switch}"]),
        _run(["collector", "--config", str(tmp_path / "collector-config" / CONFIG_KEY),
              "--http-port", str(free_port())]),
        _run(["controller", "--config", str(tmp_path / "controller-config" / CONFIG_KEY),
              "--http-port", str(operator.state_port)]),
    ]  # fmt: skip
    try:
        live = wait_for(
            lambda: (
                ((links.get(name) or {}).get("status") or {}).get("tracking")
                and links.get(name)["status"]
            ),
            60,
            "the link's status.state and status.tracking",
            interval=0.5,
        )
        state = live["state"]
        assert state["dtnRate"].endswith("bps") and state["campusRateLimit"].endswith("bps")
        assert state["dtnRtt"].endswith("ms") and state["activeFlows"] == 108
        assert state["sampledAt"].endswith("Z") and state["targetRate"] == "600Mbps"
        # the plan: what the 1 Gb/s link leaves to the campus, and the policy's host held
        # only through the sum (it has no shaper)
        assert state["campusShare"] == "400Mbps"
        (host,) = state["dtnHosts"]
        assert host["host"] == "dtn-1" and host["targetRate"] == "600Mbps"
        assert host["enforcedBy"] == "LinkSum" and "rateLimit" not in host
        assert 0 <= live["tracking"]["mrae"] < 1 and live["tracking"]["window"].endswith("s")
        printed = operator.plane.kubectl("get", "borderlink", name).stdout
        assert "bps" in printed  # the DTN RATE and CAMPUS LIMIT printer columns fill in
        # the admitted policy sees its own figures in its namespace
        policy = wait_for(
            lambda: (kube.get("dtp", "live").get("status") or {}).get("state") and
            kube.get("dtp", "live")["status"],
            20, "the policy's status.state",
        )  # fmt: skip
        assert policy["state"]["targetRate"] == "600Mbps"
        assert policy["state"]["dtnRate"].endswith("bps") and "tracking" in policy

        # a new R* from the tenant: the operator rewrites the ConfigMap (the pods stay),
        # the kubelet projects it, the same controller process takes it, statuses say so
        template = links.child("deployment", f"{name}-controller")["spec"]["template"]
        kube.apply(policy_object("live", linkRef={"name": name}, targetRate="700Mbps"))
        changed = wait_for(
            lambda: (
                (c := links.child("configmap", f"{name}-config"))
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
            "the policy's status.state.targetRate = 700Mbps",
            interval=0.5,
        )
        assert links.get(name)["status"]["state"]["targetRate"] == "700Mbps"
        assert processes[2].poll() is None  # taken live, not by a restart
        assert links.child("deployment", f"{name}-controller")["spec"]["template"] == template

        # the collector dies while its pod still looks ready: the controller holds its
        # fail-safe rate, the link is Degraded and the policy not Ready, both saying so
        stop_all([("collector", processes[1])])
        # (a plaintext link is Degraded already: the fail-safe is the more urgent reason)
        degraded = wait_for(
            lambda: (c := find_condition(links.get(name), "Degraded")) and
            c["reason"] == "FailSafe" and c, 30, "the link Degraded while the fail-safe holds",
            interval=0.5,
        )  # fmt: skip
        assert degraded["status"] == "True" and "fail-safe rate" in degraded["message"]
        assert links.get(name)["status"]["state"]["failsafeActive"] is True
        ready = wait_for(
            lambda: (c := find_condition(kube.get("dtp", "live"), "Ready")) and
            c["reason"] == "FailSafe" and c, 10, "the policy's Ready=False FailSafe",
        )  # fmt: skip
        assert ready["status"] == "False"
        processes[1] = _run(["collector", "--config", str(tmp_path / "collector-config" /
                             CONFIG_KEY), "--http-port", str(free_port())])  # fmt: skip
        wait_for(lambda: condition_true(kube.get("dtp", "live"), "Ready"), 60,
                 "the policy Ready again once samples flow", interval=0.5)  # fmt: skip
        degraded = find_condition(links.get(name), "Degraded") or {}
        assert degraded.get("reason") == "PlaintextSwitch", degraded
    finally:
        # the controller first: it restores its fail-safe through the switch's sim shaper
        stop_all(list(zip(("target", "collector", "controller"), processes, strict=True)))
