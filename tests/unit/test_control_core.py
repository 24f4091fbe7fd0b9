"""The anti-windup filter (figure 5), y_d (table 3), the 22 features (eq. 1), MRAE and IAE."""

import itertools
import math

import pytest

from scidmz.contract.state import StateVector
from scidmz.control.antiwindup import ControlConfigError, FilterState, Gains, Limits, step
from scidmz.control.features import (
    FALLBACK_STATE,
    FEATURE_NAMES,
    N_FEATURES,
    BaseRtts,
    LinkGoodput,
    Setpoint,
    bottleneck_saturated,
    desired_state,
    features,
    fill_missing,
)
from scidmz.control.quality import iae, mrae

MBPS = 1e6
LIMITS = Limits(min_bps=0.0, max_bps=1000 * MBPS, max_step_bps=200 * MBPS)


def test_unsaturated_step_is_model_plus_pi():
    gains = Gains(kp=0.5, ki=2.0, kw=1.0)
    state, out = step(FilterState(), -40 * MBPS, 400 * MBPS, 1.0, gains, LIMITS)
    assert out.u_bps == pytest.approx(380 * MBPS)  # 400 + 0.5·(−40) + 0
    assert out.windup_bps == 0 and not out.saturated
    assert state.integral_bps == pytest.approx(-80 * MBPS)  # T·Ki·e
    state, out = step(state, -40 * MBPS, 400 * MBPS, 0.5, gains, LIMITS)
    assert out.u_bps == pytest.approx((400 - 20 - 80) * MBPS)
    assert state.integral_bps == pytest.approx(-120 * MBPS)  # dt is injected: 0.5·2·(−40)


def test_the_integral_only_accumulates_inside_the_band():
    """Conditional integration: the ramp after an R* step (|e| beyond the band) is not
    summed; a small steady error is, as in figure 5; an infinite band is figure 5."""
    gains = Gains(kp=0.5, ki=0.2, kw=0.1)
    banded = Limits(0.0, 1000 * MBPS, 200 * MBPS, integral_band_bps=50 * MBPS)
    state = FilterState(applied_bps=400 * MBPS)
    for _ in range(5):  # the DTN ramping 300 Mb/s under a new R*
        state, out = step(state, -300 * MBPS, 400 * MBPS, 1.0, gains, banded)
        assert not out.saturated
    assert state.integral_bps == 0.0
    for _ in range(5):  # settled 10 Mb/s under R*: the bias is integrated away
        state, _ = step(state, -10 * MBPS, 400 * MBPS, 1.0, gains, banded)
    assert state.integral_bps == pytest.approx(5 * 0.2 * -10 * MBPS)
    state, _ = step(state, 50 * MBPS, 400 * MBPS, 1.0, gains, banded)  # the edge: included
    assert state.integral_bps == pytest.approx((-10 + 10) * MBPS)
    always = FilterState(applied_bps=400 * MBPS)
    for _ in range(5):
        always, _ = step(always, -300 * MBPS, 400 * MBPS, 1.0, gains, LIMITS)
    assert always.integral_bps == pytest.approx(5 * 0.2 * -300 * MBPS)


def test_outside_the_band_the_integral_only_unwinds_toward_zero():
    gains = Gains(kp=0.0, ki=0.2, kw=1.0)
    banded = Limits(0.0, 1000 * MBPS, 200 * MBPS, integral_band_bps=50 * MBPS)
    # saturated at max while far above target: T·Ki·e winds up, the back-calculation
    # unwinds more; only their sum's move toward zero is taken
    state = FilterState(integral_bps=300 * MBPS, applied_bps=1000 * MBPS)
    state, out = step(state, 400 * MBPS, 900 * MBPS, 1.0, gains, banded)
    assert out.windup_bps == pytest.approx(-200 * MBPS)  # ū = 1200 clamped to 1000
    assert state.integral_bps == pytest.approx((300 + 0.2 * 400 + math.expm1(-1.0) * 200) * MBPS)
    # held on a floor (w > 0) with the DTN ramping far under target: nothing winds in
    floor = Limits(400 * MBPS, 1000 * MBPS, 200 * MBPS, integral_band_bps=50 * MBPS)
    state, out = step(FilterState(applied_bps=400 * MBPS), -537 * MBPS, 400 * MBPS, 1.0,
                      Gains(0.26, 0.067, 2.13), floor)  # fmt: skip
    assert out.saturated and out.windup_bps > 0
    assert state.integral_bps == 0.0


