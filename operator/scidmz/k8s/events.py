"""Events, aggregated as the Events API means them, and written where their readers are.

Every Event goes through an :class:`EventRecorder` (``events.k8s.io/v1``): the same event
again within ``SERIES_WINDOW_S`` of its last sighting (same object, type, reason, action and
note: a note cannot change once written) does not create a new object but counts in the
first one's ``series``, patched at most once per ``PATCH_INTERVAL_S``. Beyond
``MAX_SIMILAR`` different notes for one object and reason, the rest are combined into one
series, as the legacy correlator does. A tenant who toggles a policy fifty times leaves two
Events with counts, not fifty.

Where they go: a policy's Events regard the policy, in its tenant's namespace, and never
name another tenant's policy (their notes are the admission's messages, which do not). A
BorderLink is cluster-scoped, and the API server keeps Events about cluster-scoped objects
in ``default``, where every tenant may read them; so a link's Events regard its ConfigMap
``<link>-config`` in the operator's namespace (readable by the administrators alone), with
the link itself as ``related``.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from scidmz.k8s.client import KubeApiError, KubeClient

log = logging.getLogger(__name__)

EVENTS_API: Final = "events.k8s.io/v1"
REPORTING_CONTROLLER: Final = "scidmz.io/operator"
SERIES_WINDOW_S: Final = 360.0
"""An event seen again within this long joins the first one's series (client-go's 6 min)."""
PATCH_INTERVAL_S: Final = 30.0
"""A series is patched at most this often; counts in between are written by ``flush``."""
MAX_SIMILAR: Final = 10
"""Different notes per object, type, reason and action before they are combined."""
COMBINED: Final = "(combined from similar events): "
NOTE_LIMIT: Final = 1024
"""The Events API's limit on a note's length."""


def micro_time(moment: dt.datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """An ObjectReference to ``obj`` (apiVersion, kind and metadata name, namespace, uid)."""
    meta = obj["metadata"]
    ref = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"]}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


def event_object(
    name: str,
    regarding: Mapping[str, str],
    event_type: str,
    reason: str,
    note: str,
    action: str,
    instance: str,
    now: dt.datetime,
    related: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new ``events.k8s.io/v1`` Event in ``regarding``'s namespace."""
    event: dict[str, Any] = {
        "apiVersion": EVENTS_API,
        "kind": "Event",
        "metadata": {"name": name, "namespace": regarding["namespace"]},
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": action,
        "reason": reason,
        "type": event_type,
        "note": note[:NOTE_LIMIT],
        "regarding": dict(regarding),
    }
    if related is not None:
        event["related"] = dict(related)
    return event


@dataclass
class _Series:
    name: str
    namespace: str
    seen_s: float
    count: int = 1
    written_count: int = 1
    written_s: float = 0.0
    last_seen: str = ""

    @property
    def pending(self) -> bool:
        return self.count != self.written_count


_Key = tuple[str, str, str, str, str, str, str, str]


class EventRecorder:
    """Best effort: a failed write is logged, never raised (the audit trail must not stop
    a reconcile). Thread-safe: links reconcile in parallel."""

    def __init__(
        self,
        client: KubeClient,
        instance: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._client = client
        self._instance = instance or socket.gethostname()
        self._clock, self._wall = clock, wall
        self._series: dict[_Key, _Series] = {}
        self._lock = threading.Lock()
        self.created = 0
        self.patched = 0

    def emit(
        self,
        regarding: Mapping[str, str],
        event_type: str,
        reason: str,
        note: str,
        action: str,
        related: Mapping[str, str] | None = None,
    ) -> None:
        """Record an event about ``regarding`` (an ObjectReference with a namespace)."""
        similar = (
            regarding["namespace"], regarding.get("kind", ""), regarding["name"],
            regarding.get("uid", ""), event_type, reason, action,
        )  # fmt: skip
        note = note[:NOTE_LIMIT]
        now_s, now = self._clock(), self._wall()
        with self._lock:
            self._forget_old(now_s)
            key: _Key = (*similar, note)
            if key not in self._series:
                alike = sum(1 for k in self._series if k[:7] == similar)
                if alike >= MAX_SIMILAR:
                    key = (*similar, COMBINED)
                    note = (COMBINED + note)[:NOTE_LIMIT]
            series = self._series.get(key)
            if series is not None:
                series.count += 1
                series.seen_s, series.last_seen = now_s, micro_time(now)
                if now_s - series.written_s >= PATCH_INTERVAL_S:
                    self._patch(series, now_s)
                return
            name = f"{regarding['name'][:200]}.{uuid.uuid4().hex[:16]}"
            self._series[key] = _Series(name, regarding["namespace"], now_s, written_s=now_s)
        obj = event_object(
            name, regarding, event_type, reason, note, action, self._instance, now, related
        )
        try:
            self._client.create_object(obj)
            self.created += 1
        except KubeApiError as error:
            log.warning("event %s on %s: %s", reason, regarding["name"], error)
            with self._lock:
                self._series.pop(key, None)

    def flush(self) -> None:
        """Write the counts that waited for ``PATCH_INTERVAL_S`` (each link's pass calls
        it)."""
        now_s = self._clock()
        with self._lock:
            for series in list(self._series.values()):
                if series.pending and now_s - series.written_s >= PATCH_INTERVAL_S:
                    self._patch(series, now_s)

    def _patch(self, series: _Series, now_s: float) -> None:
        body = {"series": {"count": series.count, "lastObservedTime": series.last_seen}}
        series.written_s, series.written_count = now_s, series.count
        try:
            self._client.merge_patch(EVENTS_API, "Event", series.namespace, series.name, body)
            self.patched += 1
        except KubeApiError as error:
            log.warning("event series %s/%s: %s", series.namespace, series.name, error)

    def _forget_old(self, now_s: float) -> None:
        """Series not seen for the window end (their last count written first)."""
        for key, series in list(self._series.items()):
            if now_s - series.seen_s <= SERIES_WINDOW_S:
                continue
            if series.pending:
                self._patch(series, now_s)
            del self._series[key]
