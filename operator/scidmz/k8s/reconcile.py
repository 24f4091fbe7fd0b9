"""Reconcile one DTNTransferPolicy: check what only the operator can judge, render the
children, apply them all-or-nothing, and keep the status conditions current.

Side effects go through :class:`scidmz.k8s.client.KubeClient`; the objects come from the pure
builders in :mod:`scidmz.k8s.manifests`, the conditions from :mod:`scidmz.k8s.status`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from scidmz.api.errors import describe_validation_error
from scidmz.api.policy import DTNTransferPolicySpec, parse_spec, tls_secret_problem
from scidmz.api.runtime import ControllerState, resolve_runtime_config
from scidmz.api.units import UnitError, parse_duration
from scidmz.k8s.client import KubeApiError, KubeClient
from scidmz.k8s.live_state import live_status
from scidmz.k8s.manifests import (
    COLLECTOR,
    CONTROLLER,
    DTN_SHAPER,
    LIVE_CONFIG_ANNOTATION,
    PolicyRef,
    WorkloadSettings,
    build_children,
    child_name,
    collector_address,
    dtn_shaper_address,
    selector_labels,
)
from scidmz.k8s.status import (
    Outcome,
    compute_conditions,
    conditions_equal,
    deployment_state,
    with_dtn_shaper,
)

log = logging.getLogger(__name__)

STATE_URL_ANNOTATION = "scidmz.io/controller-state-url"
"""Per-policy override of where its controller serves /state (a controller run outside
the cluster, or the demo's local one)."""


class SpecRefused(Exception):
    """The policy passed the API schema but cannot be honoured (yet): nothing is applied."""

    def __init__(self, reason: str, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_policy_spec(body: dict[str, Any]) -> DTNTransferPolicySpec:
    try:
        return parse_spec(body.get("spec") or {})
    except ValidationError as error:
        raise SpecRefused(
            "InvalidSpec", describe_validation_error(error, "spec."), retryable=False
        ) from None


def check_references(client: KubeClient, namespace: str, spec: DTNTransferPolicySpec) -> None:
    """ConfigMaps and Secrets the policy names must exist, with the keys it names."""
    pipeline = spec.switch.pipeline
    if pipeline is not None:
        ref = pipeline.config_map_ref
        config_map = client.get("v1", "ConfigMap", namespace, ref.name)
        if config_map is None:
            raise SpecRefused(
                "PipelineConfigMapNotFound",
                f"spec.switch.pipeline.configMapRef: ConfigMap {namespace}/{ref.name} "
                "does not exist",
                retryable=True,
            )
        keys = set(config_map.get("data") or {}) | set(config_map.get("binaryData") or {})
        missing = [k for k in (ref.p4info_key, ref.device_config_key) if k not in keys]
        if missing:
            raise SpecRefused(
                "PipelineConfigMapKeyMissing",
                f"ConfigMap {namespace}/{ref.name} has no key(s) {', '.join(missing)}",
                retryable=True,
            )
    tls = spec.switch.tls
    if tls is None:
        return
    secret = client.get("v1", "Secret", namespace, tls.secret_name)
    if secret is None:
        raise SpecRefused(
            "TlsSecretNotFound",
            f"spec.switch.tls.secretName: Secret {namespace}/{tls.secret_name} does not exist",
            retryable=True,
        )
    problem = tls_secret_problem(set(secret.get("data") or {}))
    if problem:
        raise SpecRefused(
            "TlsSecretKeyMissing",
            f"Secret {namespace}/{tls.secret_name}: {problem}",
            retryable=True,
        )


def render_children(
    body: dict[str, Any], spec: DTNTransferPolicySpec, settings: WorkloadSettings
) -> list[dict[str, Any]]:
    meta = body["metadata"]
    ref = PolicyRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    config = resolve_runtime_config(
        ref.name,
        ref.namespace,
        int(meta.get("generation", 1)),
        spec,
        collector_address(ref, settings),
        dtn_shaper_address(ref, settings),
    )
    return build_children(ref, config, spec.paused, settings)


def apply_all_or_nothing(client: KubeClient, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dry-run every object first, so a rejected object leaves no partial set behind.
    Returns the objects as the server stored them, in order."""
    for obj in objects:
        client.apply(obj, dry_run=True)
    return [client.apply(obj) for obj in objects]


LIVE_COMPONENTS = (CONTROLLER, DTN_SHAPER)
"""Workloads that follow their mounted ConfigMap live: the controller (R*, gains, limits,
fail-safe settings) and the DTN shaper agent (its fail-safe cap)."""


def nudge_live_pods(client: KubeClient, ref: PolicyRef, live_config_hash: str) -> list[str]:
    """Annotate the policy's running controller and DTN-shaper pods with the new config's
    hash. They take a new target rate (and the other live settings) from their mounted
    ConfigMap without a restart, but the kubelet refreshes that file only when it syncs the
    pod: at its periodic sync (1 min by default) or at once when the pod's metadata
    changes, which this write does. Returns the pods annotated; a pod gone in between is
    skipped. The nudge only hastens what the kubelet does anyway, so it never fails the
    reconcile: an error (e.g. RBAC without pods patch) is logged and the pods get the new
    file at the kubelet's next sync."""
    annotation = {LIVE_CONFIG_ANNOTATION: live_config_hash}
    nudged = []
    try:
        for component in LIVE_COMPONENTS:
            labels = selector_labels(ref, component)
            for pod in client.list_names("v1", "Pod", ref.namespace, labels):
                try:
                    client.annotate("v1", "Pod", ref.namespace, pod, annotation)
                except KubeApiError as error:
                    if not error.is_not_found:
                        raise
                    continue
                nudged.append(pod)
    except KubeApiError as error:
        log.warning(
            "%s/%s: pods not nudged (%s); they take the new config at the kubelet's next "
            "sync (up to a minute)", ref.namespace, ref.name, error,
        )  # fmt: skip
    return nudged


OPTIONAL_CHILDREN = (("apps/v1", "Deployment", DTN_SHAPER), ("v1", "Service", DTN_SHAPER))
"""Children that exist only for some specs (the tc DTN actuator's shaper)."""


def prune_optional_children(
    client: KubeClient, name: str, namespace: str, children: list[dict[str, Any]]
) -> None:
    """Delete the optional children this spec no longer renders."""
    wanted = {(c["kind"], c["metadata"]["name"]) for c in children}
    for api_version, kind, component in OPTIONAL_CHILDREN:
        child = child_name(name, component)
        if (kind, child) not in wanted:
            client.delete_if_present(api_version, kind, namespace, child)


def reconcile_policy(
    client: KubeClient, body: dict[str, Any], settings: WorkloadSettings
) -> Outcome:
    """Apply the policy's children. Raises :class:`SpecRefused` or :class:`KubeApiError`."""
    spec = parse_policy_spec(body)
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    check_references(client, namespace, spec)
    children = render_children(body, spec, settings)
    config_map = next(c for c in children if c["kind"] == "ConfigMap")
    stored = client.get("v1", "ConfigMap", namespace, config_map["metadata"]["name"])
    applied = apply_all_or_nothing(client, children)
    prune_optional_children(client, name, namespace, children)
    stored_after = applied[children.index(config_map)]
    if stored is not None and _version(stored) != _version(stored_after) and not spec.paused:
        live_hash = config_map["metadata"]["annotations"][LIVE_CONFIG_ANNOTATION]
        ref = PolicyRef(name=name, namespace=namespace, uid=meta["uid"])
        nudged = nudge_live_pods(client, ref, live_hash)
        log.info("%s/%s: new config %s, pods nudged: %s", namespace, name,
                 live_hash, ", ".join(nudged) or "none")  # fmt: skip
    return Outcome(
        True,
        "Applied",
        f"{len(children)} objects applied",
        int(meta.get("generation", 1)),
    )


def _version(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def refresh_status(
    client: KubeClient,
    namespace: str,
    name: str,
    outcome: Outcome | None,
    now: Callable[[], str] = utc_now,
    attempts: int = 5,
) -> bool:
    """Recompute the conditions from live objects; write only if they changed.

    The write carries the resourceVersion it was computed from, so two writers (the policy
    handler and the Deployment watcher) never overwrite each other with stale views.
    Returns True when something was written.
    """
    for _ in range(attempts):
        policy = client.get_policy(namespace, name)
        if policy is None:
            return False
        meta, status = policy["metadata"], policy.get("status") or {}
        paused = bool((policy.get("spec") or {}).get("paused", False))
        collector = client.get("apps/v1", "Deployment", namespace, child_name(name, COLLECTOR))
        controller = client.get("apps/v1", "Deployment", namespace, child_name(name, CONTROLLER))
        shaper = client.get("apps/v1", "Deployment", namespace, child_name(name, DTN_SHAPER))
        previous = status.get("conditions") or []
        conditions = compute_conditions(
            previous,
            int(meta.get("generation", 1)),
            outcome,
            deployment_state(collector, paused),
            with_dtn_shaper(
                deployment_state(controller, paused),
                deployment_state(shaper, paused) if shaper is not None else None,
            ),
            paused,
            now(),
        )
        patch: dict[str, Any] = {}
        if not conditions_equal(previous, conditions):
            patch["conditions"] = conditions
        if (
            outcome is not None
            and outcome.ok
            and status.get("observedGeneration") != outcome.generation
        ):
            patch["observedGeneration"] = outcome.generation
        if not patch:
            return False
        try:
            client.patch_policy_status(namespace, name, meta["resourceVersion"], patch)
            return True
        except KubeApiError as error:
            if error.is_conflict:
                continue
            if error.is_not_found:
                return False
            raise
    log.warning("status of %s/%s: gave up after %d conflicting writes", namespace, name, attempts)
    return False


def controller_state_url(metadata: dict[str, Any], url_template: str, port: int) -> str:
    """Where a policy's controller serves /state: the policy's own annotation (the demo
    points it at a local process), else the operator's template for the in-cluster Service."""
    namespace, name = metadata["namespace"], metadata["name"]
    annotations = metadata.get("annotations") or {}
    url: str = annotations.get(STATE_URL_ANNOTATION) or url_template.format(
        service=child_name(name, CONTROLLER), namespace=namespace, name=name, port=port
    )
    return url


def refresh_live_state(
    client: KubeClient,
    namespace: str,
    name: str,
    fetched: dict[str, Any] | None,
) -> bool:
    """Copy a controller's /state (``fetched``, read by the caller off the reconcile
    workers, None when it could not be read) into status.state and status.tracking when they
    changed. An unreachable controller changes nothing (its Deployment's readiness is
    already in the conditions). Returns True when something was written."""
    if fetched is None:
        return False
    policy = client.get_policy(namespace, name)
    if policy is None or (policy.get("spec") or {}).get("paused"):
        return False
    try:
        state = ControllerState.model_validate(fetched)
    except ValidationError as error:
        log.warning("%s/%s: the controller's /state is not understood: %s", namespace, name, error)
        return False
    try:
        sample_time_s = parse_duration((policy.get("spec") or {}).get("sampleTime", "1s"))
    except UnitError:
        sample_time_s = 1.0
    live = live_status(state, sample_time_s)
    status = policy.get("status") or {}
    patch = {k: v for k, v in live.items() if status.get(k) != v}
    if not patch:
        return False
    try:
        client.patch_policy_status(namespace, name, policy["metadata"]["resourceVersion"], patch)
    except KubeApiError as error:
        if error.is_conflict or error.is_not_found:
            return False  # the next poll tries again
        raise
    return True
