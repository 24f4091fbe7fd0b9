"""The closed loop on the simulator: simulated clock, the collector's road for y(t), the
DTN cap, the experiments and the report."""

import asyncio
import math
import time

import numpy as np
import pytest

from scidmz.contract.codec import state_message
from scidmz.control.loop import Controller
from scidmz.learn.closed_loop import ClockMismatchError, SimLoop, bench_settings
from scidmz.learn.evaluation import Arm, Episode, mean_interval, steady, tracking, transfer
from scidmz.learn.gains import Triple, TunedGains
from scidmz.learn.identification import SimCollector
from scidmz.learn.report import episodes_csv, markdown, paired, parse_episodes, targets
from scidmz.netsim.scenario import Scenario

ZERO = Triple(kp=0, ki=0, kw=0)
P_ONLY = Triple(kp=0.5, ki=0.2, kw=1.0)


def _gains(campus: Triple = P_ONLY, dtn: Triple = ZERO) -> TunedGains:
    return TunedGains("cubic", campus, campus, dtn)


def test_the_loop_refuses_a_controller_on_the_wall_clock():
    loop = SimLoop(Scenario(), bench_settings("pi", 600e6, 1e9, (0.5, 0.2, 1.0)))
    sim = loop.sim
    for _ in range(3):
        loop.run([600e6])  # on the simulated clock: dt is exactly T every sample
    # the bug this guards against: the controller timing its integral on the wall clock
    # while the simulator runs hundreds of times faster
    loop.controller._clock = time.monotonic
    with pytest.raises(ClockMismatchError, match="not on the simulated clock"):
        loop.run([600e6, 600e6])
    assert sim.now == pytest.approx(4.0)  # refused at the first wall-clock decision


def test_decisions_use_simulated_time_for_the_integral():
    loop = SimLoop(Scenario(), bench_settings("pi", 600e6, 1e9, (0.0, 0.5, 0.0)))
    steps = loop.run([600e6] * 6)
    decided = [s.decision for s in steps if s.decision is not None and s.decision.output]
    assert all(d.dt_s == pytest.approx(1.0) for d in decided)
    # I(t+T) = I(t) + T·Ki·e: with T = 1 s the integral moves by 0.5·e per sample
    first, second = decided[0], decided[1]
    assert second.output.integral_bps - first.output.integral_bps == pytest.approx(
        0.5 * first.error_bps
    )


def test_sim_collector_follows_the_collectors_algorithms():
    scenario = Scenario.model_validate({"dtn": {"transfer_bytes": "500MB"}, "seed": 3})
    collector = SimCollector(scenario)
    first = collector.measure()
    # algorithm 3: counter deltas at the tap, which sees the offered load (drops included)
    offered = first.measured.dtn_rate_bps + first.measured.campus_rate_bps
    assert offered >= 0.99 * (first.dtn_departed_bps + first.campus_departed_bps)
    samples = [collector.measure() for _ in range(8)]
    y = samples[-1].measured
    # algorithm 8 from start/stop digests: 100 campus + 8 DTN flows active
    assert samples[1].measured.active_flows == 108
    assert 0 < y.campus_rate_bps <= 1.2e9 and 0 < y.dtn_queuing_delay_s < 0.2
    assert y.dtn_rtt_s > scenario.dtn.base_rtt_s and y.campus_rtt_s > scenario.campus.base_rtt_s
    more = [collector.measure() for _ in range(60)]
    finished = sum(len(s.dtn_done_s) for s in samples + more)
    assert finished == 8  # the 500 MB transfer ends ...
    assert more[-1].measured.active_flows == 100  # ... and its FIN digests leave the set
    assert math.isnan(more[-1].measured.dtn_rate_bps) or more[-1].measured.dtn_rate_bps == 0


