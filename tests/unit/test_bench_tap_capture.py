"""bench/tap_capture.py's report: the highest step without a lost frame, and the figures
it gives for it."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("tap_capture")


def test_the_best_step_is_the_highest_with_no_frame_lost_in_any_run(bench):
    step = bench.Step
    steps = [
        # 100 k/s: clean in both runs, half a core each
        step(1, 100_000, 10.0, 2_500_000, 2_500_000, 0, 5.0, 10.0),
        step(2, 100_000, 10.0, 2_500_000, 2_500_000, 0, 5.0, 10.0),
        # 200 k/s: one run lost frames, so the step does not count
        step(1, 200_000, 10.0, 5_000_000, 5_000_000, 0, 9.0, 10.0),
        step(2, 200_000, 10.0, 5_000_000, 4_900_000, 100_000, 10.0, 10.0),
    ]
    text = bench.report(steps, "cmd")
    assert "**Kept up with, no frame lost:** 100 k data frames/s, a 1.21 Gb/s link" in text
    assert "(250 k frames/s at the tap, 500 k frames per CPU-second)" in text
    assert "keeps up with 25.0% of that packet rate" in text
    assert "| 200 k/s (2.42 Gb/s) | 500 k | 99.0% | 100000 | 0.95 | 521 k |" in text
    assert steps[0].frames_per_cpu_s == pytest.approx(500_000)
    assert "No step" in bench.report(steps[3:], "cmd")