def test_an_integral_wound_in_before_the_error_left_the_band_unwinds():
    """The lab's dead end: an integral of +116 Mb/s held u above B − R* and the DTN
    110 Mb/s under R*, outside the band, for 120 s. It now unwinds at T·Ki·e and stops
    at zero; once the error is back inside the band, figure 5 takes over."""
    gains = Gains(kp=0.26, ki=0.067, kw=2.13)
    banded = Limits(0.0, 1000 * MBPS, 200 * MBPS, integral_band_bps=50 * MBPS)
    state = FilterState(integral_bps=116 * MBPS, applied_bps=486 * MBPS)
    trace = []
    for _ in range(25):
        state, _ = step(state, -110 * MBPS, 400 * MBPS, 1.0, gains, banded)
        trace.append(state.integral_bps)
    assert trace[0] == pytest.approx((116 - 0.067 * 110) * MBPS)
    assert all(b <= a for a, b in itertools.pairwise(trace))
    assert trace[-1] == 0.0  # stopped at zero, not past it
    state, _ = step(state, -20 * MBPS, 400 * MBPS, 1.0, gains, banded)
    assert state.integral_bps == pytest.approx(-0.067 * 20 * MBPS)


def test_limits_keep_their_band_when_a_floor_or_ceiling_moves():
    banded = Limits(0.0, 1000 * MBPS, 200 * MBPS, integral_band_bps=30 * MBPS)
    assert banded.with_floor(100 * MBPS).integral_band_bps == 30 * MBPS
    assert banded.with_ceiling(700 * MBPS).integral_band_bps == 30 * MBPS
    assert banded.with_ceiling(700 * MBPS).max_bps == 700 * MBPS


def test_a_dtn_below_target_lowers_the_campus_rate():
    gains = Gains(0.3, 1.5, 1.5)
    _, out = step(FilterState(applied_bps=500 * MBPS), -100 * MBPS, 500 * MBPS, 1.0, gains, LIMITS)
    assert out.u_bps < 500 * MBPS


def test_saturation_and_the_slew_limit():
    gains = Gains(kp=1.0, ki=0.0, kw=0.0)
    state = FilterState(applied_bps=900 * MBPS)
    _, out = step(state, 500 * MBPS, 900 * MBPS, 1.0, gains, LIMITS)
    assert out.u_bps == 1000 * MBPS  # clamped to max
    assert out.windup_bps == pytest.approx(-400 * MBPS)
    _, out = step(state, -700 * MBPS, 900 * MBPS, 1.0, gains, LIMITS)
    assert out.u_bps == 700 * MBPS  # 200 ms... 200 Mb/s per sample at most
    _, first = step(FilterState(), -700 * MBPS, 900 * MBPS, 1.0, gains, LIMITS)
    assert first.u_bps == 200 * MBPS  # no slew limit before anything was applied


