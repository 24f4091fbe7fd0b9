"""kopf handlers: thin. Each unpacks its arguments and calls one function in
:mod:`scidmz.k8s.reconcile`; errors are classified here, once.

- 404/409/transport/5xx  -> ``kopf.TemporaryError`` (retried after a delay)
- a reference the operator cannot resolve yet -> Reconciled=False + Event, retried slowly
- a spec the operator cannot honour -> Reconciled=False + Event + ``kopf.PermanentError``
  (the next spec change triggers a new attempt)
- anything else propagates with its stack.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import defaultdict
from typing import Any

import kopf
from prometheus_client import Counter

from scidmz.api.policy import GROUP, PLURAL, VERSION
from scidmz.k8s.client import KubeApiError, KubeClient
from scidmz.k8s.manifests import MANAGED_BY
from scidmz.k8s.reconcile import (
    SpecRefused,
    controller_state_url,
    reconcile_policy,
    refresh_live_state,
    refresh_status,
)
from scidmz.k8s.settings import OperatorSettings
from scidmz.k8s.status import Outcome
from scidmz.metrics import names
from scidmz.metrics.http import fetch_state

log = logging.getLogger(__name__)

RECONCILES = Counter(names.OPERATOR_RECONCILES, "Policy reconciliations that applied the children.")
RECONCILE_ERRORS = Counter(
    names.OPERATOR_RECONCILE_ERRORS,
    "Policy reconciliations that failed (refused specs, API errors); retried by kopf.",
)

# The policy handler and the Deployment watcher both write a policy's status from worker
# threads; one lock per policy keeps this process from conflicting with itself (the
# resourceVersion precondition still guards against everyone else).
_status_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def _refresh(client: KubeClient, namespace: str, name: str, outcome: Outcome | None) -> bool:
    with _status_locks[(namespace, name)]:
        return refresh_status(client, namespace, name, outcome)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Bookkeeping under scidmz.io, peering for leader election, one API client."""
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
    memo.settings = ours
    memo.client = client = KubeClient.from_environment()
    if not ours.standalone:
        ensure_peering(client, ours)


def ensure_peering(client: KubeClient, ours: OperatorSettings) -> None:
    """kopf needs the peering object to exist; create it rather than ask users to."""
    meta = {"name": ours.peering_name, "labels": {"app.kubernetes.io/part-of": "scidmz"}}
    if ours.namespace is None:
        obj = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": meta}
        path = "/apis/kopf.dev/v1/clusterkopfpeerings"
    else:
        obj = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {**meta, "namespace": ours.namespace},
        }
        path = f"/apis/kopf.dev/v1/namespaces/{ours.namespace}/kopfpeerings"
    if client.create_if_absent(path, obj):
        log.info("created peering object %s", ours.peering_name)


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    memo.client.close()


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(body: kopf.Body, **_: Any) -> None:
    """Children go with their owner (garbage collection); only drop the local lock."""
    _status_locks.pop((body["metadata"]["namespace"], body["metadata"]["name"]), None)


def _refuse(client: KubeClient, body: dict[str, Any], refusal: SpecRefused) -> None:
    meta = body["metadata"]
    outcome = Outcome(False, refusal.reason, refusal.message, int(meta.get("generation", 1)))
    if _refresh(client, meta["namespace"], meta["name"], outcome):
        client.emit_event(dict(body), "Warning", refusal.reason, refusal.message)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    client: KubeClient = memo.client
    settings: OperatorSettings = memo.settings
    meta = body["metadata"]
    try:
        outcome = reconcile_policy(client, dict(body), settings.workload())
    except SpecRefused as refusal:
        RECONCILE_ERRORS.inc()
        _refuse(client, dict(body), refusal)
        if refusal.retryable:
            raise kopf.TemporaryError(refusal.message, delay=settings.retry_delay_s) from None
        raise kopf.PermanentError(refusal.message) from None
    except KubeApiError as error:
        RECONCILE_ERRORS.inc()
        if error.is_transient or error.is_not_found or error.is_conflict:
            raise kopf.TemporaryError(str(error), delay=5) from error
        # Rejected by the API server (e.g. 422 from admission): visible, retried slowly.
        _refuse(client, dict(body), SpecRefused("ApplyRejected", str(error), retryable=True))
        raise kopf.TemporaryError(str(error), delay=4 * settings.retry_delay_s) from error
    RECONCILES.inc()
    _refresh(client, meta["namespace"], meta["name"], outcome)


@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
def workload_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """A child Deployment changed: its readiness feeds the owner's conditions."""
    owners = [
        o
        for o in body["metadata"].get("ownerReferences", [])
        if o.get("kind") == "DTNTransferPolicy"
    ]
    if not owners or type is None:
        return
    try:
        _refresh(memo.client, body["metadata"]["namespace"], owners[0]["name"], None)
    except KubeApiError as error:
        # Event handlers are not retried; the next Deployment event refreshes again.
        log.warning("could not refresh status of %s: %s", owners[0]["name"], error)


_STATE_POLL_S = OperatorSettings().state_poll_s  # kopf reads timer intervals at import


@kopf.timer(GROUP, VERSION, PLURAL, interval=_STATE_POLL_S, sharp=True)
async def poll_live_state(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """status.state and status.tracking from the policy's controller, every poll.

    Async, with the fetch and the status write in threads of their own: a slow or hostile
    /state (it had no total deadline and no size cap) must not hold one of kopf's workers,
    which reconcile every policy."""
    settings: OperatorSettings = memo.settings
    meta = body["metadata"]
    if (body.get("spec") or {}).get("paused"):
        return
    url = controller_state_url(
        dict(meta), settings.controller_state_url, settings.controller_http_port
    )
    fetched = await asyncio.to_thread(fetch_state, url)
    if fetched is None:
        return

    def write() -> None:
        with _status_locks[(meta["namespace"], meta["name"])]:
            refresh_live_state(memo.client, meta["namespace"], meta["name"], fetched)

    try:
        await asyncio.to_thread(write)
    except KubeApiError as error:
        log.warning("live state of %s: %s", meta["name"], error)
