"""The collector's pure estimators (paper algorithms 3, 4, 6, 8)."""

import math
from dataclasses import fields

import pytest

from scidmz.contract.classes import CLASS_CAMPUS, FIRST_DTN_CLASS
from scidmz.contract.state import STATE_VARIABLES, NetworkState
from scidmz.telemetry.classes import byte_weighted
from scidmz.telemetry.estimators import (
    FlowEvent,
    RttSample,
    RttState,
    rate_bps,
    update_active_flows,
    update_flow_classes,
    update_rtt,
)

DTN = FIRST_DTN_CLASS


def test_state_order_is_the_models():
    assert tuple(f.name for f in fields(NetworkState))[:7] == STATE_VARIABLES
    state = NetworkState(6e8, 4e8, 0.1, 0.01, 0.002, math.nan, 108, measured_at_s=5.0)
    assert state.vector()[0] == 6e8 and state.vector()[6] == 108
    assert state.valid() == (True, True, True, True, True, False, True)


def test_rates_from_counter_deltas():
    assert rate_bps(75_000_000, 1.0) == 600e6
    # Δt is measured, not assumed to be T
    assert rate_bps(75_000_000, 1.25) == pytest.approx(480e6)


def test_rates_refuse_what_they_cannot_know():
    assert math.isnan(rate_bps(None, 1.0))  # the counter went backwards
    assert math.isnan(rate_bps(10, 0.0)) and math.isnan(rate_bps(10, math.nan))


def test_byte_weighting_is_the_one_classs_value_with_one_class():
    assert byte_weighted({2: 0.1}, {2: 5.0}) == 0.1
    assert byte_weighted({2: 0.1}, {}) == 0.1  # no bytes known yet: the plain mean
    assert byte_weighted({2: 0.1, 3: 0.3}, {2: 3.0, 3: 1.0}) == pytest.approx(0.15)
    assert byte_weighted({2: 0.1, 3: math.nan}, {2: 0.0, 3: 9.0}) == 0.1
    assert math.isnan(byte_weighted({2: math.nan}, {2: 1.0}))
    assert math.isnan(byte_weighted({}, {}))


def test_campus_rtt_averages_live_flows_and_smooths():
    state = update_rtt(
        RttState(),
        [RttSample(1, CLASS_CAMPUS, 0.010, 0.1), RttSample(2, CLASS_CAMPUS, 0.030, 0.2)],
        now_s=1.0,
        flow_timeout_s=2.0,
        alpha=0.5,
    )
    assert state.campus_rtt_s == pytest.approx(0.020)  # first mean taken as is
    assert state.dtn_rtt_by_class == {}
    # flow 2 reports again; flow 1 stays in the vector with its last RTT
    state = update_rtt(state, [RttSample(2, CLASS_CAMPUS, 0.050, 1.5)], 2.0, 2.0, alpha=0.5)
    assert state.campus_rtt_s == pytest.approx(0.5 * 0.020 + 0.5 * 0.030)
    # flow 1 (last seen at 0.1 s) times out at 2.1 s: only flow 2 counts
    state = update_rtt(state, [], 3.0, 2.0, alpha=0.5)
    assert set(state.campus_flows) == {2}
    assert state.campus_rtt_s == pytest.approx(0.5 * 0.025 + 0.5 * 0.050)


def test_each_dtn_classs_rtt_is_this_intervals_samples_or_its_last_value():
    state = update_rtt(
        RttState(),
        [RttSample(9, DTN, 0.100, 0.5), RttSample(9, DTN, 0.120, 0.9),
         RttSample(4, DTN + 1, 0.050, 0.9)],
        1.0,
        2.0,
    )  # fmt: skip
    assert state.dtn_rtt_by_class == pytest.approx({DTN: 0.110, DTN + 1: 0.050})
    later = update_rtt(state, [RttSample(4, DTN + 1, 0.070, 1.5)], 2.0, 2.0)
    assert later.dtn_rtt_by_class == pytest.approx({DTN: 0.110, DTN + 1: 0.070})
    bad = [RttSample(9, DTN, math.nan, 2.5), RttSample(9, DTN, -1.0, 2.6)]
    assert update_rtt(state, bad, 3.0, 2.0).dtn_rtt_by_class[DTN] == pytest.approx(0.110)


def test_rtt_smoothing_must_be_a_weight():
    with pytest.raises(ValueError, match="alpha"):
        update_rtt(RttState(), [], 1.0, 2.0, alpha=1.0)


def test_active_flows_follow_the_digests_in_order():
    active = update_active_flows(
        frozenset(), [FlowEvent(1, True), FlowEvent(2, True), FlowEvent(1, True)]
    )
    assert active == {1, 2}
    active = update_active_flows(active, [FlowEvent(1, False), FlowEvent(7, False)])
    assert active == {2}
    # a flow that stops and starts again within one poll ends up active
    assert update_active_flows(active, [FlowEvent(2, False), FlowEvent(2, True)]) == {2}


def test_each_active_flow_keeps_the_class_its_start_digest_named():
    events = [FlowEvent(1, True, class_id=DTN), FlowEvent(2, True, class_id=DTN + 3),
              FlowEvent(3, True)]  # fmt: skip
    active = update_active_flows(frozenset(), events)
    classes = update_flow_classes({}, active, events)
    assert classes == {1: DTN, 2: DTN + 3}  # flow 3's class is unknown (a register read)
    active = update_active_flows(active, [FlowEvent(1, False, class_id=DTN)])
    assert update_flow_classes(classes, active, []) == {2: DTN + 3}
