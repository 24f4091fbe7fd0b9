"""P4BS's search (seed 003 algorithms 1 and 2) as pure math and a state machine fed by
hand-made samples: the GP and EI, the z-score, and whole searches on a synthetic link."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from scidmz.contract.state import PathSignals, StateVector
from scidmz.control.buffer_gp import expected_improvement, gp_posterior, next_buffer, objective
from scidmz.control.buffer_search import (
    INFEASIBLE_F,
    BufferTuner,
    TunerSample,
    TunerSettings,
    ZScore,
    tuner_sample,
)


def test_the_objective_is_p4bs_eq_2_with_the_codes_scales():
    assert objective(0.05, 0.2) == pytest.approx(-1.0)
    assert objective(0.0, 0.02) == pytest.approx(-0.05)
    assert objective(0.01, 0.0, w_loss=1.0, w_delay=0.0) == pytest.approx(-0.2)


def test_the_gp_passes_through_its_observations_and_is_unsure_away_from_them():
    x = np.array([0.1, 0.5, 0.9])
    y = np.array([-0.5, -0.1, -0.4])
    mean, std = gp_posterior(x, y, np.array([0.1, 0.5, 0.9, 0.3]))
    assert mean[:3] == pytest.approx(y, abs=2e-3)
    assert std[:3].max() < 0.02
    assert std[3] > 0.5  # 0.2 from any observation with a 0.035 length scale: the prior's


def test_expected_improvement_prefers_a_high_mean_or_a_wide_doubt():
    ei = expected_improvement(
        np.array([-0.1, -0.3, -0.3, -0.1]), np.array([0.0, 0.0, 0.2, 0.01]), -0.2
    )
    assert ei[1] == 0.0  # no doubt, no improvement
    assert ei[0] == 0.0  # no doubt: the improvement is certain but σ = 0 gives none here
    assert ei[2] > 0 and ei[3] > ei[2]


def test_next_buffer_probes_between_the_trials_on_a_grid():
    buffer, ei = next_buffer([0.02, 0.2], [-0.3, -0.6], 0.01, 0.2)
    assert 0.01 <= buffer <= 0.2 and ei > 0
    steps = (buffer - 0.01) / 0.0015
    assert steps == pytest.approx(round(steps))  # on the 1.5 ms grid from the lower bound


def test_the_z_score_fires_on_a_jump_and_not_on_noise():
    rng = np.random.default_rng(1)
    detector = ZScore(lag=20, threshold=10.0, influence=0.1)
    noise = [detector.update(-0.2 + 0.001 * rng.standard_normal()) for _ in range(200)]
    assert not any(noise)
    assert detector.update(-0.6)


def _link(buffer_s: float, feasible_from_s: float = 0.0) -> TunerSample:
    """A synthetic link at its full rate: loss falls with the buffer, the queue fills it."""
    loss = 0.03 * math.exp(-buffer_s / 0.015)
    return TunerSample(
        utilisation=0.99,
        loss=loss,
        mean_delay_s=0.9 * buffer_s,
        dtn_rate_bps=600e6 if buffer_s >= feasible_from_s else 500e6,
        target_bps=600e6,
        saturated=False,
        srtt_s=0.110,
        rtt_min_s=0.100,
        long_flows=100,
    )


def _begin(tuner: BufferTuner, sample: TunerSample) -> float:
    """Feed ``sample`` until the search starts; the first trial's buffer."""
    for _ in range(tuner.settings.settle_window):
        first = tuner.observe(sample)
        if first is not None:
            return first
    raise AssertionError("the search did not start")


def test_the_search_waits_for_the_dtn_to_reach_its_target():
    tuner = BufferTuner(TunerSettings(capacity_bps=1e9))
    ramping = replace(_link(0.1), dtn_rate_bps=300e6)  # the link full, the DTN in slow start
    assert [tuner.observe(ramping) for _ in range(10)] == [None] * 10
    assert tuner.phase == "idle"
    assert _begin(tuner, _link(0.1)) == pytest.approx(0.110)


def _run(tuner: BufferTuner, samples: int, **link: float) -> list[float]:
    applied = []
    for _ in range(samples):
        new = tuner.observe(_link(tuner.buffer_s, **link))
        if new is not None:
            applied.append(new)
    return applied