def test_the_dtn_cap_holds_a_bbr_dtn_that_campus_shaping_cannot():
    scenario = Scenario.model_validate({"dtn": {"congestion_control": "bbr"}, "seed": 2})
    trivial = SimLoop(scenario, bench_settings("trivial", 500e6, 1e9, (0, 0, 0)))
    capped = SimLoop(
        scenario, bench_settings("trivial", 500e6, 1e9, (0, 0, 0), dtn_gains=(0, 0, 0))
    )
    free = np.mean([s.sample.measured.dtn_rate_bps for s in trivial.run([500e6] * 30)[10:]])
    held = np.mean([s.sample.measured.dtn_rate_bps for s in capped.run([500e6] * 30)[10:]])
    # BBR v1 takes the link whatever the campus is allowed (goodput: 95.6 % of B at most)
    assert free > 0.8 * 1e9 * scenario.payload_fraction
    # the cap counts frames, the tap payload; probe-rtt costs BBR ~3 % of a 20 s window
    assert held == pytest.approx(500e6 * scenario.payload_fraction, rel=0.05)


def test_episodes_produce_the_metrics():
    gains = _gains()
    track = tracking(Arm("pi"), "cubic", 1, gains, None)
    assert 0 < track.mrae < 0.5 and 0.9 < track.utilisation <= 1.0
    assert 0.8 < track.rate_ratio < 1.2
    run = transfer(Arm("trivial"), "cubic", 1, gains, None, size_bytes=2e9)
    # 2 GB at R* = 600 Mb/s: ~27 s if the trivial split gives the DTN its target
    assert 20 < run.fct_s < 40 and 0.9 < run.rate_ratio < 1.1
    held = steady(Arm("trivial"), "cubic", 1, gains, None)
    assert held.u_std_fraction == pytest.approx(0.0)  # the fixed split never moves


def test_report_judges_the_targets():
    episodes = [
        Episode("transfer", "trivial", "cubic", s, 100, mrae=0.04, fct_s=140.0, utilisation=0.99,
                rate_ratio=0.95)
        for s in (1, 2)
    ] + [
        Episode("transfer", "mlc", "cubic", s, 100, mrae=0.03, fct_s=135.0, utilisation=0.99,
                rate_ratio=0.99)
        for s in (1, 2)
    ]  # fmt: skip
    found = {t.name: t for t in targets(episodes)}
    fct = found["cubic mlc, N_s = 100: FCT vs trivial ≤ −7.4%"]
    assert fct.measured == "-3.6%" and not fct.met
    mrae = found["cubic mlc, N_s = 100: MRAE vs trivial ≤ −4.1%"]
    assert mrae.measured == "-25.0%" and mrae.met
    assert found["cubic mlc, N_s = 100: mean DTN rate ≤ 1.05 R*"].met
    text = markdown(episodes, "test")
    assert "| cubic mlc, N_s = 100: MRAE vs trivial ≤ −4.1% | -25.0% | met |" in text
    assert "**missed**" in text


def test_an_unfinished_transfer_fails_the_fct_target_and_shows_in_the_table():
    # a transfer that never completes has no FCT: averaging the others would hide it
    def run(arm: str, seed: int, fct: float) -> Episode:
        return Episode("transfer", arm, "cubic", seed, 100, mrae=0.03, fct_s=fct,
                       utilisation=0.9, rate_ratio=0.99)  # fmt: skip

    episodes = [run("trivial", 1, 150.0), run("trivial", 2, 150.0)]
    episodes += [run("mlc", 1, 120.0), run("mlc", 2, math.nan)]
    found = {t.name: t for t in targets(episodes)}
    fct = found["cubic mlc, N_s = 100: FCT vs trivial ≤ −7.4%"]
    assert fct.measured == "-20.0%, 1 of 4 runs unfinished" and not fct.met
    assert "**1 of 2 unfinished**" in markdown(episodes, "test")


