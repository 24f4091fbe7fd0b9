"""The product as a user installs it, on a real node: the image `make test` builds imported
into the node's containerd, `helm install` with the chart's defaults (the image reference
overridden, the optional simulated switch on), the examples applied, and the loop's pods
running from the image, reading their ConfigMap, finding each other through Services and
cluster DNS. Then what an operator of the cluster does to it: a new target, an upgrade of
the operator, a killed pod, a drained node, and an uninstall.

The tests run in order on one installation (each names what the earlier ones left)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scidmz import __version__
from scidmz.api.units import parse_rate
from scidmz.auth.switch_tls import load_channel_tls
from scidmz.auth.switch_tls import open_channel as open_switch_channel
from scidmz.control.actuators import SimActuator
from scidmz.demo_loop import pod_state
from scidmz.k8s.status import condition_true, find_condition
from scidmz.lab import native
from scidmz.metrics.dashboards import DASHBOARDS
from scidmz.metrics.preview import fetch_series
from scidmz.testenv import image, installed
from scidmz.testenv import node as real_node
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, start_control_plane
from scidmz.testenv.identities import secret_to_directory
from tests.k8s.conftest import wait_for

pytestmark = [
    pytest.mark.skipif(
        bool(MISSING := [*real_node.missing_tools(), *image.missing_tools()]),
        reason=f"unsupported machine (README, 'Quick start'): {', '.join(MISSING)}",
    ),
    pytest.mark.timeout(1800),
]
NS = "scidmz-system"
EXAMPLES = REPO_ROOT / "examples"


@dataclass
class Installed:
    plane: ControlPlane
    node: real_node.Node
    directory: Path

    @property
    def reader(self) -> Path:
        """The metrics-reader certificate (the operator issues it at start)."""
        path = self.directory / "reader"
        if not (path / "tls.crt").exists():
            installed.metrics_reader(self.plane, path)
        return path

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, check=check)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    archive = installed.image_archive(log=lambda _: None)
    plane = start_control_plane(
        node_reachable=True, nodes=(), crds=(REPO_ROOT / "crds",), log=lambda _: None
    )
    node = real_node.start_real_node(plane, "node-0", log=lambda _: None)
    try:
        node.import_image(archive)
        yield Installed(plane, node, tmp_path_factory.mktemp("installed"))
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


def _helm(plane: ControlPlane, *args: str) -> str:
    return installed.helm(plane, *args)


def _link(plane: ControlPlane) -> dict[str, Any]:
    out = plane.kubectl("get", "bl", "campus-border", "-o", "json", check=False).stdout
    return dict(json.loads(out)) if out else {}


def _policy(plane: ControlPlane) -> dict[str, Any]:
    out = plane.kubectl("get", "dtp", "paper-testbed", "-n", "physics", "-o", "json",
                        check=False).stdout  # fmt: skip
    return dict(json.loads(out)) if out else {}


def _pods(plane: ControlPlane, component: str, running: bool = True) -> list[dict[str, Any]]:
    return installed.pods(plane, component, running)


def _controller_state(cluster: Installed) -> dict[str, Any]:
    return pod_state(cluster.plane, cluster.reader)


def _new_decisions(cluster: Installed, count: int) -> list[dict[str, Any]]:
    """The controller's next ``count`` decisions (a newer sample each)."""
    seen: list[dict[str, Any]] = []
    last = None
    while len(seen) < count:
        state = _wait(lambda last=last: (s := _controller_state(cluster)).get("state") and
                      s["state"].get("sequence") != last and s, 30, "a new decision",
                      cluster.plane)  # fmt: skip
        last = state["state"]["sequence"]
        seen.append(state)
    return seen


def _held_campus_limit(cluster: Installed) -> float | None:
    """What the simulated switch's shaper holds now, read back from it with the
    controller's actuator certificate of the administrators' Secret (the collector's pair
    may speak P4Runtime only)."""
    (pod,) = _pods(cluster.plane, "simulated-switch")
    switch_dir = secret_to_directory(
        cluster.plane, NS, "campus-switch-tls", cluster.directory / "switch"
    )

    async def read() -> float | None:
        address = f"{pod['status']['podIP']}:9559"
        tls = load_channel_tls(switch_dir, "scidmz-target", actuator=True)
        channel = open_switch_channel(address, tls)
        actuator = SimActuator(address, timeout_s=5.0, channel=channel)
        try:
            return await actuator.current()
        finally:
            await actuator.close()

    return asyncio.run(read())


