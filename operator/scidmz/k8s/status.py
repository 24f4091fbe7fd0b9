"""Pure computation of the status conditions of links and policies.

:func:`compute_conditions` derives a BorderLink's conditions from what was observed (the
reconcile outcome and its Deployments), :func:`policy_conditions` a DTNTransferPolicy's
from its admission decision and its link's readiness. Both keep ``lastTransitionTime``
when a condition's status did not change — so recomputing an unchanged world yields an
identical status and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Outcome:
    """Result of the last reconcile: applied (True), or refused with a reason."""

    ok: bool
    reason: str
    message: str
    generation: int


@dataclass(frozen=True)
class WorkloadState:
    """Readiness of one Deployment, as read from its status."""

    ready: bool
    reason: str
    message: str


def deployment_state(deployment: dict[str, Any] | None, paused: bool) -> WorkloadState:
    """Available means: controller caught up, all replicas updated and available."""
    if deployment is None:
        return WorkloadState(False, "NotCreated", "the Deployment does not exist yet")
    if paused:
        return WorkloadState(False, "Paused", "spec.paused is true; scaled to zero")
    meta, spec, status = deployment["metadata"], deployment["spec"], deployment.get("status", {})
    wanted = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return WorkloadState(False, "Progressing", "the Deployment controller has not caught up")
    updated = status.get("updatedReplicas", 0)
    available = status.get("availableReplicas", 0)
    if updated < wanted:
        return WorkloadState(False, "Progressing", f"{updated}/{wanted} replicas updated")
    if available < wanted:
        return WorkloadState(False, "Unavailable", f"{available}/{wanted} replicas available")
    return WorkloadState(True, "DeploymentAvailable", f"{available}/{wanted} replicas available")


def with_dtn_shaper(controller: WorkloadState, shaper: WorkloadState | None) -> WorkloadState:
    """The controller's readiness including its DTN shaper (a tc DTN actuator's agent):
    the controller cannot cap the DTN without it."""
    if shaper is None or not controller.ready or shaper.ready:
        return controller
    return WorkloadState(False, shaper.reason, f"dtn-shaper: {shaper.message}")


def _condition(
    type_: str,
    status: Status,
    reason: str,
    message: str,
    generation: int,
    previous: dict[str, dict[str, Any]],
    now: str,
) -> dict[str, Any]:
    before = previous.get(type_)
    since = now
    if before is not None and before.get("status") == status:
        since = before.get("lastTransitionTime", now)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def compute_conditions(
    previous: list[dict[str, Any]],
    generation: int,
    outcome: Outcome | None,
    collector: WorkloadState,
    controller: WorkloadState,
    paused: bool,
    now: str,
    warning: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A link's five conditions. ``outcome`` None means: keep the last recorded
    Reconciled; ``warning`` (reason, message) marks it Degraded though it runs (e.g. a
    plaintext switch)."""
    by_type = {c["type"]: c for c in previous if "type" in c}
    if outcome is None:
        last = by_type.get("Reconciled")
        if last is None:
            outcome = Outcome(False, "Reconciling", "the operator has not applied it yet", 0)
        else:
            outcome = Outcome(
                last["status"] == "True",
                last["reason"],
                last.get("message", ""),
                last.get("observedGeneration", 0),
            )
    current = outcome.ok and outcome.generation == generation
    if outcome.ok and not current:
        reconciled = Outcome(
            False, "Reconciling", "a newer generation is being applied", outcome.generation
        )
    else:
        reconciled = outcome
    if paused:
        ready: tuple[Status, str, str] = ("False", "Paused", "spec.paused is true")
    elif not reconciled.ok:
        ready = ("False", reconciled.reason, reconciled.message)
    elif not collector.ready:
        ready = ("False", f"Telemetry{collector.reason}", collector.message)
    elif not controller.ready:
        ready = ("False", f"Controller{controller.reason}", controller.message)
    else:
        ready = ("True", "Ready", "collector and controller are available")
    failed = not reconciled.ok and reconciled.reason != "Reconciling"
    degraded = (reconciled.reason, reconciled.message) if failed else warning or ("AsExpected", "")
    return [
        _condition("Ready", *ready, generation, by_type, now),
        _condition(
            "Reconciled",
            "True" if reconciled.ok else "False",
            reconciled.reason,
            reconciled.message,
            reconciled.generation,
            by_type,
            now,
        ),
        _condition(
            "TelemetryReady",
            "True" if collector.ready else "False",
            collector.reason,
            collector.message,
            generation,
            by_type,
            now,
        ),
        _condition(
            "ControllerReady",
            "True" if controller.ready else "False",
            controller.reason,
            controller.message,
            generation,
            by_type,
            now,
        ),
        _condition(
            "Degraded",
            "True" if failed or warning is not None else "False",
            *degraded,
            generation,
            by_type,
            now,
        ),
    ]


def policy_conditions(
    previous: list[dict[str, Any]],
    generation: int,
    accepted: bool,
    reason: str,
    message: str,
    refs_resolved: bool,
    link_ready: tuple[bool, str, str] | None,
    now: str,
) -> list[dict[str, Any]]:
    """A policy's Accepted, ResolvedRefs and Ready (the Gateway API's first two).
    ``link_ready`` is the link's own Ready (status, reason, message); None: no link."""
    by_type = {c["type"]: c for c in previous if "type" in c}
    if not accepted:
        ready: tuple[Status, str, str] = ("False", reason, message)
    elif link_ready is not None and link_ready[1] == "FailSafe":
        ready = ("False", "FailSafe", f"admitted; {link_ready[2]}")
    elif link_ready is None or not link_ready[0]:
        why = link_ready[2] if link_ready is not None else "the link has no status yet"
        ready = ("False", "LinkNotReady", f"admitted; the link's loop is not ready: {why}")
    else:
        ready = ("True", "Ready", "the link's loop holds this target")
    return [
        _condition(
            "Accepted", "True" if accepted else "False", reason, message, generation, by_type, now
        ),
        _condition(
            "ResolvedRefs",
            "True" if refs_resolved else "False",
            "ResolvedRefs" if refs_resolved else reason,
            "the link and the DTN host exist" if refs_resolved else message,
            generation,
            by_type,
            now,
        ),
        _condition("Ready", *ready, generation, by_type, now),
    ]


def find_condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of type ``kind`` in an object's ``status.conditions`` (None: absent)."""
    for condition in (obj.get("status") or {}).get("conditions", []):
        if condition.get("type") == kind:
            return dict(condition)
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    condition = find_condition(obj, kind)
    return condition is not None and condition.get("status") == "True"


def conditions_equal(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Same conditions, ignoring order."""
    return sorted(a, key=lambda c: c["type"]) == sorted(b, key=lambda c: c["type"])
