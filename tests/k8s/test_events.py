"""The operator's Events on the real API server (scidmz.k8s.events): the same event again
counts in one object's series instead of making a new one, many different notes end in one
combined series, and a link's Events regard its ConfigMap in the operator's namespace."""

from __future__ import annotations

import json

import pytest

from scidmz.k8s.client import KubeClient
from scidmz.k8s.events import COMBINED, MAX_SIMILAR, PATCH_INTERVAL_S, EventRecorder
from scidmz.testenv.identities import OPERATOR_NAMESPACE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(plane):
    import kubernetes

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(plane.kubeconfig), client_configuration=configuration
    )
    made = KubeClient(kubernetes.client.ApiClient(configuration))
    yield made
    made.close()


def _events(plane, namespace: str, name: str) -> list[dict]:
    listed = plane.kubectl(
        "get", "events.events.k8s.io", "-n", namespace, "-o", "json",
    ).stdout  # fmt: skip
    return [e for e in json.loads(listed)["items"] if e["regarding"]["name"] == name]


def test_the_same_event_again_is_a_series_not_a_new_object(plane, client, namespace):
    clock = Clock()
    recorder = EventRecorder(client, "test-instance", clock=clock)
    policy = {"apiVersion": "scidmz.io/v1alpha1", "kind": "DTNTransferPolicy",
              "name": "p", "namespace": namespace, "uid": "u-1"}  # fmt: skip
    for _ in range(50):
        recorder.emit(policy, "Warning", "QuotaExceeded", "spec.targetRate: no room", "Admit")
    recorder.emit(policy, "Normal", "Accepted", "admitted", "Admit")
    (quota,) = [e for e in _events(plane, namespace, "p") if e["reason"] == "QuotaExceeded"]
    assert quota["note"] == "spec.targetRate: no room" and "series" not in quota
    assert recorder.created == 2 and recorder.patched == 0  # within the patch interval
    clock.now += PATCH_INTERVAL_S
    recorder.flush()
    (quota,) = [e for e in _events(plane, namespace, "p") if e["reason"] == "QuotaExceeded"]
    assert quota["series"]["count"] == 50
    assert quota["reportingController"] == "scidmz.io/operator"
    # beyond MAX_SIMILAR different notes, one combined series
    for k in range(MAX_SIMILAR + 5):
        recorder.emit(policy, "Normal", "TargetNotRaised", f"note {k}", "Admit")
    raised = [e for e in _events(plane, namespace, "p") if e["reason"] == "TargetNotRaised"]
    assert len(raised) == MAX_SIMILAR + 1
    combined = [e for e in raised if e["note"].startswith(COMBINED)]
    assert len(combined) == 1 and combined[0]["note"] == f"{COMBINED}note {MAX_SIMILAR}"


def test_a_links_events_are_in_the_operators_namespace_only(plane, client):
    from scidmz.k8s.links import LinkSummary, link_event

    recorder = EventRecorder(client, "test-instance")
    link = LinkSummary("events-link", "u-link", 1, {}, {})
    link_event(recorder, link, OPERATOR_NAMESPACE, "Normal", "RatePlanChanged", "a plan")
    (event,) = _events(plane, OPERATOR_NAMESPACE, "events-link-config")
    assert event["regarding"]["kind"] == "ConfigMap"
    assert event["related"] == {"apiVersion": "scidmz.io/v1alpha1", "kind": "BorderLink",
                                "name": "events-link", "uid": "u-link"}  # fmt: skip
    assert _events(plane, "default", "events-link") == []
