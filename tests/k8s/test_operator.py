"""The operator against a real apiserver + controller-manager + kwok: one loop per
BorderLink, in the operator's namespace, for the policies it admits."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from scidmz.api.runtime import CONFIG_KEY
from scidmz.auth.pki import uri_identities
from scidmz.testenv.identities import OPERATOR_NAMESPACE
from tests.k8s.conftest import Operator, wait_for
from tests.loops import link_object, policy_object

NS = OPERATOR_NAMESPACE
REPO = Path(__file__).parents[2]


TC_SHAPED_HOST = {
    "name": "dtn-1",
    "receiverPrefix": "203.0.113.10/32",
    "shaper": {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}},
}


def _link(links, suffix, **changes):
    return link_object(links.name(suffix), **changes)


def _policy(kube, link, name="p", **changes):
    return policy_object(name, kube.namespace, linkRef={"name": link}, **changes)


def _ready(kube, name):
    return (kube.condition(name, "Ready") or {}).get("status") == "True"


def _events(plane, namespace, name):
    args = ["get", "events", "--field-selector", f"involvedObject.name={name}",
            "-o", "jsonpath={.items[*].reason}"]  # fmt: skip
    return plane.kubectl(*args, "-n", namespace).stdout.split()


def test_a_link_and_a_policy_make_one_loop_in_the_operators_namespace(operator, kube, links):
    name = links.name("alpha")
    started = time.monotonic()
    links.apply(_link(links, "alpha"))
    kube.apply(_policy(kube, name))
    wait_for(lambda: _ready(kube, "p") and links.ready(name), 15, "Ready within 15 s")
    assert time.monotonic() - started < 15
    assert links.children(name) == {
        "deployment": [f"{name}-collector", f"{name}-controller"],
        "service": [f"{name}-collector", f"{name}-controller"],
        "configmap": [f"{name}-config"],
        "serviceaccount": [f"{name}-scidmz"],
        "secret": [f"{name}-collector-tls", f"{name}-controller-tls"],
        "networkpolicy": [f"{name}-collector", f"{name}-controller"],
    }
    # nothing at all in the tenant's namespace but the policy
    for kind in ("deployment", "pod", "service", "configmap", "secret"):
        assert kube.names(kind, "app.kubernetes.io/part-of=scidmz") == [], kind
    policy = kube.get("dtp", "p")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in policy["status"]["conditions"]}
    assert conditions == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Ready": ("True", "Ready"),
    }
    assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"]
    link = links.get(name)
    types = {c["type"]: c["status"] for c in link["status"]["conditions"]}
    assert types == {"Ready": "True", "Reconciled": "True", "TelemetryReady": "True",
                     "ControllerReady": "True", "Degraded": "False"}  # fmt: skip
    assert link["status"]["policies"] == {
        "attached": 1, "admitted": 1, "admittedTarget": "600Mbps",
        "items": [{"namespace": kube.namespace, "name": "p", "dtnHost": "dtn-1",
                   "targetRate": "600Mbps"}],
    }  # fmt: skip
    # printer columns come from the CRDs
    table = kube.plane.kubectl("get", "dtp", "p", "-n", kube.namespace).stdout.split("\n")[0]
    assert table.split() == ["NAME", "LINK", "DTN", "HOST", "TARGET", "ACCEPTED", "REASON",
                             "DTN", "RATE", "READY", "AGE"]  # fmt: skip
    assert "600Mbps" in kube.plane.kubectl("get", "borderlink", name).stdout
    # the audit trail: the decision on the policy, the rate plan on the link
    assert "Accepted" in _events(kube.plane, kube.namespace, "p")
    # the link's Events are the administrators': in the operator's namespace, regarding its
    # ConfigMap, the link as their related object; none lands in `default`
    wait_for(
        lambda: "RatePlanChanged" in _events(kube.plane, OPERATOR_NAMESPACE, f"{name}-config"),
        10, "event",
    )  # fmt: skip
    assert _events(kube.plane, "default", name) == []
    # kopf's bookkeeping lives on the link, under scidmz.io; the policy is never patched
    annotations = link["metadata"].get("annotations", {})
    assert "scidmz.io/last-handled-configuration" in annotations
    assert link["metadata"]["finalizers"] == ["scidmz.io/finalizer"]
    assert not [a for a in policy["metadata"].get("annotations", {}) if a.startswith("scidmz.io")]
    assert "finalizers" not in policy["metadata"]


def test_each_workload_has_its_own_certificate_of_the_operators_ca(operator, kube, links):
    name = links.name("certs")
    links.apply(_link(links, "certs"))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    ca = links.child("secret", "scidmz-ca")
    assert ca is not None and set(ca["data"]) == {"tls.crt", "tls.key"}
    for component in ("collector", "controller"):
        secret = links.child("secret", f"{name}-{component}-tls")
        assert secret["type"] == "kubernetes.io/tls"
        data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert data["ca.crt"] == base64.b64decode(ca["data"]["tls.crt"])
        # the identity names this incarnation of the link: a link deleted and created
        # again under the same name accepts none of these keys
        uid = links.get(name)["metadata"]["uid"]
        assert uri_identities(data["tls.crt"]) == (
            f"spiffe://scidmz.io/link/{name}/{uid}/{component}",
        )
        pod = links.child("deployment", f"{name}-{component}")["spec"]["template"]["spec"]
        volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
        assert volumes["identity"] == f"{name}-{component}-tls"
    reader = links.child("secret", "scidmz-metrics-reader")
    assert uri_identities(base64.b64decode(reader["data"]["tls.crt"])) == (
        "spiffe://scidmz.io/metrics-reader",
    )


def _pods(links, name, component):
    r = links.plane.kubectl(
        "get", "pods", "-n", NS, "-l",
        f"app.kubernetes.io/instance={name},app.kubernetes.io/component={component}",
        "-o", "jsonpath={.items[*].metadata.name}",
    )  # fmt: skip
    return sorted(r.stdout.split())


def _live_hash(obj):
    return (obj["metadata"].get("annotations") or {}).get("scidmz.io/live-config-hash")


def _replicasets(links, name):
    r = links.plane.kubectl(
        "get", "replicaset", "-n", NS, "-l", f"app.kubernetes.io/instance={name}",
        "-o", "jsonpath={.items[*].metadata.name}",
    )  # fmt: skip
    return sorted(r.stdout.split())


def test_a_new_target_rate_reaches_the_running_pods_and_only_a_trivial_strategy_rolls_them(
    operator, kube, links
):
    name = links.name("beta")
    links.apply(_link(links, "beta"))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    wait_for(lambda: len(_pods(links, name, "controller")) == 1, 30, "the controller pod")
    (controller_pod,) = _pods(links, name, "controller")
    (collector_pod,) = _pods(links, name, "collector")
    config_before = links.child("configmap", f"{name}-config")
    templates = {
        d: links.child("deployment", d)["spec"]["template"]
        for d in (f"{name}-controller", f"{name}-collector")
    }
    rs_before = _replicasets(links, name)

    # the tenant's new R* is taken live: the ConfigMap changes, the pods stay, and the
    # running controller pod is annotated so its kubelet refreshes the mounted file at once
    kube.apply(_policy(kube, name, targetRate="750Mbps"))
    config_map = wait_for(
        lambda: (
            (c := links.child("configmap", f"{name}-config"))
            and "750000000.0" in c["data"]["config.yaml"]
            and c
        ),
        10,
        "ConfigMap updated",
    )
    assert _live_hash(config_map) != _live_hash(config_before)
    wait_for(
        lambda: _live_hash(links.child("pod", controller_pod)) == _live_hash(config_map),
        10,
        "the controller pod nudged",
    )
    assert _live_hash(links.child("pod", collector_pod)) is None  # the collector reads no R*
    wait_for(lambda: kube.get("dtp", "p")["status"].get("observedGeneration") == 2, 10, "gen 2")
    for deployment, template in templates.items():
        assert links.child("deployment", deployment)["spec"]["template"] == template
    assert _replicasets(links, name) == rs_before
    assert _pods(links, name, "controller") == [controller_pod]

    # mlc and pi switch live (a mix of congestion controls makes mlc pi): no roll; trivial
    # is what the controller is built around differently: it rolls, and the collector,
    # which does not read it, does not
    links.apply(_link(links, "beta", controller={"strategy": "pi"}))
    wait_for(lambda: "strategy: pi" in links.child("configmap", f"{name}-config")["data"][
        CONFIG_KEY], 10, "the strategy pi in the ConfigMap")  # fmt: skip
    assert _replicasets(links, name) == rs_before
    links.apply(_link(links, "beta", controller={"strategy": "trivial"}))
    wait_for(lambda: len(_replicasets(links, name)) == len(rs_before) + 1, 10, "a new ReplicaSet")
    collector = f"{name}-collector"
    assert links.child("deployment", collector)["spec"]["template"] == templates[collector]
    wait_for(lambda: links.ready(name), 15, "Ready again after the roll")


def test_a_paused_link_scales_its_loop_to_zero(operator, kube, links):
    name = links.name("gamma")
    links.apply(_link(links, "gamma"))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    links.apply(_link(links, "gamma", paused=True))
    wait_for(
        lambda: (
            links.child("deployment", f"{name}-collector")["spec"]["replicas"] == 0
            and links.child("deployment", f"{name}-controller")["spec"]["replicas"] == 0
        ),
        10,
        "scaled to zero",
    )
    wait_for(lambda: (links.condition(name, "Ready") or {}).get("reason") == "Paused", 10, "Paused")
    # the policy keeps its admission, and says why it is not held now
    wait_for(
        lambda: (kube.condition("p", "Ready") or {}).get("reason") == "LinkNotReady", 10, "policy"
    )
    assert kube.condition("p", "Accepted")["status"] == "True"
    links.apply(_link(links, "gamma", paused=False))
    wait_for(lambda: _ready(kube, "p"), 15, "Ready after unpause")


def test_a_tc_actuator_pins_the_controller_tolerating_only_the_listed_taints(operator, kube, links):
    name = links.name("delta")
    toleration = {"key": "scidmz.io/border", "operator": "Exists", "effect": "NoSchedule"}
    tc = {"nodeName": "edge-1", "interface": "eth1", "tolerations": [toleration]}
    links.apply(_link(links, "delta", actuator={"type": "tc", "tc": tc}))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    pod = links.child("deployment", f"{name}-controller")["spec"]["template"]["spec"]
    assert pod["tolerations"] == [toleration] and pod["hostNetwork"] is True
    nodes = links.plane.kubectl(
        "get", "pods", "-n", NS, "-l",
        f"app.kubernetes.io/instance={name},app.kubernetes.io/component=controller",
        "-o", "jsonpath={.items[*].spec.nodeName}",
    ).stdout  # fmt: skip
    assert nodes.split() == ["edge-1"]
    # its port is the link's own pair on that node, recorded in the link's status
    allocation = links.get(name)["status"]["hostPorts"]
    assert allocation == [{"workload": "controller", "node": "edge-1", "port": 9500}] or (
        allocation[0]["node"] == "edge-1" and allocation[0]["port"] % 2 == 0
    )


def test_two_links_shaping_on_one_node_get_different_host_ports(operator, kube, links):
    tc = {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}
    first, second = links.name("one"), links.name("two")
    links.apply(_link(links, "one", actuator=tc))
    links.apply(_link(links, "two", actuator=tc))

    def ports():
        return [
            ((links.get(n) or {}).get("status") or {}).get("hostPorts") for n in (first, second)
        ]

    allocated = wait_for(lambda: all(ports()) and ports(), 15, "both allocated")
    assert allocated[0][0]["port"] != allocated[1][0]["port"]
    for link, (allocation,) in zip((first, second), allocated, strict=True):
        container = links.child("deployment", f"{link}-controller")["spec"]["template"]["spec"][
            "containers"
        ][0]
        assert container["ports"][0]["containerPort"] == allocation["port"]


def test_a_tc_dtn_cap_runs_a_shaper_on_the_dtn_host_and_is_pruned(operator, kube, links):
    name = links.name("theta")
    host = TC_SHAPED_HOST
    links.apply(_link(links, "theta", dtnHosts=[host]))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    nodes = links.plane.kubectl(
        "get", "pods", "-n", NS,
        "-l", f"app.kubernetes.io/instance={name},app.kubernetes.io/component=dtn-shaper-dtn-1",
        "-o", "jsonpath={.items[*].spec.nodeName}",
    ).stdout  # fmt: skip
    assert nodes.split() == ["dtn-1"]
    assert links.child("secret", f"{name}-dtn-shaper-dtn-1-tls") is not None
    (shaper_pod,) = _pods(links, name, "dtn-shaper-dtn-1")
    rs_before = _replicasets(links, name)
    kube.apply(_policy(kube, name, targetRate="500Mbps"))
    config_map = wait_for(
        lambda: (c := links.child("configmap", f"{name}-config")) and "500000000.0" in str(c) and c,
        10,
        "the ConfigMap rewritten",
    )
    wait_for(
        lambda: _live_hash(links.child("pod", shaper_pod)) == _live_hash(config_map),
        10,
        "the dtn-shaper pod nudged",
    )
    assert _replicasets(links, name) == rs_before
    # the same host with a simulated cap needs no agent: it and its certificate go
    links.apply(_link(links, "theta", dtnHosts=[{**host, "shaper": {"type": "sim"}}]))
    wait_for(
        lambda: not [n for v in links.children(name).values() for n in v if "dtn-shaper" in n],
        20,
        "the dtn-shaper pruned",
    )
    wait_for(lambda: links.ready(name), 15, "Ready without the shaper")


def test_each_shaped_dtn_host_gets_its_own_shaper_and_cap(operator, kube, links):
    """Two policies on two tc-shaped hosts of one link: a shaper agent on each host's node
    with its own identity, and the controller's config caps each host on its own target
    through its own agent; the second host's policy gone, its shaper alone is held."""
    name = links.name("pair")
    second = {
        **TC_SHAPED_HOST,
        "name": "dtn-2",
        "receiverPrefix": "203.0.113.11/32",
        "shaper": {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "ens2f0"}},
    }
    links.apply(_link(links, "pair", dtnHosts=[TC_SHAPED_HOST, second]))
    kube.apply(_policy(kube, name, targetRate="500Mbps"))
    wait_for(lambda: links.ready(name), 20, "Ready")
    (collector_pod,) = wait_for(lambda: _pods(links, name, "collector"), 30, "the collector pod")
    nudged_before = _live_hash(links.child("pod", collector_pod))
    kube.apply(_policy(kube, name, "second", targetRate="300Mbps", dtnHost="dtn-2"))
    # dtn-2's class joins the collector's plan: its pod is nudged to re-read the config at
    # once (the kubelet would otherwise refresh the file at its next sync, a minute on)
    wait_for(
        lambda: _live_hash(links.child("pod", collector_pod)) not in (None, nudged_before),
        10, "the collector pod nudged",
    )  # fmt: skip

    def rendered():
        config = links.child("configmap", f"{name}-config")["data"]["config.yaml"]
        return yaml.safe_load(config)

    caps = wait_for(
        lambda: (r := rendered()) and r["actuator"]["more_dtns"] and r["actuator"], 15, "two caps"
    )  # fmt: skip
    by_host = {c["host"]: c for c in [caps["dtn"], *caps["more_dtns"]]}
    assert {h: c["target_rate_bps"] for h, c in by_host.items()} == {"dtn-1": 5e8, "dtn-2": 3e8}
    assert by_host["dtn-2"]["address"].startswith(f"{name}-dtn-shaper-dtn-2.")
    assert by_host["dtn-2"]["server_name"].startswith(f"{name}-dtn-shaper-dtn-2.")
    for host, node in (("dtn-1", "dtn-1"), ("dtn-2", "edge-1")):
        deployment = links.child("deployment", f"{name}-dtn-shaper-{host}")
        pod = deployment["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert args[args.index("--dtn-host") + 1] == host
        term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
        assert links.child("secret", f"{name}-dtn-shaper-{host}-tls") is not None
    first_uid = links.child("deployment", f"{name}-dtn-shaper-dtn-1")["metadata"]["uid"]
    kube.delete("dtp", "second")
    held = wait_for(lambda: links.get(name)["status"].get("heldDtnHosts"), 10, "dtn-2 held")
    assert [h["host"] for h in held] == ["dtn-2"]
    assert links.child("deployment", f"{name}-dtn-shaper-dtn-1")["metadata"]["uid"] == first_uid
    assert links.child("deployment", f"{name}-dtn-shaper-dtn-2") is not None


def test_a_dtn_shaper_is_held_at_its_failsafe_while_a_policy_comes_and_goes(operator, kube, links):
    """A tenant who deletes and re-creates its policy neither deletes nor creates the
    privileged shaper pod: it is held at the host's fail-safe (the target last admitted
    there) for the operator's grace period (8 s here), then removed."""
    name = links.name("hold")
    links.apply(_link(links, "hold", dtnHosts=[TC_SHAPED_HOST]))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    shaper = links.child("deployment", f"{name}-dtn-shaper-dtn-1")
    uid, template = shaper["metadata"]["uid"], shaper["spec"]["template"]

    def rendered():
        config = links.child("configmap", f"{name}-config")["data"]["config.yaml"]
        return yaml.safe_load(config)

    kube.delete("dtp", "p")
    held = wait_for(
        lambda: (links.get(name)["status"].get("heldDtnHosts") or [None])[0], 10, "the hold"
    )
    assert held["host"] == "dtn-1" and held["failsafeRate"] == "600Mbps"
    wait_for(lambda: (rendered()["actuator"]["dtn"] or {}).get("held"), 10, "a held cap")
    dtn = rendered()["actuator"]["dtn"]
    assert dtn["failsafe_rate_bps"] == dtn["min_rate_bps"] == 600e6
    assert rendered()["policies"] == [] and rendered()["target_rate_bps"] == 0
    kept = links.child("deployment", f"{name}-dtn-shaper-dtn-1")
    assert kept["metadata"]["uid"] == uid and kept["spec"]["template"] == template
    # the policy again within the grace: the same pod takes it back
    kube.apply(_policy(kube, name, "again"))
    wait_for(lambda: not rendered()["actuator"]["dtn"]["held"], 10, "the cap controlled again")
    assert links.child("deployment", f"{name}-dtn-shaper-dtn-1")["metadata"]["uid"] == uid
    assert links.get(name)["status"].get("heldDtnHosts") in (None, [])
    # gone for good: removed after the grace, and its interface given back its original
    # root qdisc by a Job on its node once its pod is gone
    kube.delete("dtp", "again")
    wait_for(lambda: links.get(name)["status"].get("heldDtnHosts"), 10, "held again")
    wait_for(lambda: links.child("deployment", f"{name}-dtn-shaper-dtn-1") is None, 30, "removed")
    assert rendered()["actuator"]["dtn"] is None
    job_name = f"{name}-dtn-shaper-dtn-1-restore"
    job = wait_for(lambda: links.child("job", job_name), 30, "the restore")
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == [
        "shaper", "--interface", "ens1f0", "--state-dir", "/var/lib/scidmz-shapers", "--restore"
    ]  # fmt: skip
    assert pod["hostNetwork"] is True
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["dtn-1"]
    assert {"path": "/var/lib/scidmz/shapers", "type": "DirectoryOrCreate"} in [
        v.get("hostPath") for v in pod["volumes"]
    ]
    wait_for(
        lambda: [r.get("interface") for r in links.get(name)["status"].get("pendingRestores")
                 or []] == ["ens1f0"] or links.child("job", job_name) is None,
        10, "the restore in the link's status",
    )  # fmt: skip
    # the Job done (kwok completes its pod): the operator clears it and says so
    wait_for(lambda: links.child("job", job_name) is None, 60, "done")
    wait_for(lambda: not links.get(name)["status"].get("pendingRestores"), 10, "cleared")
    assert "ShaperRestored" in _events(links.plane, NS, f"{name}-config")


def _deleted_at(log: str, kind: str, name: str) -> int:
    """Where the operator's log records its DELETE of an object (-1: never)."""
    return log.find(f'"DELETE /apis/apps/v1/namespaces/{NS}/{kind}/{name} HTTP/1.1" 200')


def test_deleting_a_link_stops_its_controller_first_then_the_rest(operator, kube, links):
    name = links.name("epsilon")
    host = TC_SHAPED_HOST
    links.apply(_link(links, "epsilon", dtnHosts=[host]))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name), 15, "Ready")
    before = len(operator.log())
    links.delete(name, wait=True)
    assert links.get(name) is None  # the finalizer was released
    assert links.children(name) == {k: [] for k in links.children(name)}, "nothing left"
    # the controller goes first (its pod restores the fail-safe rates, through the DTN
    # shaper, which must still be there), the rest once its pods are gone
    log = operator.log()[before:]
    controller = _deleted_at(log, "deployments", f"{name}-controller")
    shaper = _deleted_at(log, "deployments", f"{name}-dtn-shaper-dtn-1")
    assert 0 <= controller < shaper, log[-3000:]
    pods_gone = log.find(f"/namespaces/{NS}/pods?labelSelector=", controller)
    assert controller < pods_gone < shaper
    policy = wait_for(
        lambda: (c := kube.condition("p", "Accepted")) and c["reason"] == "LinkNotFound" and c,
        10,
        "the policy told",
    )
    assert policy["status"] == "False" and name in policy["message"]
    assert kube.condition("p", "ResolvedRefs")["status"] == "False"
    assert "LinkNotFound" in _events(kube.plane, kube.namespace, "p")


