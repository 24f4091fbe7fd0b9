"""`scidmz demo` as `make demo` runs it by default: the image on the real node, the chart
installed with helm, the example loop in pods, its report; shortened."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys

import pytest

from scidmz.metrics import dashboards
from scidmz.testenv import image
from scidmz.testenv import node as real_node

pytestmark = [
    pytest.mark.skipif(
        bool(MISSING := [*real_node.missing_tools(), *image.missing_tools()]),
        reason=f"unsupported machine (README, 'Quick start'): {', '.join(MISSING)}",
    ),
    pytest.mark.timeout(1200),
]


def test_the_default_demo_runs_the_loop_in_pods_and_writes_its_report(tmp_path):
    report = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "scidmz.cli", "demo", "--duration", "15", "--report", str(report)],
        capture_output=True, text=True, timeout=1100, check=False, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for part in ("1/6 the image", "2/6 local Kubernetes", "3/6 helm install", "4/6 kubectl apply",
                 "5/6 the loop of BorderLink campus-border in pods", "6/6 report",
                 "first decision after", "the loop, live"):  # fmt: skip
        assert part in output, part
    # the loop's pods ran on the real node, beside the operator and the simulated switch
    pods = re.findall(r"^(campus-border-(?:collector|controller)-\S+)\s+1/1\s+Running\s+\d+\s+"
                      r"\S+\s+198\.18\.0\.\d+\s+node-0", output, re.M)  # fmt: skip
    assert {p.split("-")[2] for p in pods} == {"collector", "controller"}, output[-3000:]
    assert re.search(r"paper-testbed\s+campus-border\s+dtn-1\s+600Mbps\s+True\s+Accepted\s+"
                     r"[\d.]+[kMG]bps\s+True", output)  # fmt: skip
    with (report / "samples.csv").open() as handle:
        samples = list(csv.DictReader(handle))
    assert len(samples) >= 10
    assert all(float(s["dtn_rate_bps"]) > 0 for s in samples)
    overview, health = (len(dashboards.DASHBOARDS[n]()["panels"]) for n in ("overview", "health"))
    assert f"dashboard overview: {overview} of {overview} panels with data" in output
    # the operator's own metrics too (all but the firing alerts: none fire in a healthy run)
    assert f"dashboard health: {health - 1} of {health} panels with data" in output
    summary = (report / "summary.md").read_text()
    assert "the loop in pods on a real node" in summary
    assert re.search(r"settled, over t = \d+–\d+ s, \d+ samples: [\d.]+%", summary), summary
    assert "demo finished; the node and the control plane were removed" in output
    assert real_node.leftovers("scidmz-demo-") == []
