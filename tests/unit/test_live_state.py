"""The controller's /state JSON becomes status.state and status.tracking (API units)."""

import math

from scidmz.api.runtime import ControllerState
from scidmz.k8s.live_state import live_status

BASE = {"link": "p", "strategy": "mlc", "failsafe_active": False}


def test_state_and_tracking_in_api_units():
    live = live_status(
        ControllerState.model_validate({
            **BASE,
            "campus_rate_limit_bps": 4.018e8,
            "target_rate_bps": 6e8,
            "state": {
                "dtn_rate_bps": 5.982e8, "campus_rate_bps": 3.9e8, "dtn_rtt_s": 0.1013,
                "campus_rtt_s": 0.0112, "dtn_queuing_delay_s": 0.0013,
                "campus_queuing_delay_s": None, "active_flows": 108.0,
                "sampled_at": "2026-11-22T07:00:00Z", "sequence": 7,
            },
            "tracking": {"mrae": 0.04213, "window": 120},
        }),
        sample_time_s=1.0,
    )  # fmt: skip
    assert live["state"] == {
        "dtnRate": "598.2Mbps",
        "campusRate": "390Mbps",
        "dtnRtt": "101.3ms",
        "campusRtt": "11.2ms",
        "dtnQueuingDelay": "1.3ms",
        "activeFlows": 108,
        "campusRateLimit": "401.8Mbps",
        "targetRate": "600Mbps",
        "sampledAt": "2026-11-22T07:00:00Z",
        "failsafeActive": False,
    }
    assert live["tracking"] == {"mrae": 0.0421, "window": "120s"}


def test_nothing_measured_yet_writes_nothing():
    idle = {**BASE, "tracking": {"mrae": None, "window": 0}}
    assert live_status(ControllerState.model_validate(idle), 1.0) == {}
    unmeasured = {**BASE, "state": {"dtn_rate_bps": math.nan, "sampled_at": "x", "sequence": 1}}
    assert live_status(ControllerState.model_validate(unmeasured), 1.0) == {}


def test_a_failsafe_without_samples_still_says_what_is_held():
    """A controller that never got a sample holds its fail-safe rate: the link's status
    says so (the operator then marks it Degraded), with the rate in force."""
    from scidmz.k8s.links import failsafe_held

    held = {**BASE, "failsafe_active": True, "campus_rate_limit_bps": 4e8}
    live = live_status(ControllerState.model_validate(held), 1.0)
    assert live == {"state": {"campusRateLimit": "400Mbps", "failsafeActive": True}}
    why = failsafe_held(live)
    assert why is not None and "fail-safe rate (u(t) = 400Mbps)" in why
    assert failsafe_held({"state": {"failsafeActive": False}}) is None
    assert failsafe_held({}) is None


def test_the_admitted_policy_gets_its_rate_target_and_the_links_limit():
    from scidmz.k8s.live_state import policy_live_status

    state = ControllerState.model_validate({
        **BASE,
        "campus_rate_limit_bps": 4e8,
        "target_rate_bps": 6e8,
        "state": {"dtn_rate_bps": 5.9e8, "campus_rtt_s": 0.01, "sampled_at": "t", "sequence": 3},
        "tracking": {"mrae": 0.05, "window": 10},
    })  # fmt: skip
    assert policy_live_status(state, 0.5) == {
        "state": {
            "dtnRate": "590Mbps",
            "targetRate": "600Mbps",
            "campusRateLimit": "400Mbps",
            "shortfall": "10Mbps",
            "sampledAt": "t",
        },
        "tracking": {"mrae": 0.05, "window": "5s"},
    }
    unmeasured = {**BASE, "state": {"dtn_rate_bps": math.nan, "sampled_at": "x", "sequence": 1}}
    assert policy_live_status(ControllerState.model_validate(unmeasured), 1.0) == {}


def test_each_policy_sees_its_own_hosts_rate_and_target_and_no_others():
    """Several DTN hosts: the link's status lists each host, and each policy's status has
    its host's rate and RTT and its own target, never another's."""
    from scidmz.k8s.live_state import policy_live_status

    state = ControllerState.model_validate({
        **BASE,
        "campus_rate_limit_bps": 3.5e8,
        "target_rate_bps": 5e8,
        "policies": [
            {"namespace": "climate", "name": "archive", "dtn_host": "dtn-1",
             "target_rate_bps": 3e8, "capped": True, "dtn_rate_limit_bps": 3.1e8},
            {"namespace": "genomics", "name": "core", "dtn_host": "dtn-2",
             "target_rate_bps": 2e8},
        ],
        "state": {
            "dtn_rate_bps": 4.9e8, "dtn_rtt_s": 0.09, "sampled_at": "t", "sequence": 4,
            "dtn_hosts": [
                {"host": "dtn-1", "rate_bps": 2.95e8, "rtt_s": 0.1013},
                {"host": "dtn-2", "rate_bps": 1.95e8, "rtt_s": 0.0507, "queuing_delay_s": 0.002},
            ],
        },
    })  # fmt: skip
    link = live_status(state, 1.0, capacity_bps=1e9)["state"]
    assert link["dtnRate"] == "490Mbps" and link["targetRate"] == "500Mbps"
    # the administrators' plan: each host's target, how it is held and its cap, and
    # what the targets leave to the campus
    assert link["campusShare"] == "500Mbps"
    assert link["dtnHosts"] == [
        {"host": "dtn-1", "rate": "295Mbps", "rtt": "101.3ms", "targetRate": "300Mbps",
         "enforcedBy": "DtnCap", "rateLimit": "310Mbps"},
        {"host": "dtn-2", "rate": "195Mbps", "rtt": "50.7ms", "queuingDelay": "2ms",
         "targetRate": "200Mbps", "enforcedBy": "LinkSum"},
    ]  # fmt: skip
    # a host measured without a policy, and a policy whose host is not measured yet
    moved = state.model_copy(
        update={
            "state": state.state.model_copy(
                update={
                    "dtn_hosts": [state.state.dtn_hosts[1].model_copy(update={"host": "dtn-9"})]
                }
            )
        }
    )
    hosts = live_status(moved, 1.0)["state"]["dtnHosts"]
    assert [h["host"] for h in hosts] == ["dtn-9", "dtn-1", "dtn-2"]
    assert "targetRate" not in hosts[0] and "rate" not in hosts[1]
    assert hosts[1]["targetRate"] == "300Mbps" and hosts[1]["rateLimit"] == "310Mbps"
    assert "campusShare" not in live_status(moved, 1.0)["state"]  # capacity unknown
    genomics = policy_live_status(state, 1.0, "genomics", "core", "dtn-2")["state"]
    # its host has no shaper: held only through the link's sum, and 5 Mb/s short
    assert genomics == {"dtnRate": "195Mbps", "dtnRtt": "50.7ms", "targetRate": "200Mbps",
                        "campusRateLimit": "350Mbps", "enforcedBy": "LinkSum",
                        "shortfall": "5Mbps", "sampledAt": "t"}  # fmt: skip
    climate = policy_live_status(state, 1.0, "climate", "archive", "dtn-1")["state"]
    assert climate["dtnRate"] == "295Mbps" and climate["targetRate"] == "300Mbps"
    assert climate["enforcedBy"] == "DtnCap" and climate["dtnRateLimit"] == "310Mbps"
    # a host the collector does not measure yet: no figures rather than another's
    assert "state" not in policy_live_status(state, 1.0, "physics", "exp", "dtn-3")