def test_a_missing_pipeline_configmap_is_reported_not_applied(operator, kube, links):
    name = links.name("zeta")
    link = _link(links, "zeta")
    link["spec"]["switch"]["pipeline"] = {"configMapRef": {"name": f"{name}-p4"}}
    links.apply(link)
    kube.apply(_policy(kube, name))
    cond = wait_for(
        lambda: (
            (c := links.condition(name, "Ready")) and c["reason"] == "PipelineConfigMapNotFound"
            and c
        ),
        10,
        "refusal",
    )  # fmt: skip
    assert cond["status"] == "False" and f"{name}-p4" in cond["message"]
    assert links.condition(name, "Degraded")["status"] == "True"
    assert "PipelineConfigMapNotFound" in _events(links.plane, OPERATOR_NAMESPACE, f"{name}-config")
    assert links.children(name)["deployment"] == []  # nothing partial
    # the policy is admitted, and says its link is not ready and why
    wait_for(lambda: (kube.condition("p", "Ready") or {}).get("reason") == "LinkNotReady", 10, "")
    assert "PipelineConfigMapNotFound" not in kube.condition("p", "Accepted")["reason"]
    assert operator.alive()
    # the administrators add it: the next pass picks it up
    links.plane.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": f"{name}-p4", "namespace": NS},
        "data": {"p4info.txtpb": "# p4info"}, "binaryData": {"device_config.bin": "AAEC"},
    }))  # fmt: skip
    wait_for(lambda: links.ready(name), 15, "Ready after the ConfigMap appeared")
    assert links.condition(name, "Degraded")["status"] == "False"


