"""Control quality on the simulator: MRAE, FCT, utilisation, scale, per strategy (issue 5).

    .venv/bin/python bench/control_quality.py            # full: 10 seeds, N_s 1..1000
    .venv/bin/python bench/control_quality.py --quick    # 3 seeds, N_s = 100
    (the same as `scidmz bench control [--quick]`)

Writes bench/results/control_quality/{report.md, *_cdf.png} (or --out) and prints the table.
"""

from __future__ import annotations

import sys

from scidmz.cli import app

if __name__ == "__main__":
    sys.exit(app(["bench", "control", *sys.argv[1:]]))
