"""kopf handlers: thin. They keep the operator's indexes, wake the right link's loop, and
call one function in :mod:`scidmz.k8s.links` each.

- Every BorderLink has a daemon: it reconciles the link (admits its policies, applies its
  loop, writes both statuses) when woken and at least every ``resync_s`` (2 s while its
  loop is not ready: that is how Deployment readiness reaches the status, without the
  cluster-wide Deployment watch a kopf watcher would need), one pass at a time, so a burst
  of a thousand policy events costs a few passes, not a thousand.
- A policy, namespace or link change wakes the daemons it concerns. A policy that names a
  link that does not exist is answered here (LinkNotFound).
- Deleting a link stops its controller first (it restores the fail-safe rates through the
  shapers, which are still there), then removes the rest, then tells its policies.
- Policies are never written but in status: no finalizer, no annotation, no patch of what
  a tenant owns.

Errors: a failed pass is logged and retried after ``retry_delay_s``; 404/409/transport
errors of the deletion handler are ``kopf.TemporaryError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections.abc import Iterable
from typing import Any

import kopf
from prometheus_client import Counter

from scidmz.api import link as link_api
from scidmz.api import policy as policy_api
from scidmz.api.runtime import ControllerState
from scidmz.api.types import GROUP, VERSION
from scidmz.k8s.certificates import (
    METRICS_READER_SECRET,
    AuthorityKeeper,
    CertificateCache,
    OperatorIdentity,
    validity_from,
)
from scidmz.k8s.client import KubeApiError, KubeClient
from scidmz.k8s.events import EventRecorder
from scidmz.k8s.links import (
    Context,
    LinkSummary,
    PolicySummary,
    ReconcilerState,
    controller_stopped,
    link_event,
    reconcile_link,
    refuse_orphans,
    remove_loop,
    renew_metrics_reader,
    restore_on_teardown,
    summarize_link,
    summarize_policy,
)
from scidmz.k8s.live_state import live_status, policy_live_status
from scidmz.k8s.manifests import CONTROLLER, LinkWorkloads, child_name, host_port
from scidmz.k8s.settings import OperatorSettings
from scidmz.metrics import names
from scidmz.metrics.http import fetch_state_explained
from scidmz.outage_log import OutageLog

log = logging.getLogger(__name__)

RECONCILES = Counter(names.OPERATOR_RECONCILES, "Link passes that completed.")
RECONCILE_ERRORS = Counter(
    names.OPERATOR_RECONCILE_ERRORS,
    "Link passes that failed (API errors); retried after retry_delay_s.",
)

LINKS = (GROUP, VERSION, link_api.PLURAL)
POLICIES = (GROUP, VERSION, policy_api.PLURAL)
NOT_READY_RESYNC_S = 2.0
NEW_LINK_GRACE_S = 2.0
"""How long a new link without policies waits for them before its first pass."""
RESTORE_WAIT_S = 120.0
"""How long a link's deletion waits for its DTN shaper's interface to be restored."""
TEARDOWN_WAIT_S = 45.0
"""How long a link's deletion waits for its controller to stop (it has 30 s of grace to
restore the fail-safe rates) before removing the rest regardless."""


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Bookkeeping under scidmz.io, peering for leader election, one API client, the CA."""
    ours = OperatorSettings()
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.peering.name = ours.peering_name
    settings.peering.mandatory = not ours.standalone
    settings.peering.standalone = ours.standalone
    settings.peering.lifetime = ours.peering_lifetime_s
    settings.peering.priority = (
        ours.peering_priority
        if ours.peering_priority is not None
        else random.SystemRandom().randint(1, 2**31 - 1)
    )
    log.info("peering %r with priority %d", settings.peering.name, settings.peering.priority)
    client = KubeClient.from_environment()
    if not ours.standalone:
        ensure_peering(client, ours)
    namespace = ours.operator_namespace
    validity = validity_from(ours)
    keeper = AuthorityKeeper(client, namespace, ours.ca_secret, validity)
    keeper.ensure()
    memo.settings = ours
    memo.client = client
    memo.events = EventRecorder(client)
    memo.context = Context(
        client, ours.workload(), keeper, memo.events, ours.host_port_base,
        ours.host_port_pairs, dtn_shaper_grace_s=ours.dtn_shaper_grace_s,
    )  # fmt: skip
    memo.state = ReconcilerState(certificates=CertificateCache(validity))
    memo.state_identity = OperatorIdentity(keeper)
    memo.triggers = {}
    memo.seen_policies = {}
    memo.seen_namespaces = {}
    memo.state_outages = {}
    # kopf logs every timer run at INFO: a line per link every poll, "succeeded" even when
    # the controller could not be reached (the poll reports that itself)
    logging.getLogger("kopf.objects").addFilter(_QuietTimer())
    renew_metrics_reader(memo.context, memo.state)
    own_secrets(client, ours, (ours.ca_secret, METRICS_READER_SECRET))
    health = getattr(memo, "health", None)  # the CLI's /readyz; absent in embedded runs
    if health is not None:
        health.set_ready(True, "started: the API server answered and the CA is loaded")