def _apply_config_map(links, name, card):
    links.plane.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS},
        "data": {"card.yaml": card}, "binaryData": {"inverse.onnx": "b25ueA=="},
    }))  # fmt: skip


def test_a_custom_model_is_checked_against_its_card_then_mounted(operator, kube, links):
    """spec.controller.modelRef: a missing ConfigMap, then a card that does not cover the
    link, are refused naming what is missing or outside; nothing runs meanwhile. A card
    that covers it: the controller mounts the ConfigMap, and a new model restarts it."""
    name = links.name("mu")
    link = _link(links, "mu")
    link["spec"]["controller"] = {"model": "cubic", "modelRef": {"configMapName": f"{name}-m"}}
    links.apply(link)
    kube.apply(_policy(kube, name))

    def refused(reason):
        return wait_for(lambda: (c := links.condition(name, "Ready")) and c["reason"] == reason
                        and c, 10, reason)  # fmt: skip

    assert f"{name}-m" in refused("ModelConfigMapNotFound")["message"]
    assert links.children(name)["deployment"] == []
    card = (REPO / "models" / "cubic" / "card.yaml").read_text()
    _apply_config_map(links, f"{name}-m", card.replace("1Gbps", "10Gbps"))
    assert (
        "spec.capacity 1Gbps is outside the card's 10Gbps..10Gbps"
        in refused("ModelCardMismatch")["message"]
    )
    assert links.children(name)["deployment"] == []
    _apply_config_map(links, f"{name}-m", card)
    wait_for(lambda: links.ready(name), 15, "Ready once the card covers the link")
    controller = links.plane.kubectl("get", "deployment", "-n", NS, f"{name}-controller",
                                     "-o", "json").stdout  # fmt: skip
    pod = json.loads(controller)["spec"]["template"]
    (model,) = [v for v in pod["spec"]["volumes"] if v["name"] == "model"]
    assert model["configMap"]["name"] == f"{name}-m"
    before = pod["metadata"]["annotations"]
    links.plane.kubectl("patch", "configmap", "-n", NS, f"{name}-m", "--type=merge",
                        "-p", json.dumps({"binaryData": {"inverse.onnx": "bmV3"}}))  # fmt: skip
    wait_for(lambda: json.loads(links.plane.kubectl(
        "get", "deployment", "-n", NS, f"{name}-controller", "-o", "json"
    ).stdout)["spec"]["template"]["metadata"]["annotations"] != before, 15,
        "the controller rolled for the new model")  # fmt: skip


