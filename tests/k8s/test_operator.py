"""The operator against a real apiserver + controller-manager + kwok."""

from __future__ import annotations

import copy
import time
import urllib.request

import pytest

from tests.k8s.conftest import Operator, wait_for

CHILD_SELECTOR = "app.kubernetes.io/instance={name}"


def _policy(example_policy, name, **spec_changes):
    obj = copy.deepcopy(example_policy)
    obj["metadata"] = {"name": name}
    obj["spec"].update(spec_changes)
    return obj


def _ready(kube, name):
    cond = kube.condition(name, "Ready")
    return cond is not None and cond["status"] == "True"


def _children(kube, name):
    selector = CHILD_SELECTOR.format(name=name)
    return {
        kind: kube.names(kind, selector)
        for kind in ("deployment", "service", "configmap", "serviceaccount")
    }


def test_create_makes_children_and_ready_status(operator, kube, example_policy):
    started = time.monotonic()
    kube.apply(_policy(example_policy, "alpha"))
    wait_for(lambda: _ready(kube, "alpha"), 5, "Ready=True within 5 s")
    elapsed = time.monotonic() - started
    assert elapsed < 5
    assert _children(kube, "alpha") == {
        "deployment": ["alpha-collector", "alpha-controller"],
        "service": ["alpha-collector", "alpha-controller"],
        "configmap": ["alpha-config"],
        "serviceaccount": ["alpha-scidmz"],
    }
    policy = kube.get("dtp", "alpha")
    assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"]
    types = {c["type"]: c["status"] for c in policy["status"]["conditions"]}
    assert types == {
        "Ready": "True",
        "Reconciled": "True",
        "TelemetryReady": "True",
        "ControllerReady": "True",
        "Degraded": "False",
    }
    # Printer columns come from the CRD.
    table = kube.plane.kubectl("get", "dtp", "alpha", "-n", kube.namespace).stdout
    assert table.split("\n")[0].split() == [
        "NAME",
        "TARGET",
        "CAPACITY",
        "DTN",
        "RATE",
        "CAMPUS",
        "LIMIT",
        "READY",
        "AGE",
    ]
    assert "600Mbps" in table and "1Gbps" in table and "True" in table
    # kopf's bookkeeping lives under scidmz.io.
    annotations = policy["metadata"].get("annotations", {})
    assert not [a for a in annotations if "kopf.zalando.org" in a or a.startswith("kopf.")]
    assert "scidmz.io/last-handled-configuration" in annotations


def _pods(kube, name, component):
    return kube.names(
        "pod", f"{CHILD_SELECTOR.format(name=name)},app.kubernetes.io/component={component}"
    )


def _live_hash(obj):
    return (obj["metadata"].get("annotations") or {}).get("scidmz.io/live-config-hash")


