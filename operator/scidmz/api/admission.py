"""Which policies a border link holds a rate for, and why the others are refused.

A pure function of the link, the policies that name it, their namespaces' labels and each
policy's place (``status.admission``): the operator calls it on every change and writes the
outcome into both objects' status (the Gateway API's ``Accepted`` and ``ResolvedRefs``
conditions, and the place). What the API server can decide about one policy alone (its
namespace, its DTN host, a target above capacity) is also in the chart's
ValidatingAdmissionPolicy; what needs every policy of the link (a DTN host already held,
the tenants' share) is decided here.

A policy's place is when it was admitted on its link and DTN host, not when it was created:
creation times and specs are the tenant's to write, places are written by the operator
alone, in the status subresource. So an old policy patched onto a busy link or DTN host is
a newcomer and waits; a raise of an admitted policy's target is granted only from room
nobody else holds, and until then its admitted target keeps running; when the
administrators shrink the share, the policies admitted last give way first. Nothing a
tenant writes moves another tenant's admitted policy. (A policy cannot be re-pointed at all:
spec.linkRef and spec.dtnHost are immutable; a place still names its link and host.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scidmz.api.link import BorderLinkSpec
from scidmz.api.policy import AdmissionStatus, DTNTransferPolicySpec
from scidmz.api.selection import namespace_allowed
from scidmz.api.units import format_rate, parse_rate

# Accepted=True
ACCEPTED = "Accepted"
TARGET_NOT_RAISED = "TargetNotRaised"
"""Admitted at its earlier target: a raise that does not fit yet (Accepted stays True)."""
# ResolvedRefs=False (and Accepted=False)
LINK_NOT_FOUND = "LinkNotFound"
DTN_HOST_NOT_FOUND = "DtnHostNotFound"
# Accepted=False
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
DTN_NOT_ALLOWED = "DtnNotAllowed"
TARGET_ABOVE_CAPACITY = "TargetAboveCapacity"
DTN_HOST_IN_USE = "DtnHostInUse"
QUOTA_EXCEEDED = "QuotaExceeded"
INVALID_SPEC = "InvalidSpec"

REASONS = (
    ACCEPTED,
    TARGET_NOT_RAISED,
    LINK_NOT_FOUND,
    DTN_HOST_NOT_FOUND,
    NAMESPACE_NOT_ALLOWED,
    DTN_NOT_ALLOWED,
    TARGET_ABOVE_CAPACITY,
    DTN_HOST_IN_USE,
    QUOTA_EXCEEDED,
    INVALID_SPEC,
)
SHRUNK = "the link's share shrank, and the policies admitted last give way first"
WAITING = frozenset({DTN_HOST_IN_USE, QUOTA_EXCEEDED})
"""Refusals that keep a policy's place in the queue: it waits for room on its link."""


