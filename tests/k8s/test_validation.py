"""Invalid policies are rejected by the API server itself (schema + CEL), with a message
naming the field. kubectl applies with fieldValidation=Strict, so unknown fields fail too."""

from __future__ import annotations

import copy

import pytest

from tests.api_rules import IDS, PLACED, full_spec, set_dotted, violating

CASES = [
    # (id, dotted field, value, fragments expected in the error)
    ("missing-unit", "targetRate", "600", ["spec.targetRate", "should match"]),
    ("unknown-unit", "bottleneckCapacity", "1GiB", ["spec.bottleneckCapacity", "should match"]),
    (
        "target-at-capacity",
        "targetRate",
        "1Gbps",
        ["spec.targetRate", "targetRate must be below bottleneckCapacity"],
    ),
    (
        "target-above-capacity",
        "targetRate",
        "1.5Gbps",
        ["spec.targetRate", "must be below bottleneckCapacity"],
    ),
    ("negative-rate", "targetRate", "-600Mbps", ["spec.targetRate", "should match"]),
    ("zero-rate", "targetRate", "0Mbps", ["spec.targetRate", "must be greater than 0"]),
    ("zero-capacity", "bottleneckCapacity", "0bps", ["spec.bottleneckCapacity"]),
    ("sample-time-too-short", "sampleTime", "50ms", ["spec.sampleTime", "between 100ms and 60s"]),
    ("sample-time-too-long", "sampleTime", "2m", ["spec.sampleTime", "between 100ms and 60s"]),
    ("bad-ip", "dtn.receiverPrefix", "203.0.113.300/32", ["spec.dtn.receiverPrefix", "CIDR"]),
    (
        "bad-ipv4-prefix-length",
        "campus.remotePrefix",
        "198.51.100.0/33",
        ["spec.campus.remotePrefix", "CIDR"],
    ),
    (
        "bad-ipv6-prefix-length",
        "dtn.receiverPrefix",
        "2001:db8::/129",
        ["spec.dtn.receiverPrefix", "CIDR"],
    ),
    (
        "host-bits-set",
        "campus.remotePrefix",
        "203.0.113.7/24",
        ["spec.campus.remotePrefix", "host bits"],
    ),
    ("no-prefix-length", "campus.remotePrefix", "203.0.113.0", ["spec.campus.remotePrefix"]),
    ("unbracketed-ipv6-address", "switch.address", "2001:db8::1:9559", ["spec.switch.address"]),
    (
        "port-out-of-range",
        "switch.address",
        "switch-1:70000",
        ["spec.switch.address", "port must be between 1 and 65535"],
    ),
    ("bracket-not-ipv6", "switch.address", "[10.0.0.1]:9559", ["spec.switch.address", "IPv6"]),
    (
        "unknown-strategy",
        "controller.strategy",
        "pid",
        ["spec.controller.strategy", "Unsupported value"],
    ),
    (
        "unknown-congestion-control",
        "dtn.congestionControl",
        "vegas",
        ["spec.dtn.congestionControl", "Unsupported value"],
    ),
    ("unknown-actuator", "actuator.type", "ovs", ["spec.actuator.type", "Unsupported value"]),
    (
        "negative-gain",
        "controller.gains",
        {"kp": -0.1, "ki": 1.0, "kw": 1.0},
        ["spec.controller.gains.kp"],
    ),
    ("missing-required-field", "targetRate", None, ["spec.targetRate", "Required value"]),
    (
        "missing-required-nested",
        "dtn.receiverPrefix",
        None,
        ["spec.dtn.receiverPrefix", "Required value"],
    ),
    (
        "inverted-limits",
        "controller.limits",
        {"min": "800Mbps", "max": "200Mbps"},
        ["spec.controller.limits.min", "must not exceed controller.limits.max"],
    ),
    (
        "limit-above-capacity",
        "controller.limits",
        {"max": "2Gbps"},
        ["spec.controller.limits.max", "must not exceed bottleneckCapacity"],
    ),
    ("unknown-field", "surprise", "yes", ['unknown field "spec.surprise"']),
    (
        "unknown-nested-field",
        "controller.gain",
        {"kp": 1},
        ['unknown field "spec.controller.gain"'],
    ),
    ("tc-without-settings", "actuator", {"type": "tc"}, ["spec.actuator.tc", "required"]),
    (
        "dtn-tc-without-settings",
        "actuator.dtn",
        {"type": "tc"},
        ["spec.actuator.dtn.tc", "required when actuator.dtn.type is tc"],
    ),
    (
        "dtn-failsafe-not-a-rate",
        "actuator.dtn",
        {"type": "sim", "failsafeRate": "fast"},
        ["spec.actuator.dtn.failsafeRate", "must be 'target' or a rate"],
    ),
    (
        "dtn-failsafe-above-capacity",
        "actuator.dtn",
        {"type": "sim", "failsafeRate": "2Gbps"},
        ["spec.actuator.dtn.failsafeRate", "must not exceed bottleneckCapacity"],
    ),
    (
        "dtn-gain-out-of-range",
        "actuator.dtn",
        {"type": "dryRun", "gains": {"kp": 101, "ki": 0, "kw": 0}},
        ["spec.actuator.dtn.gains.kp"],
    ),
    (
        "unknown-desired-state-mode",
        "controller.desiredState",
        {"mode": "zero"},
        ["spec.controller.desiredState.mode", "Unsupported value"],
    ),
    (
        "overlapping-prefixes",
        "campus.remotePrefix",
        "203.0.113.10/32",
        ["spec.dtn.receiverPrefix", "overlap"],
    ),
    (
        "duplicate-ports",
        "switch.ports",
        {"campus": 1, "dtn": 1, "bottleneck": 3},
        ["spec.switch.ports", "distinct"],
    ),
]


