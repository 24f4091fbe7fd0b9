"""A BBR DTN held by the DTN cap on real TCP: the controller's second actuator (a `scidmz
shaper` agent setting a tbf on the DTN's egress) in the lab, as `bench/lab_control.py --cca
bbr` runs it at 1 Gb/s. Short runs at 100 Mb/s so they fit CI's two cores."""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from scidmz.lab import topology
from scidmz.lab.runner import Lab
from scidmz.netsim.scenario import Scenario
from tests.lab.conftest import NEEDS_ROOT_AND_IPERF3, lab_for_module

pytestmark = NEEDS_ROOT_AND_IPERF3

SCENARIO = Scenario.model_validate(
    {
        "bottleneck": {"capacity_bps": "100Mbps", "buffer_s": "50ms"},
        "campus": {"long_flows": 8},
        "dtn": {"streams": 2, "congestion_control": "bbr"},
    }
)
POLICY = Path(__file__).parents[2] / "examples" / "lab" / "bbr-1G.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_for_module(SCENARIO, tmp_path_factory)


def _dtn_cap_qdisc() -> str:
    namespace, interface = topology.DTN_CAP
    return subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "qdisc", "show", "dev", interface],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def test_the_dtn_cap_holds_a_bbr_dtn_at_its_target_on_real_tcp(lab: Lab, tmp_path: Path) -> None:
    """trivial+dtn: the cap at R* = 60 Mb/s, u at B − R*. Left alone, two BBR streams
    against eight Cubic flows take ~85 of the 100 Mb/s; capped, the kernel's delivered DTN
    rate stays at R* and the campus gets the rest."""
    from scidmz.lab.loop import load_loop, run_loop

    loop = load_loop(POLICY, "trivial").with_link(capacity="100Mbps").retargeted(60e6)
    summary = run_loop(loop, lab, 12.0, tmp_path, warmup_s=6.0)
    rows = list(csv.DictReader((tmp_path / "samples.csv").open()))
    caps = {float(r["dtn_rate_limit_bps"]) for r in rows[2:] if r["dtn_rate_limit_bps"]}
    assert caps == {60e6}
    assert "rate 60Mbit" in _dtn_cap_qdisc()
    delivered = summary["mean_dtn_delivered_bps"]
    assert 0.85 * 60e6 < delivered < 1.03 * 60e6, summary
    truth = list(csv.DictReader((tmp_path / "truth.csv").open()))
    campus = [float(r["campus_rate_bps"]) for r in truth if float(r["t_s"]) >= 6.0]
    assert sum(campus) / len(campus) > 25e6  # the campus gets what the capped DTN leaves