def own_secrets(client: KubeClient, ours: OperatorSettings, names: Iterable[str]) -> None:
    """The Secrets the operator made for itself, owned by its Deployment (when it runs
    from the chart): ``helm uninstall`` then leaves no CA behind. An upgrade keeps the
    Deployment, and with it the CA every link's certificates hang off."""
    if ours.operator_deployment is None:
        return
    namespace = ours.operator_namespace
    deployment = client.get("apps/v1", "Deployment", namespace, ours.operator_deployment)
    if deployment is None:
        log.warning("Deployment %s/%s not found: the operator's Secrets stay after it is "
                    "removed", namespace, ours.operator_deployment)  # fmt: skip
        return
    owner = {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": ours.operator_deployment,
        "uid": deployment["metadata"]["uid"],
    }  # fmt: skip
    for name in names:
        secret = client.get("v1", "Secret", namespace, name)
        if secret is not None and secret["metadata"].get("ownerReferences") != [owner]:
            client.set_owner("v1", "Secret", namespace, name, owner)


class _QuietTimer(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "'poll_live_state' succeeded" not in record.getMessage()


def ensure_peering(client: KubeClient, ours: OperatorSettings) -> None:
    """kopf needs the peering object to exist; create it rather than ask users to."""
    obj = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": ours.peering_name, "labels": {"app.kubernetes.io/part-of": "scidmz"}},
    }
    if client.create_if_absent("/apis/kopf.dev/v1/clusterkopfpeerings", obj):
        log.info("created peering object %s", ours.peering_name)


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    memo.client.close()


# ---- indexes ----------------------------------------------------------------------------


@kopf.index(*LINKS)
def links(body: kopf.Body, **_: Any) -> dict[str, LinkSummary]:
    summary = summarize_link(body)
    return {summary.name: summary}


@kopf.index(*POLICIES)
def policies_by_link(body: kopf.Body, **_: Any) -> dict[str, PolicySummary]:
    summary = summarize_policy(body)
    return {summary.link: summary}


@kopf.index("", "v1", "namespaces")
def namespace_labels(body: kopf.Body, **_: Any) -> dict[str, dict[str, str]]:
    return {body["metadata"]["name"]: dict(body["metadata"].get("labels") or {})}


def _one(index: Any, key: str) -> Any:
    if key not in index:
        return None
    return next(iter(index[key]), None)


def _all(index: Any, key: str) -> list[Any]:
    return list(index[key]) if key in index else []


def wake(memo: kopf.Memo, link: str | None) -> None:
    if link:
        trigger = memo.triggers.get(link)
        if trigger is not None:
            trigger.set()


# ---- the per-link loop ------------------------------------------------------------------


