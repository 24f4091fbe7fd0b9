"""Control quality on the simulator: every controller arm against the fixed baselines.

    .venv/bin/python bench/control_quality.py                # full: 10 seeds, N_s 50..200
    .venv/bin/python bench/control_quality.py --quick        # 3 seeds, N_s = 100
    .venv/bin/python bench/control_quality.py --workers 2    # episodes on two processes
    (the same as `scidmz bench control [...]`)

Arms: trivial, pi, mlc (campus shaper only, the paper's setting), the same three with the
DTN actuator (trivial+dtn = the campus bucket at B − R* plus the DTN paced at R*), and mlc
with table 3's desired state (ablation). Experiments: tracking a time-varying R*(t), the
10 GB transfer of table 5 at N_s ∈ {50, 100, 150, 200}, short flows (§4.5), campus demand
below B − R* part of the time, and a constant R* for limit cycles. The controller runs on
the simulated clock (checked every sample).

Writes bench/results/control_quality/{report.md, *_cdf.png} (or --out), with the targets
judged at the top, and prints the report.
"""

from __future__ import annotations

import sys

from scidmz.cli import app

if __name__ == "__main__":
    sys.exit(app(["bench", "control", *sys.argv[1:]]))