def _restarts(plane: ControlPlane) -> dict[str, int]:
    out = plane.kubectl("get", "pods", "-n", NS, "-o", "json").stdout
    return {
        p["metadata"]["name"]: sum(c["restartCount"] for c in statuses)
        for p in json.loads(out)["items"]
        for statuses in [p["status"].get("containerStatuses") or []]
    }


def test_helm_install_runs_the_loop_in_pods_on_the_real_node(cluster: Installed) -> None:
    plane = cluster.plane
    installed.helm_install(plane, "simulatedSwitch.enabled=true")
    # both operator replicas Ready only once started (readinessProbe on /readyz)
    operators = _pods(plane, "operator")
    assert len(operators) == 2 and all(
        c["ready"] for p in operators for c in p["status"]["containerStatuses"]
    )
    # as GitOps would: in one apply (the link's first pass then mostly sees its policy)
    files = ("tenants.yaml", "borderlink.yaml", "dtntransferpolicy.yaml")
    plane.kubectl("apply", *[a for f in files for a in ("-f", str(EXAMPLES / f))])
    _wait(lambda: condition_true(_link(plane), "Ready"), 240,
          "the link's loop Ready (collector and controller pods)", plane)  # fmt: skip
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
    _prometheus_scrapes_every_loop_pod(cluster)
    # u(t) is decided on each new sample
    decisions = _new_decisions(cluster, 3)
    assert all(d["campus_rate_limit_bps"] > 0 and not d["failsafe_active"] for d in decisions)
    # logs and exec through the API server, which checks the kubelet's serving certificate
    (controller,) = _pods(plane, "controller")
    name = controller["metadata"]["name"]
    logs = plane.kubectl("logs", "-n", NS, name).stdout
    assert "controller for campus-border: mlc" in logs, logs[-2000:]
    version = plane.kubectl("exec", "-n", NS, name, "--", "scidmz", "--version").stdout
    assert version.strip() == f"scidmz {__version__}", version


def test_a_new_target_is_taken_without_a_restart(cluster: Installed) -> None:
    """The tenant lowers the target (GitOps would patch the same field): the running
    controller takes it from its re-read ConfigMap and gives the campus more room; then
    an operator upgrade rolls the operator, not the loop."""
    plane = cluster.plane
    (before,) = _pods(plane, "controller")
    held_before = [d["campus_rate_limit_bps"] for d in _new_decisions(cluster, 5)]
    assert all(d == pytest.approx(600e6) for d in
               [s["target_rate_bps"] for s in _new_decisions(cluster, 1)])  # fmt: skip
    plane.kubectl("patch", "dtp", "paper-testbed", "-n", "physics", "--type=merge",
                  "-p", '{"spec": {"targetRate": "400Mbps"}}')  # fmt: skip
    _wait(lambda: _controller_state(cluster).get("target_rate_bps") == pytest.approx(400e6),
          90, "the controller holding the new target", plane)  # fmt: skip
    _new_decisions(cluster, 8)  # the loop settles on the new split (max step 200 Mb/s)
    held_after = [d["campus_rate_limit_bps"] for d in _new_decisions(cluster, 5)]
    # R* 600 → 400 Mb/s on 1 Gb/s: u(t) near B − R* moves up by about 200 Mb/s
    assert sum(held_after) / 5 > sum(held_before) / 5 + 100e6, (held_before, held_after)
    (after,) = _pods(plane, "controller")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert _restarts(plane)[after["metadata"]["name"]] == 0
    status = _wait(lambda: (_link(plane).get("status") or {}).get("state", {}).get("targetRate")
                   == "400Mbps", 60, "the new target in the link's status", plane)  # fmt: skip
    assert status
    # upgrading the operator leaves the running loop alone
    _helm(plane, "upgrade", "scidmz", str(REPO_ROOT / "charts" / "scidmz"), "--namespace", NS,
          "--reuse-values", "--set", "operator.resyncSeconds=15", "--wait",
          "--timeout", "180s")  # fmt: skip
    _new_decisions(cluster, 3)
    (still,) = _pods(plane, "controller")
    assert still["metadata"]["uid"] == before["metadata"]["uid"]


