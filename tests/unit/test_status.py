from scidmz.k8s.status import (
    Outcome,
    WorkloadState,
    compute_conditions,
    conditions_equal,
    deployment_state,
)

UP = WorkloadState(True, "DeploymentAvailable", "1/1")
DOWN = WorkloadState(False, "Unavailable", "0/1")


def _by_type(conditions):
    return {c["type"]: c for c in conditions}


def _dep(generation=1, observed=1, replicas=1, updated=1, available=1):
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "updatedReplicas": updated,
            "availableReplicas": available,
        },
    }


def test_ready_only_when_applied_and_both_available():
    ok = Outcome(True, "Applied", "", 2)
    c = _by_type(compute_conditions([], 2, ok, UP, UP, False, "t0"))
    assert c["Ready"]["status"] == "True"
    assert c["Degraded"]["status"] == "False"
    c = _by_type(compute_conditions([], 2, ok, UP, DOWN, False, "t0"))
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "ControllerUnavailable"


def test_stale_generation_is_not_ready():
    c = _by_type(compute_conditions([], 3, Outcome(True, "Applied", "", 2), UP, UP, False, "t"))
    assert c["Ready"]["status"] == "False"
    assert c["Reconciled"]["reason"] == "Reconciling"


def test_refusal_sets_degraded_with_reason():
    refused = Outcome(False, "PipelineConfigMapNotFound", "ConfigMap x missing", 1)
    c = _by_type(compute_conditions([], 1, refused, UP, UP, False, "t"))
    assert c["Ready"]["reason"] == "PipelineConfigMapNotFound"
    assert c["Degraded"]["status"] == "True"
    assert c["Degraded"]["message"] == "ConfigMap x missing"


def test_transition_time_kept_when_status_unchanged():
    ok = Outcome(True, "Applied", "", 1)
    first = compute_conditions([], 1, ok, UP, UP, False, "t0")
    second = compute_conditions(first, 1, None, UP, UP, False, "t1")
    assert conditions_equal(first, second)
    third = _by_type(compute_conditions(second, 1, None, DOWN, UP, False, "t2"))
    assert third["TelemetryReady"]["lastTransitionTime"] == "t2"
    assert third["ControllerReady"]["lastTransitionTime"] == "t0"


def test_missing_outcome_keeps_last_reconciled():
    refused = Outcome(False, "TlsSecretNotFound", "no secret", 1)
    first = compute_conditions([], 1, refused, DOWN, DOWN, False, "t0")
    again = _by_type(compute_conditions(first, 1, None, UP, UP, False, "t1"))
    assert again["Reconciled"]["reason"] == "TlsSecretNotFound"
    assert again["Ready"]["status"] == "False"


def test_paused_is_not_ready():
    c = _by_type(
        compute_conditions(
            [],
            1,
            Outcome(True, "Applied", "", 1),
            deployment_state(_dep(), True),
            deployment_state(_dep(), True),
            True,
            "t",
        )
    )
    assert c["Ready"]["reason"] == "Paused"


def test_deployment_state():
    assert deployment_state(None, False).reason == "NotCreated"
    assert deployment_state(_dep(), False).ready
    assert deployment_state(_dep(generation=2, observed=1), False).reason == "Progressing"
    assert deployment_state(_dep(updated=0), False).reason == "Progressing"
    assert deployment_state(_dep(available=0), False).reason == "Unavailable"


def test_a_condition_is_found_by_type_and_absent_ones_are_none():
    from scidmz.k8s.status import condition_true, find_condition

    obj = {"status": {"conditions": [{"type": "Accepted", "status": "False", "reason": "X"},
                                     {"type": "Ready", "status": "True"}]}}  # fmt: skip
    assert find_condition(obj, "Accepted") == {"type": "Accepted", "status": "False", "reason": "X"}
    assert find_condition(obj, "Degraded") is None and find_condition({}, "Ready") is None
    assert condition_true(obj, "Ready") and not condition_true(obj, "Accepted")
    assert not condition_true({"status": None}, "Ready")


def test_a_policy_is_ready_only_while_its_link_controls():
    from scidmz.k8s.status import policy_conditions

    def ready(link_ready):
        conditions = policy_conditions([], 1, True, "Accepted", "", True, link_ready, "t")
        return next((c["status"], c["reason"]) for c in conditions if c["type"] == "Ready")

    assert ready((True, "Ready", "")) == ("True", "Ready")
    assert ready((False, "TelemetryProgressing", "0/1 replicas")) == ("False", "LinkNotReady")
    assert ready(None) == ("False", "LinkNotReady")
    held = (False, "FailSafe", "the controller holds the fail-safe rate (u(t) = 400Mbps)")
    conditions = policy_conditions([], 1, True, "Accepted", "", True, held, "t")
    (condition,) = [c for c in conditions if c["type"] == "Ready"]
    assert (condition["status"], condition["reason"]) == ("False", "FailSafe")
    assert "400Mbps" in condition["message"]
