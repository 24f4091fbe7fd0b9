"""The DTNTransferPolicy custom resource: a research group's request for a transfer rate.

Namespaced and unprivileged: it names a :class:`~scidmz.api.link.BorderLink`, one of its
DTN hosts and the rate to hold, nothing else. It cannot name a node, an interface, a switch,
an election id or a Secret; the link's administrators own those. Whether it is admitted
and why not is its status (``Accepted``, ``ResolvedRefs``, as in the Gateway API), with
its measured rate and tracking error.

These pydantic models are the API's single source: ``crds/`` is generated from them, and
every ``description`` is what ``kubectl explain dtp.spec...`` prints.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from scidmz.api.link import TrackingStatus
from scidmz.api.rules import VALIDATIONS, Rule
from scidmz.api.types import (
    MAX_RATE_BPS,
    ApiModel,
    Condition,
    CongestionControl,
    DnsLabel,
    ObjectName,
    Rate,
)
from scidmz.api.units import cel_rate_bps, parse_rate

KIND = "DTNTransferPolicy"
PLURAL = "dtntransferpolicies"
SINGULAR = "dtntransferpolicy"
SHORT_NAMES = ["dtp"]


class LinkRef(ApiModel):
    """A reference to a BorderLink (cluster-scoped, so by name alone)."""

    name: ObjectName = Field(description="The BorderLink's name.")


_TARGET = cel_rate_bps("self.targetRate")


def _immutable(field: str) -> dict[str, Any]:
    """A CEL transition rule (``oldSelf``: the API server checks it on updates only). A
    policy's place on its link is for the link and DTN host it asked for: a policy that
    could be re-pointed would carry an old place onto a busy host."""
    return {
        "rule": "self == oldSelf",
        "message": f"spec.{field} is immutable: delete the policy and create it anew to ask "
        "for another link or DTN host",
    }


POLICY_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"{_TARGET} > 0.0",
        check=lambda spec: parse_rate(spec.target_rate) > 0,
        message="targetRate must be greater than 0",
        violation={"targetRate": "0bps"},
        field_path=".targetRate",
    ),
    Rule(
        cel=f"{_TARGET} < {MAX_RATE_BPS:.1e}",
        check=lambda spec: parse_rate(spec.target_rate) < MAX_RATE_BPS,
        message="targetRate must be below 10Tbps",
        violation={"targetRate": "10Tbps"},
        field_path=".targetRate",
    ),
)


class DTNTransferPolicySpec(ApiModel):
    """Hold a DTN host's transfers at targetRate on a border link."""

    RULES = POLICY_RULES

    link_ref: LinkRef = Field(
        description="The border link the transfers cross. Immutable: to move a policy, "
        "delete it and create it anew (it then queues behind the policies admitted before).",
        json_schema_extra={VALIDATIONS: [_immutable("linkRef")]},
    )
    dtn_host: DnsLabel = Field(
        description="Which of the link's DTN hosts (BorderLink spec.dtnHosts[].name). "
        "Immutable, as linkRef.",
        json_schema_extra={VALIDATIONS: [_immutable("dtnHost")]},
    )
    target_rate: Rate = Field(
        description="R*_DTN, the DTN rate to hold, with a unit: bps, kbps, Mbps, Gbps or Tbps "
        "(e.g. 600Mbps). Must be below the link's capacity and fit in what the link leaves "
        "tenants (tenants.maxTargetPercent).",
    )
    congestion_control: CongestionControl = Field(
        default="cubic",
        description="Congestion control of the sending DTN. Selects the inverse model and "
        "the default gains (tuned per CCA, models/<cca>/gains.yaml). One of: cubic, bbr.",
    )


class PolicyStateStatus(ApiModel):
    """What the link's loop measures for this policy, in API units."""

    model_config = ConfigDict(extra="ignore")

    dtn_rate: str | None = Field(
        default=None,
        description="Its DTN host's rate at the tap (the host's own class), e.g. 298.7Mbps.",
    )
    dtn_rtt: str | None = Field(default=None, description="Its DTN host's round-trip time.")
    target_rate: str | None = Field(
        default=None,
        description="The target the running controller holds for this policy (a new "
        "spec.targetRate shows here once the controller has taken it, in seconds).",
    )
    campus_rate_limit: str | None = Field(
        default=None, description="u(t), the link's campus rate limit."
    )
    enforced_by: Literal["DtnCap", "LinkSum"] | None = Field(
        default=None,
        description="How its rate is held: DtnCap, by its DTN host's own cap loop on its "
        "target; LinkSum, only through the link's campus loop on the admitted targets' sum "
        "(its host has no shaper: a DTN that ignores campus shaping, such as BBR, is not "
        "held).",
    )
    dtn_rate_limit: str | None = Field(
        default=None, description="The cap in force on its DTN host (DtnCap)."
    )
    shortfall: str | None = Field(
        default=None,
        description="How far its rate is below its target in the latest sample (absent "
        "when at or above it): each DTN's share of a shortfall of the link's sum is its own.",
    )
    sampled_at: str | None = Field(default=None, description="Sample time (RFC 3339).")


class AdmissionStatus(ApiModel):
    """A policy's place on its link: written by the operator alone (the status
    subresource, which a tenant's Role cannot write), so no edit of the spec can move it
    ahead of a policy admitted before it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    link: str = Field(description="The BorderLink the place is on.")
    link_uid: str = Field(
        default="",
        alias="linkUID",
        description="That link's metadata.uid: a link deleted and created again under the "
        "same name starts with no places.",
    )
    dtn_host: str = Field(description="The DTN host the place is on.")
    queued_at: str = Field(
        description="When the policy first asked for this link and DTN host (RFC 3339, "
        "microseconds): its place among the policies waiting."
    )
    admitted_at: str | None = Field(
        default=None,
        description="When it was admitted there (absent while it waits): its place among "
        "the admitted. When the administrators lower the link's capacity or "
        "tenants.maxTargetPercent, the policies admitted last give way first.",
    )
    admitted_target: str | None = Field(
        default=None,
        description="The target the link's loop holds for it. A lower spec.targetRate "
        "applies at once; a higher one only when it fits, and until then this one keeps "
        "running (reason TargetNotRaised).",
    )


class DTNTransferPolicyStatus(ApiModel):
    """Observed state, written by the operator."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation the decision was made for."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Accepted (admitted, or why not), ResolvedRefs (the link and the DTN "
        "host exist), Ready (the link's loop holds this target).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    admission: AdmissionStatus | None = Field(
        default=None,
        description="Its place on the link (absent while refused for a reason other than "
        "waiting for room).",
    )
    state: PolicyStateStatus | None = Field(default=None, description="Latest measurement.")
    tracking: TrackingStatus | None = Field(default=None, description="Tracking quality.")


def parse_spec(raw: dict[str, Any]) -> DTNTransferPolicySpec:
    """Validate a spec dict from the API (camelCase) into the typed model."""
    return DTNTransferPolicySpec.model_validate(raw)
