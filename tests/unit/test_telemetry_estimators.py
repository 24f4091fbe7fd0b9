"""The collector's pure estimators (paper algorithms 3, 4, 6, 8)."""

import math
from dataclasses import fields

import pytest

from scidmz.contract.state import STATE_VARIABLES, NetworkState
from scidmz.telemetry.estimators import (
    CounterReading,
    FlowEvent,
    RttSample,
    RttState,
    class_rates,
    queuing_delays,
    update_active_flows,
    update_rtt,
)


def test_state_order_is_the_models():
    assert tuple(f.name for f in fields(NetworkState))[:7] == STATE_VARIABLES
    state = NetworkState(6e8, 4e8, 0.1, 0.01, 0.002, math.nan, 108, measured_at_s=5.0)
    assert state.vector()[0] == 6e8 and state.vector()[6] == 108
    assert state.valid() == (True, True, True, True, True, False, True)


def test_rates_from_counter_deltas():
    before = CounterReading(dtn_bytes=1_000, campus_bytes=5_000, at_s=10.0)
    after = CounterReading(dtn_bytes=75_001_000, campus_bytes=50_005_000, at_s=11.0)
    assert class_rates(before, after) == (600e6, 400e6)
    # Δt is measured, not assumed to be T
    late = CounterReading(dtn_bytes=75_001_000, campus_bytes=50_005_000, at_s=11.25)
    assert class_rates(before, late) == pytest.approx((480e6, 320e6))


def test_rates_refuse_what_they_cannot_know():
    before = CounterReading(dtn_bytes=10_000, campus_bytes=10_000, at_s=10.0)
    reset = CounterReading(dtn_bytes=10, campus_bytes=20_000, at_s=11.0)
    dtn, campus = class_rates(before, reset)
    assert math.isnan(dtn) and campus == 80_000.0
    assert all(math.isnan(r) for r in class_rates(before, before))


def test_campus_rtt_averages_live_flows_and_smooths():
    state = update_rtt(
        RttState(),
        [RttSample(1, False, 0.010, 0.1), RttSample(2, False, 0.030, 0.2)],
        now_s=1.0,
        flow_timeout_s=2.0,
        alpha=0.5,
    )
    assert state.campus_rtt_s == pytest.approx(0.020)  # first mean taken as is
    assert math.isnan(state.dtn_rtt_s)
    # flow 2 reports again; flow 1 stays in the vector with its last RTT
    state = update_rtt(state, [RttSample(2, False, 0.050, 1.5)], 2.0, 2.0, alpha=0.5)
    assert state.campus_rtt_s == pytest.approx(0.5 * 0.020 + 0.5 * 0.030)
    # flow 1 (last seen at 0.1 s) times out at 2.1 s: only flow 2 counts
    state = update_rtt(state, [], 3.0, 2.0, alpha=0.5)
    assert set(state.campus_flows) == {2}
    assert state.campus_rtt_s == pytest.approx(0.5 * 0.025 + 0.5 * 0.050)


def test_dtn_rtt_is_this_intervals_samples_or_the_last_value():
    state = update_rtt(
        RttState(), [RttSample(9, True, 0.100, 0.5), RttSample(9, True, 0.120, 0.9)], 1.0, 2.0
    )
    assert state.dtn_rtt_s == pytest.approx(0.110)
    assert update_rtt(state, [], 2.0, 2.0).dtn_rtt_s == pytest.approx(0.110)
    bad = [RttSample(9, True, math.nan, 2.5), RttSample(9, True, -1.0, 2.6)]
    assert update_rtt(state, bad, 3.0, 2.0).dtn_rtt_s == pytest.approx(0.110)


def test_rtt_smoothing_must_be_a_weight():
    with pytest.raises(ValueError, match="alpha"):
        update_rtt(RttState(), [], 1.0, 2.0, alpha=1.0)


def test_queuing_delay_registers():
    assert queuing_delays(2_500_000, 0)[0] == 0.0025
    assert math.isnan(queuing_delays(2_500_000, 0)[1])


def test_active_flows_follow_the_digests_in_order():
    active = update_active_flows(
        frozenset(), [FlowEvent(1, True), FlowEvent(2, True), FlowEvent(1, True)]
    )
    assert active == {1, 2}
    active = update_active_flows(active, [FlowEvent(1, False), FlowEvent(7, False)])
    assert active == {2}
    # a flow that stops and starts again within one poll ends up active
    assert update_active_flows(active, [FlowEvent(2, False), FlowEvent(2, True)]) == {2}
