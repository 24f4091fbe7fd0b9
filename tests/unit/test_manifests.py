"""The pure builders of a link's loop (scidmz.k8s.manifests): what runs where, locked down,
in the operator's namespace only."""

from dataclasses import replace

import pytest
import yaml

from scidmz.api.link import HostPortAllocation, Toleration
from scidmz.api.runtime import ChannelSecurity, RuntimeConfig, restart_relevant
from scidmz.auth.identity import WORKLOAD_SERVER_NAME
from scidmz.k8s.manifests import (
    CONFIG_HASH_ANNOTATION,
    IDENTITY_MOUNT,
    LIVE_CONFIG_ANNOTATION,
    TLS_MOUNT,
    LinkRef,
    LinkWorkloads,
    WorkloadSettings,
    build_children,
    build_shaper_restore_job,
    child_name,
    collector_address,
    dtn_shaper_address,
    dtn_shaper_workload,
    server_names,
    shaper_restore_of,
)
from tests.loops import link_spec, policy_spec, render
from tests.unit.test_live_config import (
    COLLECTOR_SPEC_CHANGES,
    LIVE_SPEC_CHANGES,
    RESTART_SPEC_CHANGES,
)

REF = LinkRef(name="campus-border", uid="1234")
SETTINGS = WorkloadSettings(
    image="example.org/scidmz:test",
    namespace="scidmz-system",
    resources={"collector": {"requests": {"cpu": "50m"}, "limits": {"memory": "512Mi"}}},
)
SECURITY = ChannelSecurity(
    identity_dir=IDENTITY_MOUNT,
    collector_server_name=server_names(REF.name, "collector", SETTINGS)[1],
    dtn_shaper_server_name=server_names(REF.name, "dtn-shaper-dtn-1", SETTINGS)[1],
)
SHAPER_PORT = 9502


def _children(link=None, policy=None, generation=1, **work):
    config = render(
        link if link is not None else link_spec(),
        policy if policy is not None else policy_spec(),
        generation,
        collector_address(REF.name, SETTINGS),
        dtn_shaper_address(REF.name, SETTINGS, SHAPER_PORT + 1, "dtn-1"),
        SECURITY,
    )
    ports = (
        HostPortAllocation(workload="controller", node="edge-1", port=9500),
        HostPortAllocation(workload="dtn-shaper-dtn-1", node="dtn-1", port=SHAPER_PORT),
    )
    workloads = LinkWorkloads(host_ports=ports, **work)
    return {
        o["kind"] + "/" + o["metadata"]["name"]: o
        for o in build_children(REF, config, SETTINGS, workloads)
    }


def _pod(children, component):
    return children[f"Deployment/campus-border-{component}"]["spec"]["template"]["spec"]


