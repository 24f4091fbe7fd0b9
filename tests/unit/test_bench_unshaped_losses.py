"""bench/unshaped_losses.py's bookkeeping: which phase of a case counts as unshaped, and the
per-class loss rates over it."""

from __future__ import annotations

import math

import pytest

from tests.bench_scripts import load_bench

SEGMENT_BITS = 1448 * 8


def _case(schedule: list[list[float]]) -> dict[str, object]:
    return {
        "duration_s": 60.0,
        "u_schedule": schedule,
        "scenario": {"bottleneck": {"capacity_bps": 300e6}},
    }


def test_the_unshaped_phase_ends_when_u_first_drops_below_the_bottleneck():
    bench = load_bench("unshaped_losses")
    assert bench.unshaped_until(_case([[0.0, 300e6], [20.0, 150e6], [40.0, 60e6]])) == 20.0
    assert bench.unshaped_until(_case([[0.0, 1e10], [30.0, 300e6], [45.0, 1e8]])) == 45.0
    assert bench.unshaped_until(_case([[0.0, 300e6]])) == 60.0  # never shaped: all of it
    assert bench.unshaped_until(_case([[0.0, 150e6]])) is None  # shaped from the start


def test_loss_rates_are_per_segment_delivered_over_the_phase_only():
    bench = load_bench("unshaped_losses")
    rows = [
        {
            "t_s": float(t),
            "dtn_rate_bps": 10 * SEGMENT_BITS * 100.0,  # 1000 segments a second
            "campus_rate_bps": 10 * SEGMENT_BITS * 400.0,  # 4000
            "dtn_losses": 10.0 if t <= 20 else 1e6,
            "campus_losses": 20.0 if t <= 20 else 1e6,
        }
        for t in range(1, 31)
    ]
    shares = bench.shares(rows, 5.0, 20.0, SEGMENT_BITS / 8)
    assert shares.dtn_loss == pytest.approx(10 / 1000)
    assert shares.campus_loss == pytest.approx(20 / 4000)
    assert shares.loss_ratio == pytest.approx(2.0)
    assert shares.dtn_bps == pytest.approx(1000 * SEGMENT_BITS)
    empty = bench.shares(rows, 40.0, 50.0, SEGMENT_BITS / 8)
    assert math.isnan(empty.dtn_loss) and math.isnan(empty.loss_ratio)
    # the same bits in segments twice as large are half as many: twice the loss rate
    jumbo = bench.shares(rows, 5.0, 20.0, SEGMENT_BITS / 4)
    assert jumbo.dtn_loss == pytest.approx(2 * shares.dtn_loss)