def test_a_killed_collector_pod_is_replaced_and_control_resumes(cluster: Installed) -> None:
    """The controller holds the fail-safe rate while samples are missing, and the link and
    the policy say so; the Deployment replaces the pod and control resumes on its samples.
    The node is cordoned meanwhile so that the outage lasts past the operator's state poll
    (a replacement otherwise comes back within seconds)."""
    plane = cluster.plane
    (collector,) = _pods(plane, "collector")
    plane.kubectl("cordon", "node-0")
    try:
        plane.kubectl("delete", "pod", "-n", NS, collector["metadata"]["name"], "--wait=false")
        _wait(lambda: _controller_state(cluster).get("failsafe_active") is True, 30,
              "the controller in its fail-safe", plane)  # fmt: skip
        degraded = _wait(
            lambda: (c := find_condition(_link(plane), "Degraded")) and c["status"] == "True"
            and c, 30, "the link Degraded while the fail-safe holds", plane,
        )  # fmt: skip
        assert degraded["reason"] == "FailSafe" and "fail-safe rate" in degraded["message"]
        # no collector: the link is not Ready for its telemetry, and its policy says so
        ready = find_condition(_link(plane), "Ready") or {}
        assert ready.get("status") == "False" and ready["reason"].startswith("Telemetry"), ready
        policy = _wait(lambda: (p := _policy(plane)) and not condition_true(p, "Ready") and p,
                       30, "the policy not Ready while the fail-safe holds", plane)  # fmt: skip
        assert (find_condition(policy, "Ready") or {}).get("reason") == "LinkNotReady"
    finally:
        plane.kubectl("uncordon", "node-0")
    _wait(lambda: (now := _pods(plane, "collector")) and now[0]["metadata"]["uid"]
          != collector["metadata"]["uid"], 60, "a new collector pod", plane)  # fmt: skip
    _wait(lambda: _controller_state(cluster).get("failsafe_active") is False, 120,
          "control back on the new collector", plane)  # fmt: skip
    _wait(lambda: not condition_true(_link(plane), "Degraded"), 30, "Degraded cleared", plane)
    _wait(lambda: condition_true(_policy(plane), "Ready"), 30, "the policy Ready again", plane)
    assert _new_decisions(cluster, 2)


def test_a_drained_node_keeps_the_failsafe_rate_and_nothing_crash_loops(
    cluster: Installed,
) -> None:
    """``kubectl drain`` of the loop's pods (the operator and the simulated switch stand
    for what runs elsewhere, so the drain selects the link's pods): the controller restores
    the fail-safe rate as it is evicted, the switch holds it while nothing can be
    scheduled, the link says why, and no pod restarts; uncordoned, the loop comes back."""
    plane = cluster.plane
    restarts = _restarts(plane)
    plane.kubectl("drain", "node-0", "--pod-selector", "app.kubernetes.io/part-of=scidmz",
                  "--delete-emptydir-data", "--ignore-daemonsets", "--timeout=120s")  # fmt: skip
    try:
        failsafe = 1e9 - 400e6  # trivial: B − R*
        _wait(lambda: _held_campus_limit(cluster) == pytest.approx(failsafe), 30,
              "the fail-safe rate in force on the switch", plane)  # fmt: skip
        link = _wait(lambda: (now := _link(plane)) and not condition_true(now, "Ready") and now,
                     60, "the link not Ready while drained", plane)  # fmt: skip
        ready = find_condition(link, "Ready") or {}
        assert ready.get("reason", "").startswith(("Telemetry", "Controller")), ready
        pending = _pods(plane, "controller", running=False)
        assert pending and all(p["status"]["phase"] == "Pending" for p in pending)
        time.sleep(20)  # long enough for a crash loop to show
        assert _held_campus_limit(cluster) == pytest.approx(failsafe)
        now = _restarts(plane)
        assert {n: r for n, r in now.items() if r > restarts.get(n, 0)} == {}
    finally:
        plane.kubectl("uncordon", "node-0")
    _wait(lambda: condition_true(_link(plane), "Ready"), 180, "the loop back after uncordon", plane)
    _wait(lambda: _controller_state(cluster).get("failsafe_active") is False, 120,
          "control back after the drain", plane)  # fmt: skip


MIRRORS = {"campus": "mir-campus", "dtn": "mir-dtn", "border": "mir-border"}
"""The tap node's mirror interfaces: one end of a veth pair each, in the node's network;
frames sent into the other end arrive on them as a mirror session's would."""


def _tap_link(name: str, node: str, campus: str = MIRRORS["campus"]) -> dict[str, Any]:
    return {
        "apiVersion": "scidmz.io/v1alpha1",
        "kind": "BorderLink",
        "metadata": {"name": name},
        "spec": {
            "capacity": "1Gbps",
            "campus": {"remotePrefix": "10.71.4.0/24"},
            "dtnHosts": [{"name": "dtn-1", "receiverPrefix": "10.71.4.250/32"}],
            "tenants": {"namespaces": {"from": "Selector",
                                       "selector": {"matchLabels": {"scidmz.io/tenant": "true"}}}},
            "switch": {
                "tap": {
                    "nodeName": node,
                    "interfaces": {"campus": campus, "dtn": [MIRRORS["dtn"]],
                                   "border": MIRRORS["border"]},
                }
            },
        },
    }  # fmt: skip