def test_a_software_tap_comes_first_and_a_missing_node_creates_nothing(operator, kube, links):
    """spec.switch.tap: on a node that does not exist the link is refused and nothing is
    created; on one that does, the tap runs on its host port first, then the collector
    (which dials it) and the controller."""
    name = links.name("tap")
    link = _link(links, "tap")
    tap = {
        "nodeName": "no-such-node",
        "interfaces": {"campus": "m0", "dtn": ["m1"], "bottleneck": "m2", "acks": "m3"},
    }
    link["spec"]["switch"] = {"tap": tap}  # fmt: skip
    links.apply(link)
    kube.apply(_policy(kube, name))
    refusal = wait_for(lambda: (c := links.condition(name, "Ready")) and
                       c["reason"] == "TapNodeNotFound" and c, 10, "refusal")  # fmt: skip
    assert "no-such-node" in refusal["message"]
    assert links.children(name)["deployment"] == [] and links.children(name)["secret"] == []
    link["spec"]["switch"]["tap"]["nodeName"] = "edge-1"
    links.apply(link)
    wait_for(lambda: links.ready(name), 30, "Ready with its tap")
    children = links.children(name)
    assert children["deployment"] == [f"{name}-collector", f"{name}-controller", f"{name}-tap"]
    assert f"{name}-tap-tls" in children["secret"]
    ports = links.get(name)["status"]["hostPorts"]
    (allocation,) = [p for p in ports if p["workload"] == "tap"]
    assert allocation["node"] == "edge-1"
    config = yaml.safe_load(links.child("configmap", f"{name}-config")["data"][CONFIG_KEY])
    assert config["switch"]["address"] == f"{name}-tap.{NS}.svc:{allocation['port'] + 1}"
    assert config["switch"]["tap_server_name"] == f"{name}-tap.{NS}.svc"
    # the link goes back to a switch address: its tap goes
    link["spec"]["switch"] = {"address": "switch.example:9559", "plaintext": True}
    links.apply(link)
    wait_for(lambda: f"{name}-tap" not in links.children(name)["deployment"], 15, "tap gone")


