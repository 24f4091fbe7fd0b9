"""The lab's life cycle: a failed ``up`` and ``down`` leave nothing behind. Separate from
test_lab.py because each of these tears the lab down."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scidmz.lab import runner, topology
from scidmz.lab.topology import LabError
from scidmz.netsim.scenario import Scenario

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(
        shutil.which("iperf3") is None, reason="iperf3 missing (make test installs it)"
    ),
]

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
