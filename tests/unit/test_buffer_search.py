"""P4BS's search (seed 003 algorithms 1 and 2) as pure math and a state machine fed by
hand-made samples: the GP and EI, the z-score, and whole searches on a synthetic link."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scidmz.control.buffer_search import (
    INFEASIBLE_F,
    BufferTuner,
    TunerSample,
    TunerSettings,
    ZScore,
    expected_improvement,
    gp_posterior,
    next_buffer,
    objective,
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
    assert tuner.observe(_link(0.1)) == pytest.approx(0.110)  # busy: the search starts
    for _ in range(3):
        tuner.observe(_link(0.11))
    assert tuner.observe(None) is None  # stale: the trial starts over ...
    assert [tuner.observe(_link(0.11)) for _ in range(9)] == [None] * 9  # ... 5 + 5 again
    assert tuner.observe(_link(0.11)) is not None


def test_hold_restarts_the_search_when_the_objective_jumps():
    settings = TunerSettings(capacity_bps=1e9, z_lag=10)
    tuner = BufferTuner(settings)
    _run(tuner, 200)
    assert tuner.phase == "hold"
    searches = tuner.searches
    worse = TunerSample(0.99, 0.04, 0.15, 6e8, 6e8, False, 0.11, 0.1, 300)
    for _ in range(30):
        if tuner.observe(worse) is not None:
            break
    assert tuner.searches == searches + 1 and tuner.phase == "expand"
