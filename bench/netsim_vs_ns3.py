"""Compare the flow-level simulator with ns-3 on one small dumbbell; write a Markdown table.

    python3.11 -m venv /tmp/ns3venv && /tmp/ns3venv/bin/pip install ns3==3.44.post0   # ~520 MB
    .venv/bin/python bench/netsim_vs_ns3.py --ns3-python /tmp/ns3venv/bin/python

100 Mb/s bottleneck, 1.25 MB drop-tail FIFO (100 ms), 10 Cubic flows: 5 "campus" at 10 ms
and 5 "dtn" at 100 ms base RTT, 1 Gb/s access links, 20 s, measured over 5–20 s. The campus
shaper is made transparent (u = 10 Gb/s) because ns-3's dumbbell has none. ns-3 is not a
project dependency: it runs in a throwaway environment (``bench/ns3/dumbbell.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from scidmz.netsim import layout
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

HERE = Path(__file__).parent
CLASSES = ("campus", "dtn")
NS3_HEADER_BYTES = 54
NS3_IP_BYTES = 1500


def run_netsim(seed: int, duration_s: float, warmup_s: float) -> dict[str, dict[str, float]]:
    scenario = parse_scenario(
        {
            "bottleneck": {"capacity_bps": "100Mbps", "buffer_bytes": "1.25MB"},
            "campus": {"long_flows": 5, "base_rtt_s": "10ms", "line_rate_bps": "1Gbps"},
            "dtn": {"streams": 5, "base_rtt_s": "100ms", "line_rate_bps": "1Gbps"},
            "shaper": {"initial_rate_bps": "10Gbps", "burst_bytes": "10MB"},
            # ns-3's point-to-point link: IPv4 20 + TCP 20 + timestamps 12 + PPP 2 per
            # segment, and no TSO (every segment its own packet)
            "header_bytes": NS3_HEADER_BYTES,
            "min_tso_segments": 1,
            "seed": seed,
        }
    )
    sim = Simulator(scenario)
    sim.advance(round(warmup_s / scenario.step_s))
    steps = round((duration_s - warmup_s) / scenario.step_s)
    out = sim.advance(steps)
    window = duration_s - warmup_s
    result: dict[str, dict[str, float]] = {}
    for name, dep, qd in (
        ("campus", layout.OUT_DEP_CAMPUS, layout.OUT_QD_CAMPUS_W),
        ("dtn", layout.OUT_DEP_DTN, layout.OUT_QD_DTN_W),
    ):
        sent = float(out[dep].sum())
        result[name] = {
            # ns-3 counts IP packets at its queue disc: payload + IP and TCP headers
            "rate_bps": sent * NS3_IP_BYTES / scenario.mss_bytes * 8 / window,
            "queuing_delay_s": float(out[qd].sum()) / sent,
            "flows": 5,
        }
    return result


def run_ns3(python: str, duration_s: float, warmup_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "ns3.json"
        subprocess.run(
            [python, str(HERE / "ns3" / "dumbbell.py"), "--out", str(target),
             "--duration-s", str(duration_s), "--warmup-s", str(warmup_s)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        loaded: dict[str, object] = json.loads(target.read_text())
        return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns3-python", help="Python of an environment with `pip install ns3`.")
    parser.add_argument("--ns3-json", type=Path, help="Use a saved bench/ns3/dumbbell.py result.")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=20.0, help="Simulated seconds.")
    parser.add_argument("--warmup", type=float, default=5.0, help="Seconds left out at the start.")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "netsim_vs_ns3.md")
    args = parser.parse_args()
    if args.ns3_json:
        reference = json.loads(args.ns3_json.read_text())
    elif args.ns3_python:
        reference = run_ns3(args.ns3_python, args.duration, args.warmup)
    else:
        parser.error("give --ns3-python or --ns3-json")
    started = time.perf_counter()
    runs = [run_netsim(seed, args.duration, args.warmup) for seed in range(1, args.seeds + 1)]
    netsim_wall = (time.perf_counter() - started) / args.seeds

    rows = []
    for name in CLASSES:
        ns3 = reference["classes"][name]
        rates = np.array([r[name]["rate_bps"] for r in runs])
        delays = np.array([r[name]["queuing_delay_s"] for r in runs])
        rate_diff = (rates.mean() - ns3["rate_bps"]) / ns3["rate_bps"] * 100
        delay_diff = (delays.mean() - ns3["queuing_delay_s"]) * 1e3
        rows.append(
            f"| {name} | {ns3['rate_bps'] / 1e6:.1f} | {rates.mean() / 1e6:.1f} ± "
            f"{rates.std() / 1e6:.1f} | {rate_diff:+.1f} % | {ns3['queuing_delay_s'] * 1e3:.1f} | "
            f"{delays.mean() * 1e3:.1f} ± {delays.std() * 1e3:.1f} | {delay_diff:+.1f} ms |"
        )
    table = "\n".join(
        [
            f"# netsim vs ns-3: 100 Mb/s dumbbell, 10 Cubic flows, {args.duration:.0f} s",
            "",
            "5 campus flows (10 ms) + 5 DTN flows (100 ms) share a 100 Mb/s bottleneck with a",
            "1.25 MB drop-tail FIFO; 1 Gb/s access links; measured over "
            f"{args.warmup:.0f}-{args.duration:.0f} s. ns-3 3.44",
            "(TcpCubic, SACK, DelAckCount 1, FifoQueueDisc, 1-packet device queue), one run;",
            f"netsim: mean ± std over seeds 1-{args.seeds}. Queuing delay is bytes-weighted FIFO",
            "sojourn per class. Reproduce: `.venv/bin/python bench/netsim_vs_ns3.py "
            f"--ns3-python /tmp/ns3venv/bin/python --duration {args.duration:g} "
            f"--warmup {args.warmup:g} --out {args.out}`.",
            "",
            "| class | ns-3 Mb/s | netsim Mb/s | rate diff | ns-3 QD ms | netsim QD ms | QD diff |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Wall time for {args.duration:g} simulated seconds: ns-3 {reference['wall_s']:.1f} s, "
            f"netsim {netsim_wall:.3f} s.",
            "",
        ]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