def test_back_calculation_discharges_windup():
    """A long error while saturated: with Kw the integral stays bounded and the output
    leaves saturation as soon as the error turns; without it, it stays stuck."""

    def run(kw: float) -> tuple[float, int]:
        gains = Gains(kp=0.0, ki=1.0, kw=kw)
        state = FilterState(applied_bps=1000 * MBPS)
        for _ in range(30):  # DTN far above target: wants u far above max
            state, _ = step(state, 300 * MBPS, 900 * MBPS, 1.0, gains, LIMITS)
        peak = state.integral_bps
        recovered_after = -1
        for sample in range(60):  # the error turns
            state, out = step(state, -100 * MBPS, 900 * MBPS, 1.0, gains, LIMITS)
            if out.u_bps < 1000 * MBPS:
                recovered_after = sample
                break
        return peak, recovered_after

    bounded_peak, fast = run(kw=1.0)
    wound_peak, slow = run(kw=0.0)
    assert bounded_peak < 0.2 * wound_peak
    assert 0 <= fast < 3
    assert slow == -1 or slow > 10 * max(fast, 1)


def test_without_integral_action_a_saturation_leaves_nothing_behind():
    # Ki = 0: back-calculation alone would integrate the saturator's error while u sits on
    # a floor and keep it after the floor lets go (u held 17 Mb/s high for 40 s)
    floor = Limits(min_bps=700 * MBPS, max_bps=1000 * MBPS, max_step_bps=200 * MBPS)
    state, gains = FilterState(applied_bps=700 * MBPS), Gains(0.5, 0.0, 0.06)
    for _ in range(40):
        state, out = step(state, 0.0, 600 * MBPS, 1.0, gains, floor)
        assert out.saturated and out.u_bps == 700 * MBPS
    assert state.integral_bps == 0.0
    state, out = step(state, 0.0, 600 * MBPS, 1.0, gains, LIMITS)
    assert out.u_bps == 600 * MBPS  # back to the model's rate at once
    # with integral action the same floor winds the integral, bounded by back-calculation
    state = FilterState(applied_bps=700 * MBPS)
    for _ in range(40):
        state, _ = step(state, 0.0, 600 * MBPS, 1.0, Gains(0.5, 0.1, 0.06), floor)
    assert state.integral_bps > 50 * MBPS


def test_a_large_kw_settles_on_the_boundary_instead_of_swinging():
    """Saturated at max with a constant error: Euler's T·Kw·w with Kw·T = 2.9 overshoots
    the boundary by 1.9× every step and u swung between the slew limits (the BBR limit
    cycle); the exact step moves I toward the boundary without crossing it."""
    gains = Gains(kp=0.84, ki=1.8, kw=2.9)
    state = FilterState(applied_bps=1000 * MBPS)
    applied = []
    for _ in range(40):  # the DTN far above R* whatever u is (BBR without its cap)
        state, out = step(state, 520 * MBPS, 413 * MBPS, 1.0, gains, LIMITS)
        applied.append(out.u_bps)
    assert applied[-20:] == [1000 * MBPS] * 20
    assert abs(state.integral_bps) < 2000 * MBPS  # bounded, not wound up


def test_small_kw_matches_the_euler_step():
    gains = Gains(kp=0.0, ki=1e-9, kw=0.01)  # an integral to unwind (e = 0: only w acts)
    state = FilterState(applied_bps=1000 * MBPS)
    state, out = step(state, 0.0, 1100 * MBPS, 1.0, gains, LIMITS)
    assert out.windup_bps == pytest.approx(-100 * MBPS)
    assert state.integral_bps == pytest.approx(0.01 * -100 * MBPS, rel=0.01)


def test_bad_gains_and_limits_are_named():
    with pytest.raises(ControlConfigError, match="gain ki"):
        Gains(0.1, -1.0, 0.1)
    with pytest.raises(ControlConfigError, match="gain kw"):
        Gains(0.1, 1.0, math.nan)
    with pytest.raises(ControlConfigError, match=r"limits\.min .* exceeds limits\.max"):
        Limits(800 * MBPS, 200 * MBPS, 100 * MBPS)
    with pytest.raises(ControlConfigError, match="maxStep"):
        Limits(0.0, 1.0, 0.0)
    with pytest.raises(ControlConfigError, match="integralBand"):
        Limits(0.0, 1.0, 1.0, integral_band_bps=0.0)
    with pytest.raises(ControlConfigError, match="integralBand"):
        Limits(0.0, 1.0, 1.0, integral_band_bps=math.nan)
    with pytest.raises(ValueError, match="finite"):
        step(FilterState(), math.nan, 0.0, 1.0, Gains(0, 0, 0), LIMITS)


