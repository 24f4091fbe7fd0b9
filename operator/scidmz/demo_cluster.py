"""``make demo`` as the product runs: the project's image on a real node (kubelet,
containerd, runc) of a local control plane, the chart installed with ``helm install``
(its simulated switch on), ``examples/`` applied, and the link's loop running in pods:
the collector and controller the operator created, finding the switch and each other
through Services and cluster DNS. A Prometheus on the node discovers the pods through the
API server and scrapes them over mutual TLS; the report's dashboards come from it.

Needs root, cgroups, overlayfs, containerd and buildah (``testenv.node.missing_tools``);
``scidmz demo --mode host`` runs the loop as local processes instead where they are
missing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rich.console import Console

from scidmz.demo import (
    EXAMPLES,
    LOOP_LINK,
    DemoError,
    hold_until_interrupted,
    say_how_it_ended,
    wait_until_ready,
)
from scidmz.demo_loop import dashboard_pictures, pod_state, watch, write_report
from scidmz.testenv import image, installed
from scidmz.testenv import node as real_node
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, ControlPlaneError, start_control_plane
from scidmz.testenv.identities import OPERATOR_NAMESPACE

IN_CLUSTER_EXAMPLES = ("tenants.yaml", "borderlink.yaml", "dtntransferpolicy.yaml")
"""examples/bbr-edge-tc.yaml is left out: its link shapes with tc on edge nodes this
single node does not have (``--mode host`` shows it on fake nodes)."""


def missing() -> list[str]:
    """What the in-cluster demo needs and this machine lacks (empty: it can run)."""
    return [*real_node.missing_tools(), *image.missing_tools()]


def run_cluster_demo(
    keep: bool = False,
    timeout_s: float = 300.0,
    duration_s: float = 60.0,
    report_dir: Path = Path("demo-report"),
) -> None:
    console = Console()
    lacking = missing()
    if lacking:
        raise DemoError(
            f"the in-cluster demo needs {', '.join(dict.fromkeys(lacking))} "
            "(make sysdeps installs them as root); or run the loop as local processes: "
            "scidmz demo --mode host"
        )
    gone = [name for name in IN_CLUSTER_EXAMPLES if not (EXAMPLES / name).exists()]
    if gone:
        raise DemoError(f"{', '.join(gone)} missing in {EXAMPLES}: run the demo from a clone")
    workdir = Path(tempfile.mkdtemp(prefix="scidmz-demo-"))
    failed = True
    plane: ControlPlane | None = None
    node: real_node.Node | None = None
    say = console.print
    try:
        console.rule("[bold]1/6 the image (buildah, no Docker daemon)")
        try:
            archive = installed.image_archive(lambda m: say(f"  {m}"))
        except image.ImageError as error:
            raise DemoError(f"the image did not build: {error}") from error

        console.rule("[bold]2/6 local Kubernetes: control plane and a real node")
        try:
            plane = start_control_plane(
                workdir=workdir / "cluster", node_reachable=True, nodes=(),
                crds=(REPO_ROOT / "crds",), log=lambda m: say(f"  {m}"),
            )  # fmt: skip
            node = real_node.start_real_node(plane, "node-0", log=lambda m: say(f"  {m}"))
            started = time.monotonic()
            node.import_image(archive)
            say(
                f"  image imported into the node's containerd in {time.monotonic() - started:.0f} s"
            )
        except (ControlPlaneError, real_node.NodeError) as error:
            raise DemoError(str(error)) from error

        console.rule("[bold]3/6 helm install scidmz (with its simulated switch)")
        try:
            installed.helm_install(
                plane, "simulatedSwitch.enabled=true", "operator.statePollSeconds=2"
            )
        except ControlPlaneError as error:
            pods = plane.kubectl("get", "pods", "-A", check=False).stdout
            raise DemoError(f"{error}\n{pods}") from error
        say(plane.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide").stdout)

        console.rule("[bold]4/6 kubectl apply -f examples/")
        applied = plane.kubectl(
            "apply", *[a for n in IN_CLUSTER_EXAMPLES for a in ("-f", str(EXAMPLES / n))]
        )
        say("  " + applied.stdout.strip().replace("\n", "\n  "))
        say(
            "  (bbr-edge-tc.yaml left out: it shapes with tc on edge nodes this one node "
            "does not have; --mode host shows it on fake nodes)"
        )
        pods_hint = f"kubectl get pods -n {OPERATOR_NAMESPACE} (KUBECONFIG={plane.kubeconfig})"
        wait_until_ready(plane, console, timeout_s, pods_hint)
        say(plane.kubectl("get", "borderlinks").stdout)
        say(plane.kubectl("get", "dtp", "-A").stdout)
        say(plane.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide").stdout)

        console.rule(
            f"[bold]5/6 the loop of BorderLink {LOOP_LINK} in pods, for {duration_s:.0f} s"
        )
        reader = installed.metrics_reader(plane, workdir / "reader")
        prometheus = installed.start_prometheus(plane, node, reader, workdir / "prometheus")
        say(f"  prometheus on the node: {prometheus} (pods found through the API server)")
        say("  the controller's /state, read from its pod over mutual TLS every second:")
        label = f"physics/paper-testbed on {LOOP_LINK}"
        began = time.time()
        try:
            rows = watch(lambda: pod_state(plane, reader), label, duration_s,
                         console)  # fmt: skip
        except TimeoutError as error:
            raise DemoError(f"the loop did not start: {error}") from None
        say(plane.kubectl("get", "dtp", "-A").stdout)

        console.rule("[bold]6/6 report")
        written = write_report(rows, report_dir, label,
                               how="simulated campus, the loop in pods on a real node")  # fmt: skip
        written += dashboard_pictures(prometheus, began, time.time(), report_dir, say)
        say("  report: " + ", ".join(str(p) for p in written))
        if keep:
            ns = OPERATOR_NAMESPACE
            hint = f"kubectl get pods -n {ns}; kubectl logs -n {ns} deploy/{LOOP_LINK}-controller"
            hold_until_interrupted(console, plane.kubeconfig, hint)
        failed = False
    finally:
        if node is not None:
            node.stop()
        if plane is not None:
            plane.stop()
        say_how_it_ended(console, workdir, failed, "the node and the control plane were removed")
