import copy

import pytest

from scidmz.api.policy import parse_spec
from scidmz.api.runtime import resolve_runtime_config
from scidmz.k8s.manifests import (
    CONFIG_HASH_ANNOTATION,
    LIVE_CONFIG_ANNOTATION,
    TLS_MOUNT,
    PolicyRef,
    WorkloadSettings,
    build_children,
    child_name,
    collector_address,
    dtn_shaper_address,
)
from tests.unit.test_live_config import (
    COLLECTOR_SPEC_CHANGES,
    LIVE_SPEC_CHANGES,
    RESTART_SPEC_CHANGES,
)

REF = PolicyRef(name="paper-testbed", namespace="science", uid="1234")
SETTINGS = WorkloadSettings(image="example.org/scidmz:test")


def _children(spec_dict, paused=False, generation=1):
    spec = parse_spec(spec_dict)
    config = resolve_runtime_config(
        REF.name, REF.namespace, generation, spec, collector_address(REF, SETTINGS),
        dtn_shaper_address(REF, SETTINGS),
    )  # fmt: skip
    return {
        o["kind"] + "/" + o["metadata"]["name"]: o
        for o in build_children(REF, config, paused, SETTINGS)
    }


def test_children_set_and_ownership(example_policy):
    children = _children(example_policy["spec"])
    assert set(children) == {
        "ServiceAccount/paper-testbed-scidmz",
        "ConfigMap/paper-testbed-config",
        "Service/paper-testbed-collector",
        "Service/paper-testbed-controller",
        "Deployment/paper-testbed-collector",
        "Deployment/paper-testbed-controller",
    }
    for obj in children.values():
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner["uid"] == "1234" and owner["controller"] is True
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "scidmz-operator"
        assert labels["app.kubernetes.io/instance"] == "paper-testbed"
        assert obj["metadata"]["namespace"] == "science"