@kopf.daemon(*LINKS, cancellation_timeout=1.0)
async def run_link(name: str, memo: kopf.Memo, **indexes: Any) -> None:
    """Reconcile the link when woken, and at least every resync_s (2 s while its loop is
    not ready), one pass at a time."""
    links, policies_by_link = indexes["links"], indexes["policies_by_link"]
    namespace_labels = indexes["namespace_labels"]
    trigger = memo.triggers.setdefault(name, asyncio.Event())
    settings: OperatorSettings = memo.settings
    first = True
    while True:
        trigger.clear()
        link: LinkSummary | None = _one(links, name)
        if link is None or link.deleting:
            return
        policies: list[PolicySummary] = _all(policies_by_link, name)
        if first and not policies and not link.status.get("conditions"):
            # A new link applied together with its policies (one `kubectl apply`, GitOps)
            # would start its loop without them and roll the pods a moment later (~30 s of
            # Recreate): give its policies a moment to arrive, or their event wakes it.
            first = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(trigger.wait(), NEW_LINK_GRACE_S)
            continue
        first = False
        labels = {p.namespace: _one(namespace_labels, p.namespace) or {} for p in policies}
        others = [
            allocation
            for other_name in list(links)
            if other_name != name
            for other in _all(links, other_name)
            for allocation in other.host_ports
        ]
        try:
            result = await asyncio.to_thread(
                reconcile_link, memo.context, memo.state, link, policies, labels, others
            )
        except KubeApiError as error:
            RECONCILE_ERRORS.inc()
            log.warning("link %s: %s (retried in %.0f s)", name, error, settings.retry_delay_s)
            wait = settings.retry_delay_s
        else:
            RECONCILES.inc()
            wait = settings.resync_s if result.ready else NOT_READY_RESYNC_S
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(trigger.wait(), wait)


@kopf.on.update(*LINKS, field="spec")
def link_changed(name: str, memo: kopf.Memo, **_: Any) -> None:
    """The daemon reads the new spec from the index; wake it."""
    wake(memo, name)


@kopf.on.delete(*LINKS)
def link_deleted(name: str, memo: kopf.Memo, runtime: dt.timedelta, **indexes: Any) -> None:
    """Controller first (the fail-safe), then the DTN shaper and its interface's original
    qdisc, then the rest, then the policies' LinkNotFound."""
    policies_by_link = indexes["policies_by_link"]
    client: KubeClient = memo.client
    namespace = memo.settings.operator_namespace
    link = _one(indexes["links"], name) or LinkSummary(name, "", 0, {}, {})
    try:
        stopped = controller_stopped(client, name, namespace)
        if not stopped and runtime.total_seconds() < TEARDOWN_WAIT_S:
            raise kopf.TemporaryError(
                "waiting for the controller to stop (it restores the fail-safe rates first)",
                delay=1,
            )
        if not stopped:
            link_event(
                memo.events, link, namespace, "Warning", "ControllerStillRunning",
                f"the controller did not stop within {TEARDOWN_WAIT_S:.0f} s; removing the "
                "loop regardless", action="Delete",
            )  # fmt: skip
        waited = runtime.total_seconds()
        if not restore_on_teardown(memo.context, memo.state, link, waited, RESTORE_WAIT_S):
            raise kopf.TemporaryError(
                "waiting for the DTN shaper's interface to get its original qdisc back",
                delay=2,
            )
        remove_loop(client, memo.state, name, namespace)
        refuse_orphans(client, memo.events, name, _all(policies_by_link, name))
    except KubeApiError as error:
        raise kopf.TemporaryError(str(error), delay=2) from error
    memo.triggers.pop(name, None)


# ---- what wakes a link ------------------------------------------------------------------


def _identity(summary: PolicySummary) -> tuple[str, int, str, str]:
    return (summary.link, summary.generation, summary.created, summary.uid)


