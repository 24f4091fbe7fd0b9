"""Invalid links and policies are rejected by the API server itself (schema + CEL), with a
message naming the field. kubectl applies with fieldValidation=Strict, so unknown fields
fail too."""

from __future__ import annotations

import uuid

import pytest
import yaml

from tests.api_rules import IDS, PLACED, full_spec, set_dotted, violating
from tests.loops import link_object, link_spec, policy_object

LINK_CASES = [
    # (id, dotted field, value, fragments expected in the error)
    ("unknown-unit", "capacity", "1GiB", ["spec.capacity", "should match"]),
    ("zero-capacity", "capacity", "0bps", ["spec.capacity"]),
    ("sample-time-too-short", "sampleTime", "50ms", ["spec.sampleTime", "between 100ms and 60s"]),
    ("sample-time-too-long", "sampleTime", "2m", ["spec.sampleTime", "between 100ms and 60s"]),
    ("bad-ip", "dtnHosts", [{"name": "d", "receiverPrefix": "203.0.113.300/32"}],
     ["spec.dtnHosts[0].receiverPrefix", "CIDR"]),
    ("bad-ipv4-prefix-length", "campus.remotePrefix", "198.51.100.0/33",
     ["spec.campus.remotePrefix", "CIDR"]),
    ("bad-ipv6-prefix-length", "dtnHosts", [{"name": "d", "receiverPrefix": "2001:db8::/129"}],
     ["spec.dtnHosts[0].receiverPrefix", "CIDR"]),
    ("host-bits-set", "campus.remotePrefix", "203.0.113.7/24",
     ["spec.campus.remotePrefix", "host bits"]),
    ("no-prefix-length", "campus.remotePrefix", "203.0.113.0", ["spec.campus.remotePrefix"]),
    ("unbracketed-ipv6-address", "switch.address", "2001:db8::1:9559", ["spec.switch.address"]),
    ("port-out-of-range", "switch.address", "switch-1:70000",
     ["spec.switch.address", "port must be between 1 and 65535"]),
    ("bracket-not-ipv6", "switch.address", "[10.0.0.1]:9559", ["spec.switch.address", "IPv6"]),
    ("no-switch-tls", "switch.tls", None, ["spec.switch.tls", "switch.tls is required"]),
    ("unknown-strategy", "controller.strategy", "pid",
     ["spec.controller.strategy", "Unsupported value"]),
    ("unknown-actuator", "actuator.type", "ovs", ["spec.actuator.type", "Unsupported value"]),
    ("negative-gain", "controller.gains", {"kp": -0.1, "ki": 1.0, "kw": 1.0},
     ["spec.controller.gains.kp"]),
    ("missing-required-field", "capacity", None, ["spec.capacity", "Required value"]),
    ("no-dtn-hosts", "dtnHosts", [], ["spec.dtnHosts"]),
    ("duplicate-dtn-hosts", "dtnHosts",
     [{"name": "d", "receiverPrefix": "192.0.2.1/32"},
      {"name": "d", "receiverPrefix": "192.0.2.2/32"}],
     ["spec.dtnHosts[1]", "Duplicate value"]),
    ("overlapping-dtn-hosts", "dtnHosts",
     [{"name": "a", "receiverPrefix": "192.0.2.0/24"},
      {"name": "b", "receiverPrefix": "192.0.2.2/32"}],
     ["spec.dtnHosts", "must not overlap"]),
    ("inverted-limits", "controller.limits", {"min": "800Mbps", "max": "200Mbps"},
     ["spec.controller.limits.min", "must not exceed controller.limits.max"]),
    ("limit-above-capacity", "controller.limits", {"max": "2Gbps"},
     ["spec.controller.limits.max", "must not exceed capacity"]),
    ("unknown-field", "surprise", "yes", ['unknown field "spec.surprise"']),
    ("tc-without-settings", "actuator", {"type": "tc"}, ["spec.actuator.tc", "required"]),
    ("tolerate-everything", "actuator", {"type": "tc", "tc": {
        "nodeName": "edge-1", "interface": "eth1", "tolerations": [{"operator": "Equal"}]}},
     ["tolerations[0].key", "must use operator Exists"]),
    ("selector-missing", "tenants", {"namespaces": {"from": "Selector"}},
     ["spec.tenants.namespaces.selector", "required when from is Selector"]),
    ("share-100", "tenants", {"maxTargetPercent": 100}, ["spec.tenants.maxTargetPercent"]),
    ("overlapping-prefixes", "campus.remotePrefix", "203.0.113.10/32",
     ["spec.dtnHosts", "overlap"]),
    ("duplicate-ports", "switch.ports", {"campus": 1, "dtn": 1, "bottleneck": 3},
     ["spec.switch.ports", "distinct"]),
]  # fmt: skip

