"""A real node (kubelet + containerd + runc) joined to the local control plane: pods from
an image built here run with addresses of the node's bridge, and stopping the node leaves
nothing behind on the host."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from scidmz.testenv import node as real_node
from scidmz.testenv.cluster import ControlPlane, start_control_plane
from tests.k8s.conftest import wait_for

pytestmark = pytest.mark.skipif(
    bool(MISSING := real_node.missing_tools()),
    reason=f"unsupported machine (README, 'Quick start'): {', '.join(MISSING)}",
)


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    plane = start_control_plane(node_reachable=True, log=lambda _: None)
    yield plane
    plane.stop()


def test_a_pod_runs_on_the_real_node_and_nothing_is_left_after_it(plane: ControlPlane) -> None:
    node = real_node.start_real_node(plane, "node-0", log=lambda _: None)
    try:
        addresses = json.loads(
            plane.kubectl("get", "node", "node-0", "-o", "jsonpath={.status.addresses}").stdout
        )
        assert {"type": "InternalIP", "address": real_node.NODE_IP} in addresses
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "sandbox-only", "namespace": "default"},
            "spec": {
                "nodeName": "node-0",
                "containers": [{"name": "pause", "image": real_node.PAUSE_IMAGE,
                                "imagePullPolicy": "Never"}],
            },
        }  # fmt: skip
        plane.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
        phase = wait_for(
            lambda: (out := plane.kubectl(
                "get", "pod", "sandbox-only", "-o", "jsonpath={.status.phase} {.status.podIP}",
                check=False,
            ).stdout).startswith("Running") and out,
            60, "the pod Running",
        )  # fmt: skip
        assert real_node.pod_ip_in_range(phase.split()[1]), phase
        # the pod's network is the node's bridge: reachable from the node, not the host's
        ping = subprocess.run(
            node.in_node("ping", "-c", "1", "-W", "2", phase.split()[1]),
            capture_output=True,
            check=False,
        )
        assert ping.returncode == 0, ping.stderr
        plane.kubectl("delete", "pod", "sandbox-only", "--wait=true", "--timeout=60s")
        # Services: the kubernetes Service's cluster IP reaches the API server through
        # kube-proxy's rules, and its name resolves through the cluster's DNS
        for url in (
            "https://198.19.0.1/livez",
            "https://kubernetes.default.svc.cluster.local/livez",
        ):
            answer = wait_for(lambda url=url: (r := subprocess.run(
                node.in_node("curl", "-s", "--max-time", "2", "--cacert",
                             str(plane.pki.ca_cert), url),
                capture_output=True, text=True, check=False,
            )).returncode == 0 and r, 30, f"{url} from the node")  # fmt: skip
            assert answer.stdout.strip() == "ok", (url, answer.stdout, answer.stderr)
    finally:
        node.stop()
    assert real_node.leftovers(str(node.root)) == []