@kopf.on.event(*POLICIES)
async def policy_changed(type: str, body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    """Wake the links a policy was and is attached to, when what admission reads of it
    changed (not for the operator's own status writes)."""
    links = indexes["links"]
    summary = summarize_policy(body)
    key = summary.key
    before = memo.seen_policies.get(key)
    if type == "DELETED":
        memo.seen_policies.pop(key, None)
        wake(memo, summary.link)
        return
    memo.seen_policies[key] = _identity(summary)
    if before == _identity(summary):
        return
    wake(memo, summary.link)
    if before is not None and before[0] != summary.link:
        wake(memo, before[0])
    if _one(links, summary.link) is None and not _says_link_not_found(summary):
        try:
            await asyncio.to_thread(
                refuse_orphans, memo.client, memo.events, summary.link, [summary]
            )
        except KubeApiError as error:
            log.warning("policy %s/%s: %s", *key, error)


def _says_link_not_found(summary: PolicySummary) -> bool:
    return any(
        c.get("type") == "Accepted" and c.get("reason") == "LinkNotFound"
        for c in summary.conditions
    )


@kopf.on.event("", "v1", "namespaces")
async def namespace_changed(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A namespace's labels decide which links its policies may attach to: wake every
    link when they change."""
    name = body["metadata"]["name"]
    labels = dict(body["metadata"].get("labels") or {})
    before = memo.seen_namespaces.get(name)
    memo.seen_namespaces[name] = labels
    if before is None or before == labels or type is None:
        return
    for link in list(memo.triggers):
        wake(memo, link)


# ---- the measured state -----------------------------------------------------------------

_STATE_POLL_S = OperatorSettings().state_poll_s  # kopf reads timer intervals at import


@kopf.timer(*LINKS, interval=_STATE_POLL_S, sharp=True)
async def poll_live_state(name: str, memo: kopf.Memo, **indexes: Any) -> None:
    """status.state and status.tracking of the link and its admitted policy, from the
    link's controller, every poll: over mutual TLS, with a total deadline and a size cap,
    off the reconcile passes. The URL is the operator's setting; no tenant can choose it."""
    settings: OperatorSettings = memo.settings
    links, policies_by_link = indexes["links"], indexes["policies_by_link"]
    link: LinkSummary | None = _one(links, name)
    if link is None or link.deleting or (link.spec or {}).get("paused"):
        return
    work = LinkWorkloads(host_ports=tuple(link.host_ports))
    port = host_port(work, CONTROLLER) or settings.controller_http_port
    service = child_name(name, CONTROLLER)
    url = settings.state_url(name, service, port)
    # the certificate is checked against the Service's name, whatever the URL's host
    server_name = f"{service}.{settings.operator_namespace}.svc"
    fetched, why = await asyncio.to_thread(
        fetch_state_explained, url, tls=memo.state_identity.context(), server_name=server_name
    )
    outages: dict[str, OutageLog] = memo.state_outages
    outage = outages.setdefault(name, OutageLog(log, f"{name}: the controller's /state"))
    if fetched is None:
        outage.failed(why, time.monotonic(), f"status.state keeps its last values ({url})")
        return
    outage.recovered(time.monotonic())
    was_failsafe = (link.status.get("state") or {}).get("failsafeActive")
    try:
        await asyncio.to_thread(
            write_live_state, memo.client, link, _all(policies_by_link, name), fetched
        )
    except KubeApiError as error:
        log.warning("live state of %s: %s", name, error)
        return
    if bool(fetched.get("failsafe_active")) != bool(was_failsafe):
        wake(memo, name)  # Degraded and the policies' Ready follow the fail-safe at once


def write_live_state(
    client: KubeClient,
    link: LinkSummary,
    policies: list[PolicySummary],
    fetched: dict[str, Any],
) -> int:
    """Copy a controller's /state into the link's and its admitted policies' status where
    it changed. Returns the writes made."""
    from pydantic import ValidationError

    from scidmz.api.units import UnitError, parse_duration, parse_rate

    try:
        state = ControllerState.model_validate(fetched)
    except ValidationError as error:
        log.warning("%s: the controller's /state is not understood: %s", link.name, error)
        return 0
    try:
        sample_time_s = parse_duration(str(link.spec.get("sampleTime", "1s")))
    except UnitError:
        sample_time_s = 1.0
    try:
        capacity_bps: float | None = parse_rate(str(link.spec.get("capacity", "")))
    except UnitError:
        capacity_bps = None
    writes = 0
    live = live_status(state, sample_time_s, capacity_bps)
    patch = {k: v for k, v in live.items() if link.status.get(k) != v}
    if patch:
        client.patch_link_status(link.name, patch)
        writes += 1
    known = {p.key: p for p in policies}
    for item in _admitted(link):
        policy = known.get((item["namespace"], item["name"]))
        per_policy = policy_live_status(
            state, sample_time_s, item["namespace"], item["name"], str(item.get("dtnHost", ""))
        )
        changes = {k: v for k, v in per_policy.items() if policy is None or policy.live.get(k) != v}
        if not changes:
            continue
        try:
            client.patch_policy_status(item["namespace"], item["name"], None, changes)
        except KubeApiError as error:
            if not error.is_not_found:
                raise
        else:
            writes += 1
    return writes


def _admitted(link: LinkSummary) -> Iterable[dict[str, Any]]:
    return list((link.status.get("policies") or {}).get("items") or [])