def test_a_tls_secret_without_its_ca_is_reported_then_mounted(operator, kube, links):
    name = links.name("tau")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-switch", "namespace": NS},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"},
    }
    links.plane.kubectl("apply", "-f", "-", input_text=json.dumps(secret))
    link = _link(links, "tau")
    link["spec"]["switch"]["tls"] = {"secretName": f"{name}-switch"}
    links.apply(link)
    cond = wait_for(
        lambda: (
            (c := links.condition(name, "Ready")) and c["reason"] == "TlsSecretKeyMissing" and c
        ),
        10,
        "refusal",
    )
    assert cond["status"] == "False" and "ca.crt" in cond["message"]
    assert links.children(name)["deployment"] == []
    secret["data"]["ca.crt"] = "Y2E="
    links.plane.kubectl("apply", "-f", "-", input_text=json.dumps(secret))
    wait_for(lambda: links.child("deployment", f"{name}-collector"), 15, "applied")
    pod = links.child("deployment", f"{name}-collector")["spec"]["template"]["spec"]
    volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
    assert volumes["switch-tls"] == f"{name}-switch"


def _resource_versions(links, kube, name):
    versions = {"link": links.get(name)["metadata"]["resourceVersion"],
                "dtp": kube.get("dtp", "p")["metadata"]["resourceVersion"]}  # fmt: skip
    for kind, names in links.children(name).items():
        for child in names:
            versions[f"{kind}/{child}"] = links.child(kind, child)["metadata"]["resourceVersion"]
    return versions


