"""A tenant with only their namespace tries what they may not, on the real API server with
the chart's ValidatingAdmissionPolicy: each attempt is refused with the field and the
reason (by the API server, or in the policy's status), and nothing privileged appears.

The tenant is a ServiceAccount with the Role examples/tenants.yaml gives research groups
(DTNTransferPolicies in their namespace, nothing else), impersonated with kubectl --as."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from scidmz.testenv.identities import OPERATOR_NAMESPACE
from tests.k8s.conftest import REPO, wait_for
from tests.loops import link_object, policy_object


class Tenant:
    """kubectl as a tenant's ServiceAccount (its namespace's Role only)."""

    def __init__(self, plane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        role = next(
            d for d in yaml.safe_load_all((REPO / "examples" / "tenants.yaml").read_text())
            if d["kind"] == "Role"
        )  # fmt: skip
        role["metadata"]["namespace"] = namespace
        plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(role))
        plane.kubectl("create", "serviceaccount", "alice", "-n", namespace)
        plane.kubectl(
            "create", "rolebinding", "alice", "--role=scidmz-tenant",
            f"--serviceaccount={namespace}:alice", "-n", namespace,
        )  # fmt: skip
        self.user = f"system:serviceaccount:{namespace}:alice"

    def kubectl(self, *args: str, input_text: str | None = None):
        return self.plane.kubectl(
            *args, "--as", self.user, "--as-group", "system:serviceaccounts",
            input_text=input_text, check=False,
        )  # fmt: skip

    def apply(self, obj, dry_run: bool = False):
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.namespace}}
        server = ["--dry-run=server"] if dry_run else []
        return self.kubectl("apply", *server, "-f", "-", input_text=yaml.safe_dump(obj))

    def can(self, verb: str, resource: str, namespace: str | None = None) -> bool:
        where = namespace or self.namespace
        resource, _, sub = resource.partition("/")
        subresource = [f"--subresource={sub}"] if sub else []
        answer = self.kubectl("auth", "can-i", verb, resource, *subresource, "-n", where)
        return answer.stdout.strip() == "yes"


@pytest.fixture
def tenant(plane, namespace) -> Tenant:
    return Tenant(plane, namespace)


def _policy(link: str, name: str = "p", **changes):
    return policy_object(name, linkRef={"name": link}, **changes)


def _accepted(kube, name):
    return kube.condition(name, "Accepted") or {}


def _admission_knows(tenant: Tenant, link: str) -> None:
    """Wait until the API server's admission has the new link among its policy's params
    (an informer: a link created a moment ago may not be there yet, and a policy for a link
    it does not know is let through, parameterNotFoundAction: Allow). Probed with a dry run
    that only the admission policy refuses."""
    probe = _policy(link, "admission-probe", dtnHost="no-such-host")
    wait_for(
        lambda: "ValidatingAdmissionPolicy" in tenant.apply(probe, dry_run=True).stderr,
        15, f"the admission policy to know BorderLink {link}",
    )  # fmt: skip


def _refused_by_the_api_server(result, *fragments):
    assert result.returncode != 0, result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_a_tenant_may_ask_for_a_rate_and_nothing_else(
    plane, operator, admission_policy, tenant, kube, links
):
    name = links.name("t")
    hosts = [
        {"name": "dtn-1", "receiverPrefix": "203.0.113.10/32"},
        {"name": "dtn-2", "receiverPrefix": "203.0.113.20/32",
         "allowedNamespaces": {"from": "Selector",
                               "selector": {"matchLabels": {"team": "climate"}}}},
    ]  # fmt: skip
    links.apply(link_object(name, dtnHosts=hosts))
    wait_for(lambda: links.get(name), 10, "the link")
    _admission_knows(tenant, name)
    # what the tenant may do: ask for a rate on the link, and read its status
    assert tenant.apply(_policy(name)).returncode == 0
    wait_for(lambda: _accepted(kube, "p").get("status") == "True", 15, "admitted")
    assert tenant.kubectl("get", "dtp", "p", "-n", tenant.namespace).returncode == 0

    # privileged fields do not exist for it: the API server says so (kubectl is strict)
    for field, value in (
        ("nodeName", "edge-1"), ("interface", "eth0"),
        ("switch", {"address": "someone-elses-switch:9559", "electionId": 99}),
        ("tls", {"secretName": "secret-of-another-namespace"}),
    ):  # fmt: skip
        result = tenant.apply(_policy(name, "sneaky", **{field: value}))
        _refused_by_the_api_server(result, f'unknown field "spec.{field}"')
    # the admission policy refuses what the link does not allow, before it is stored
    _refused_by_the_api_server(
        tenant.apply(_policy(name, "elsewhere", dtnHost="dtn-9")),
        "ValidatingAdmissionPolicy", f"BorderLink {name} has no DTN host dtn-9",
    )  # fmt: skip
    _refused_by_the_api_server(
        tenant.apply(_policy(name, "theirs", dtnHost="dtn-2")),
        f"namespace {tenant.namespace} may not ask for DTN host dtn-2",
    )
    _refused_by_the_api_server(
        tenant.apply(_policy(name, "huge", targetRate="2Gbps")),
        "spec.targetRate: 2Gbps is not below the capacity",
    )
    for refused in ("sneaky", "elsewhere", "theirs", "huge"):
        assert kube.get("dtp", refused) is None
    # its RBAC: policies in its namespace, nothing else
    assert tenant.can("create", "dtntransferpolicies.scidmz.io")
    for verb, resource, where in (
        ("create", "borderlinks.scidmz.io", None), ("patch", "borderlinks.scidmz.io", None),
        ("get", "secrets", OPERATOR_NAMESPACE), ("get", "secrets", None),
        ("create", "pods", None), ("create", "deployments.apps", None),
        ("patch", "dtntransferpolicies.scidmz.io/status", None),
        ("create", "dtntransferpolicies.scidmz.io", "default"),
    ):  # fmt: skip
        assert not tenant.can(verb, resource, where), (verb, resource, where)
    assert tenant.kubectl("get", "borderlinks").returncode != 0
    # and no workload of any kind ever appears where it lives
    for kind in ("pods", "deployments", "services", "configmaps", "secrets"):
        listed = plane.kubectl("get", kind, "-n", tenant.namespace, "-o", "json").stdout
        items = [i["metadata"]["name"] for i in json.loads(listed)["items"]]
        assert [i for i in items if not i.startswith(("alice", "kube-root-ca"))] == [], kind


def test_a_link_that_does_not_allow_the_namespace_refuses_it(
    plane, operator, admission_policy, tenant, kube, links
):
    name = links.name("closed")
    closed = {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "x"}}}}
    links.apply(link_object(name, tenants=closed))
    wait_for(lambda: links.get(name), 10, "the link")
    _admission_knows(tenant, name)
    _refused_by_the_api_server(
        tenant.apply(_policy(name)),
        f"spec.linkRef.name: BorderLink {name} does not allow policies from namespace "
        f"{tenant.namespace}",
    )
    # a link that admits nobody (the default) refuses everyone too
    default = links.name("default")
    link = link_object(default)
    link["spec"].pop("tenants")
    links.apply(link)
    wait_for(lambda: links.get(default), 10, "the link")
    _admission_knows(tenant, default)
    _refused_by_the_api_server(tenant.apply(_policy(default)), "does not allow policies")


def test_the_share_the_link_leaves_tenants_is_decided_in_status(
    plane, operator, admission_policy, tenant, kube, links
):
    name = links.name("quota")
    links.apply(link_object(name))
    # 950 Mb/s of 1 Gb/s: below the capacity (the API server takes it), above the 90 %
    assert tenant.apply(_policy(name, targetRate="950Mbps")).returncode == 0
    refusal = wait_for(
        lambda: (c := _accepted(kube, "p")) and c.get("reason") == "QuotaExceeded" and c,
        15,
        "QuotaExceeded",
    )
    assert refusal["status"] == "False"
    assert "spec.targetRate: 950Mbps does not fit" in refusal["message"]
    assert "900Mbps (90% of 1Gbps) in all, 900Mbps left" in refusal["message"]
    events = plane.kubectl(
        "get", "events", "-n", tenant.namespace, "--field-selector", "involvedObject.name=p",
        "-o", "jsonpath={.items[*].reason}",
    ).stdout.split()  # fmt: skip
    assert "QuotaExceeded" in events
    # the loop holds nothing for it
    wait_for(
        lambda: (
            ((links.get(name) or {}).get("status") or {}).get("policies", {}).get("admitted") == 0
        ),
        10,
        "nothing admitted",
    )
    # within the share: admitted
    assert tenant.apply(_policy(name, targetRate="800Mbps")).returncode == 0
    wait_for(lambda: _accepted(kube, "p").get("status") == "True", 15, "admitted at 800 Mb/s")


def test_first_come_first_served_and_the_next_one_when_the_first_goes(
    plane, operator, admission_policy, tenant, kube, links
):
    name = links.name("fcfs")
    hosts = [{"name": "dtn-1", "receiverPrefix": "203.0.113.10/32"},
             {"name": "dtn-2", "receiverPrefix": "203.0.113.20/32"}]  # fmt: skip
    links.apply(link_object(name, dtnHosts=hosts))
    assert tenant.apply(_policy(name, "first")).returncode == 0
    wait_for(lambda: _accepted(kube, "first").get("status") == "True", 15, "first admitted")
    # creation times have a resolution of a second (equal ones are ordered by name)
    time.sleep(1.1)
    assert tenant.apply(_policy(name, "same-host")).returncode == 0
    time.sleep(1.1)
    other = _policy(name, "other-host", dtnHost="dtn-2", targetRate="200Mbps")
    assert tenant.apply(other).returncode == 0
    wait_for(lambda: _accepted(kube, "same-host").get("reason") == "DtnHostInUse", 15, "in use")
    # another DTN host is its own class and cap: admitted beside the first, in the sum
    wait_for(lambda: _accepted(kube, "other-host").get("status") == "True", 15, "other host")
    assert _accepted(kube, "first")["status"] == "True"  # a later one never displaces it
    kube.delete("dtp", "first")
    wait_for(lambda: _accepted(kube, "same-host").get("status") == "True", 15, "the next admitted")
    assert _accepted(kube, "other-host")["status"] == "True"
    config = wait_for(
        lambda: (c := links.child("configmap", f"{name}-config"))
        and "same-host" in c["data"]["config.yaml"] and c,
        15,
        "the loop now holds same-host",
    )  # fmt: skip
    rendered = yaml.safe_load(config["data"]["config.yaml"])
    assert sorted(p["name"] for p in rendered["policies"]) == ["other-host", "same-host"]
    assert rendered["target_rate_bps"] == 800e6
    assert sorted(c["host"] for c in rendered["dtn_classes"]) == ["dtn-1", "dtn-2"]
    assert "name: first" not in config["data"]["config.yaml"]


def test_a_policy_before_its_link_waits_and_a_namespace_that_loses_its_label_loses_it(
    plane, operator, admission_policy, tenant, kube, links
):
    name = links.name(f"later-{uuid.uuid4().hex[:4]}")
    # GitOps in any order: the API server cannot judge a link that does not exist yet
    assert tenant.apply(_policy(name)).returncode == 0
    refusal = wait_for(
        lambda: (c := _accepted(kube, "p")) and c.get("reason") == "LinkNotFound" and c,
        15,
        "LinkNotFound",
    )
    assert f"BorderLink {name} does not exist" in refusal["message"]
    assert kube.condition("p", "ResolvedRefs")["status"] == "False"
    links.apply(link_object(name))
    wait_for(lambda: _accepted(kube, "p").get("status") == "True", 15, "admitted once it exists")
    # the administrators take the namespace off the tenants' list: the stored policy loses
    # its admission (the API server only sees new writes; the operator sees them all)
    plane.kubectl("label", "namespace", tenant.namespace, "scidmz.io/tenant-")
    wait_for(lambda: _accepted(kube, "p").get("reason") == "NamespaceNotAllowed", 15, "dropped")
    wait_for(
        lambda: links.get(name)["status"]["policies"]["admitted"] == 0, 10, "the loop let it go"
    )


def test_a_flood_of_policies_stops_at_the_administrators_quota(
    plane, operator, admission_policy, tenant, links
):
    """Policy objects are the tenant's to create, so their number is bounded the way
    Kubernetes bounds any object count: the ResourceQuota examples/tenants.yaml gives each
    tenant namespace (10 policies), applied here as an administrator would."""
    name = links.name("flood")
    links.apply(link_object(name))
    quota = next(
        d for d in yaml.safe_load_all((REPO / "examples" / "tenants.yaml").read_text())
        if d["kind"] == "ResourceQuota"
    )  # fmt: skip
    quota["metadata"]["namespace"] = tenant.namespace
    limit = int(quota["spec"]["hard"]["count/dtntransferpolicies.scidmz.io"])
    plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(quota))
    wait_for(
        lambda: "count/dtntransferpolicies.scidmz.io"
        in plane.kubectl("get", "resourcequota", quota["metadata"]["name"], "-n",
                         tenant.namespace, "-o", "jsonpath={.status.hard}").stdout,
        10,
        "the quota in force",
    )  # fmt: skip
    results = [tenant.apply(_policy(name, f"p{k}")) for k in range(limit + 3)]
    assert [r.returncode == 0 for r in results] == [True] * limit + [False] * 3
    assert "exceeded quota" in results[limit].stderr


# ---- what one tenant can no longer do to another ---------------------------------------


@pytest.fixture
def rival(plane) -> Iterator[Tenant]:
    """A second research group: its own namespace and ServiceAccount."""
    name = f"r-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, "scidmz.io/tenant=true")
    yield Tenant(plane, name)
    plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _status(tenant: Tenant, name: str) -> dict:
    got = tenant.plane.kubectl("get", "dtp", name, "-n", tenant.namespace, "-o", "json")
    return json.loads(got.stdout).get("status") or {}


def _reason(tenant: Tenant, name: str) -> str:
    for condition in _status(tenant, name).get("conditions") or []:
        if condition["type"] == "Accepted":
            return f"{condition['status']}/{condition['reason']}"
    return ""


def _loop_targets(links, name: str) -> list[tuple[str, str]]:
    config = links.child("configmap", f"{name}-config") or {"data": {"config.yaml": "{}"}}
    rendered = yaml.safe_load(config["data"]["config.yaml"]) or {}
    return [(p["namespace"], p["name"]) for p in rendered.get("policies") or []]


def test_no_edit_of_a_kept_policy_pushes_an_admitted_one_out(
    plane, operator, admission_policy, tenant, rival, links
):
    """The attack, in every order it used: the attacker keeps policies from before the
    victim's (one naming a link that did not exist yet, one refused for quota), then edits
    them onto the victim's link and host. The victim's policy stays admitted and its loop
    unchanged; the attacker's learns only that someone holds the host."""
    name = links.name("keep")
    hosts = [{"name": "dtn-1", "receiverPrefix": "203.0.113.10/32"},
             {"name": "dtn-2", "receiverPrefix": "203.0.113.20/32"}]  # fmt: skip
    attacker, victim = tenant, rival
    # kept from before: a policy for a link that does not exist yet ...
    assert attacker.apply(_policy(links.name("not-yet"), "elsewhere")).returncode == 0
    links.apply(link_object(name, dtnHosts=hosts))
    wait_for(lambda: links.get(name), 10, "the link")
    _admission_knows(attacker, name)
    # ... and one refused for quota (950 Mb/s of the 900 Mb/s tenants' share)
    assert attacker.apply(_policy(name, "greedy", targetRate="950Mbps")).returncode == 0
    wait_for(lambda: _reason(attacker, "greedy") == "False/QuotaExceeded", 15, "QuotaExceeded")
    time.sleep(1.1)  # creation times have a resolution of a second: the victim's is later
    assert victim.apply(_policy(name, "victim")).returncode == 0
    wait_for(lambda: _reason(victim, "victim") == "True/Accepted", 15, "the victim admitted")
    admitted_at = _status(victim, "victim")["admission"]["admittedAt"]
    assert _loop_targets(links, name) == [(victim.namespace, "victim")]

    # 1. re-pointing a kept policy at the busy link or host: refused by the API server
    for changes, field in (({"linkRef": {"name": name}}, "linkRef"),
                           ({"dtnHost": "dtn-2"}, "dtnHost")):  # fmt: skip
        kept = "elsewhere" if field == "linkRef" else "greedy"
        patch = json.dumps({"spec": changes})
        result = attacker.kubectl("patch", "dtp", kept, "-n", attacker.namespace,
                                  "--type=merge", "-p", patch)  # fmt: skip
        _refused_by_the_api_server(result, f"spec.{field} is immutable")
    # 2. lowering the old refused one into the share: it queues behind the victim
    lower = '{"spec": {"targetRate": "600Mbps"}}'
    lowered = attacker.kubectl(
        "patch", "dtp", "greedy", "-n", attacker.namespace, "--type=merge", "-p", lower
    )
    assert lowered.returncode == 0, lowered.stderr
    wait_for(lambda: _reason(attacker, "greedy") == "False/DtnHostInUse", 15, "it waits")
    message = next(c["message"] for c in _status(attacker, "greedy")["conditions"]
                   if c["type"] == "Accepted")  # fmt: skip
    assert "a policy of another namespace" in message
    assert victim.namespace not in message and "victim" not in message
    # 3. writing its own place: status is not the tenant's to write
    forged = {"status": {"admission": {"link": name, "dtnHost": "dtn-1",
                                       "queuedAt": "2000-01-01T00:00:00.000000Z",
                                       "admittedAt": "2000-01-01T00:00:00.000000Z",
                                       "admittedTarget": "600Mbps"}}}  # fmt: skip
    result = attacker.kubectl(
        "patch", "dtp", "greedy", "-n", attacker.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(forged),
    )  # fmt: skip
    _refused_by_the_api_server(result, "forbidden")
    with_status = {**_policy(name, "greedy", targetRate="600Mbps"), **forged}
    assert attacker.apply(with_status).returncode == 0  # status in a manifest is ignored
    assert "2000-01-01" not in json.dumps(_status(attacker, "greedy"))
    # after all that: the victim holds its place and its loop, unchanged
    time.sleep(2)
    assert _reason(victim, "victim") == "True/Accepted"
    assert _status(victim, "victim")["admission"]["admittedAt"] == admitted_at
    assert _loop_targets(links, name) == [(victim.namespace, "victim")]
    victim_events = plane.kubectl("get", "events", "-n", victim.namespace, "-o", "json").stdout
    assert attacker.namespace not in victim_events and "greedy" not in victim_events
    # when the victim goes, the one that asked first (the lowered one) is next
    victim.kubectl("delete", "dtp", "victim", "-n", victim.namespace)
    wait_for(lambda: _reason(attacker, "greedy") == "True/Accepted", 15, "the next admitted")


