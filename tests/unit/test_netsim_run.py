"""`scidmz sim run`, u(t) schedules and the streamed outputs."""

import csv
import json
import subprocess
import sys

import pytest

from scidmz.netsim.records import SAMPLE_COLUMN_DOCS, SAMPLE_COLUMNS
from scidmz.netsim.run import run_simulation
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.schedule import ScheduleError, load_schedule, parse_schedule, random_rate
from scidmz.netsim.simulator import Simulator

SMALL = {"bottleneck": {"capacity_bps": "100Mbps"}, "campus": {"long_flows": 5}}


def _scidmz(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "scidmz.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
        check=False,
    )


def test_every_sample_column_is_documented():
    assert set(SAMPLE_COLUMN_DOCS) == set(SAMPLE_COLUMNS)


def test_step_schedule_changes_u_at_the_right_step():
    schedule = parse_schedule({"steps": [{"at": "0s", "rate": "80Mbps"}, {"at": 1.5, "rate": 0}]})
    sim = Simulator(parse_scenario(SMALL))
    first = sim.run_sample(schedule.changes(0.0, 1.0))
    second = sim.run_sample(schedule.changes(1.0, 2.0))
    assert first.campus_rate_limit_bps == pytest.approx(80e6)
    assert second.campus_rate_limit_bps == pytest.approx(40e6)  # half the interval at 0
    assert sim.campus_rate_limit_bps == 0.0


def test_random_schedule_is_reproducible_and_bounded():
    schedule = parse_schedule({"random": {"max": "1Gbps", "every": "500ms", "seed": 3}})
    changes = schedule.changes(0.0, 3.0)
    assert [t for t, _ in changes] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert all(0 <= rate <= 1e9 for _, rate in changes)
    assert len({rate for _, rate in changes}) == 6
    # chunking the run differently draws the same values
    assert schedule.changes(1.0, 2.0) == changes[2:4]
    assert random_rate(schedule.random, 4) == changes[4][1]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({}, "exactly one of steps or random"),
        ({"steps": []}, "must not be empty"),
        ({"steps": [{"at": 2, "rate": 1}, {"at": 1, "rate": 1}]}, "time order"),
        ({"steps": [{"at": 0, "rate": "-1Mbps"}]}, "steps.0.rate"),
        ({"random": {"min": "2Gbps", "max": "1Gbps"}}, "min must not exceed max"),
        ({"random": {"max": "1Gbps", "every": 0}}, "random.every"),
        ({"steps": [{"at": 0, "rate": 1, "extra": 1}]}, "steps.0.extra"),
    ],
)
def test_bad_schedules_name_the_problem(raw, fragment):
    with pytest.raises(ScheduleError, match=fragment):
        parse_schedule(raw)


def test_csv_schedules(tmp_path):
    good = tmp_path / "u.csv"
    good.write_text("time_s,rate_bps\n0,5e8\n10,1e8\n")
    assert load_schedule(good).changes(0, 20) == [(0.0, 5e8), (10.0, 1e8)]
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,rate_bps\n0,fast\n")
    with pytest.raises(ScheduleError, match=r"bad\.csv:2"):
        load_schedule(bad)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("t,u\n0,1\n")
    with pytest.raises(ScheduleError, match="header"):
        load_schedule(wrong)


def test_run_streams_samples_flows_and_summary(tmp_path):
    scenario = parse_scenario(
        {**SMALL, "dtn": {"transfer_bytes": "5MB", "streams": 2},
         "campus": {"long_flows": 5, "short_flows": {"enabled": True}}}
    )  # fmt: skip
    seen = []
    summary = run_simulation(
        scenario, 4.5, tmp_path, progress=lambda done, total: seen.append((done, total))
    )
    assert seen[-1] == (5, 5)
    rows = list(csv.DictReader((tmp_path / "samples.csv").open()))
    assert len(rows) == 5 and list(rows[0]) == list(SAMPLE_COLUMNS)
    flows = list(csv.DictReader((tmp_path / "flows.csv").open()))
    assert {row["kind"] for row in flows} == {"short", "dtn"}
    assert summary["dtn_transfer"]["completed"] is True
    assert summary["dtn_transfer"]["fct_s"] == pytest.approx(
        max(float(row["end_s"]) for row in flows if row["kind"] == "dtn"), abs=1e-6
    )
    assert summary["short_flows"]["completed"] == sum(row["kind"] == "short" for row in flows)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["steps"] == 5000
    assert written["scenario"]["campus"]["long_flows"] == 5


def test_cli_runs_with_a_scenario_and_schedule(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "bottleneck: {capacity_bps: 100Mbps}\ncampus: {long_flows: 5}\ndtn: {streams: 2}\n"
    )
    (tmp_path / "u.yaml").write_text("steps:\n  - {at: 0s, rate: 30Mbps}\n")
    result = _scidmz(
        "sim", "run", "--scenario", "s.yaml", "--u-schedule", "u.yaml",
        "--duration", "3", "--out", "out", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["mean"]["campus_rate_limit_bps"] == pytest.approx(30e6)
    assert '"speedup"' in result.stdout


@pytest.mark.parametrize(
    ("scenario", "fragment"),
    [
        ("bottleneck: {capacity_bps: 0}\n", "bottleneck.capacity_bps"),
        ("bottleneck: {capacity_bps: -1Gbps}\n", "bottleneck.capacity_bps"),
        ("step_s: 0\n", "step_s"),
        ("campus: {flows: 3}\n", "campus.flows"),
    ],
)
def test_cli_refuses_bad_scenarios_and_runs_nothing(tmp_path, scenario, fragment):
    (tmp_path / "s.yaml").write_text(scenario)
    result = _scidmz(
        "sim", "run", "--scenario", "s.yaml", "--duration", "1", "--out", "out", cwd=tmp_path
    )
    assert result.returncode == 2
    assert fragment in result.stderr
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_bad_duration(tmp_path):
    result = _scidmz("sim", "run", "--duration", "0", "--out", "out", cwd=tmp_path)
    assert result.returncode == 2
    assert "--duration" in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_docs_document_every_sample_column():
    """docs/simulator.md's table of samples.csv is generated from SAMPLE_COLUMN_DOCS when
    the site is built (hack/mkdocs_hooks.py); the site's build test checks the page."""
    from scidmz.testenv.cluster import REPO_ROOT

    page = (REPO_ROOT / "docs" / "simulator.md").read_text()
    assert "<!-- generated: sample-columns -->" in page
    assert all(SAMPLE_COLUMN_DOCS[column] for column in SAMPLE_COLUMNS)