def place_time(moment: dt.datetime) -> str:
    """A place's timestamp: RFC 3339 in UTC with microseconds (fixed width, so that the
    strings order as the times do)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalised_time(text: str) -> str:
    """``text`` (any RFC 3339 time, e.g. a condition's lastTransitionTime) as
    :func:`place_time` writes it; unchanged when it does not parse."""
    try:
        return place_time(dt.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return text


@dataclass(frozen=True)
class PolicyView:
    """What admission needs of one policy. ``spec`` is None when it does not parse
    (``problem`` says why): an object stored before a schema change."""

    namespace: str
    name: str
    created: str
    """metadata.creationTimestamp: breaks ties between newcomers of one pass only."""
    spec: DTNTransferPolicySpec | None
    problem: str = ""
    place: AdmissionStatus | None = None
    """Its place as the operator last recorded it (``status.admission``)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Decision:
    """The outcome for one policy: its two conditions' status, reason and message, the
    place to record (None: it has none) and, admitted, the target the loop holds."""

    accepted: bool
    reason: str
    message: str
    refs_resolved: bool = True
    place: AdmissionStatus | None = None

    @property
    def resolved_reason(self) -> str:
        return "ResolvedRefs" if self.refs_resolved else self.reason

    @property
    def target(self) -> str | None:
        """The target the link's loop holds for it (None: not admitted)."""
        if not self.accepted or self.place is None:
            return None
        return self.place.admitted_target


def tenant_share_bps(link: BorderLinkSpec) -> float:
    """What the admitted targets may take together."""
    return parse_rate(link.capacity) * link.tenants.max_target_percent / 100.0


def _refusal(reason: str, message: str, resolved: bool = True) -> Decision:
    return Decision(False, reason, message, resolved)


def _static_check(
    link_name: str,
    link: BorderLinkSpec,
    policy: PolicyView,
    labels: Mapping[str, str],
) -> Decision | None:
    """What can be judged from this policy alone (the API server's check, repeated here
    for objects stored before the link changed). None: nothing against it."""
    spec = policy.spec
    if spec is None:
        return _refusal(INVALID_SPEC, policy.problem or "the spec does not parse")
    if not namespace_allowed(link.tenants.namespaces, labels):
        return _refusal(
            NAMESPACE_NOT_ALLOWED,
            f"spec.linkRef.name: BorderLink {link_name} does not allow policies from "
            f"namespace {policy.namespace} (its spec.tenants.namespaces)",
        )
    host = link.dtn_host(spec.dtn_host)
    if host is None:
        names = ", ".join(h.name for h in link.dtn_hosts)
        return _refusal(
            DTN_HOST_NOT_FOUND,
            f"spec.dtnHost: BorderLink {link_name} has no DTN host {spec.dtn_host!r} "
            f"(it has: {names})",
            resolved=False,
        )
    if host.allowed_namespaces is not None and not namespace_allowed(
        host.allowed_namespaces, labels
    ):
        return _refusal(
            DTN_NOT_ALLOWED,
            f"spec.dtnHost: namespace {policy.namespace} may not ask for DTN host "
            f"{host.name} of BorderLink {link_name} (its dtnHosts[].allowedNamespaces)",
        )
    capacity = parse_rate(link.capacity)
    if parse_rate(spec.target_rate) >= capacity:
        return _refusal(
            TARGET_ABOVE_CAPACITY,
            f"spec.targetRate: {spec.target_rate} is not below the capacity of BorderLink "
            f"{link_name} ({link.capacity})",
        )
    return None


def current_place(policy: PolicyView, link_name: str, link_uid: str, now: str) -> AdmissionStatus:
    """The policy's place on this link and its spec's DTN host: the recorded one when it
    is for them (and for this incarnation of the link), else a new one at the back."""
    assert policy.spec is not None
    place = policy.place
    if (
        place is not None
        and place.link == link_name
        and place.dtn_host == policy.spec.dtn_host
        and (not place.link_uid or not link_uid or place.link_uid == link_uid)
    ):
        return place.model_copy(update={"link_uid": link_uid or place.link_uid})
    return AdmissionStatus(link=link_name, link_uid=link_uid, dtn_host=policy.spec.dtn_host,
                           queued_at=now)  # fmt: skip


def _holder_text(holder: PolicyView, asking: PolicyView) -> str:
    """Who holds what a policy asks for, as its tenant may see it: another namespace's
    policy is never named."""
    if holder.namespace == asking.namespace:
        return f"policy {holder.name} of this namespace"
    return "a policy of another namespace"


def _quota_message(link_name: str, link: BorderLinkSpec, rate: str, left_bps: float) -> str:
    share = tenant_share_bps(link)
    return (
        f"spec.targetRate: {rate} does not fit in what BorderLink {link_name} leaves "
        f"tenants: {format_rate(share)} ({link.tenants.max_target_percent}% of "
        f"{link.capacity}) in all, {format_rate(max(0.0, left_bps))} left"
    )


def _admitted_order(item: tuple[PolicyView, AdmissionStatus]) -> tuple[str, ...]:
    policy, place = item
    return (place.admitted_at or "", place.queued_at, policy.created, *policy.key)


def _queue_order(item: tuple[PolicyView, AdmissionStatus]) -> tuple[str, ...]:
    policy, place = item
    return (place.queued_at, policy.created, *policy.key)


def admit(
    link_name: str,
    link: BorderLinkSpec | None,
    policies: Sequence[PolicyView],
    namespace_labels: Mapping[str, Mapping[str, str]],
    now: str = "",
    link_uid: str = "",
) -> dict[tuple[str, str], Decision]:
    """Every policy's decision. ``link`` None: it does not exist. A namespace missing from
    ``namespace_labels`` has no labels. ``now`` (:func:`place_time`) stamps new places.

    In order: the policies admitted before keep their places (by when they were admitted;
    when the share no longer holds them all, the last admitted give way); then the raises
    of admitted targets, from what is left; then the waiting, by when they asked."""
    decisions: dict[tuple[str, str], Decision] = {}
    if link is None:
        for policy in policies:
            decisions[policy.key] = _refusal(
                LINK_NOT_FOUND,
                f"spec.linkRef.name: BorderLink {link_name} does not exist",
                resolved=False,
            )
        return decisions
    share = tenant_share_bps(link)
    admitted_before: list[tuple[PolicyView, AdmissionStatus]] = []
    waiting: list[tuple[PolicyView, AdmissionStatus]] = []
    for policy in policies:
        labels = namespace_labels.get(policy.namespace, {})
        refused = _static_check(link_name, link, policy, labels)
        if refused is not None:
            decisions[policy.key] = refused
            continue
        place = current_place(policy, link_name, link_uid, now)
        if place.admitted_at is not None and place.admitted_target is not None:
            admitted_before.append((policy, place))
        else:
            waiting.append((policy, place))

    granted_bps = 0.0
    holders: dict[str, PolicyView] = {}
    held: list[tuple[PolicyView, AdmissionStatus]] = []

    def wait(policy: PolicyView, place: AdmissionStatus, reason: str, message: str) -> None:
        back = place.model_copy(update={"admitted_at": None, "admitted_target": None})
        decisions[policy.key] = Decision(False, reason, message, True, back)

    def blocked(policy: PolicyView, host: str) -> tuple[str, str] | None:
        holder = holders.get(host)
        if holder is not None:
            return DTN_HOST_IN_USE, (
                f"spec.dtnHost: DTN host {host} of BorderLink {link_name} is held by "
                f"{_holder_text(holder, policy)}, admitted before this one asked; it waits "
                "for the host"
            )
        return None

    for policy, place in sorted(admitted_before, key=_admitted_order):
        assert policy.spec is not None and place.admitted_target is not None
        host = policy.spec.dtn_host
        conflict = blocked(policy, host)
        if conflict is not None:  # two places on one host: only an old record can say so
            wait(policy, place, *conflict)
            continue
        # a lower target applies at once; a higher one waits for the raises below
        kept = policy.spec.target_rate
        if parse_rate(kept) > parse_rate(place.admitted_target):
            kept = place.admitted_target
        if granted_bps + parse_rate(kept) > share * (1 + 1e-12):
            message = _quota_message(link_name, link, kept, share - granted_bps)
            wait(policy, place, QUOTA_EXCEEDED, f"{message}; {SHRUNK}")
            continue
        granted_bps += parse_rate(kept)
        holders[host] = policy
        held.append((policy, place.model_copy(update={"admitted_target": kept})))

    for policy, held_place in held:
        assert policy.spec is not None and held_place.admitted_target is not None
        wanted_bps = parse_rate(policy.spec.target_rate)
        keep = parse_rate(held_place.admitted_target)
        place = held_place
        if wanted_bps > keep and granted_bps + (wanted_bps - keep) <= share * (1 + 1e-12):
            granted_bps += wanted_bps - keep
            place = place.model_copy(update={"admitted_target": policy.spec.target_rate})
            keep = wanted_bps
        if wanted_bps > keep:
            left = share - granted_bps + keep
            decisions[policy.key] = Decision(
                True, TARGET_NOT_RAISED,
                f"{_quota_message(link_name, link, policy.spec.target_rate, left)}; the "
                f"admitted target {place.admitted_target} keeps running until it fits",
                True, place,
            )  # fmt: skip
            continue
        decisions[policy.key] = Decision(
            True, ACCEPTED,
            f"admitted on BorderLink {link_name}, DTN host {policy.spec.dtn_host}, "
            f"target {place.admitted_target}",
            True, place,
        )  # fmt: skip

    for policy, place in sorted(waiting, key=_queue_order):
        assert policy.spec is not None
        conflict = blocked(policy, policy.spec.dtn_host)
        if conflict is not None:
            wait(policy, place, *conflict)
            continue
        target = parse_rate(policy.spec.target_rate)
        if granted_bps + target > share * (1 + 1e-12):
            message = _quota_message(link_name, link, policy.spec.target_rate, share - granted_bps)
            wait(policy, place, QUOTA_EXCEEDED, message)
            continue
        granted_bps += target
        holders[policy.spec.dtn_host] = policy
        admitted_place = place.model_copy(
            update={"admitted_at": now, "admitted_target": policy.spec.target_rate}
        )
        decisions[policy.key] = Decision(
            True, ACCEPTED,
            f"admitted on BorderLink {link_name}, DTN host {policy.spec.dtn_host}, "
            f"target {policy.spec.target_rate}",
            True, admitted_place,
        )  # fmt: skip
    return decisions


def admitted(
    policies: Iterable[PolicyView], decisions: Mapping[tuple[str, str], Decision]
) -> list[PolicyView]:
    """The admitted policies, in the order they were admitted."""

    def order(policy: PolicyView) -> tuple[str, ...]:
        place = decisions[policy.key].place
        return (place.admitted_at or "" if place else "", policy.created, *policy.key)

    return sorted((p for p in policies if decisions[p.key].accepted), key=order)
