"""The product as a user installs it, on a real node: the image `make test` builds imported
into the node's containerd, `helm install` with the chart's defaults (only the image
reference overridden), the examples applied, and the loop's pods running from the image,
reading their ConfigMap, finding each other through Services and cluster DNS."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from scidmz.auth.identity import WORKLOAD_SERVER_NAME
from scidmz.metrics.dashboards import DASHBOARDS
from scidmz.metrics.preview import fetch_series
from scidmz.testenv import image
from scidmz.testenv import node as real_node
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, start_control_plane
from scidmz.testenv.identities import create_switch_secret
from tests.k8s.conftest import wait_for

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(real_node.missing_tools() or image.missing_tools()),
        reason="the installed product needs root, the real node's tools and buildah",
    ),
    pytest.mark.timeout(1800),
]
NS = "scidmz-system"
EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, real_node.Node, Path]]:
    base = image.base_image(image.base_rootfs(Path.home() / ".cache" / "scidmz" /
                                              f"image-base-{image.SUITE}"))  # fmt: skip
    built = image.build(REPO_ROOT, base)
    archive = image.archive(built.tag, tmp_path_factory.mktemp("image") / "scidmz.tar")
    plane = start_control_plane(
        node_reachable=True, nodes=(), crds=(REPO_ROOT / "crds",), log=lambda _: None
    )
    node = real_node.start_real_node(plane, "node-0", log=lambda _: None)
    try:
        node.import_image(archive)
        yield plane, node, tmp_path_factory.mktemp("switch")
    finally:
        node.stop()
        plane.stop()


def _wait(predicate, timeout_s: float, what: str, plane: ControlPlane):  # type: ignore[no-untyped-def]
    """``wait_for`` every 0.5 s, with every pod's state when it times out."""
    try:
        return wait_for(predicate, timeout_s, what, interval=0.5)
    except AssertionError as error:
        pods = plane.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        raise AssertionError(f"{error}\n{pods}") from None


def _switch(plane: ControlPlane, directory: Path) -> None:
    """`scidmz target` (the simulated campus) as a pod beside the loop, serving the
    switch's certificate, and the administrators' Secret for the collector."""
    tls = create_switch_secret(plane, NS, "campus-switch-tls", directory, "scidmz-target")
    plane.kubectl(
        "create", "secret", "generic", "scidmz-target-serving", "-n", NS,
        f"--from-file=tls.crt={tls.switch_cert}", f"--from-file=tls.key={tls.switch_key}",
        f"--from-file=ca.crt={tls.collector_dir / 'ca.crt'}",
    )  # fmt: skip
    labels = {"app.kubernetes.io/name": "scidmz-target"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "scidmz-target", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "target", "image": "localhost/scidmz:test",
                        "imagePullPolicy": "Never",
                        "args": ["target", "--listen", "0.0.0.0:9559",
                                 "--dtn-address", "203.0.113.10", "--campus-address", "203.0.113.1",
                                 "--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key",
                                 "--tls-client-ca", "/tls/ca.crt"],
                        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                    }],
                    "volumes": [{"name": "tls", "secret": {"secretName": "scidmz-target-serving"}}],
                },
            },
        },
    }  # fmt: skip
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "scidmz-target", "namespace": NS},
        "spec": {"selector": labels, "ports": [{"name": "p4rt", "port": 9559}]},
    }  # fmt: skip
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": [deployment, service]}),
    )


