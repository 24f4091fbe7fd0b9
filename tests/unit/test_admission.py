"""Which policies a link holds a rate for (scidmz.api.admission), and the namespace
selection it and the chart's ValidatingAdmissionPolicy share (scidmz.api.selection)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scidmz.api import admission
from scidmz.api.admission import PolicyView, admit, admitted
from scidmz.api.link import parse_link_spec
from scidmz.api.policy import parse_spec
from scidmz.api.selection import (
    LabelSelector,
    LabelSelectorRequirement,
    NamespaceSelection,
    namespace_allowed,
    selector_matches,
)
from tests.loops import link_spec, policy_spec

TENANT = {"scidmz.io/tenant": "true"}


def _link(**changes):
    hosts = [
        {"name": "dtn-1", "receiverPrefix": "203.0.113.10/32"},
        {"name": "dtn-2", "receiverPrefix": "203.0.113.20/32",
         "allowedNamespaces": {"from": "Selector", "selector": {
             "matchLabels": {"kubernetes.io/metadata.name": "climate"}}}},
    ]  # fmt: skip
    return parse_link_spec(link_spec(dtnHosts=hosts) | changes)


def _policy(name, namespace="physics", created="2026-01-01T00:00:00Z", **changes):
    return PolicyView(namespace, name, created, parse_spec(policy_spec(**changes)))


LABELS = {
    "physics": {**TENANT, "kubernetes.io/metadata.name": "physics"},
    "climate": {**TENANT, "kubernetes.io/metadata.name": "climate"},
    "sales": {"kubernetes.io/metadata.name": "sales"},
}


def test_an_allowed_policy_is_admitted():
    decisions = admit("campus-border", _link(), [_policy("p")], LABELS)
    decision = decisions[("physics", "p")]
    assert decision.accepted and decision.reason == admission.ACCEPTED
    assert decision.refs_resolved and "target 600Mbps" in decision.message


@pytest.mark.parametrize(
    ("policy", "reason", "fragment", "resolved"),
    [
        (_policy("p", namespace="sales"), admission.NAMESPACE_NOT_ALLOWED,
         "does not allow policies from namespace sales", True),
        (_policy("p", dtnHost="dtn-9"), admission.DTN_HOST_NOT_FOUND,
         "has no DTN host 'dtn-9' (it has: dtn-1, dtn-2)", False),
        (_policy("p", dtnHost="dtn-2"), admission.DTN_NOT_ALLOWED,
         "namespace physics may not ask for DTN host dtn-2", True),
        (_policy("p", targetRate="1Gbps"), admission.TARGET_ABOVE_CAPACITY,
         "1Gbps is not below the capacity", True),
        (_policy("p", targetRate="950Mbps"), admission.QUOTA_EXCEEDED,
         "900Mbps (90% of 1Gbps) in all, 900Mbps left", True),
    ],
)  # fmt: skip
def test_each_refusal_names_the_field_and_the_reason(policy, reason, fragment, resolved):
    decision = admit("campus-border", _link(), [policy], LABELS)[policy.key]
    assert not decision.accepted and decision.reason == reason
    assert fragment in decision.message and decision.message.startswith(("spec.", "BorderLink"))
    assert decision.refs_resolved is resolved


def test_a_missing_link_refuses_every_policy_that_names_it():
    decisions = admit("gone", None, [_policy("a"), _policy("b", namespace="climate")], LABELS)
    for decision in decisions.values():
        assert decision.reason == admission.LINK_NOT_FOUND and not decision.refs_resolved
        assert "BorderLink gone does not exist" in decision.message


def test_first_come_first_served_and_recomputed_when_the_first_goes():
    first = _policy("first", created="2026-01-01T00:00:01Z")
    same_host = _policy("same-host", created="2026-01-01T00:00:02Z")
    other_host = _policy("other", namespace="climate", created="2026-01-01T00:00:03Z",
                         dtnHost="dtn-2")  # fmt: skip
    decisions = admit("l", _link(), [other_host, same_host, first], LABELS)
    assert decisions[first.key].accepted
    assert decisions[same_host.key].reason == admission.DTN_HOST_IN_USE
    assert "held by policy physics/first" in decisions[same_host.key].message
    # one DTN class per link: a second host's policy is refused, not mixed into the first
    assert decisions[other_host.key].reason == admission.DTN_CLASS_SHARED
    # the first goes away: the next by creation time is admitted
    decisions = admit("l", _link(), [other_host, same_host], LABELS)
    assert decisions[same_host.key].accepted
    assert [p.name for p in admitted([other_host, same_host], decisions)] == ["same-host"]


def test_a_later_policy_never_displaces_an_earlier_one():
    early = _policy("early", created="2026-01-01T00:00:01Z", targetRate="800Mbps")
    late = _policy("late", created="2026-01-01T00:00:02Z", targetRate="100Mbps")
    decisions = admit("l", _link(), [late, early], LABELS)
    assert decisions[early.key].accepted and not decisions[late.key].accepted


def test_equal_creation_times_are_ordered_by_namespace_then_name():
    b = _policy("b", created="2026-01-01T00:00:01Z")
    a = _policy("a", created="2026-01-01T00:00:01Z")
    assert admit("l", _link(), [b, a], LABELS)[a.key].accepted


def test_a_namespace_that_loses_its_label_loses_its_admission():
    policy = _policy("p")
    assert admit("l", _link(), [policy], LABELS)[policy.key].accepted
    relabelled = {**LABELS, "physics": {"kubernetes.io/metadata.name": "physics"}}
    assert admit("l", _link(), [policy], relabelled)[policy.key].reason == (
        admission.NAMESPACE_NOT_ALLOWED
    )


def test_a_link_admits_nobody_by_default():
    """tenants.namespaces.from defaults to None: a new link waits for its administrators."""
    spec = link_spec()
    spec.pop("tenants")
    decision = admit("l", parse_link_spec(spec), [_policy("p")], LABELS)[("physics", "p")]
    assert decision.reason == admission.NAMESPACE_NOT_ALLOWED


def test_an_unparseable_policy_is_refused_with_its_problem():
    broken = PolicyView("physics", "old", "t", None, "spec.targetRate: bad")
    decision = admit("l", _link(), [broken], LABELS)[broken.key]
    assert decision.reason == admission.INVALID_SPEC and decision.message == "spec.targetRate: bad"


# ---- namespace selection ---------------------------------------------------------------


def _requirement(key, operator, values=()):
    return LabelSelectorRequirement(key=key, operator=operator, values=list(values))


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (LabelSelector(), {}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "1", "b": "2"}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "2"}, False),
        (LabelSelector(match_expressions=[_requirement("a", "In", ["1", "2"])]), {"a": "2"}, True),
        (LabelSelector(match_expressions=[_requirement("a", "In", ["1"])]), {}, False),
        (LabelSelector(match_expressions=[_requirement("a", "NotIn", ["1"])]), {}, True),
        (LabelSelector(match_expressions=[_requirement("a", "NotIn", ["1"])]), {"a": "1"}, False),
        (LabelSelector(match_expressions=[_requirement("a", "Exists")]), {"a": ""}, True),
        (LabelSelector(match_expressions=[_requirement("a", "DoesNotExist")]), {"a": ""}, False),
    ],
)
def test_label_selectors_mean_what_kubernetes_means(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


def test_selection_from_all_selector_none():
    labels = {"team": "x"}
    assert namespace_allowed(NamespaceSelection(from_="All"), labels)
    assert not namespace_allowed(NamespaceSelection(), labels)  # None, the default
    chosen = NamespaceSelection.model_validate(
        {"from": "Selector", "selector": {"matchLabels": labels}}
    )
    assert namespace_allowed(chosen, labels) and not namespace_allowed(chosen, {})


@given(
    targets=st.lists(st.integers(1, 999), min_size=1, max_size=12),
    percent=st.integers(1, 99),
)
def test_admitted_targets_never_exceed_the_tenants_share(targets, percent):
    """Whatever arrives, the admitted sum stays within maxTargetPercent of capacity, and
    one policy per DTN class."""
    hosts = [{"name": f"dtn-{k}", "receiverPrefix": f"203.0.113.{k + 1}/32"}
             for k in range(len(targets))]  # fmt: skip
    link = parse_link_spec(
        link_spec(dtnHosts=hosts, tenants={"namespaces": {"from": "All"},
                                           "maxTargetPercent": percent})
    )  # fmt: skip
    policies = [
        _policy(f"p{k}", created=f"2026-01-01T00:00:{k:02d}Z", dtnHost=f"dtn-{k}",
                targetRate=f"{target}Mbps")
        for k, target in enumerate(targets)
    ]  # fmt: skip
    decisions = admit("l", link, policies, LABELS)
    chosen = admitted(policies, decisions)
    assert len(chosen) <= admission.DTN_CLASSES_PER_LINK
    total = sum(int(p.spec.target_rate.removesuffix("Mbps")) for p in chosen if p.spec)
    assert total <= 1000 * percent / 100
    if targets[0] <= 10 * percent:  # the first fits: it is the one admitted
        assert chosen and chosen[0].name == "p0"
