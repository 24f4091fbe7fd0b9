"""Which policies a link holds a rate for (scidmz.api.admission), and the namespace
selection it and the chart's ValidatingAdmissionPolicy share (scidmz.api.selection)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scidmz.api import admission
from scidmz.api.admission import PolicyView, admit, admitted
from scidmz.api.link import parse_link_spec
from scidmz.api.policy import AdmissionStatus, parse_spec
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


def _policy(name, namespace="physics", created="2026-01-01T00:00:00Z", place=None, **changes):
    return PolicyView(namespace, name, created, parse_spec(policy_spec(**changes)), place=place)


def _placed(policy: PolicyView, decisions) -> PolicyView:
    """The policy as the next pass sees it: with the place the operator recorded."""
    return replace(policy, place=decisions[policy.key].place)


def _at(second: int) -> str:
    return f"2026-06-01T00:00:{second:02d}.000000Z"


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
                         dtnHost="dtn-2", targetRate="200Mbps")  # fmt: skip
    decisions = admit("l", _link(), [other_host, same_host, first], LABELS)
    assert decisions[first.key].accepted
    assert decisions[same_host.key].reason == admission.DTN_HOST_IN_USE
    assert "held by policy first of this namespace" in decisions[same_host.key].message
    # another host's policy is admitted beside it: each host is its own class and cap
    assert decisions[other_host.key].accepted
    # the first goes away: the next by creation time on its host is admitted
    decisions = admit("l", _link(), [other_host, same_host], LABELS)
    assert decisions[same_host.key].accepted
    chosen = admitted([other_host, same_host], decisions)
    assert sorted(p.name for p in chosen) == ["other", "same-host"]


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


# ---- places: what a tenant's edits cannot move ------------------------------------------


def test_an_old_policy_arriving_later_waits_behind_the_admitted_one():
    """Creation times are the tenant's: a policy created long ago but new on this host
    queues behind the holder instead of displacing it."""
    victim = _policy("victim", namespace="climate", created="2026-03-01T00:00:00Z")
    decisions = admit("l", _link(), [victim], LABELS, _at(1), "uid-1")
    assert decisions[victim.key].accepted
    victim = _placed(victim, decisions)
    assert victim.place is not None and victim.place.admitted_at == _at(1)
    old = _policy("old", created="2020-01-01T00:00:00Z")
    decisions = admit("l", _link(), [old, victim], LABELS, _at(2), "uid-1")
    assert decisions[victim.key].accepted
    refusal = decisions[old.key]
    assert refusal.reason == admission.DTN_HOST_IN_USE and not refusal.accepted
    # its tenant learns that someone holds the host, not who
    assert "a policy of another namespace" in refusal.message
    assert "climate" not in refusal.message and "victim" not in refusal.message
    assert refusal.place is not None and refusal.place.queued_at == _at(2)
    assert refusal.place.admitted_at is None


def test_a_raise_that_does_not_fit_keeps_the_admitted_target_running():
    holder = _policy("a", targetRate="600Mbps")
    decisions = admit("l", _link(), [holder], LABELS, _at(1))
    raised = replace(_placed(holder, decisions), spec=parse_spec(policy_spec(targetRate="950Mbps")))
    decision = admit("l", _link(), [raised], LABELS, _at(2))[raised.key]
    assert decision.accepted and decision.reason == admission.TARGET_NOT_RAISED
    assert decision.target == "600Mbps"
    assert "spec.targetRate: 950Mbps does not fit" in decision.message
    assert "the admitted target 600Mbps keeps running" in decision.message
    assert decision.place is not None and decision.place.admitted_at == _at(1)
    # a raise that fits is taken; a lower target applies at once
    for wanted in ("800Mbps", "100Mbps"):
        changed = replace(raised, spec=parse_spec(policy_spec(targetRate=wanted)))
        decision = admit("l", _link(), [changed], LABELS, _at(3))[changed.key]
        assert decision.reason == admission.ACCEPTED and decision.target == wanted


def test_a_raise_never_takes_room_an_admitted_policy_holds():
    """Two hosts of a link: the first admitted raising its target past the share does not
    push the second out (the attack a creation-time order allowed)."""
    first = _policy("first", targetRate="400Mbps")
    second = _policy("second", namespace="climate", dtnHost="dtn-2", targetRate="400Mbps")
    decisions = admit("l", _link(), [first], LABELS, _at(1))
    first = _placed(first, decisions)
    decisions = admit("l", _link(), [first, second], LABELS, _at(2))
    second = _placed(second, decisions)
    assert decisions[second.key].accepted
    greedy = replace(first, spec=parse_spec(policy_spec(targetRate="800Mbps")))
    decisions = admit("l", _link(), [greedy, second], LABELS, _at(3))
    assert decisions[second.key].accepted and decisions[second.key].target == "400Mbps"
    assert decisions[greedy.key].reason == admission.TARGET_NOT_RAISED
    assert decisions[greedy.key].target == "400Mbps"
    # what is left for its target: its own 400 Mb/s and the 100 Mb/s nobody holds
    assert "500Mbps left" in decisions[greedy.key].message


def test_when_the_share_shrinks_the_last_admitted_give_way_first():
    early = _policy("early", created="2026-09-01T00:00:00Z", targetRate="300Mbps")
    late = _policy("late", namespace="climate", created="2020-01-01T00:00:00Z",
                   dtnHost="dtn-2", targetRate="300Mbps")  # fmt: skip
    early = _placed(early, admit("l", _link(), [early], LABELS, _at(1)))
    late = _placed(late, admit("l", _link(), [early, late], LABELS, _at(2)))
    # the administrators leave tenants 50 % of 1 Gb/s instead of 90 %
    smaller = _link(tenants={"namespaces": {"from": "All"}, "maxTargetPercent": 50})
    decisions = admit("l", smaller, [late, early], LABELS, _at(3))
    assert decisions[early.key].accepted
    assert decisions[late.key].reason == admission.QUOTA_EXCEEDED
    assert "the policies admitted last give way first" in decisions[late.key].message
    # it keeps its place in the queue, ahead of anyone who asks after it
    assert decisions[late.key].place.queued_at == _at(2)


def test_the_waiting_are_admitted_in_the_order_they_asked():
    holder = _policy("holder")
    holder = _placed(holder, admit("l", _link(), [holder], LABELS, _at(1)))
    first_asked = _policy("b", created="2026-12-01T00:00:00Z")
    asked_later = _policy("a", created="2020-01-01T00:00:00Z")
    first_asked = _placed(first_asked, admit("l", _link(), [holder, first_asked], LABELS, _at(2)))
    asked_later = _placed(
        asked_later, admit("l", _link(), [holder, first_asked, asked_later], LABELS, _at(3))
    )
    decisions = admit("l", _link(), [asked_later, first_asked], LABELS, _at(4))
    assert decisions[first_asked.key].accepted
    assert decisions[asked_later.key].reason == admission.DTN_HOST_IN_USE
    assert "policy b of this namespace" in decisions[asked_later.key].message


def test_a_place_is_for_one_link_incarnation_and_host():
    admitted_place = AdmissionStatus(link="l", link_uid="old-uid", dtn_host="dtn-1",
                                     queued_at=_at(0), admitted_at=_at(0),
                                     admitted_target="600Mbps")  # fmt: skip
    holder = _placed(_policy("holder"), admit("l", _link(), [_policy("holder")], LABELS, _at(1),
                                              "new-uid"))  # fmt: skip
    stale = _policy("stale", namespace="climate", created="2020-01-01T00:00:00Z",
                    place=admitted_place)  # fmt: skip
    decisions = admit("l", _link(), [stale, holder], LABELS, _at(2), "new-uid")
    assert decisions[holder.key].accepted
    assert decisions[stale.key].reason == admission.DTN_HOST_IN_USE
    for other in ({"link": "m"}, {"dtn_host": "dtn-2"}):
        moved = _policy("p", place=admitted_place.model_copy(update={**other, "link_uid": ""}))
        place = admission.current_place(moved, "l", "", _at(5))
        assert place.admitted_at is None and place.queued_at == _at(5)


def test_a_refusal_other_than_waiting_gives_the_place_up():
    policy = _placed(_policy("p"), admit("l", _link(), [_policy("p")], LABELS, _at(1)))
    relabelled = {**LABELS, "physics": {"kubernetes.io/metadata.name": "physics"}}
    decision = admit("l", _link(), [policy], relabelled, _at(2))[policy.key]
    assert decision.reason == admission.NAMESPACE_NOT_ALLOWED and decision.place is None


def test_place_times_order_as_strings():
    import datetime as dt

    early = admission.place_time(dt.datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=dt.UTC))
    late = admission.place_time(dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.UTC))
    assert early < late and early.endswith(".000005Z")
    assert admission.normalised_time("2026-01-01T00:00:01Z") == late
    assert admission.normalised_time("not a time") == "not a time"


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
    one policy per DTN host; each that fits beside those before it is admitted."""
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
    assert len({p.spec.dtn_host for p in chosen if p.spec}) == len(chosen)
    total = sum(int(p.spec.target_rate.removesuffix("Mbps")) for p in chosen if p.spec)
    assert total <= 1000 * percent / 100
    if targets[0] <= 10 * percent:  # the first fits: it is admitted first
        assert chosen and chosen[0].name == "p0"
    # each one refused is refused for want of room, never for sharing the link
    refused = [p for p in policies if not decisions[p.key].accepted]
    assert all(decisions[p.key].reason == admission.QUOTA_EXCEEDED for p in refused)