def test_a_new_target_rate_reaches_the_running_pods_and_a_new_strategy_rolls_them(
    operator, kube, example_policy
):
    kube.apply(_policy(example_policy, "beta"))
    wait_for(lambda: _ready(kube, "beta"), 10, "beta Ready")
    wait_for(lambda: len(_pods(kube, "beta", "controller")) == 1, 30, "the controller pod")
    (controller_pod,) = _pods(kube, "beta", "controller")
    (collector_pod,) = _pods(kube, "beta", "collector")
    config_before = kube.get("configmap", "beta-config")
    templates = {
        d: kube.get("deployment", d)["spec"]["template"]
        for d in ("beta-controller", "beta-collector")
    }
    rs_before = kube.names("replicaset", "app.kubernetes.io/instance=beta")

    # R* is taken live: the ConfigMap changes, the pods stay, and the running controller
    # pod is annotated so its kubelet refreshes the mounted file at once
    kube.apply(_policy(example_policy, "beta", targetRate="750Mbps"))
    config_map = wait_for(
        lambda: (
            (c := kube.get("configmap", "beta-config"))
            and "750000000.0" in c["data"]["config.yaml"]
            and c
        ),
        10,
        "ConfigMap updated",
    )
    assert _live_hash(config_map) != _live_hash(config_before)
    wait_for(
        lambda: _live_hash(kube.get("pod", controller_pod)) == _live_hash(config_map),
        10,
        "the controller pod nudged",
    )
    assert _live_hash(kube.get("pod", collector_pod)) is None  # the collector reads no R*
    wait_for(lambda: kube.get("dtp", "beta")["status"].get("observedGeneration") == 2, 10, "gen 2")
    for deployment, template in templates.items():
        assert kube.get("deployment", deployment)["spec"]["template"] == template
    assert kube.names("replicaset", "app.kubernetes.io/instance=beta") == rs_before
    assert _pods(kube, "beta", "controller") == [controller_pod]

    # the strategy is what the controller is built around: a new ReplicaSet per Deployment
    kube.apply(_policy(example_policy, "beta", targetRate="750Mbps", controller={"strategy": "pi"}))
    wait_for(
        lambda: (
            len(kube.names("replicaset", "app.kubernetes.io/instance=beta")) == len(rs_before) + 2
        ),
        10,
        "new ReplicaSets",
    )
    wait_for(lambda: _ready(kube, "beta"), 10, "Ready again after the roll")
    policy = kube.get("dtp", "beta")
    assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"] == 3


def test_paused_scales_workloads_to_zero(operator, kube, example_policy):
    kube.apply(_policy(example_policy, "gamma"))
    wait_for(lambda: _ready(kube, "gamma"), 10, "gamma Ready")
    kube.apply(_policy(example_policy, "gamma", paused=True))
    wait_for(
        lambda: (
            kube.get("deployment", "gamma-collector")["spec"]["replicas"] == 0
            and kube.get("deployment", "gamma-controller")["spec"]["replicas"] == 0
        ),
        10,
        "scaled to zero",
    )
    wait_for(
        lambda: (kube.condition("gamma", "Ready") or {}).get("reason") == "Paused",
        10,
        "Ready=False/Paused",
    )
    kube.apply(_policy(example_policy, "gamma", paused=False))
    wait_for(lambda: _ready(kube, "gamma"), 10, "Ready after unpause")