def _helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [plane.toolchain.path("helm"), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def test_helm_install_runs_the_loop_in_pods_on_the_real_node(
    cluster: tuple[ControlPlane, real_node.Node, Path],
) -> None:
    plane, node, directory = cluster
    _helm(plane, "install", "scidmz", str(REPO_ROOT / "charts" / "scidmz"), "--namespace", NS,
          "--create-namespace", "--set", "image.repository=localhost/scidmz",
          "--set", "image.tag=test", "--wait", "--timeout", "180s")  # fmt: skip
    _switch(plane, directory)
    plane.kubectl("apply", "-f", str(EXAMPLES / "tenants.yaml"),
                  "-f", str(EXAMPLES / "borderlink.yaml"))  # fmt: skip
    plane.kubectl("apply", "-f", str(EXAMPLES / "dtntransferpolicy.yaml"))

    def link_ready() -> bool:
        out = plane.kubectl("get", "bl", "campus-border", "-o", "json", check=False).stdout
        conditions = (json.loads(out).get("status") or {}).get("conditions", []) if out else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    _wait(link_ready, 240, "the link's loop Ready (collector and controller pods)", plane)
    # the measured rate reaches the policy's status through the controller's Service
    rate = _wait(
        lambda: plane.kubectl(
            "get", "dtp", "paper-testbed", "-n", "physics",
            "-o", "jsonpath={.status.state.dtnRate}", check=False,
        ).stdout, 90, "the measured DTN rate in the policy's status", plane,
    )  # fmt: skip
    assert rate.endswith("bps"), rate
    nodes = plane.kubectl("get", "pods", "-n", NS, "-o", "jsonpath={.items[*].spec.nodeName}")
    assert set(nodes.stdout.split()) == {"node-0"}
    _prometheus_scrapes_every_loop_pod(plane, node, directory)

    # u(t) is decided and moves with the samples
    limits = set()
    for _ in range(3):
        limits.add(_wait(lambda: _link_state(plane).get("campusRateLimit"), 30, "u(t)", plane))
        seen = _link_state(plane).get("sampledAt")
        _wait(lambda seen=seen: _link_state(plane).get("sampledAt") != seen, 30,
              "a newer sample", plane)  # fmt: skip
    assert all(limit.endswith("bps") for limit in limits), limits

    # a collector pod killed: its Deployment replaces it, the controller goes to its
    # fail-safe while samples are missing and comes back to control on the new pod's
    collector = _pods(plane, "collector")
    plane.kubectl("delete", "-n", NS, *collector, "--wait=false")
    _wait(lambda: (now := _pods(plane, "collector")) and not set(now) & set(collector),
          60, "a new collector pod", plane)  # fmt: skip
    before = _link_state(plane).get("sampledAt")
    _wait(lambda: link_ready() and _link_state(plane).get("sampledAt") != before, 120,
          "control back on the new collector", plane)  # fmt: skip

    _helm(plane, "uninstall", "scidmz", "--namespace", NS, "--wait")
    left = plane.kubectl("get", "deployments", "-n", NS, "-l",
                         "app.kubernetes.io/component=operator", "-o", "name").stdout  # fmt: skip
    assert left.strip() == ""


def _prometheus_scrapes_every_loop_pod(
    plane: ControlPlane, node: real_node.Node, directory: Path
) -> None:
    """The real Prometheus, on the node's network, discovering the loop's pods through the
    API server (``kubernetes_sd_configs``) and scraping them over mutual TLS with the
    metrics-reader certificate; the overview dashboard's queries then return data."""
    # Debian's Prometheus has no Kubernetes discovery: the one hack/testenv/build.sh builds
    prometheus = str(plane.toolchain.node_dir / "prometheus")
    reader = directory / "reader"
    reader.mkdir()
    secret = json.loads(plane.kubectl("get", "secret", "scidmz-metrics-reader", "-n", NS,
                                      "-o", "json").stdout)["data"]  # fmt: skip
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (reader / key).write_bytes(base64.b64decode(secret[key]))
    port = plane.server.rsplit(":", 1)[1]
    pki = plane.pki
    config = {
        "global": {"scrape_interval": "2s"},
        "scrape_configs": [{
            "job_name": "scidmz-pods",
            "kubernetes_sd_configs": [{
                "role": "pod",
                "api_server": f"https://{real_node.HOST_IP}:{port}",
                "tls_config": {"ca_file": str(pki.ca_cert), "cert_file": str(pki.admin_cert),
                               "key_file": str(pki.admin_key)},
                "namespaces": {"names": [NS]},
            }],
            "scheme": "https",
            "tls_config": {"ca_file": str(reader / "ca.crt"),
                           "cert_file": str(reader / "tls.crt"),
                           "key_file": str(reader / "tls.key"),
                           "server_name": WORKLOAD_SERVER_NAME},
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                 "regex": "https-metrics", "action": "keep"},
                # the label a ServiceMonitor gives: <link>-<component>
                {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance",
                                   "__meta_kubernetes_pod_label_app_kubernetes_io_component"],
                 "separator": "-", "target_label": "service"},
            ],
        }],
    }  # fmt: skip
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    listen = f"{real_node.NODE_IP}:9090"
    node.spawn("prometheus", [prometheus, f"--config.file={directory / 'prometheus.yml'}",
                              f"--storage.tsdb.path={directory / 'tsdb'}",
                              f"--web.listen-address={listen}"])  # fmt: skip
    url = f"http://{listen}"

    def up() -> list[dict[str, object]]:
        query = urllib.parse.urlencode({"query": 'up{job="scidmz-pods"}'})
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as reply:
                return list(json.load(reply)["data"]["result"])
        except OSError:
            return []

    try:
        targets = _wait(lambda: (r := up()) and all(t["value"][1] == "1" for t in r) and
                        len(r) >= 2 and r, 60, "every loop pod scraped", plane)  # fmt: skip
    except AssertionError as error:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as reply:
                seen = reply.read().decode()[:3000]
        except OSError as reason:
            seen = f"no answer: {reason}"
        raise AssertionError(f"{error}\ntargets: {seen}\n{node.log_tail('prometheus')}") from None
    services = {t["metric"]["service"] for t in targets}  # type: ignore[index]
    assert services == {"campus-border-collector", "campus-border-controller"}, services
    time.sleep(10)  # a few scrapes for the rate() panels
    now = time.time()
    source = fetch_series(url, now - 60, now, step_s=2.0, variables={"link": ".*"})
    overview = DASHBOARDS["overview"]()
    empty = [
        panel["title"] for panel in overview["panels"]
        if not any(source(t["expr"], t.get("legendFormat", "")) for t in panel["targets"])
    ]  # fmt: skip
    assert empty == [], empty


def _link_state(plane: ControlPlane) -> dict[str, str]:
    out = plane.kubectl("get", "bl", "campus-border", "-o", "jsonpath={.status.state}",
                        check=False).stdout  # fmt: skip
    return dict(json.loads(out)) if out else {}


def _pods(plane: ControlPlane, component: str) -> list[str]:
    return plane.kubectl(
        "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/component={component}",
        "--field-selector=status.phase=Running", "-o", "name",
    ).stdout.split()  # fmt: skip