def _grid_best(settings: TunerSettings, feasible_from_s: float = 0.0) -> float:
    grid = np.arange(settings.min_s, settings.max_s, 0.0005)
    scores = [
        objective(_link(b).loss, _link(b).mean_delay_s) if b >= feasible_from_s else -9
        for b in grid
    ]
    return float(max(scores))


def test_a_search_expands_searches_and_holds_near_the_best_buffer():
    settings = TunerSettings(capacity_bps=1e9)
    tuner = BufferTuner(settings)
    applied = _run(tuner, 200)
    assert tuner.phase == "hold"
    assert applied[0] == pytest.approx(0.110)  # one BDP first (algorithm 1)
    assert tuner.iterations <= settings.max_iterations
    held = tuner.best
    assert held is not None and tuner.buffer_s == held.buffer_s
    # within 0.05 of the objective's best on a fine grid, after at most 1 + 4 trials
    assert held.f >= _grid_best(settings) - 0.05, (held, tuner.trials)
    assert len(tuner.trials) <= 1 + settings.max_iterations + 3


def test_a_buffer_that_starves_the_dtn_is_infeasible_and_never_held():
    settings = TunerSettings(capacity_bps=1e9)
    tuner = BufferTuner(settings)
    _run(tuner, 200, feasible_from_s=0.030)
    assert tuner.phase == "hold"
    starved = [t for t in tuner.trials if t.buffer_s < 0.030]
    assert all(not t.feasible and t.f == INFEASIBLE_F for t in starved)
    assert tuner.buffer_s >= 0.030


def test_nothing_is_searched_below_the_utilisation_gate_or_on_stale_telemetry():
    tuner = BufferTuner(TunerSettings(capacity_bps=1e9, default_s=0.1))
    idle = TunerSample(0.9, 0.0, 0.05, 6e8, 6e8, False, 0.11, 0.1, 100)
    assert [tuner.observe(idle) for _ in range(10)] == [None] * 10
    assert (tuner.phase, tuner.buffer_s) == ("idle", 0.1)
    # busy, and the DTN was at its target over the last samples: the search starts
    assert tuner.observe(_link(0.1)) == pytest.approx(0.110)
    for _ in range(3):
        tuner.observe(_link(0.11))
    assert tuner.observe(None) is None  # stale: the trial starts over ...
    settings = tuner.settings
    again = settings.settle_samples + settings.measure_samples  # a steady queue settles at once
    assert [tuner.observe(_link(0.11)) for _ in range(again - 1)] == [None] * (again - 1)
    assert tuner.observe(_link(0.11)) is not None


def test_hold_restarts_the_search_when_the_objective_jumps():
    settings = TunerSettings(capacity_bps=1e9, z_lag=10)
    tuner = BufferTuner(settings)
    rng = np.random.default_rng(2)
    for _ in range(300):  # a link is never perfectly still
        held = _link(tuner.buffer_s)
        tuner.observe(replace(held, mean_delay_s=held.mean_delay_s + 5e-4 * rng.standard_normal()))
    assert tuner.phase == "hold" and tuner.searches == 1  # the noise restarted nothing
    searches = tuner.searches
    worse = TunerSample(0.99, 0.04, 0.15, 6e8, 6e8, False, 0.11, 0.1, 300)
    for _ in range(30):
        if tuner.observe(worse) is not None:
            break
    assert tuner.searches == searches + 1 and tuner.phase == "expand"


def _filling(buffer_s: float, age: int, fill_samples: int) -> TunerSample:
    """The synthetic link while its queue fills a new buffer over ``fill_samples``."""
    full = _link(buffer_s)
    share = min(age / fill_samples, 1.0)
    return replace(full, mean_delay_s=full.mean_delay_s * share)


@pytest.mark.parametrize("fill_samples", [1, 12, 25])
def test_a_trial_is_scored_once_its_queue_has_settled(fill_samples):
    settings = TunerSettings(capacity_bps=1e9)
    tuner = BufferTuner(settings)
    buffer = _begin(tuner, _link(0.1))  # the first trial's buffer
    assert buffer is not None
    age = 0
    while not tuner.trials:
        age += 1
        tuner.observe(_filling(buffer, age, fill_samples))
    trial = tuner.trials[0]
    # scored on the filled queue, never on the transient ...
    assert trial.mean_delay_s == pytest.approx(0.9 * buffer, rel=0.02)
    # ... after the least wait, a little after the queue stopped growing (two windows)
    assert settings.settle_samples <= trial.waited <= fill_samples + 2 * settings.settle_window
    assert age == trial.waited + settings.measure_samples