def test_tc_actuator_pins_controller_to_node(operator, kube, example_policy):
    kube.apply(
        _policy(
            example_policy,
            "delta",
            actuator={"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}},
        )
    )
    wait_for(lambda: _ready(kube, "delta"), 10, "delta Ready")
    pods = kube.plane.kubectl(
        "get",
        "pods",
        "-n",
        kube.namespace,
        "-l",
        "app.kubernetes.io/instance=delta,app.kubernetes.io/component=controller",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ).stdout
    assert pods.split() == ["edge-1"]


def test_a_tc_dtn_actuator_runs_a_shaper_on_the_dtn_host_and_is_pruned(
    operator, kube, example_policy
):
    dtn = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    kube.apply(_policy(example_policy, "theta", actuator={"type": "sim", "dtn": dtn}))
    wait_for(lambda: _ready(kube, "theta"), 10, "theta Ready")
    nodes = kube.plane.kubectl(
        "get", "pods", "-n", kube.namespace,
        "-l", "app.kubernetes.io/instance=theta,app.kubernetes.io/component=dtn-shaper",
        "-o", "jsonpath={.items[*].spec.nodeName}",
    ).stdout  # fmt: skip
    assert nodes.split() == ["dtn-1"]
    assert kube.get("service", "theta-dtn-shaper")["spec"]["ports"][0]["port"] == 9470
    # a new R* (the agent's fail-safe cap, with failsafeRate 'target'): the agent keeps
    # running and is nudged to re-read its ConfigMap, as the controller is
    (shaper_pod,) = _pods(kube, "theta", "dtn-shaper")
    rs_before = kube.names("replicaset", "app.kubernetes.io/instance=theta")
    kube.apply(
        _policy(example_policy, "theta", targetRate="500Mbps", actuator={"type": "sim", "dtn": dtn})
    )
    config_map = wait_for(
        lambda: (c := kube.get("configmap", "theta-config")) and "500000000.0" in str(c) and c,
        10,
        "the ConfigMap rewritten",
    )
    wait_for(
        lambda: _live_hash(kube.get("pod", shaper_pod)) == _live_hash(config_map),
        10,
        "the dtn-shaper pod nudged",
    )
    assert kube.names("replicaset", "app.kubernetes.io/instance=theta") == rs_before
    # the same policy with a simulated DTN actuator needs no agent: it is removed
    kube.apply(_policy(example_policy, "theta", actuator={"type": "sim", "dtn": {"type": "sim"}}))
    wait_for(
        lambda: (
            "theta-dtn-shaper" not in _children(kube, "theta")["deployment"]
            and "theta-dtn-shaper" not in _children(kube, "theta")["service"]
        ),
        20,
        "the dtn-shaper pruned",
    )
    wait_for(lambda: _ready(kube, "theta"), 10, "theta Ready without the shaper")


def test_delete_collects_children(operator, kube, example_policy):
    kube.apply(_policy(example_policy, "epsilon"))
    wait_for(lambda: _ready(kube, "epsilon"), 10, "epsilon Ready")
    kube.delete("dtp", "epsilon")
    empty = {"deployment": [], "service": [], "configmap": [], "serviceaccount": []}
    wait_for(lambda: _children(kube, "epsilon") == empty, 20, "children garbage-collected")


def test_missing_pipeline_configmap_is_reported_not_applied(operator, kube, example_policy):
    spec_switch = copy.deepcopy(example_policy["spec"]["switch"])
    spec_switch["pipeline"] = {"configMapRef": {"name": "p4-pipeline"}}
    kube.apply(_policy(example_policy, "zeta", switch=spec_switch))
    cond = wait_for(
        lambda: (
            (c := kube.condition("zeta", "Ready"))
            and c["reason"] == "PipelineConfigMapNotFound"
            and c
        ),
        10,
        "refusal",
    )
    assert cond["status"] == "False"
    assert "p4-pipeline" in cond["message"]
    assert kube.condition("zeta", "Degraded")["status"] == "True"
    events = kube.plane.kubectl(
        "get",
        "events",
        "-n",
        kube.namespace,
        "--field-selector",
        "involvedObject.name=zeta",
        "-o",
        "jsonpath={.items[*].reason}",
    ).stdout
    assert "PipelineConfigMapNotFound" in events
    # Nothing partial: no workload, no config.
    assert _children(kube, "zeta") == {
        "deployment": [],
        "service": [],
        "configmap": [],
        "serviceaccount": [],
    }
    assert operator.alive()
    # Once the ConfigMap appears, the retry picks it up.
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "p4-pipeline"},
            "data": {"p4info.txtpb": "# p4info"},
            "binaryData": {"device_config.bin": "AAEC"},
        }
    )
    wait_for(lambda: _ready(kube, "zeta"), 15, "Ready after the ConfigMap appeared")
    assert kube.condition("zeta", "Degraded")["status"] == "False"


