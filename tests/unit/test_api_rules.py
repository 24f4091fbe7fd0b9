"""One table of rules drives both the CRD's CEL and the operator's checks."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from scidmz.api.crd import BORDER_LINK, DTN_TRANSFER_POLICY, build_crd
from scidmz.api.link import BorderLinkSpec, parse_link_spec
from scidmz.api.policy import DTNTransferPolicySpec, parse_spec
from scidmz.api.rules import RuledModel, walk_rules
from scidmz.api.runtime import RuntimeConfig, dump_runtime_config
from tests.api_rules import IDS, PLACED, full_link_spec, full_spec, violating
from tests.loops import policy_spec, render

PARSE = {"BorderLink": parse_link_spec, "DTNTransferPolicy": parse_spec}
CRDS = {"BorderLink": BORDER_LINK, "DTNTransferPolicy": DTN_TRANSFER_POLICY}


@pytest.mark.parametrize("kind", PARSE)
def test_the_full_spec_breaks_no_rule(kind):
    PARSE[kind](full_spec(kind))


def test_every_model_has_rules_somewhere():
    # the walk reaches nested, optional, listed and Annotated-in-Union fields
    paths = {(k.kind, k.placed.path) for k in PLACED}
    expected = [("BorderLink", p) for p in (
        "", "switch", "switch.ports", "actuator", "actuator.sim.address",
        "failsafe.staleAfter", "telemetry.digestHold", "controller.limits",
        "dtnHosts[].receiverPrefix", "dtnHosts[].shaper", "tenants.namespaces",
        "actuator.tc.tolerations[]",
    )] + [("DTNTransferPolicy", "")]  # fmt: skip
    assert set(expected) <= paths


@pytest.mark.parametrize("rule", PLACED, ids=IDS)
def test_the_operator_refuses_each_violation_with_the_rules_message(rule):
    with pytest.raises(ValidationError) as caught:
        PARSE[rule.kind](violating(full_spec(rule.kind), rule.placed))
    assert rule.placed.rule.message in str(caught.value)


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for key in filter(None, path.split(".")):
        if key.endswith("[]"):
            schema = schema["properties"][key[:-2]]["items"]
        else:
            schema = schema["properties"][key]
    return schema


@pytest.mark.parametrize("rule", PLACED, ids=IDS)
def test_the_crd_carries_each_rule_where_it_applies(rule):
    crd = build_crd(CRDS[rule.kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = _schema_at(crd["properties"]["spec"], rule.placed.path)
    assert rule.placed.rule.validation() in node["x-kubernetes-validations"]


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    seen.add(model)
    for info in model.model_fields.values():
        for arg in _flatten(info.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in seen:
                _models(arg, seen)
    return seen


def _flatten(annotation: Any) -> list[Any]:
    from typing import get_args

    return [annotation, *(a for arg in get_args(annotation) for a in _flatten(arg))]


def test_no_check_lives_outside_the_rules():
    """A validator written straight in pydantic would be a rule the API server does not
    know: every model check is RuledModel's, every field check a ``Checked``."""
    models = _models(DTNTransferPolicySpec, _models(BorderLinkSpec, set()))
    assert len(models) > 20
    for model in models:
        assert issubclass(model, RuledModel), model
        decorators = model.__pydantic_decorators__
        assert set(decorators.model_validators) <= {"_check_rules"}, model
        assert not decorators.field_validators, model
        for name, info in model.model_fields.items():
            for item in info.metadata:
                kind = type(item).__name__
                assert "Validator" not in kind, f"{model.__name__}.{name}: {kind}"


def test_rules_are_not_checked_twice_or_lost():
    for model in (BorderLinkSpec, DTNTransferPolicySpec):
        messages = [(p.path, p.rule.message) for p in walk_rules(model)]
        assert len(messages) == len(set(messages))


# ---- accepted means usable ---------------------------------------------------------------


def _numbers(node: Any) -> list[float]:
    if isinstance(node, dict):
        return [n for v in node.values() for n in _numbers(v)]
    return [float(node)] if isinstance(node, int | float) else []


def load_runtime_config_text(text: str) -> RuntimeConfig:
    return RuntimeConfig.model_validate(yaml.safe_load(text))


_NUMBERS = st.one_of(
    st.integers(0, 10**7).map(str),
    st.decimals(0, 10**4, places=3, allow_nan=False, allow_infinity=False).map(str),
)
# values at the rules' edges (R* against B = 1 Gb/s, T = 1 s), and anything else
EDGE_RATES = ["0bps", "1bps", "0.5Mbps", "400Mbps", "999.999Mbps", "1Gbps", "1.000001Gbps",
              "10Tbps", "10.000001Tbps", "99999999999999999999Tbps"]  # fmt: skip
EDGE_DURATIONS = ["0s", "1us", "999us", "1ms", "100ms", "500ms", "501ms", "1s", "30s", "60s",
                  "60m", "61m"]  # fmt: skip
RATES = st.one_of(
    st.sampled_from(EDGE_RATES),
    st.builds(
        lambda n, u: n + u, _NUMBERS, st.sampled_from(["bps", "kbps", "Mbps", "Gbps", "Tbps"])
    ),
)
DURATIONS = st.one_of(
    st.sampled_from(EDGE_DURATIONS),
    st.builds(lambda n, u: n + u, _NUMBERS, st.sampled_from(["us", "ms", "s", "m"])),
)
CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "policy.targetRate": RATES,
        "capacity": RATES,
        "sampleTime": DURATIONS,
        "controller.limits.min": RATES,
        "controller.limits.max": RATES,
        "controller.limits.maxStep": RATES,
        "controller.limits.integralBand": RATES,
        "controller.desiredState.dtnRtt": DURATIONS,
        "failsafe.staleAfter": DURATIONS,
        "failsafe.rate": st.one_of(st.just("trivial"), RATES),
        "dtnHosts[].shaper.failsafeRate": st.one_of(st.just("target"), RATES),
        "dtnHosts[].shaper.minRate": RATES,
        "telemetry.digestHold": DURATIONS,
        "telemetry.flowTimeout": DURATIONS,
    },
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)
@given(changes=CHANGES)
def test_every_spec_the_rules_accept_renders_a_usable_runtime_config(changes):
    """No link and policy pass the rules (hence the API server) and admission, and are then
    refused or turned into a config the collector or controller cannot use."""
    from scidmz.api.loop_file import LoopFileError
    from tests.api_rules import set_dotted

    link, policy = full_link_spec(), policy_spec()
    link["dtnHosts"][0].pop("allowedNamespaces")  # the test's namespace has no team label
    link["tenants"] = {"namespaces": {"from": "All"}}
    for dotted, value in changes.items():
        if dotted.startswith("policy."):
            set_dotted(policy, dotted.removeprefix("policy."), value)
        else:
            set_dotted(link, dotted, value)
    try:
        config = render(link, policy, collector="collector:9600")
    except LoopFileError:
        assume(False)  # rejected or refused: not an example (Unsatisfiable if none passes)
        return
    assert all(math.isfinite(v) for v in _numbers(config.model_dump()))
    assert load_runtime_config_text(dump_runtime_config(config)) == config
    c = config.controller
    assert 0 <= c.min_rate_bps <= c.max_rate_bps <= config.bottleneck_capacity_bps
    assert 0 < config.target_rate_bps < config.bottleneck_capacity_bps
    dtn = config.actuator.dtn
    assert dtn is None or dtn.failsafe_rate_bps <= config.bottleneck_capacity_bps
    assert config.failsafe.stale_after_s >= config.sample_time_s
    assert 2 * config.telemetry.digest_hold_s <= config.sample_time_s