def test_a_queue_that_never_settles_is_scored_after_the_longest_wait():
    settings = TunerSettings(capacity_bps=1e9, max_wait_samples=12)
    tuner = BufferTuner(settings)
    _begin(tuner, _link(0.1))
    age = 0
    while not tuner.trials:
        age += 1
        growing = 0.01 * 1.2**age  # still filling, 20 % a sample
        tuner.observe(replace(_link(tuner.buffer_s), mean_delay_s=growing))
    assert tuner.trials[0].waited == 12


def test_a_sawtooth_within_the_window_counts_as_settled():
    settings = TunerSettings(capacity_bps=1e9)
    tuner = BufferTuner(settings)
    _begin(tuner, _link(0.1))
    age = 0
    while not tuner.trials:
        age += 1
        swing = 0.02 if age % 2 else 0.08  # a Cubic sawtooth: wide, but periodic
        tuner.observe(replace(_link(tuner.buffer_s), mean_delay_s=swing))
    assert tuner.trials[0].waited == settings.settle_samples


def test_the_expansion_ignores_loss_that_is_not_the_border_routers():
    settings = TunerSettings(capacity_bps=1e9)
    shaper_drops = replace(_link(0.11), loss=0.01, border_loss=0.0005)
    tuner = BufferTuner(settings)
    _begin(tuner, shaper_drops)
    for _ in range(settings.settle_samples + settings.measure_samples):
        tuner.observe(replace(shaper_drops, mean_delay_s=0.9 * tuner.buffer_s))
    assert tuner.phase == "search"  # no doubling on the path's loss
    assert tuner.bounds_s[1] == pytest.approx(0.110)
    doubled = BufferTuner(settings)
    border_drops = replace(shaper_drops, border_loss=0.01)
    _begin(doubled, border_drops)
    for _ in range(settings.settle_samples + settings.measure_samples):
        doubled.observe(border_drops)
    assert (doubled.phase, doubled.buffer_s) == ("expand", pytest.approx(0.2))


def test_a_search_with_no_feasible_buffer_holds_the_administrators_default():
    settings = TunerSettings(capacity_bps=1e9, default_s=0.08)
    tuner = BufferTuner(settings)
    for _ in range(300):  # the DTN holds its target at the default buffer, at no other
        at_default = math.isclose(tuner.buffer_s, 0.08)
        tuner.observe(replace(_link(tuner.buffer_s), dtn_rate_bps=600e6 if at_default else 5e8))
    assert tuner.phase == "hold" and tuner.no_feasible
    assert tuner.buffer_s == pytest.approx(0.08)
    assert all(not t.feasible for t in tuner.trials)


def test_the_search_stops_early_when_its_trials_cannot_tell_the_improvement_from_noise():
    def trials_with(noise: float) -> int:
        rng = np.random.default_rng(3)
        tuner = BufferTuner(TunerSettings(capacity_bps=1e9, max_iterations=10))
        for _ in range(400):
            clean = _link(tuner.buffer_s)
            jitter = noise * rng.standard_normal()
            tuner.observe(replace(clean, mean_delay_s=max(clean.mean_delay_s + jitter, 0.0)))
            if tuner.phase == "hold":
                break
        assert tuner.phase == "hold"
        return len(tuner.trials)

    assert trials_with(0.02) < trials_with(0.0)


@pytest.mark.parametrize(
    ("signal", "expected"), [("path", 0.02), ("bottleneck", 0.004), ("actuator", 0.003)]
)
def test_the_loss_read_is_the_chosen_signal(signal, expected):
    state = StateVector(6e8, 4e8, 0.12, 0.03, 0.02, 0.02, 108)
    signals = PathSignals(
        dtn_retransmission_ratio=0.02, campus_retransmission_ratio=0.02,
        bottleneck_loss_ratio=0.004, dtn_mean_queuing_delay_s=0.02,
        campus_mean_queuing_delay_s=0.02, long_flows=108,
    )  # fmt: skip
    sample = tuner_sample(state, signals, 6e8, 1e9, False, signal, queue_loss=0.003)
    assert sample.loss == pytest.approx(expected)
    assert sample.border_loss == pytest.approx(0.003)  # the queue's own counter, when read
    unread = tuner_sample(state, signals, 6e8, 1e9, False, signal)
    assert unread.border_loss == pytest.approx(0.004)  # else method 2