def test_arms_are_paired_by_seed():
    """A shift smaller than the seeds' scatter but on every seed is a sure difference when
    paired; the same means with the pairing scrambled are not."""

    def run(arm: str, seed: int, error: float) -> Episode:
        return Episode("tracking", arm, "cubic", seed, 100, mrae=error)

    base = [0.02, 0.09, 0.04, 0.12, 0.06, 0.03, 0.10, 0.05, 0.08, 0.07]
    pi = [run("pi", s, e) for s, e in enumerate(base, start=1)]
    mlc = [run("mlc", s, e - 0.004) for s, e in enumerate(base, start=1)]
    sure = paired(mlc, pi, "mrae")
    assert (sure.seeds, sure.lower) == (10, 10)
    assert sure.mean_difference == pytest.approx(-0.004)
    assert sure.p_value < 0.01  # exact Wilcoxon, 10 of 10 the same way: p = 2/1024
    scrambled = [run("mlc", s, e - 0.004) for s, e in enumerate(reversed(base), start=1)]
    loose = paired(scrambled, pi, "mrae")
    assert loose.mean_difference == pytest.approx(-0.004) and loose.p_value > 0.3
    assert abs(loose.half_width) > abs(loose.mean_difference)
    # seeds only one side has, and NaN figures, are left out
    assert paired(mlc[:3], pi[1:], "mrae").seeds == 2
    assert paired(mlc, pi, "fct_s").seeds == 0
    assert paired(pi, pi, "mrae").describe(100, "") == "identical on 10/10 seeds"
    assert "lower on 10/10 seeds, p = 0.002" in sure.describe(100, "")
    text = markdown(pi + mlc, "test")
    assert "| cubic | mlc vs pi | tracking | -0.40 ± 0.00, lower on 10/10 seeds" in text


def test_episodes_survive_their_csv():
    episodes = [
        Episode("transfer", "mlc+dtn", "bbr", 3, 150, mrae=0.05, fct_s=140.5, rate_ratio=0.98),
        Episode("steady", "trivial", "cubic", 1, 100, u_std_fraction=0.0),
    ]
    again = parse_episodes(episodes_csv(episodes))
    assert episodes_csv(again) == episodes_csv(episodes)
    assert again[0].fct_s == 140.5 and again[0].campus_flows == 150
    assert math.isnan(again[1].fct_s) and again[1].u_std_fraction == 0.0
    with pytest.raises(ValueError, match="line 2"):
        parse_episodes(episodes_csv(episodes).replace(",150,", ",many,"))
    with pytest.raises(ValueError, match="missing"):
        parse_episodes("experiment,arm\ntracking,mlc\n")


def test_mean_interval():
    mean, half = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(half, 2.4841, rel_tol=1e-3)
    assert math.isnan(mean_interval([math.nan])[0])


def test_a_controller_only_sees_samples_through_the_stream_message():
    # the loop hands the controller exactly what the collector would publish
    controller = Controller(bench_settings("trivial", 600e6, 1e9, (0, 0, 0)), _Null())
    decision = asyncio.run(
        controller.on_sample(state_message((5e8, 4e8, 0.2, 0.06, 0.09, 0.09, 108.0), 1))
    )
    assert decision is not None and decision.u_bps == 400e6


class _Null:
    name = "null"

    async def apply(self, rate_bps: float) -> float:
        return rate_bps

    async def current(self) -> float | None:
        return None

    async def close(self) -> None:
        return


def test_the_report_renders_again_from_saved_episodes(tmp_path):
    from typer.testing import CliRunner

    from scidmz.cli import app

    episodes = [
        Episode("tracking", arm, "cubic", seed, 100, mrae=error * seed, utilisation=0.95)
        for arm, error in (("trivial", 0.05), ("mlc", 0.03)) for seed in (1, 2, 3)
    ]  # fmt: skip
    saved = tmp_path / "episodes.csv"
    saved.write_text(episodes_csv(episodes))
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["bench", "control", "--from-csv", str(saved), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    assert "(3 seeds)" in text and "| cubic | mlc vs trivial | tracking |" in text
    assert not (out / "episodes.csv").exists()  # nothing was run, nothing re-saved
    broken = tmp_path / "broken.csv"
    broken.write_text("experiment,arm\ntracking,mlc\n")
    for bad in (broken, tmp_path / "missing.csv"):
        result = CliRunner().invoke(app, ["bench", "control", "--from-csv", str(bad)])
        assert result.exit_code == 2 and str(bad) in result.output