def test_children_set_and_ownership_all_in_the_operators_namespace():
    children = _children()
    assert set(children) == {
        "ServiceAccount/campus-border-scidmz",
        "ConfigMap/campus-border-config",
        "Service/campus-border-collector",
        "Service/campus-border-controller",
        "NetworkPolicy/campus-border-collector",
        "NetworkPolicy/campus-border-controller",
        "Deployment/campus-border-collector",
        "Deployment/campus-border-controller",
    }
    for obj in children.values():
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner == {
            "apiVersion": "scidmz.io/v1alpha1", "kind": "BorderLink", "name": "campus-border",
            "uid": "1234", "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "scidmz-operator"
        assert labels["scidmz.io/link"] == "campus-border"
        assert obj["metadata"]["namespace"] == "scidmz-system"  # never the tenant's


def test_workloads_are_locked_down_sized_and_probed_over_https_without_tc():
    children = _children()
    for component in ("collector", "controller"):
        dep = children[f"Deployment/campus-border-{component}"]
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert "hostNetwork" not in pod and "affinity" not in pod and "tolerations" not in pod
        assert container["args"] == [component, "--config", "/etc/scidmz/config.yaml"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["scheme"] == "HTTPS"
            assert "host" not in container[probe]["httpGet"]
        assert {"name": "SCIDMZ_FD_LIMIT", "value": "65536"} in container["env"]
        assert all(e["name"] != "SCIDMZ_PROBES_ON_LOOPBACK" for e in container["env"])
        assert pod["automountServiceAccountToken"] is False
        # its own certificate, and nobody else's
        mounted = {"name": "identity", "secret": {"secretName": f"campus-border-{component}-tls"}}
        assert mounted in pod["volumes"]
        assert "app.kubernetes.io/version" not in dep["spec"]["selector"]["matchLabels"]
        # the image's own user, unless the administrators set another
        assert (sc["runAsUser"], sc["runAsGroup"]) == (10001, 10001)
    collector = children["Deployment/campus-border-collector"]["spec"]["template"]["spec"]
    assert collector["containers"][0]["resources"] == {
        "requests": {"cpu": "50m"}, "limits": {"memory": "512Mi"}
    }  # fmt: skip


def test_the_controllers_state_is_reachable_while_it_is_not_ready():
    """Not ready is what a controller holding its fail-safe reports; its /state says why,
    so its Service reaches it anyway. The sample stream goes to a ready collector only."""
    children = _children()
    assert children["Service/campus-border-controller"]["spec"]["publishNotReadyAddresses"]
    assert "publishNotReadyAddresses" not in children["Service/campus-border-collector"]["spec"]


def test_network_policies_admit_the_controller_to_the_stream_and_observers_to_metrics():
    children = _children()
    collector = children["NetworkPolicy/campus-border-collector"]["spec"]
    assert collector["policyTypes"] == ["Ingress"]
    stream, metrics = collector["ingress"]
    assert stream["ports"] == [{"port": "grpc-samples", "protocol": "TCP"}]
    assert stream["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "scidmz", "app.kubernetes.io/instance": "campus-border",
        "app.kubernetes.io/component": "controller",
    }}}]  # fmt: skip
    assert metrics["ports"] == [{"port": "https-metrics", "protocol": "TCP"}]
    # the operator's own pods only: no Prometheus namespace was configured
    assert metrics["from"] == [{"podSelector": {"matchLabels": dict(SETTINGS.operator_pod_labels)}}]
    controller = children["NetworkPolicy/campus-border-controller"]["spec"]
    assert [rule["ports"] for rule in controller["ingress"]] == [[metrics["ports"][0]]]


