"""The lab's life cycle: a failed ``up`` and ``down`` leave nothing behind. Separate from
test_lab.py because each of these tears the lab down."""

from __future__ import annotations

import csv
import gzip
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from scidmz.lab import runner, topology
from scidmz.lab.topology import LabError
from scidmz.netsim.scenario import Scenario
from tests.lab.conftest import NEEDS_ROOT_AND_IPERF3

pytestmark = NEEDS_ROOT_AND_IPERF3

SCENARIO = Scenario.model_validate(
    {"bottleneck": {"capacity_bps": "100Mbps"}, "campus": {"long_flows": 2}, "dtn": {"streams": 1}}
)


def _lab_processes() -> list[str]:
    listed = subprocess.run(
        ["pgrep", "-a", "-f", "delayline-|tapreader-|iperf3"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in listed.stdout.splitlines() if "pgrep" not in line]


def test_a_failing_step_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner.down()
    original = topology.build_commands
    monkeypatch.setattr(
        topology,
        "build_commands",
        lambda scenario, offloads=True: [
            *original(scenario, offloads),
            ["ip", "-n", topology.DTN, "link", "set", "dev", "nosuch", "up"],
        ],
    )
    with pytest.raises(LabError, match="nosuch"):
        runner.up(SCENARIO, state_dir=tmp_path)
    assert runner.existing_namespaces() == []
    assert _lab_processes() == []


def test_down_kills_processes_and_removes_namespaces(tmp_path: Path) -> None:
    runner.down()
    lab = runner.up(SCENARIO, state_dir=tmp_path)
    runner.spawn(topology.RECV, ["iperf3", "--server", "--port", "5299"], tmp_path / "server.log")
    assert _lab_processes()
    removed = runner.down(lab.state_dir)
    assert removed == list(topology.NAMESPACES)
    assert runner.existing_namespaces() == [] and _lab_processes() == []
    assert runner.down(lab.state_dir) == []


def test_missing_tools_are_named_with_their_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        shutil, "which", lambda tool: None if tool == "iperf3" else "/usr/bin/" + tool
    )
    with pytest.raises(LabError, match="apt-get install iperf3"):
        runner.check_host()


def test_record_runs_each_case_on_its_own_lab_with_its_u_schedule(tmp_path: Path) -> None:
    from scidmz.lab.record import record_matrix

    runner.down()
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "duration: 5s\nbottleneck: 100Mbps\ncases:\n"
        "  - {name: steps, scenario: {campus: {long_flows: 3}, dtn: {streams: 1}},"
        " u_steps: [[0s, 80Mbps], [3s, 20Mbps]]}\n"
        "  - {name: bbr-fixed, scenario: {campus: {long_flows: 2},"
        " dtn: {streams: 1, congestion_control: bbr}}, u: 50Mbps}\n"
    )
    index = record_matrix(matrix, tmp_path / "out", state_dir=tmp_path / "state")
    assert {name: case["status"] for name, case in index["cases"].items()} == {
        "steps": "ok",
        "bbr-fixed": "ok",
    }
    rows = list(csv.DictReader((tmp_path / "out" / "steps" / "truth.csv").open()))
    # row t covers (t − 1, t]; the step at 3 s shows from the row at 4 s
    assert [float(r["campus_rate_limit_bps"]) for r in rows] == [80e6, 80e6, 80e6, 20e6, 20e6]
    assert float(rows[-1]["campus_rate_bps"]) < 21e6
    case = tmp_path / "out" / "steps"
    # what a dataset keeps: no iperf3 logs, the per-flow table compressed
    assert sorted(p.name for p in case.iterdir()) == ["case.json", "flows.csv.gz", "truth.csv"]
    with gzip.open(case / "flows.csv.gz", "rt") as handle:
        flows = list(csv.DictReader(handle))
    assert {f["class"] for f in flows} == {"dtn", "campus"}
    assert all(float(f["cwnd_segments"]) > 0 for f in flows)
    # a BBR sender's state from ss: its bandwidth estimate and min RTT; none for Cubic
    with gzip.open(tmp_path / "out" / "bbr-fixed" / "flows.csv.gz", "rt") as handle:
        bbr_flows = list(csv.DictReader(handle))
    dtn = [f for f in bbr_flows if f["class"] == "dtn" and float(f["bytes_acked"]) > 1e6]
    assert dtn and all(float(f["bbr_bandwidth_bps"]) > 1e6 for f in dtn)
    assert all(0.05 < float(f["bbr_min_rtt_s"]) < 0.5 for f in dtn)
    assert all(float(f["delivery_rate_bps"]) > 0 for f in dtn)
    # the Cubic case's data flows (iperf3's control connections use the namespace's default)
    cubic = [f for f in flows if float(f["bytes_acked"]) > 1e6]
    assert cubic and all(math.isnan(float(f["bbr_bandwidth_bps"])) for f in cubic)
    assert runner.existing_namespaces() == [] and _lab_processes() == []
