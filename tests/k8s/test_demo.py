"""`scidmz demo --mode host` (what `make demo DEMO_MODE=host` runs: the loop as local
processes, for machines without containerd) end to end, as a user runs it, shortened.
The default, in-cluster mode is tested with the real node (tests/node)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

from scidmz.metrics import dashboards


def test_the_demo_runs_the_loop_and_writes_its_report(tmp_path):
    report = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "scidmz.cli", "demo", "--mode", "host", "--duration", "15",
         "--report", str(report)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
        env={"COLUMNS": "200", **__import__("os").environ},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "demo finished; everything was stopped and removed" in output
    for part in ("1/5", "2/5", "3/5", "4/5", "5/5", "the loop, live", "tracking error"):
        assert part in output, part
    # the operator copied the local controller's /state into the example link's policy's
    # status only (the other link's loop does not run here)
    tables = re.findall(r"NAMESPACE\s+NAME\s+LINK.*?\n(.*?)\n\n", output, re.S)
    assert tables, output[-2000:]
    last = tables[-1]  # printed after the loop ran
    rows = {line.split()[1]: line for line in last.splitlines() if line.strip()}
    assert re.search(
        r"campus-border\s+dtn-1\s+600Mbps\s+True\s+Accepted\s+[\d.]+[kMG]bps\s+True",
        rows["paper-testbed"],
    ), rows
    assert re.search(r"edge-10g\s+dtn-2\s+4Gbps\s+True\s+Accepted\s+True", rows["bbr-edge"])
    # every link's workloads in the operator's namespace, with their certificates, and
    # Prometheus scraping them over mutual TLS
    for shown in ("secret/campus-border-collector-tls", "networkpolicy.networking.k8s.io/"
                  "campus-border-collector", "deployment.apps/edge-10g-dtn-shaper"):  # fmt: skip
        assert shown in output, shown
    with (report / "samples.csv").open() as handle:
        samples = list(csv.DictReader(handle))
    assert len(samples) >= 8
    assert all(float(s["dtn_rate_bps"]) > 0 for s in samples)
    assert (report / "demo.png").stat().st_size > 10_000
    # the dashboards drawn from their own queries: every overview panel has the loop's data
    overview, health = (len(dashboards.DASHBOARDS[n]()["panels"]) for n in ("overview", "health"))
    assert f"dashboard overview: {overview} of {overview} panels with data" in output
    # all but the firing alerts (none fire in a healthy run)
    assert f"dashboard health: {health - 1} of {health} panels with data" in output
    for name in ("overview", "health"):
        assert (report / f"dashboard-{name}.png").stat().st_size > 10_000
    summary = (report / "summary.md").read_text()
    # the settled error, with the window it covers, counted from the first decision
    assert re.search(r"tracking error \(MRAE, eq\. 3\) settled, over t = \d+–\d+ s", summary)
    assert "first decision after" in output