def _link_named(plane: ControlPlane, name: str) -> dict[str, Any]:
    out = plane.kubectl("get", "bl", name, "-o", "json", check=False).stdout
    return dict(json.loads(out)) if out else {}


def _deployments(plane: ControlPlane, link: str) -> list[str]:
    out = plane.kubectl("get", "deployments", "-n", NS, "-l", f"scidmz.io/link={link}",
                        "-o", "jsonpath={.items[*].metadata.name}").stdout  # fmt: skip
    return sorted(out.split())


def _preflight_from_the_image_on_the_node(cluster: Installed) -> None:
    """`scidmz preflight` as an administrator runs it where scidmz is not installed: from
    the image, in a debug pod on the node's network (``kubectl debug node/…``, as root)."""
    plane = cluster.plane
    custom = cluster.directory / "preflight-container.json"
    custom.write_text(json.dumps({"securityContext": {"runAsUser": 0}}))
    taps = f"campus={MIRRORS['campus']},dtn={MIRRORS['dtn']},border={MIRRORS['border']}"
    started = plane.kubectl(
        "debug", "node/node-0", f"--image={image.IMAGE_TAG}", "--image-pull-policy=Never",
        "--profile=netadmin", f"--custom={custom}", "--",
        "scidmz", "preflight", "--json", "--taps", taps,
    )  # fmt: skip
    found = re.search(r"pod (\S+) with container", started.stdout + started.stderr)
    assert found, started.stdout + started.stderr
    pod = found.group(1)
    try:
        _wait(lambda: plane.kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")
              .stdout in ("Succeeded", "Failed"), 60, "the preflight pod done", plane)  # fmt: skip
        findings = json.loads(plane.kubectl("logs", pod).stdout)
    finally:
        plane.kubectl("delete", "pod", pod, "--wait=false", check=False)
    levels = {(f["subject"], f["check"]): f["level"] for f in findings}
    assert not [f for f in findings if f["level"] == "fail"], findings
    assert levels[("the tap", "packet socket")] == "ok"
    assert levels[("the tap", "frame reader")] == "ok"  # the image's prebuilt reader
    assert all(any(m in subject for subject, _ in levels) for m in MIRRORS.values()), levels


