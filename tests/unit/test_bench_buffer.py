"""``scidmz bench buffer``: one episode per arm on the twin, the report's verdicts from
hand-made episodes, the CLI's refusals and its re-rendering from a saved episodes.csv."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from scidmz.cli import app
from scidmz.learn.buffer_bench import (
    COLUMNS,
    BufferEpisode,
    episode,
    episodes_csv,
    fixed_buffer_s,
    parse_episodes,
)
from scidmz.learn.buffer_report import markdown, p4bs_best


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
    searched = episode("p4bs", "cubic", 50, seed=2)
    assert searched.buffer_ms != pytest.approx(100.0)  # it searched: the mean buffer moved
    assert math.isfinite(searched.dtn_mrae) and searched.campus_qd_ms > 0


def _episodes(p4bs_f: list[float]) -> list[BufferEpisode]:
    rows = []
    for seed, f in enumerate(p4bs_f, start=1):
        for arm, objective, qd, mrae in (
            ("100ms", -0.3, 80.0, 0.010), ("bdp", -0.2, 9.0, 0.012), ("p4bs", f, 25.0, 0.012),
        ):  # fmt: skip
            rows.append(BufferEpisode(arm, "cubic", 100, seed, objective, 0.01, qd, mrae, 130.0,
                                      {"100ms": 100.0, "bdp": 16.7}.get(arm, 28.0)))  # fmt: skip
    return rows


def test_p4bs_wins_only_where_it_beats_every_other_arm():
    episodes = _episodes([-0.1] * 8 + [-0.2, -0.25])  # a tie with bdp is no win
    assert p4bs_best(episodes) == {("cubic", 100): (8, 10)}
    text = markdown(episodes, "scidmz bench buffer")
    assert "| cubic | 100 | 8/10 — met | 25.0 ms — met | +0.20 pts — met |" in text
    assert "10/10 episodes (100%" in text  # every mean buffer under 30 ms
    missed = markdown(_episodes([-0.1] * 7 + [-0.3] * 3), "x")
    assert "7/10 — MISSED" in missed


def test_the_report_renders_from_a_saved_csv_and_bad_input_is_refused(tmp_path):
    saved = tmp_path / "episodes.csv"
    saved.write_text(episodes_csv(_episodes([-0.1] * 3)))
    assert parse_episodes(saved.read_text())[0].arm == "100ms"
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["bench", "buffer", "--from-csv", str(saved), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "P4BS best on f̄" in (out / "report.md").read_text()
    broken = tmp_path / "broken.csv"
    broken.write_text("arm,cca\np4bs,cubic\n")
    for args, says in (
        (["--from-csv", str(broken)], "the header must be"),
        (["--cca", "reno"], "--cca must be cubic or bbr"),
        (["--loads", "25,lots"], "--loads must be integers"),
        (["--capacity", "1bps"], "--capacity must be within"),
        (["--seeds", "0"], "--seeds, --workers"),
    ):
        result = CliRunner().invoke(app, ["bench", "buffer", *args, "--out", str(out)])
        assert result.exit_code == 2 and says in result.output, (args, result.output)