def test_tc_actuator_gets_net_admin_host_network_its_port_and_only_listed_tolerations():
    tc = {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}
    untolerated = _pod(_children(link_spec(actuator=tc)), "controller")
    assert "tolerations" not in untolerated  # not every NoSchedule taint, as it once did
    toleration = Toleration(key="scidmz.io/border", operator="Exists", effect="NoSchedule")
    children = _children(link_spec(actuator=tc), tolerations=(toleration,))
    pod = _pod(children, "controller")
    assert pod["hostNetwork"] is True
    assert pod["tolerations"] == [
        {"key": "scidmz.io/border", "operator": "Exists", "effect": "NoSchedule"}
    ]
    container = pod["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    # on the node's network the port is the link's own allocation
    assert container["ports"] == [
        {"name": "https-metrics", "containerPort": 9500, "protocol": "TCP"}
    ]
    assert {"name": "SCIDMZ_HTTP_PORT", "value": "9500"} in container["env"]
    # the kubelet probes its loopback listener; the public port wants a client certificate
    assert {"name": "SCIDMZ_PROBES_ON_LOOPBACK", "value": "true"} in container["env"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {
            "host": "127.0.0.1",
            "path": path,
            "port": "https-metrics",
            "scheme": "HTTP",
        }
    service = children["Service/campus-border-controller"]["spec"]["ports"]
    assert [p["port"] for p in service] == [9500]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["edge-1"]
    assert "hostNetwork" not in _pod(children, "collector")


def test_paused_scales_to_zero():
    running, paused = _children(), _children(paused=True)
    assert running["Deployment/campus-border-controller"]["spec"]["replicas"] == 1
    assert paused["Deployment/campus-border-controller"]["spec"]["replicas"] == 0
    assert paused["Deployment/campus-border-collector"]["spec"]["replicas"] == 0


WORKLOADS = ("Deployment/campus-border-collector", "Deployment/campus-border-controller")


def load_runtime_config_text(config_map) -> RuntimeConfig:
    return RuntimeConfig.model_validate(yaml.safe_load(config_map["data"]["config.yaml"]))


def _changed(change, generation=2):
    link, policy = change
    return _children(link_spec(**link), policy_spec(**policy), generation)


@pytest.mark.parametrize("change", LIVE_SPEC_CHANGES.values(), ids=[*LIVE_SPEC_CHANGES])
def test_a_live_change_rewrites_the_config_and_leaves_the_pods_running(change):
    before, after = _children(), _changed(change)
    key = "ConfigMap/campus-border-config"
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
def test_a_change_the_processes_are_built_around_rolls_the_pods_that_read_it(change):
    """Each component rolls exactly when what it reads at start changes; every such
    change rolls at least one."""
    before, after = _children(), _changed(change)
    rolled = []
    for workload in WORKLOADS:
        if workload in after:
            a = before[workload]["spec"]["template"]["metadata"]["annotations"]
            b = after[workload]["spec"]["template"]["metadata"]["annotations"]
            component = workload.rsplit("-", 1)[1]
            reads = _reads(before, component) != _reads(after, component)
            assert (a[CONFIG_HASH_ANNOTATION] != b[CONFIG_HASH_ANNOTATION]) is reads, workload
            rolled += [workload] * reads
    assert rolled


def _reads(children, component):
    config = load_runtime_config_text(children["ConfigMap/campus-border-config"])
    return restart_relevant(config, component)


def test_an_administrators_change_of_the_controller_rolls_the_controller_only():
    before, after = _children(), _changed(RESTART_SPEC_CHANGES["strategy to trivial"])

    def template(children, component):
        return children[f"Deployment/campus-border-{component}"]["spec"]["template"]

    assert template(before, "controller") != template(after, "controller")
    assert template(before, "collector") == template(after, "collector")


def test_same_spec_renders_identical_objects():
    assert _children() == _children()


@pytest.mark.parametrize("length", [10, 50, 63, 200, 253])
def test_child_names_fit_dns_labels(length):
    link = "p" * length
    hosts = ("dtn-1", "h" * 63)
    shapers = [dtn_shaper_workload(h) for h in hosts]
    suffixes = ["collector", "controller", "config", "scidmz", *shapers,
                *(f"{s}-tls" for s in shapers), *(f"{s}-restore" for s in shapers)]  # fmt: skip
    for suffix in suffixes:
        name = child_name(link, suffix)
        assert len(name) <= 63 and name.endswith(suffix)
    assert dtn_shaper_workload("h" * 63) != dtn_shaper_workload("h" * 62 + "i")
    assert child_name("a" * 200, "collector") != child_name("a" * 199 + "b", "collector")


def test_workload_certificates_name_their_service_and_the_metrics_name():
    names = server_names("campus-border", "collector", SETTINGS)
    assert names == [
        "campus-border-collector",
        "campus-border-collector.scidmz-system.svc",
        "campus-border-collector.scidmz-system.svc.cluster.local",
        WORKLOAD_SERVER_NAME,
    ]


def test_switch_tls_secret_is_mounted_into_the_collector_only():
    children = _children()  # the example link has switch.tls
    collector = _pod(children, "collector")
    secret = {"name": "switch-tls", "secret": {"secretName": "campus-switch-tls"}}
    assert secret in collector["volumes"]
    mounts = collector["containers"][0]["volumeMounts"]
    assert {"name": "switch-tls", "mountPath": TLS_MOUNT, "readOnly": True} in mounts
    # and into the controller of a sim actuator, which talks to the simulator on that port
    assert secret in _pod(children, "controller")["volumes"]
    dry = _children(link_spec(actuator={"type": "dryRun"}))
    assert all(v.get("secret", {}).get("secretName") != "campus-switch-tls"
               for v in _pod(dry, "controller")["volumes"])  # fmt: skip
    config = children["ConfigMap/campus-border-config"]["data"]["config.yaml"]
    assert "tls_server_name: scidmz-target" in config
    # and into a controller whose only sim actuator is the buffer's
    buffered = _children(
        link_spec(
            actuator={"type": "dryRun"},
            controller={"strategy": "pi"},
            buffer={"actuator": {"type": "sim"}},
        )
    )
    assert secret in _pod(buffered, "controller")["volumes"]
    rendered = buffered["ConfigMap/campus-border-config"]["data"]["config.yaml"]
    assert "actuator_type: sim" in rendered and "default_s: 0.1" in rendered


def _with_tc_shaper():
    shaper = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    host = {**link_spec()["dtnHosts"][0], "shaper": shaper}
    return link_spec(dtnHosts=[host])


def test_a_tc_dtn_cap_gets_a_shaper_on_the_dtn_host_on_its_own_ports():
    children = _children(_with_tc_shaper())
    shaper = children["Deployment/campus-border-dtn-shaper-dtn-1"]
    service = children["Service/campus-border-dtn-shaper-dtn-1"]
    pod = shaper["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # the fail-safe and bounds come from the mounted ConfigMap, followed live
    assert container["args"] == [
        "shaper", "--interface", "ens1f0", "--config", "/etc/scidmz/config.yaml",
        "--dtn-host", "dtn-1", "--listen", f"0.0.0.0:{SHAPER_PORT + 1}",
        "--state-dir", "/var/lib/scidmz-shapers",
    ]  # fmt: skip
    # the interface's original qdisc is recorded on the node, where it outlives the pod
    assert {"name": "shaper-state", "mountPath": "/var/lib/scidmz-shapers"} in container[
        "volumeMounts"
    ]
    # and what the operator's restore Job needs is read back from the Deployment
    restore = shaper_restore_of(shaper)
    assert restore is not None and (restore.node, restore.interface) == ("dtn-1", "ens1f0")
    job = build_shaper_restore_job(REF, restore, SETTINGS)
    job_pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == "campus-border-dtn-shaper-dtn-1-restore"
    assert job_pod["containers"][0]["args"][-1] == "--restore"
    assert job_pod["affinity"] == pod["affinity"] and job_pod["hostNetwork"] is True
    # labelled apart from the shaper: the operator waits for the shaper's pods alone
    component = "app.kubernetes.io/component"
    assert job["spec"]["template"]["metadata"]["labels"][component] == "dtn-shaper-dtn-1-restore"
    assert shaper_restore_of({"spec": {}}) is None
    assert {"name": "config", "mountPath": "/etc/scidmz", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert pod["hostNetwork"] is True
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["dtn-1"]
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("grpc-shaper", SHAPER_PORT + 1), ("https-metrics", SHAPER_PORT)
    }  # fmt: skip
    config = children["ConfigMap/campus-border-config"]["data"]["config.yaml"]
    assert f"address: campus-border-dtn-shaper-dtn-1.scidmz-system.svc:{SHAPER_PORT + 1}" in config
    assert "hostNetwork" not in _pod(children, "controller")
    order = list(children)
    assert order.index("Deployment/campus-border-dtn-shaper-dtn-1") < order.index(
        "Deployment/campus-border-controller"
    )


def test_a_new_target_rate_leaves_the_dtn_shaper_running():
    """With failsafeRate 'target' the agent's fail-safe cap is R*: it reads it from the
    ConfigMap, so its Deployment does not change (nor roll) with R*."""
    key = "Deployment/campus-border-dtn-shaper-dtn-1"
    link = _with_tc_shaper()
    before = _children(link)[key]
    assert _children(link, policy_spec(targetRate="700Mbps"), generation=2)[key] == before
    failsafe = {**link, "failsafe": {"staleAfter": "9s", "rate": "trivial"}}
    assert _children(failsafe, generation=3)[key] == before


@pytest.mark.parametrize("kind", ["sim", "dryRun"])
def test_other_dtn_caps_need_no_shaper(kind):
    host = {**link_spec()["dtnHosts"][0], "shaper": {"type": kind}}
    children = _children(link_spec(dtnHosts=[host]))
    assert not any("dtn-shaper" in name for name in children)


def test_an_image_from_a_private_registry_is_pulled_by_every_pod_with_its_secrets():
    """Every pod the operator makes (the loop's Deployments and the shaper restore Job)
    names the pull Secrets; none without them."""
    private = replace(SETTINGS, image_pull_secrets=("campus-registry", "mirror"))
    config = render(
        _with_tc_shaper(), policy_spec(), 1, collector_address(REF.name, private),
        dtn_shaper_address(REF.name, private, SHAPER_PORT + 1, "dtn-1"), SECURITY,
    )  # fmt: skip
    ports = (
        HostPortAllocation(workload="controller", node="edge-1", port=9500),
        HostPortAllocation(workload="dtn-shaper-dtn-1", node="dtn-1", port=SHAPER_PORT),
    )
    children = build_children(REF, config, private, LinkWorkloads(host_ports=ports))
    pods = [o["spec"]["template"]["spec"] for o in children if o["kind"] == "Deployment"]
    assert len(pods) == 3  # collector, controller, the DTN host's shaper
    wanted = [{"name": "campus-registry"}, {"name": "mirror"}]
    assert all(pod["imagePullSecrets"] == wanted for pod in pods)
    shaper = next(o for o in children if o["metadata"]["name"].endswith("dtn-shaper-dtn-1")
                  and o["kind"] == "Deployment")  # fmt: skip
    restore = shaper_restore_of(shaper)
    assert restore is not None
    job = build_shaper_restore_job(REF, restore, private)
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == wanted
    # the public image: no such field at all
    assert all("imagePullSecrets" not in _pod(_children(_with_tc_shaper()), c)
               for c in ("collector", "controller"))  # fmt: skip
