"""Which policies a border link holds a rate for, and why the others are refused.

A pure function of the link, the policies that name it and their namespaces' labels: the
operator calls it on every change and writes the outcome into both objects' status (the
Gateway API's ``Accepted`` and ``ResolvedRefs`` conditions). What the API server can decide
about one policy alone (its namespace, its DTN host, a target above capacity) is also in
the chart's ValidatingAdmissionPolicy; what needs every policy of the link (a DTN host
already held, the tenants' share) is decided here, first come first served by creation
time, and recomputed whenever a policy, the link or a namespace changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scidmz.api.link import BorderLinkSpec
from scidmz.api.policy import DTNTransferPolicySpec
from scidmz.api.selection import namespace_allowed
from scidmz.api.units import format_rate, parse_rate

DTN_CLASSES_PER_LINK = 1
"""The telemetry classes a link's DTN hosts are measured in. The P4 contract has one DTN
class: the admitted hosts' traffic is counted together, so a link holds one policy at a
time, and a second is refused (``DtnClassShared``) rather than mixed into the first one's
rate. Per-DTN classes lift this."""

# Accepted=True
ACCEPTED = "Accepted"
# ResolvedRefs=False (and Accepted=False)
LINK_NOT_FOUND = "LinkNotFound"
DTN_HOST_NOT_FOUND = "DtnHostNotFound"
# Accepted=False
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
DTN_NOT_ALLOWED = "DtnNotAllowed"
TARGET_ABOVE_CAPACITY = "TargetAboveCapacity"
DTN_HOST_IN_USE = "DtnHostInUse"
DTN_CLASS_SHARED = "DtnClassShared"
QUOTA_EXCEEDED = "QuotaExceeded"
INVALID_SPEC = "InvalidSpec"

REASONS = (
    ACCEPTED,
    LINK_NOT_FOUND,
    DTN_HOST_NOT_FOUND,
    NAMESPACE_NOT_ALLOWED,
    DTN_NOT_ALLOWED,
    TARGET_ABOVE_CAPACITY,
    DTN_HOST_IN_USE,
    DTN_CLASS_SHARED,
    QUOTA_EXCEEDED,
    INVALID_SPEC,
)


@dataclass(frozen=True)
class PolicyView:
    """What admission needs of one policy. ``spec`` is None when it does not parse
    (``problem`` says why): an object stored before a schema change."""

    namespace: str
    name: str
    created: str
    """metadata.creationTimestamp (RFC 3339, UTC): the order of admission."""
    spec: DTNTransferPolicySpec | None
    problem: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Decision:
    """The outcome for one policy: its two conditions' status, reason and message."""

    accepted: bool
    reason: str
    message: str
    refs_resolved: bool = True

    @property
    def resolved_reason(self) -> str:
        return "ResolvedRefs" if self.refs_resolved else self.reason


def admission_order(policies: Iterable[PolicyView]) -> list[PolicyView]:
    """First come, first served: creation time, then namespace and name (equal seconds)."""
    return sorted(policies, key=lambda p: (p.created, p.namespace, p.name))


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


def admit(
    link_name: str,
    link: BorderLinkSpec | None,
    policies: Sequence[PolicyView],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> dict[tuple[str, str], Decision]:
    """Every policy's decision. ``link`` None: it does not exist. A namespace missing from
    ``namespace_labels`` has no labels."""
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
    granted_bps = 0.0
    holders: dict[str, PolicyView] = {}
    for policy in admission_order(policies):
        labels = namespace_labels.get(policy.namespace, {})
        refused = _static_check(link_name, link, policy, labels)
        if refused is not None:
            decisions[policy.key] = refused
            continue
        spec = policy.spec
        assert spec is not None  # _static_check refused it otherwise
        holder = holders.get(spec.dtn_host)
        if holder is not None:
            decisions[policy.key] = _refusal(
                DTN_HOST_IN_USE,
                f"spec.dtnHost: DTN host {spec.dtn_host} of BorderLink {link_name} is held by "
                f"policy {holder.namespace}/{holder.name} (admitted first)",
            )
            continue
        if len(holders) >= DTN_CLASSES_PER_LINK:
            first = next(iter(holders.values()))
            decisions[policy.key] = _refusal(
                DTN_CLASS_SHARED,
                f"BorderLink {link_name} measures its DTN hosts as one class, so it holds one "
                f"policy at a time; {first.namespace}/{first.name} holds it (admitted first)",
            )
            continue
        target = parse_rate(spec.target_rate)
        if granted_bps + target > share * (1 + 1e-12):
            left = max(0.0, share - granted_bps)
            decisions[policy.key] = _refusal(
                QUOTA_EXCEEDED,
                f"spec.targetRate: {spec.target_rate} does not fit in what BorderLink "
                f"{link_name} leaves tenants: {format_rate(share)} "
                f"({link.tenants.max_target_percent}% of {link.capacity}) in all, "
                f"{format_rate(left)} left",
            )
            continue
        granted_bps += target
        holders[spec.dtn_host] = policy
        decisions[policy.key] = Decision(
            True,
            ACCEPTED,
            f"admitted on BorderLink {link_name}, DTN host {spec.dtn_host}, "
            f"target {spec.target_rate}",
        )
    return decisions


def admitted(
    policies: Sequence[PolicyView], decisions: Mapping[tuple[str, str], Decision]
) -> list[PolicyView]:
    """The admitted policies, in admission order."""
    return [p for p in admission_order(policies) if decisions[p.key].accepted]