@pytest.mark.parametrize(
    ("field", "value", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_api_server_rejects(kube, example_policy, field, value, fragments):
    policy = copy.deepcopy(example_policy)
    policy["metadata"] = {"name": "invalid"}
    set_dotted(policy["spec"], field, value)
    result = kube.apply(policy, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert kube.get("dtp", "invalid") is None


def test_the_policy_using_every_block_is_accepted(kube, example_policy):
    policy = {**copy.deepcopy(example_policy), "metadata": {"name": "full"}}
    policy["spec"] = full_spec(example_policy)
    result = kube.apply(policy, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("placed", PLACED, ids=IDS)
def test_the_api_server_rejects_every_rule_the_operator_enforces(kube, example_policy, placed):
    """The same table (scidmz.api.rules) made the CEL and the operator's checks; here the
    server itself must refuse each violation, so no policy it accepts is refused later."""
    policy = {**copy.deepcopy(example_policy), "metadata": {"name": "violating"}}
    policy["spec"] = violating(full_spec(example_policy), placed)
    result = kube.apply(policy, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert placed.rule.message in result.stderr, result.stderr
    assert kube.get("dtp", "violating") is None


def test_valid_edge_values_are_accepted(kube, example_policy):
    policy = copy.deepcopy(example_policy)
    policy["metadata"] = {"name": "edges"}
    policy["spec"].update(targetRate="999.5Mbps", sampleTime="100ms")
    policy["spec"]["switch"]["address"] = "[2001:db8::1]:9559"
    policy["spec"]["dtn"]["receiverPrefix"] = "2001:db8::10/128"
    policy["spec"]["campus"]["remotePrefix"] = "2001:db8::/64"
    result = kube.apply(policy, check=False)
    assert result.returncode == 0, result.stderr


def test_kubectl_explain_documents_the_api(plane):
    out = plane.kubectl("explain", "dtp.spec.controller").stdout
    for field in ("strategy", "gains", "limits", "desiredState"):
        assert field in out
    assert "anti-windup" in out.lower() or "u(t)" in out
    limits = plane.kubectl("explain", "dtp.spec.controller.limits.maxStep").stdout
    assert "slew" in limits
    band = plane.kubectl("explain", "dtp.spec.controller.limits.integralBand").stdout
    assert "conditional integration" in band and "5% of bottleneckCapacity" in band