POLICY_CASES = [
    ("missing-unit", "targetRate", "600", ["spec.targetRate", "should match"]),
    ("negative-rate", "targetRate", "-600Mbps", ["spec.targetRate", "should match"]),
    ("zero-rate", "targetRate", "0Mbps", ["spec.targetRate", "must be greater than 0"]),
    ("unknown-congestion-control", "congestionControl", "vegas",
     ["spec.congestionControl", "Unsupported value"]),
    ("missing-required-field", "targetRate", None, ["spec.targetRate", "Required value"]),
    ("missing-link", "linkRef", None, ["spec.linkRef", "Required value"]),
    ("bad-host-name", "dtnHost", "DTN_1", ["spec.dtnHost", "should match"]),
    # what a tenant may not say at all
    ("node-name", "nodeName", "edge-1", ['unknown field "spec.nodeName"']),
    ("interface", "actuator", {"tc": {"interface": "eth0"}}, ['unknown field "spec.actuator"']),
    ("switch-address", "switch", {"address": "other:9559"}, ['unknown field "spec.switch"']),
    ("election-id", "electionId", 1000, ['unknown field "spec.electionId"']),
    ("secret", "tls", {"secretName": "someone-elses"}, ['unknown field "spec.tls"']),
]  # fmt: skip


def _name() -> str:
    return f"v-{uuid.uuid4().hex[:8]}"


def _apply_link(plane, obj, check=False):
    return plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(obj), check=check)


@pytest.mark.parametrize(
    ("field", "value", "fragments"), [c[1:] for c in LINK_CASES], ids=[c[0] for c in LINK_CASES]
)
def test_api_server_rejects_links(plane, field, value, fragments):
    link = link_object(_name())
    set_dotted(link["spec"], field, value)
    result = _apply_link(plane, link)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert plane.kubectl("get", "borderlink", link["metadata"]["name"], check=False).returncode


@pytest.mark.parametrize(
    ("field", "value", "fragments"),
    [c[1:] for c in POLICY_CASES],
    ids=[c[0] for c in POLICY_CASES],
)
def test_api_server_rejects_policies(kube, field, value, fragments):
    policy = policy_object("invalid")
    set_dotted(policy["spec"], field, value)
    result = kube.apply(policy, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert kube.get("dtp", "invalid") is None


def test_the_link_using_every_block_is_accepted(plane):
    from tests.api_rules import full_link_spec

    link = {**link_object(_name()), "spec": full_link_spec()}
    link["spec"]["paused"] = True  # nothing to run
    result = _apply_link(plane, link)
    assert result.returncode == 0, result.stderr
    plane.kubectl("delete", "borderlink", link["metadata"]["name"], "--wait=false")


@pytest.mark.parametrize("rule", PLACED, ids=IDS)
def test_the_api_server_rejects_every_rule_the_operator_enforces(plane, kube, rule):
    """The same table (scidmz.api.rules) made the CEL and the operator's checks; here the
    server itself must refuse each violation, so nothing it accepts is refused later."""
    spec = violating(full_spec(rule.kind), rule.placed)
    if rule.kind == "BorderLink":
        obj = {**link_object(_name()), "spec": spec}
        result = _apply_link(plane, obj)
    else:
        obj = {**policy_object("violating"), "spec": spec}
        result = kube.apply(obj, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert rule.placed.rule.message in result.stderr, result.stderr


def test_valid_edge_values_are_accepted(plane, kube):
    name = _name()
    link = link_object(name)
    link["spec"].update(sampleTime="100ms", paused=True)
    link["spec"]["switch"]["address"] = "[2001:db8::1]:9559"
    link["spec"]["dtnHosts"] = [{"name": "dtn-1", "receiverPrefix": "2001:db8::10/128"}]
    link["spec"]["campus"]["remotePrefix"] = "2001:db8::/64"
    result = _apply_link(plane, link)
    assert result.returncode == 0, result.stderr
    policy = policy_object("edges", linkRef={"name": name}, targetRate="999.5Mbps")
    assert kube.apply(policy, check=False).returncode == 0
    plane.kubectl("delete", "borderlink", name, "--wait=false")


def test_kubectl_explain_documents_both_resources(plane):
    out = plane.kubectl("explain", "borderlink.spec.controller").stdout
    for field in ("strategy", "gains", "limits", "desiredState"):
        assert field in out
    assert "anti-windup" in out.lower() or "u(t)" in out
    limits = plane.kubectl("explain", "bl.spec.controller.limits.maxStep").stdout
    assert "slew" in limits
    band = plane.kubectl("explain", "bl.spec.controller.limits.integralBand").stdout
    assert "conditional integration" in band and "5% of capacity" in band
    tenants = plane.kubectl("explain", "bl.spec.tenants.namespaces.from").stdout
    assert "Gateway API" in plane.kubectl("explain", "bl.spec.tenants.namespaces").stdout
    assert "None" in tenants and "admits nothing" in tenants
    policy = plane.kubectl("explain", "dtp.spec").stdout
    for field in ("linkRef", "dtnHost", "targetRate", "congestionControl"):
        assert field in policy
    assert "nodeName" not in policy
    assert link_spec()  # the example parses
