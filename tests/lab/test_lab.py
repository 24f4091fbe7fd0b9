"""The lab for real: namespaces, tbf, the delay line and iperf3 flows on Linux TCP.

Short runs at 100 Mb/s so they fit CI's two cores; skipped (with the reason) only where
the machine cannot build network namespaces.
"""

from __future__ import annotations

import asyncio
import csv
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scidmz.cli import app
from scidmz.control.actuators import TcActuator
from scidmz.lab import runner, topology
from scidmz.lab.runner import Lab
from scidmz.lab.topology import LabError
from scidmz.lab.traffic import client_summary, record_truth
from scidmz.netsim.scenario import Scenario

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(
        shutil.which("iperf3") is None, reason="iperf3 missing (make test installs it)"
    ),
]

SCENARIO = Scenario.model_validate(
    {
        "bottleneck": {"capacity_bps": "100Mbps", "buffer_s": "50ms"},
        "campus": {"long_flows": 8},
        "dtn": {"streams": 2},
    }
)


def _lab_processes() -> list[str]:
    listed = subprocess.run(
        ["pgrep", "-a", "-f", "delayline-|iperf3"], capture_output=True, text=True, check=False
    )
    return [line for line in listed.stdout.splitlines() if "pgrep" not in line]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    runner.down()
    state = tmp_path_factory.mktemp("lab-state")
    built = runner.up(SCENARIO, state_dir=state)
    yield built
    runner.down(state)


def test_base_rtts_come_from_the_delay_line(lab: Lab) -> None:
    assert runner.ping_rtt_s(topology.DTN, topology.RECV_ADDR) == pytest.approx(0.100, abs=0.003)
    assert runner.ping_rtt_s(topology.CAMPUS, topology.RECV_ADDR) == pytest.approx(0.010, abs=0.003)


def test_a_second_lab_is_refused_and_the_first_survives(lab: Lab, tmp_path: Path) -> None:
    with pytest.raises(LabError, match="already up"):
        runner.up(SCENARIO, state_dir=tmp_path)
    assert runner.existing_namespaces() == list(topology.NAMESPACES)


def test_flows_fill_the_bottleneck_and_truth_is_recorded(lab: Lab, tmp_path: Path) -> None:
    path = record_truth(lab, 6.0, tmp_path)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 6
    steady = rows[2:]
    goodput = [float(r["dtn_rate_bps"]) + float(r["campus_rate_bps"]) for r in steady]
    # The acked bytes of both classes fill B = 100 Mb/s less headers and retransmissions.
    assert all(85e6 < g < 101e6 for g in goodput), goodput
    assert all(float(r["campus_active_flows"]) == 8 for r in steady)
    assert all(float(r["dtn_active_flows"]) == 2 for r in steady)
    assert all(0 <= float(r["queuing_delay_s"]) <= 0.051 for r in rows)
    assert max(float(r["queuing_delay_s"]) for r in steady) > 0.005  # the queue is used
    assert all(float(r["dtn_min_rtt_s"]) == pytest.approx(0.100, abs=0.003) for r in steady)
    assert all(float(r["delayline_drops"]) == 0 for r in rows)
    summary = client_summary(tmp_path / "iperf3-campus.json")
    assert summary["rate_bps"] > 10e6


def test_the_projects_tc_actuator_shapes_campus_traffic(lab: Lab, tmp_path: Path) -> None:
    async def set_u(rate_bps: float) -> None:
        actuator = await TcActuator.open(topology.CAMPUS_SHAPER[1], netns=topology.CAMPUS_SHAPER[0])
        try:
            await actuator.apply(rate_bps)
        finally:
            await actuator.close()

    asyncio.run(set_u(30e6))
    try:
        rows = list(csv.DictReader(record_truth(lab, 5.0, tmp_path).open()))
    finally:
        asyncio.run(set_u(SCENARIO.bottleneck.capacity_bps))
    assert all(float(r["campus_rate_limit_bps"]) == 30e6 for r in rows)
    assert all(float(r["campus_rate_bps"]) < 31e6 for r in rows[1:])
    # The DTN takes what campus leaves.
    assert float(rows[-1]["dtn_rate_bps"]) > 40e6


def test_traffic_without_a_lab_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["lab", "traffic", "--duration", "2", "--out", str(tmp_path)],
        env={"SCIDMZ_LAB_STATE": str(tmp_path / "none")},
    )
    assert result.exit_code == 2
    assert "no lab is up" in result.output


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
