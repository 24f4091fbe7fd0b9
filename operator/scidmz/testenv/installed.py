"""The product installed on the real node: the image imported, the chart installed with
helm, the pods found, and a Prometheus on the node discovering them through the API
server, as the in-cluster demo and the tests use them.

Side effects only at the edges: ``prometheus_config`` is pure; the rest runs helm,
kubectl, buildah or a process on the node.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scidmz.auth.identity import WORKLOAD_SERVER_NAME
from scidmz.testenv import image
from scidmz.testenv import node as real_node
from scidmz.testenv.certs import PkiPaths
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, ControlPlaneError
from scidmz.testenv.identities import OPERATOR_NAMESPACE, secret_to_directory

CHART = REPO_ROOT / "charts" / "scidmz"
RELEASE = "scidmz"
IMAGE_REPOSITORY, IMAGE_TAG = image.IMAGE_TAG.rsplit(":", 1)
PROMETHEUS_PORT = 9090


ARCHIVES = Path.home() / ".cache" / "scidmz" / "image-archive"
"""The last image's docker-archive, named by its ID: one export per build, not per use."""


def image_archive(log: Callable[[str], None] = print) -> Path:
    """The project's image (``make image``'s), built or reused, as a docker-archive for
    the node's containerd (exported once per image). Raises ``image.ImageError``."""
    with image.BUILD_LOCK:
        cache = Path.home() / ".cache" / "scidmz" / f"image-base-{image.SUITE}"
        if not (cache / ".complete").exists():
            log(f"image: the base (debootstrap {image.SUITE}, once, ~1 min) ...")
        base = image.base_image(image.base_rootfs(cache))
        log("image: buildah bud (cached layers; a first build takes ~5 min) ...")
        built = image.build(REPO_ROOT, base)
        path = ARCHIVES / f"{image.image_id(built.tag)}.tar"
        if path.exists():
            log(f"image: {built.tag} ready in {built.seconds:.0f} s (exported before)")
            return path
        log(f"image: {built.tag} built in {built.seconds:.0f} s; exporting it for containerd ...")
        ARCHIVES.mkdir(parents=True, exist_ok=True)
        for old in ARCHIVES.glob("*.tar"):
            old.unlink()  # one image of ~800 MB is enough
        partial = image.archive(built.tag, path.with_suffix(".partial"))
        partial.rename(path)  # only a whole archive is ever found
        return path


def helm(plane: ControlPlane, *args: str, timeout_s: float = 600) -> str:
    """Run helm against ``plane``; its stdout. Raises ``ControlPlaneError`` with helm's
    message when it fails."""
    result = subprocess.run(
        [plane.toolchain.path("helm"), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True, text=True, check=False, timeout=timeout_s,
    )  # fmt: skip
    if result.returncode != 0:
        raise ControlPlaneError(f"helm {args[0]}: {result.stderr.strip() or result.stdout}")
    return result.stdout


def helm_install(plane: ControlPlane, *settings: str, timeout: str = "180s") -> str:
    """``helm install`` of the chart with its defaults, the image built here, and
    ``settings`` (``key=value``); waits for the operator's pods to be Ready."""
    values = [f"image.repository={IMAGE_REPOSITORY}", f"image.tag={IMAGE_TAG}", *settings]
    return helm(
        plane, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
        "--create-namespace", *[a for v in values for a in ("--set", v)],
        "--wait", "--timeout", timeout,
    )  # fmt: skip


def pods(plane: ControlPlane, component: str, running: bool = True) -> list[dict[str, Any]]:
    """The operator namespace's pods of ``component`` (not those being deleted)."""
    phase = ["--field-selector=status.phase=Running"] if running else []
    out = plane.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/component={component}",
        *phase, "-o", "json",
    ).stdout  # fmt: skip
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def metrics_reader(plane: ControlPlane, directory: Path) -> Path:
    """The operator-issued metrics-reader certificate (what Prometheus presents)."""
    return secret_to_directory(plane, OPERATOR_NAMESPACE, "scidmz-metrics-reader", directory)


def prometheus_config(
    api_server: str, pki: PkiPaths, reader: Path, namespaces: Sequence[str]
) -> dict[str, Any]:
    """Prometheus discovering pods through the API server (``kubernetes_sd_configs``) and
    scraping every ``https-metrics`` port over mutual TLS with the metrics-reader
    certificate, labelled as a ServiceMonitor would (``service: <link>-<component>``)."""

    # two copies, not one object twice: yaml.safe_dump would write an anchor and an alias
    def discovery() -> list[dict[str, Any]]:
        return [{
            "role": "pod",
            "api_server": api_server,
            "tls_config": {"ca_file": str(pki.ca_cert), "cert_file": str(pki.admin_cert),
                           "key_file": str(pki.admin_key)},
            "namespaces": {"names": list(namespaces)},
        }]  # fmt: skip

    return {
        "global": {"scrape_interval": "2s"},
        "scrape_configs": [{
            "job_name": "scidmz-pods",
            "kubernetes_sd_configs": discovery(),
            "scheme": "https",
            "tls_config": {"ca_file": str(reader / "ca.crt"),
                           "cert_file": str(reader / "tls.crt"),
                           "key_file": str(reader / "tls.key"),
                           "server_name": WORKLOAD_SERVER_NAME},
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                 "regex": "https-metrics", "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance",
                                   "__meta_kubernetes_pod_label_app_kubernetes_io_component"],
                 "separator": "-", "target_label": "service"},
            ],
        }, {
            # the operator replicas' own /metrics (plain HTTP, its counters only): what a
            # PodMonitor scrapes, for the health dashboard's reconcile panels
            "job_name": "operator",
            "kubernetes_sd_configs": discovery(),
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component",
                                   "__meta_kubernetes_pod_container_port_name"],
                 "regex": "operator;metrics", "action": "keep"},
            ],
        }],
    }  # fmt: skip


def start_prometheus(
    plane: ControlPlane, node: real_node.Node, reader: Path, directory: Path
) -> str:
    """The Prometheus ``hack/testenv/build.sh`` builds (Debian's has no Kubernetes
    discovery) on the node's network, as a cluster's would run; its URL."""
    import yaml

    port = plane.server.rsplit(":", 1)[1]
    config = prometheus_config(
        f"https://{real_node.HOST_IP}:{port}", plane.pki, reader, [OPERATOR_NAMESPACE]
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    listen = f"{real_node.NODE_IP}:{PROMETHEUS_PORT}"
    binary = str(plane.toolchain.node_dir / "prometheus")
    node.spawn("prometheus", [
        binary, f"--config.file={directory / 'prometheus.yml'}",
        f"--storage.tsdb.path={directory / 'tsdb'}", f"--web.listen-address={listen}",
    ])  # fmt: skip
    return f"http://{listen}"