def test_a_raise_that_does_not_fit_keeps_the_admitted_target(
    plane, operator, admission_policy, tenant, links
):
    name = links.name("raise")
    links.apply(link_object(name))
    assert tenant.apply(_policy(name)).returncode == 0
    wait_for(lambda: _reason(tenant, "p") == "True/Accepted", 15, "admitted")

    def loop_target() -> float:
        config = links.child("configmap", f"{name}-config")
        return yaml.safe_load(config["data"]["config.yaml"])["target_rate_bps"]

    assert loop_target() == 600e6
    assert tenant.apply(_policy(name, targetRate="950Mbps")).returncode == 0
    wait_for(lambda: _reason(tenant, "p") == "True/TargetNotRaised", 15, "the raise refused")
    status = _status(tenant, "p")
    assert status["admission"]["admittedTarget"] == "600Mbps"
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert "spec.targetRate: 950Mbps does not fit" in accepted["message"]
    assert "the admitted target 600Mbps keeps running" in accepted["message"]
    assert loop_target() == 600e6
    # a target that fits is taken at once
    assert tenant.apply(_policy(name, targetRate="500Mbps")).returncode == 0
    wait_for(lambda: _reason(tenant, "p") == "True/Accepted", 15, "the lower target taken")
    wait_for(lambda: loop_target() == 500e6, 10, "the loop at 500 Mb/s")