def test_a_software_tap_link_runs_on_the_node_over_veth_mirror_interfaces(
    cluster: Installed,
) -> None:
    """``spec.switch.tap``: the operator runs `scidmz target --source packets` from the
    image on the node (host network, CAP_NET_RAW only), its collector dials it over mutual
    TLS, and the link becomes Ready; frames offered on the campus mirror show up as the
    campus rate. A tap on a node that does not exist, or naming an interface the node
    lacks, leaves the link not Ready with a reason naming what is missing, and nothing of
    the loop but the tap is created."""
    plane, node = cluster.plane, cluster.node
    for interface in MIRRORS.values():
        subprocess.run(node.in_node("ip", "link", "add", interface, "type", "veth", "peer",
                                    "name", f"{interface}-p"), check=True)  # fmt: skip
        for end in (interface, f"{interface}-p"):
            subprocess.run(node.in_node("ip", "link", "set", end, "up"), check=True)
    links = [_tap_link("tap-border", "node-0"), _tap_link("tap-nowhere", "node-9"),
             _tap_link("tap-no-interface", "node-0", campus="mir-nosuch")]  # fmt: skip
    # a research group's policy on it (examples/tenants.yaml's namespace): a loop with no
    # DTN class measures no DTN rate and holds its fail-safe (the campus gets the link)
    policy = {
        "apiVersion": "scidmz.io/v1alpha1", "kind": "DTNTransferPolicy",
        "metadata": {"name": "tap-transfer", "namespace": "physics"},
        "spec": {"linkRef": {"name": "tap-border"}, "dtnHost": "dtn-1",
                 "targetRate": "100Mbps", "congestionControl": "cubic"},
    }  # fmt: skip
    try:
        plane.kubectl("apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1",
                      "kind": "List", "items": [*links, policy]}))  # fmt: skip
        try:
            _wait(lambda: condition_true(_link_named(plane, "tap-border"), "Ready"), 240,
                  "the tap link Ready (tap, collector and controller)", plane)  # fmt: skip
        except AssertionError as error:
            status = _link_named(plane, "tap-border").get("status")
            logs = plane.kubectl("logs", "-n", NS, "-l", "app.kubernetes.io/instance=tap-border",
                                 "--all-containers", "--tail=30", check=False).stdout  # fmt: skip
            raise AssertionError(f"{error}\n{json.dumps(status, indent=1)}\n{logs}") from None
        (tap,) = [p for p in _pods(plane, "tap") if p["spec"]["nodeName"] == "node-0"
                  and "tap-border" in p["metadata"]["name"]]  # fmt: skip
        container = tap["spec"]["containers"][0]
        assert tap["spec"]["hostNetwork"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
        _preflight_from_the_image_on_the_node(cluster)
        # 20 k campus frames/s for 20 s on the campus mirror: the tap counts them
        framegen = native.binary("framegen")
        offered = subprocess.Popen(node.in_node(str(framegen), f"{MIRRORS['campus']}-p", "data",
                                                "20000", "20", "50"))  # fmt: skip
        try:
            rate = _wait(lambda: (r := ((_link_named(plane, "tap-border").get("status") or {})
                                        .get("state") or {}).get("campusRate")) and
                         parse_rate(r) > 50e6 and r, 90, "the campus rate the tap measures",
                         plane)  # fmt: skip
        finally:
            offered.wait(timeout=60)
        # 20 k frames/s of 1514 B on the wire is 242 Mb/s; the tap counts IP bytes
        assert 150e6 < parse_rate(rate) < 300e6, rate
        # the node that is not there: refused before anything is created
        nowhere = _wait(lambda: (c := find_condition(_link_named(plane, "tap-nowhere"), "Ready"))
                        and c["reason"] == "TapNodeNotFound" and c, 60,
                        "the missing node reported", plane)  # fmt: skip
        assert "node-9" in nowhere["message"]
        assert _deployments(plane, "tap-nowhere") == []

        # the interface that is not there: the tap's refusal, and only the tap exists
        def telemetry() -> dict[str, Any]:
            return find_condition(_link_named(plane, "tap-no-interface"), "TelemetryReady") or {}

        missing = _wait(lambda: (c := telemetry()).get("reason") == "TapFailed" and c, 120,
                        "the missing interface reported", plane)  # fmt: skip
        assert "mir-nosuch" in missing["message"], missing
        ready = find_condition(_link_named(plane, "tap-no-interface"), "Ready") or {}
        assert ready.get("reason") == "TelemetryTapFailed", ready
        assert _deployments(plane, "tap-no-interface") == ["tap-no-interface-tap"]
    finally:
        plane.kubectl("delete", "dtp", "-n", "physics", "tap-transfer", "--wait=false",
                      check=False)  # fmt: skip
        plane.kubectl("delete", "bl", *(link["metadata"]["name"] for link in links),
                      "--wait", "--timeout=120s", check=False)  # fmt: skip
        for interface in MIRRORS.values():
            subprocess.run(node.in_node("ip", "link", "delete", interface), check=False)
    _wait(lambda: not [p for p in _pods(plane, "tap", running=False)], 120,
          "the taps removed with their links", plane)  # fmt: skip


def test_helm_uninstall_leaves_nothing(cluster: Installed) -> None:
    """Links deleted first (their workloads go with them), then the release: no pod,
    Secret, peering or cluster role of scidmz is left; only the CRDs stay, by helm's
    rule, so that links and policies survive a reinstall."""
    plane = cluster.plane
    plane.kubectl("delete", "-f", str(EXAMPLES / "dtntransferpolicy.yaml"),
                  "-f", str(EXAMPLES / "borderlink.yaml"), "--wait", "--timeout=120s")  # fmt: skip
    _wait(lambda: not _pods(plane, "controller", running=False), 120, "the loop removed", plane)
    _helm(plane, "uninstall", "scidmz", "--namespace", NS, "--wait")
    _wait(lambda: plane.kubectl("get", "pods,secrets,services,deployments,networkpolicies",
                                "-n", NS, "-o", "name").stdout.strip() == "",
          120, "nothing left in the namespace", plane)  # fmt: skip
    for kind in ("clusterkopfpeering", "clusterrole", "validatingadmissionpolicy"):
        left = plane.kubectl("get", kind, "-o", "name").stdout.split()
        assert [n for n in left if "scidmz" in n and "system:" not in n] == [], kind


def _prometheus_scrapes_every_loop_pod(cluster: Installed) -> None:
    """The real Prometheus, on the node's network, discovering the loop's pods through the
    API server (``kubernetes_sd_configs``) and scraping them over mutual TLS with the
    metrics-reader certificate; the overview dashboard's queries then return data."""
    plane, node = cluster.plane, cluster.node
    url = installed.start_prometheus(plane, node, cluster.reader, cluster.directory / "prom")

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