MEASURED = StateVector(590 * MBPS, 405 * MBPS, 0.17, 0.08, 0.07, 0.069, 108)


def test_desired_state_table_3_and_reachable():
    setpoint = Setpoint(target_rate_bps=600 * MBPS, capacity_bps=1000 * MBPS)
    base = BaseRtts(0.1, 0.01)
    assert desired_state(setpoint, MEASURED, base, "table3") == (
        600 * MBPS, 400 * MBPS, 0.1, 0.01, 0.0, 0.0, 108,
    )  # fmt: skip
    # reachable (default): the split from the setpoint, the delays as they are now
    assert desired_state(setpoint, MEASURED, base) == (
        600 * MBPS, 400 * MBPS, 0.17, 0.08, 0.07, 0.069, 108,
    )  # fmt: skip
    configured = Setpoint(600 * MBPS, 1000 * MBPS, dtn_rtt_s=0.12, campus_rtt_s=0.015)
    for mode in ("table3", "reachable"):
        y_d = desired_state(configured, MEASURED, base, mode)
        assert (y_d.dtn_rtt_s, y_d.campus_rtt_s) == (0.12, 0.015)


def test_reachable_campus_rate_is_the_links_full_goodput_minus_the_target():
    # a full link carries 956 Mb/s of payload per Gb/s: y_d asks for the campus share of
    # that (356 Mb/s at R* = 600), not table 3's 400 Mb/s the link never carries
    setpoint = Setpoint(target_rate_bps=600 * MBPS, capacity_bps=1000 * MBPS)
    link = LinkGoodput().update(
        MEASURED._replace(dtn_rate_bps=600 * MBPS, campus_rate_bps=356 * MBPS), 1000 * MBPS
    )
    assert link.or_capacity(1000 * MBPS) == pytest.approx(956 * MBPS)
    reachable = desired_state(setpoint, MEASURED, BaseRtts(), "reachable", link)
    assert reachable.campus_rate_bps == pytest.approx(356 * MBPS)
    assert desired_state(setpoint, MEASURED, BaseRtts(), "table3", link).campus_rate_bps == (
        400 * MBPS
    )
    # never below zero, never above B_max − R*
    high = Setpoint(target_rate_bps=990 * MBPS, capacity_bps=1000 * MBPS)
    assert desired_state(high, MEASURED, BaseRtts(), "reachable", link).campus_rate_bps == 0.0
    over = LinkGoodput((1200 * MBPS,))
    assert desired_state(setpoint, MEASURED, BaseRtts(), "reachable", over).campus_rate_bps == (
        400 * MBPS
    )