def test_a_tenants_edits_roll_no_pod_and_leave_one_event_per_kind(
    plane, operator, admission_policy, tenant, links
):
    """Congestion control and target are a tenant's to change, live: fifty edits roll no
    workload of the loop, and their Events are aggregated, not one per edit."""
    name = links.name("edits")
    links.apply(link_object(name))
    assert tenant.apply(_policy(name)).returncode == 0
    wait_for(lambda: _reason(tenant, "p") == "True/Accepted", 15, "admitted")
    templates = {}
    for component in ("collector", "controller"):
        deployment = wait_for(lambda c=component: links.child("deployment", f"{name}-{c}"), 15, "")
        templates[component] = deployment["spec"]["template"]
    config_before = links.child("configmap", f"{name}-config")["data"]["config.yaml"]
    for k in range(50):
        changes = {"congestionControl": "bbr" if k % 2 == 0 else "cubic",
                   "targetRate": "500Mbps" if k % 2 == 0 else "600Mbps"}  # fmt: skip
        assert tenant.apply(_policy(name, **changes)).returncode == 0
    wait_for(
        lambda: "dtn_congestion_control: cubic" in links.child("configmap", f"{name}-config")[
            "data"]["config.yaml"] and _status(tenant, "p")["observedGeneration"] >= 51,
        20, "the last edit taken",
    )  # fmt: skip
    assert links.child("configmap", f"{name}-config")["data"]["config.yaml"] == config_before
    for component, template in templates.items():
        deployment = links.child("deployment", f"{name}-{component}")
        assert deployment["spec"]["template"] == template, component
    listed = plane.kubectl(
        "get", "events", "-n", OPERATOR_NAMESPACE, "-o", "json",
        "--field-selector", f"involvedObject.name={name}-config,reason=RatePlanChanged",
    ).stdout  # fmt: skip
    plan_events = json.loads(listed)["items"]
    # the first plan, then two alternating ones: three objects at most, whatever the edits
    assert 1 <= len(plan_events) <= 3, [e["message"] for e in plan_events]
    tenant_events = json.loads(plane.kubectl("get", "events", "-n", tenant.namespace,
                                             "-o", "json").stdout)["items"]  # fmt: skip
    assert len(tenant_events) <= 2