def test_tls_secret_without_its_ca_is_reported_then_mounted(operator, kube, example_policy):
    switch = copy.deepcopy(example_policy["spec"]["switch"])
    switch["tls"] = {"secretName": "switch-tls"}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "switch-tls"},
              "type": "kubernetes.io/tls",
              "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}  # fmt: skip
    kube.apply(secret)
    kube.apply(_policy(example_policy, "tau", switch=switch))
    cond = wait_for(
        lambda: (
            (c := kube.condition("tau", "Ready")) and c["reason"] == "TlsSecretKeyMissing" and c
        ),
        10,
        "refusal",
    )
    assert cond["status"] == "False" and "ca.crt" in cond["message"]
    assert _children(kube, "tau")["deployment"] == []
    secret["data"]["ca.crt"] = "Y2E="
    kube.apply(secret)
    wait_for(lambda: _ready(kube, "tau"), 15, "Ready once the Secret has ca.crt")
    pod = kube.get("deployment", "tau-collector")["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v] == ["switch-tls"]


def _resource_versions(kube, name):
    versions = {"dtp": kube.get("dtp", name)["metadata"]["resourceVersion"]}
    for kind, names in _children(kube, name).items():
        for child in names:
            versions[f"{kind}/{child}"] = kube.get(kind, child)["metadata"]["resourceVersion"]
    return versions


def test_restart_writes_nothing(operator, kube, example_policy):
    kube.apply(_policy(example_policy, "eta"))
    wait_for(lambda: _ready(kube, "eta"), 10, "eta Ready")
    # kwok, the Deployment controller and the operator's status refresh trail Ready (longer
    # on a loaded machine): take the snapshot once nothing has changed for a second and a half
    settled = [_resource_versions(kube, "eta")]

    def unchanged() -> bool:
        time.sleep(1.5)
        settled.append(_resource_versions(kube, "eta"))
        return settled[-1] == settled[-2]

    wait_for(unchanged, 30, "eta's objects to settle")
    before = settled[-1]
    resumed_before = operator.log().count("Handler 'reconcile' succeeded")
    operator.stop()
    operator.start()
    wait_for(
        lambda: operator.log().count("Handler 'reconcile' succeeded") > resumed_before,
        20,
        "the restarted operator resumed the policies",
    )
    time.sleep(1.5)
    assert _resource_versions(kube, "eta") == before


def test_two_replicas_only_one_acts(operator, plane, kube, example_policy, tmp_path):
    standby = Operator(plane, tmp_path / "standby.log", priority=50)
    standby.start()
    try:
        # kopf starts a replica paused until peering says it may act; a lower priority
        # stays paused without logging a transition.
        wait_for(
            lambda: "Pausing the watch-stream for dtntransferpolicies" in standby.log(),
            20,
            "the lower-priority replica to hold its watch paused",
        )
        url = f"http://127.0.0.1:{operator.health_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
        kube.apply(_policy(example_policy, "theta"))
        wait_for(lambda: _ready(kube, "theta"), 10, "theta Ready (by the active replica)")
        time.sleep(1.0)
        assert "Handler 'reconcile' succeeded" not in standby.log()
        # Fail-over: the active replica stops, the standby takes over.
        operator.stop()
        wait_for(
            lambda: "Resuming operations after the pause" in standby.log(),
            30,
            "the standby to resume",
        )
        kube.apply(_policy(example_policy, "iota"))
        wait_for(lambda: _ready(kube, "iota"), 15, "iota Ready (by the former standby)")
        assert "Handler 'reconcile' succeeded" in standby.log()
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
    from scidmz.k8s.manifests import CONTROLLER, PolicyRef, selector_labels
    from scidmz.k8s.reconcile import nudge_live_pods

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
    ref = PolicyRef(name="iota", namespace=ns, uid="0")
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "iota-controller-x", "labels": selector_labels(ref, CONTROLLER)},
        "spec": {"containers": [{"name": "c", "image": "example.org/none"}]},
    }  # fmt: skip
    kube.apply(pod)
    client = KubeClient(kubernetes.client.ApiClient(configuration))
    try:
        labels = selector_labels(ref, CONTROLLER)
        assert client.list_names("v1", "Pod", ns, labels) == ["iota-controller-x"]
        with pytest.raises(KubeApiError) as refused:
            client.annotate("v1", "Pod", ns, "iota-controller-x", {"a": "b"})
        assert refused.value.status == 403
        assert nudge_live_pods(client, ref, "0123456789abcdef") == []  # logged, not raised
    finally:
        client.close()
    assert _live_hash(kube.get("pod", "iota-controller-x")) is None