def test_workloads_are_locked_down_without_tc(example_policy):
    children = _children(example_policy["spec"])
    for component in ("collector", "controller"):
        dep = children[f"Deployment/paper-testbed-{component}"]
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert "hostNetwork" not in pod and "affinity" not in pod
        assert container["args"] == [component, "--config", "/etc/scidmz/config.yaml"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert pod["automountServiceAccountToken"] is False
        # The selector must not carry the version: upgrades would orphan pods.
        assert "app.kubernetes.io/version" not in dep["spec"]["selector"]["matchLabels"]


def test_tc_actuator_gets_net_admin_host_network_and_pinning(example_policy):
    spec = dict(example_policy["spec"])
    spec["actuator"] = {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}
    children = _children(spec)
    pod = children["Deployment/paper-testbed-controller"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["NET_ADMIN"],
    }
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["edge-1"]
    collector_pod = children["Deployment/paper-testbed-collector"]["spec"]["template"]["spec"]
    assert "hostNetwork" not in collector_pod


def test_paused_scales_to_zero(example_policy):
    running = _children(example_policy["spec"])
    paused = _children(example_policy["spec"], paused=True)
    assert running["Deployment/paper-testbed-controller"]["spec"]["replicas"] == 1
    assert paused["Deployment/paper-testbed-controller"]["spec"]["replicas"] == 0
    assert paused["Deployment/paper-testbed-collector"]["spec"]["replicas"] == 0


WORKLOADS = ("Deployment/paper-testbed-collector", "Deployment/paper-testbed-controller")


@pytest.mark.parametrize("change", LIVE_SPEC_CHANGES.values(), ids=[*LIVE_SPEC_CHANGES])
def test_a_live_change_rewrites_the_config_and_leaves_the_pods_running(example_policy, change):
    before = _children(example_policy["spec"])
    after = _children({**example_policy["spec"], **change}, generation=2)
    key = "ConfigMap/paper-testbed-config"
    assert before[key]["data"] != after[key]["data"]
    hashes = [c[key]["metadata"]["annotations"][LIVE_CONFIG_ANNOTATION] for c in (before, after)]
    assert hashes[0] != hashes[1]
    for workload in WORKLOADS:
        assert before[workload] == after[workload]


@pytest.mark.parametrize(
    "change",
    [*RESTART_SPEC_CHANGES.values(), *COLLECTOR_SPEC_CHANGES.values()],
    ids=[*RESTART_SPEC_CHANGES, *COLLECTOR_SPEC_CHANGES],
)
def test_a_change_the_processes_are_built_around_rolls_the_pods(example_policy, change):
    before = _children(example_policy["spec"])
    after = _children({**example_policy["spec"], **change}, generation=2)
    for workload in WORKLOADS:
        if workload in after:
            a = before[workload]["spec"]["template"]["metadata"]["annotations"]
            b = after[workload]["spec"]["template"]["metadata"]["annotations"]
            assert a[CONFIG_HASH_ANNOTATION] != b[CONFIG_HASH_ANNOTATION]


def test_same_spec_renders_identical_objects(example_policy):
    assert _children(example_policy["spec"]) == _children(example_policy["spec"])


@pytest.mark.parametrize("length", [10, 50, 63, 200, 253])
def test_child_names_fit_dns_labels(length):
    policy = "p" * length
    for suffix in ("collector", "controller", "config", "scidmz"):
        name = child_name(policy, suffix)
        assert len(name) <= 63 and name.endswith(suffix)
    assert child_name("a" * 200, "collector") != child_name("a" * 199 + "b", "collector")


def test_switch_tls_secret_is_mounted_into_the_collector_only(example_policy):
    plain = _children(example_policy["spec"])
    spec = copy.deepcopy(example_policy["spec"])
    spec["switch"]["tls"] = {"secretName": "switch-tls", "serverName": "tofino-1.campus.example"}
    children = _children(spec)
    collector = children["Deployment/paper-testbed-collector"]["spec"]["template"]["spec"]
    assert {"name": "switch-tls", "secret": {"secretName": "switch-tls"}} in collector["volumes"]
    mounts = collector["containers"][0]["volumeMounts"]
    assert {"name": "switch-tls", "mountPath": TLS_MOUNT, "readOnly": True} in mounts
    controller = children["Deployment/paper-testbed-controller"]["spec"]["template"]["spec"]
    assert all("secret" not in v for v in controller["volumes"])
    # the server name reaches the collector through its runtime config, which rolls its pod
    config = children["ConfigMap/paper-testbed-config"]["data"]["config.yaml"]
    assert "tls_server_name: tofino-1.campus.example" in config
    assert plain["ConfigMap/paper-testbed-config"]["data"]["config.yaml"] != config


def test_a_tc_dtn_actuator_gets_a_shaper_on_the_dtn_host(example_policy):
    spec = copy.deepcopy(example_policy["spec"])
    spec["actuator"]["dtn"] = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    children = _children(spec)
    shaper = children["Deployment/paper-testbed-dtn-shaper"]
    service = children["Service/paper-testbed-dtn-shaper"]
    pod = shaper["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # the fail-safe comes from the mounted ConfigMap, followed live
    assert container["args"] == [
        "shaper", "--interface", "ens1f0", "--config", "/etc/scidmz/config.yaml",
        "--listen", "0.0.0.0:9470",
    ]  # fmt: skip
    assert {"name": "config", "mountPath": "/etc/scidmz", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert pod["hostNetwork"] is True
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["dtn-1"]
    assert {p["name"] for p in service["spec"]["ports"]} == {"grpc-shaper", "http-metrics"}
    # the controller reaches it through its Service, and does not need host networking
    config = children["ConfigMap/paper-testbed-config"]["data"]["config.yaml"]
    assert "address: paper-testbed-dtn-shaper.science.svc:9470" in config
    assert (
        "hostNetwork"
        not in children["Deployment/paper-testbed-controller"]["spec"]["template"]["spec"]
    )
    order = list(children)
    assert order.index("Deployment/paper-testbed-dtn-shaper") < order.index(
        "Deployment/paper-testbed-controller"
    )


def test_a_new_target_rate_leaves_the_dtn_shaper_running(example_policy):
    """With failsafeRate 'target' the agent's fail-safe cap is R*: it reads it from the
    ConfigMap, so its Deployment does not change (nor roll) with R*."""
    spec = copy.deepcopy(example_policy["spec"])
    spec["actuator"]["dtn"] = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    key = "Deployment/paper-testbed-dtn-shaper"
    before = _children(spec)[key]
    assert _children({**spec, "targetRate": "700Mbps"}, generation=2)[key] == before
    failsafe = {**spec, "failsafe": {"staleAfter": "9s", "rate": "trivial"}}
    assert _children(failsafe, generation=3)[key] == before


@pytest.mark.parametrize("kind", ["sim", "dryRun"])
def test_other_dtn_actuators_need_no_shaper(example_policy, kind):
    spec = copy.deepcopy(example_policy["spec"])
    spec["actuator"]["dtn"] = {"type": kind}
    children = _children(spec)
    assert not any("dtn-shaper" in name for name in children)
