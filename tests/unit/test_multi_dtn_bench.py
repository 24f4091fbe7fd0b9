"""``scidmz bench multi-dtn``: its plans, its disturbance figure, its CSV, and the twin's
closed loop with several DTN hosts under the real controller."""

from __future__ import annotations

import math
import statistics

import pytest

from scidmz.learn.closed_loop import SimLoop
from scidmz.learn.multi_dtn_bench import (
    MultiDtnEpisode,
    disturbance,
    episodes_csv,
    parse_episodes,
    plan,
    scenario,
)
from scidmz.learn.multi_dtn_report import markdown

MBPS = 1e6


def test_the_plan_follows_the_admitted_policies_and_the_case() -> None:
    before = plan("static", "capped", 0.0, _models())
    assert before.strategy == "trivial"
    assert before.setpoint.target_rate_bps == 450 * MBPS
    assert [(c.host, c.target_bps) for c in before.dtns] == [
        ("dtn-1", 300 * MBPS),
        ("dtn-3", 150 * MBPS),
    ]
    during = plan("pi", "capped", 60.0, _models())
    assert during.setpoint.target_rate_bps == 650 * MBPS
    assert [c.host for c in during.dtns] == ["dtn-1", "dtn-2", "dtn-3"]
    assert [p.dtn_host for p in during.policies] == ["dtn-1", "dtn-2", "dtn-3"]
    uncapped = plan("pi", "bbr-uncapped", 60.0, _models())
    assert [c.host for c in uncapped.dtns] == ["dtn-1", "dtn-2"]
    assert uncapped.setpoint.target_rate_bps == 650 * MBPS  # still in the sum


def test_disturbance_is_the_largest_deviation_after_the_event_from_the_mean_before() -> None:
    rates = [100.0] * 10 + [0.0, 0.0, 130.0, 90.0, 100.0] + [100.0] * 10
    assert disturbance(rates, 10, 100.0) == pytest.approx(0.30)  # the first 2 T ignored
    assert math.isnan(disturbance(rates, 0, 100.0))


def test_episodes_round_trip_through_the_csv_and_render() -> None:
    rows = [
        MultiDtnEpisode(
            "pi",
            "capped",
            seed,
            dtn,
            "cubic",
            300.0,
            299.0,
            0.04,
            0.998,
            0.956,
            70.0,
            math.nan if dtn == "dtn-2" else 0.12,
        )
        for seed in (1, 2)
        for dtn in ("dtn-1", "dtn-2", "dtn-3")
    ]
    parsed = parse_episodes(episodes_csv(rows))
    assert [(r.seed, r.dtn, r.mrae) for r in parsed] == [(r.seed, r.dtn, r.mrae) for r in rows]
    assert math.isnan(parsed[1].worst_disturbance)
    text = markdown(parsed, "scidmz bench multi-dtn")
    assert "| pi | each DTN's MRAE ≤ 5 % | worst DTN 4.0% | met |" in text
    assert "worst disturbance ≤ 10 % | worst DTN 12.0% | **missed** |" in text
    with pytest.raises(ValueError, match="header"):
        parse_episodes("arm,seed\npi,1\n")


def test_each_dtn_host_is_measured_apart_and_held_by_its_own_cap_on_the_twin() -> None:
    """The real controller on the twin with three DTN hosts: the collector's per-host
    rates agree with the bottleneck's truth, and each capped host ends near its own
    target (the sum loop alone could not tell them apart)."""
    settings = plan("pi", "capped", 0.0, _models())
    loop = SimLoop(scenario(3), settings)
    measured: list[tuple[float, ...]] = []
    truth: list[tuple[float, ...]] = []
    for step in loop.run([settings.setpoint.target_rate_bps] * 50):
        if step.sample.sim_s > 20:
            by_host = {f.host: f.rate_bps for f in step.sample.dtns}
            measured.append((by_host["dtn-1"], by_host["dtn-3"]))
            truth.append(
                (step.sample.dtn_host_departed_bps[0], step.sample.dtn_host_departed_bps[2])
            )
    for column in (0, 1):
        seen = statistics.fmean(m[column] for m in measured)
        real = statistics.fmean(t[column] for t in truth)
        assert seen == pytest.approx(real, rel=0.02)
    assert statistics.fmean(m[0] for m in measured[-15:]) == pytest.approx(300 * MBPS, rel=0.08)
    assert statistics.fmean(m[1] for m in measured[-15:]) == pytest.approx(150 * MBPS, rel=0.08)
    caps = {cap.control.host: cap.applied_bps for cap in loop.controller.caps}
    assert set(caps) == {"dtn-1", "dtn-3"} and all(c is not None for c in caps.values())


def _models():
    from scidmz.control.settings import default_models_dir

    return default_models_dir()