def test_a_restart_writes_nothing(operator, kube, links):
    name = links.name("eta")
    links.apply(_link(links, "eta"))
    kube.apply(_policy(kube, name))
    wait_for(lambda: links.ready(name) and _ready(kube, "p"), 15, "Ready")
    # kwok, the Deployment controller and the operator's status trail Ready (longer on a
    # loaded machine): take the snapshot once nothing has changed for a second and a half
    settled = [_resource_versions(links, kube, name)]

    def unchanged() -> bool:
        time.sleep(1.5)
        settled.append(_resource_versions(links, kube, name))
        return settled[-1] == settled[-2]

    wait_for(unchanged, 30, "the objects to settle")
    before = settled[-1]
    operator.stop()
    operator.start()
    wait_for(lambda: "Daemon 'run_link' is invoked" in operator.log_since_start(), 20, "resumed")
    time.sleep(7.0)  # past a resync of every link
    assert _resource_versions(links, kube, name) == before


def test_two_replicas_only_one_acts(operator, plane, kube, links, tmp_path):
    standby = Operator(plane, tmp_path / "standby.log", priority=50)
    standby.start()
    try:
        wait_for(
            lambda: "Pausing the watch-stream for borderlinks" in standby.log(),
            20,
            "the lower-priority replica to hold its watch paused",
        )
        url = f"http://127.0.0.1:{operator.health_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
        name = links.name("iota")
        links.apply(_link(links, "iota"))
        kube.apply(_policy(kube, name))
        wait_for(lambda: links.ready(name), 15, "Ready (by the active replica)")
        time.sleep(1.0)
        assert "Daemon 'run_link'" not in standby.log()
        operator.stop()
        wait_for(lambda: "Resuming operations after the pause" in standby.log(), 30, "resume")
        other = links.name("kappa")
        links.apply(_link(links, "kappa"))
        kube.apply(_policy(kube, other, name="q"))
        wait_for(lambda: links.ready(other), 20, "Ready (by the former standby)")
        assert "Daemon 'run_link'" in standby.log()
    finally:
        standby.stop()
        if not operator.alive():
            operator.start()


