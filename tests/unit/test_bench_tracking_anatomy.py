"""bench/tracking_anatomy.py: which phase each second of a tracking episode falls in, and
shares of the MRAE that add up to it."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("tracking_anatomy")


def test_seconds_are_labelled_by_the_step_before_them(bench: ModuleType) -> None:
    targets = [6e8] * 3 + [4e8] * 7 + [5e8] * 2
    labelled = bench.phases(targets)
    assert [p for p, _ in labelled[:3]] == ["settled"] * 3  # before any step
    assert labelled[3] == ("step second", 0)
    assert [p for p, _ in labelled[4:9]] == ["fall, 1-5 s"] * 5
    assert labelled[9] == ("settled", 6)
    assert labelled[10] == ("step second", 0)
    assert labelled[11] == ("rise, 1-5 s", 1)


def test_the_shares_add_up_to_the_mrae_and_falls_are_measured_from_the_new_level(
    bench: ModuleType,
) -> None:
    second = bench.Second
    # R* falls 600 -> 400 Mb/s at second 2; the DTN takes two seconds to come down
    dtn = [6e8, 6e8, 6e8, 5e8, 4e8, 4e8]
    targets = [6e8, 6e8, 4e8, 4e8, 4e8, 4e8]
    episode = [second(t, d, 1e9 - d, 1e9 - t) for t, d in zip(targets, dtn, strict=True)]
    split = bench.shares([episode])
    mrae = sum(abs(d - t) / t for d, t in zip(dtn, targets, strict=True)) / len(dtn)
    assert sum(split.values()) == pytest.approx(mrae)
    assert split["step second"] == pytest.approx(0.5 / 6)
    assert split["fall, 1-5 s"] == pytest.approx(0.25 / 6)
    assert split["settled"] == 0.0 and split["rise, 1-5 s"] == 0.0
    falls = bench.after_falls([episode])
    assert falls[0] == pytest.approx((2e8, -2e8, 0.0))
    assert falls[1] == pytest.approx((1e8, -1e8, 0.0))
    assert falls[3] == pytest.approx((0.0, 0.0, 0.0))
    assert 4 not in falls  # the episode ends
