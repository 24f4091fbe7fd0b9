"""``scidmz bench buffer``: episodes on the twin (a transfer, a short steady one), the
feasibility judge and the report's verdicts from hand-made episodes, the CLI's refusals and
its re-rendering from a saved episodes.csv."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from scidmz.cli import app
from scidmz.learn import buffer_bench
from scidmz.learn.buffer_bench import (
    COLUMNS,
    BufferEpisode,
    episode,
    episodes_csv,
    fixed_buffer_s,
    judge_feasible,
    parse_episodes,
)
from scidmz.learn.buffer_report import markdown, p4bs_best, paired_gap
from scidmz.netsim.simulator import Simulator


def test_the_fixed_arms_are_sized_from_the_flows_and_the_link():
    # 100 campus flows at 10 ms and 8 DTN streams at 100 ms: a mean RTT of 16.7 ms
    assert fixed_buffer_s("bdp", 100, 1e9) == pytest.approx(0.01667, rel=1e-3)
    assert fixed_buffer_s("stanford", 100, 1e9) == pytest.approx(0.01667 / math.sqrt(108), rel=1e-3)
    assert fixed_buffer_s("tiny", 100, 1e9) == pytest.approx(30 * 1514 * 8 / 1e9)
    assert fixed_buffer_s("bloated", 25, 1e9) == 0.2
    assert COLUMNS[:10] == (
        "arm", "cca", "load", "seed", "objective", "loss", "campus_qd_ms", "dtn_mrae",
        "fct_s", "buffer_ms",
    )  # fmt: skip


def test_an_episode_keeps_its_buffer_or_lets_p4bs_move_it():
    fixed = episode("bdp", "cubic", 50, seed=2)
    assert fixed.buffer_ms == pytest.approx(1e3 * fixed_buffer_s("bdp", 50, 1e9))
    assert 100 < fixed.fct_s < 200  # 10 GB at ~600 Mb/s
    assert -1 < fixed.objective < 0 and 0 <= fixed.loss < 0.05
    assert (fixed.trial_share, fixed.searches) == (0.0, 0)
    # judged from the twin's truth: BR1 drops far less than the path loses (the shaper's
    # drops are resent too), and the judge's delay is BR1's own
    assert fixed.loss < fixed.path_loss
    assert fixed.objective == pytest.approx(
        -(0.5 * fixed.loss / 0.05 + 0.5 * fixed.mean_qd_ms / 200), abs=0.01
    )
    searched = episode("p4bs", "cubic", 50, seed=2)
    assert searched.buffer_ms != pytest.approx(100.0)  # it searched: the mean buffer moved
    assert math.isfinite(searched.dtn_mrae) and searched.campus_qd_ms > 0
    assert 0 < searched.trial_share < 1 and searched.searches >= 1
    assert math.isfinite(searched.trial_objective) and math.isfinite(searched.held_objective)


def test_a_steady_episode_runs_its_time_and_moves_the_campus_load(monkeypatch):
    monkeypatch.setattr(buffer_bench, "STEADY_S", 60)
    monkeypatch.setattr(buffer_bench, "STEADY_LOADS", ((0.0, 1.0), (30.0, 2.0), (45.0, 0.5)))
    counts: list[int] = []
    original = Simulator.set_campus_long_flows

    def spy(sim: Simulator, count: int) -> None:
        counts.append(count)
        original(sim, count)

    monkeypatch.setattr(Simulator, "set_campus_long_flows", spy)
    steady = episode("100ms", "cubic", 20, seed=1, kind="steady")
    assert counts == [20, 40, 10]
    assert steady.episode == "steady" and math.isnan(steady.fct_s)
    assert 0.5 < steady.min_window_ratio < 1.5


def _row(arm: str, seed: int, **figures: float) -> BufferEpisode:
    base = {"objective": -0.2, "loss": 0.001, "campus_qd_ms": 20.0, "dtn_mrae": 0.010,
            "fct_s": 130.0, "buffer_ms": 50.0}  # fmt: skip
    kind = "steady" if "min_window_ratio" in figures else "transfer"
    return BufferEpisode(arm, "cubic", 100, seed, **(base | figures), episode=kind)  # type: ignore[arg-type]


def test_an_arm_is_feasible_only_where_it_keeps_the_dtns_target():
    judged = judge_feasible([
        _row("100ms", 1),
        _row("bdp", 1, dtn_mrae=0.0149),  # +0.49 points: kept
        _row("stanford", 1, dtn_mrae=0.0151),  # +0.51 points
        _row("tiny", 1, fct_s=132.7),  # 2.1 % slower
        _row("bloated", 1, fct_s=132.5),
        _row("bdp", 2),  # no 100 ms arm on seed 2: not judged
        _row("bdp", 1, min_window_ratio=0.951),
        _row("tiny", 1, min_window_ratio=0.949),
    ])  # fmt: skip
    assert [e.feasible for e in judged] == [True, True, False, False, True, None, True, False]


def _episodes(p4bs_f: list[float], bdp_feasible: bool = True) -> list[BufferEpisode]:
    rows = []
    for seed, f in enumerate(p4bs_f, start=1):
        rows += [
            _row("100ms", seed, objective=-0.3, campus_qd_ms=80.0, buffer_ms=100.0),
            _row("bdp", seed, objective=-0.2, campus_qd_ms=9.0, buffer_ms=16.7,
                 fct_s=130.0 if bdp_feasible else 140.0),
            _row("p4bs", seed, objective=f, campus_qd_ms=25.0, dtn_mrae=0.012, buffer_ms=28.0),
        ]  # fmt: skip
    return judge_feasible(rows)


def test_p4bs_wins_only_where_it_beats_every_feasible_arm():
    episodes = _episodes([-0.1] * 8 + [-0.2, -0.25])  # a tie with bdp is no win
    assert p4bs_best(episodes) == {("transfer", "cubic", 100): (8, 10)}
    text = markdown(episodes, "scidmz bench buffer")
    assert "| transfer | cubic | 100 | 8/10 — met | 8/10 |" in text
    assert "25.0 ms — met | +0.20 pts — met | 10/10 |" in text
    assert "7/10 — MISSED" in markdown(_episodes([-0.1] * 7 + [-0.3] * 3), "x")
    # a buffer that breaks the DTN's target is no rival of ours, but is of the paper's
    slow_bdp = _episodes([-0.25] * 10, bdp_feasible=False)
    assert p4bs_best(slow_bdp) == {("transfer", "cubic", 100): (10, 10)}
    assert p4bs_best(slow_bdp, feasible_only=False) == {("transfer", "cubic", 100): (0, 10)}
    gap, error = paired_gap(slow_bdp, ("transfer", "cubic", 100))
    assert gap == pytest.approx(0.05) and error == pytest.approx(0.0)


def test_the_report_renders_from_a_saved_csv_and_bad_input_is_refused(tmp_path):
    saved = tmp_path / "episodes.csv"
    saved.write_text(episodes_csv(_episodes([-0.1] * 3)))
    parsed = parse_episodes(saved.read_text())
    assert parsed[0].arm == "100ms" and parsed[0].feasible is True
    assert episodes_csv(parsed) == episodes_csv(_episodes([-0.1] * 3))  # NaN != NaN
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["bench", "buffer", "--from-csv", str(saved), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "P4BS best among the feasible" in (out / "report.md").read_text()
    broken = tmp_path / "broken.csv"
    broken.write_text("arm,cca\np4bs,cubic\n")
    for args, says in (
        (["--from-csv", str(broken)], "the header must be"),
        (["--cca", "reno"], "--cca must be cubic or bbr"),
        (["--loads", "25,lots"], "--loads must be integers"),
        (["--capacity", "1bps"], "--capacity must be within"),
        (["--seeds", "0"], "--seeds, --workers"),
        (["--episode", "forever"], "--episode must be transfer or steady"),
        (["--arms", "p4bs,huge"], "--arms: unknown huge"),
    ):
        result = CliRunner().invoke(app, ["bench", "buffer", *args, "--out", str(out)])
        assert result.exit_code == 2 and says in result.output, (args, result.output)