def test_a_killed_active_replica_is_replaced_and_a_change_still_applied():
    """bench/chaos.py's operator fail-over in short form: SIGKILL (no clean hand-over), so
    the standby must find the active replica's peering record expired."""
    from scidmz.chaos.failover import run_operator_failover

    result = run_operator_failover(policies=5, lifetime_s=4, log=lambda _: None)
    assert result.ready_before == 5 and result.ready_after == 5, result
    assert result.takeover_s is not None, result  # the standby resumed
    assert result.reconciled_s is not None, result  # and applied the change made after the kill


def test_a_pod_nudge_refused_by_rbac_leaves_the_reconcile_alone(plane, kube):
    """An operator whose RBAC lacks pods patch (e.g. an old Role) still reconciles: the
    nudge only hastens the kubelet's own refresh of the mounted ConfigMap."""
    import kubernetes

    from scidmz.k8s.client import KubeApiError, KubeClient
    from scidmz.k8s.links import nudge_live_pods
    from scidmz.k8s.manifests import CONTROLLER, selector_labels

    ns = kube.namespace
    plane.kubectl("create", "serviceaccount", "no-pod-patch", "-n", ns)
    plane.kubectl("create", "role", "pods-list", "--verb=list", "--resource=pods", "-n", ns)
    plane.kubectl(
        "create", "rolebinding", "pods-list", "--role=pods-list",
        f"--serviceaccount={ns}:no-pod-patch", "-n", ns,
    )  # fmt: skip
    token = plane.kubectl("create", "token", "no-pod-patch", "-n", ns).stdout.strip()
    configuration = kubernetes.client.Configuration()
    configuration.host = plane.server
    configuration.ssl_ca_cert = str(plane.pki.ca_cert)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "iota-controller-x", "labels": selector_labels("iota", CONTROLLER)},
        "spec": {"containers": [{"name": "c", "image": "example.org/none"}]},
    }  # fmt: skip
    kube.apply(pod)
    client = KubeClient(kubernetes.client.ApiClient(configuration))
    try:
        labels = selector_labels("iota", CONTROLLER)
        assert client.list_names("v1", "Pod", ns, labels) == ["iota-controller-x"]
        with pytest.raises(KubeApiError) as refused:
            client.annotate("v1", "Pod", ns, "iota-controller-x", {"a": "b"})
        assert refused.value.status == 403
        assert nudge_live_pods(client, "iota", ns, "0123456789abcdef") == []  # logged
    finally:
        client.close()
    assert _live_hash(kube.get("pod", "iota-controller-x")) is None