def test_link_goodput_learns_only_from_a_full_link():
    b = 1000 * MBPS
    link = LinkGoodput()
    idle = MEASURED._replace(dtn_queuing_delay_s=0.0, campus_queuing_delay_s=0.0)
    assert link.update(idle, b) == link  # no standing queue: the link had room to spare
    unmeasured = MEASURED._replace(dtn_queuing_delay_s=math.nan, campus_queuing_delay_s=math.nan)
    assert link.update(unmeasured, b) == link
    assert link.update(MEASURED._replace(campus_rate_bps=math.nan), b) == link
    # a queue but far below the link: a capped DTN and an application-limited campus whose
    # bursts sojourn 2 ms (it dragged G to 638 Mb/s before the 0.9·B floor)
    bursts = MEASURED._replace(dtn_rate_bps=338 * MBPS, campus_rate_bps=300 * MBPS,
                               dtn_queuing_delay_s=0.002, campus_queuing_delay_s=0.002)  # fmt: skip
    assert link.update(bursts, b) == link
    first = link.update(MEASURED, b)  # 590 + 405 Mb/s, 70 ms of queue
    assert first.total_bps == pytest.approx(995 * MBPS)
    # a median over the latest full samples: a queue filling at a transfer's start reads
    # above the link (the tap counts before the queue) and must not linger in G
    burst = LinkGoodput().update(
        MEASURED._replace(dtn_rate_bps=302 * MBPS, campus_rate_bps=776 * MBPS), b
    )
    steady = MEASURED._replace(dtn_rate_bps=594 * MBPS, campus_rate_bps=362 * MBPS)
    settled = burst.update(steady, b).update(steady, b)
    assert settled.total_bps == pytest.approx(956 * MBPS)
    for _ in range(40):
        settled = settled.update(steady, b)
    assert len(settled.recent_bps) == 31
    assert bottleneck_saturated(MEASURED) is True
    assert bottleneck_saturated(idle) is False
    assert bottleneck_saturated(unmeasured) is None
    one_side = MEASURED._replace(dtn_queuing_delay_s=math.nan, campus_queuing_delay_s=0.004)
    assert bottleneck_saturated(one_side) is True


def test_base_rtts_come_from_measured_values_only():
    # A DTN path whose base RTT (250 ms) is above the fallback's 100 ms must be learned as
    # it is: the fallback never enters the minimum, NaN (unmeasured) leaves it alone.
    base = BaseRtts()
    assert base.or_fallback() == (FALLBACK_STATE.dtn_rtt_s, FALLBACK_STATE.campus_rtt_s)
    unmeasured = StateVector(1.0, 1.0, math.nan, math.nan, 0.0, 0.0, 3)
    base = base.update(unmeasured).update(MEASURED._replace(dtn_rtt_s=0.26, campus_rtt_s=0.3))
    base = base.update(MEASURED._replace(dtn_rtt_s=0.25, campus_rtt_s=math.nan))
    assert base.or_fallback() == (0.25, 0.3)
    assert base.update(MEASURED._replace(dtn_rtt_s=0.0)).dtn_rtt_s == 0.25  # not a sample


def test_fill_missing_by_name():
    raw = StateVector(math.nan, 3.0, math.nan, 0.02, math.nan, 0.001, math.nan)
    filled = fill_missing(raw, FALLBACK_STATE._replace(active_flows=7))
    assert filled == (0.0, 3.0, FALLBACK_STATE.dtn_rtt_s, 0.02, 0.0, 0.001, 7)


def test_features_are_22_in_the_documented_order():
    assert N_FEATURES == 22 == len(FEATURE_NAMES)
    assert FEATURE_NAMES[0] == "desired_dtn_rate_bps"
    assert FEATURE_NAMES[7] == "previous_dtn_rate_bps"
    assert FEATURE_NAMES[20] == "before_previous_active_flows"
    row = features(
        StateVector(*range(7)), StateVector(*range(10, 17)), StateVector(*range(20, 27)), 99.0
    )
    assert row.shape == (1, 22) and row.dtype.name == "float32"
    assert row[0].tolist() == [*range(7), *range(10, 17), *range(20, 27), 99.0]
    with pytest.raises(ValueError, match="finite"):
        features(StateVector(*[math.nan] * 7), MEASURED, MEASURED, 0.0)


def test_mrae_and_iae():
    targets = [600 * MBPS, 600 * MBPS, 300 * MBPS, 0.0]
    rates = [540 * MBPS, 660 * MBPS, math.nan, 5.0]
    assert mrae(targets, rates) == pytest.approx(0.1)  # the NaN and the zero target skipped
    assert iae(targets[:2], rates[:2], dt_s=1.0) == pytest.approx(120 * MBPS)
    assert math.isnan(mrae([0.0], [1.0]))
    with pytest.raises(ValueError):
        mrae([1.0], [])
