"""Compare the flow-level simulator with ns-3, and both with real Linux TCP, on one small
dumbbell; write a Markdown table.

    python3.11 -m venv /tmp/ns3venv && /tmp/ns3venv/bin/pip install ns3==3.44.post0   # ~520 MB
    .venv/bin/python bench/netsim_vs_ns3.py --ns3-python /tmp/ns3venv/bin/python
    # + the same dumbbell on real Linux TCP (root, ~7 min, alone):
    scidmz lab record --matrix examples/lab/ns3-dumbbell.yaml --out data/lab-ns3-dumbbell
    .venv/bin/python bench/netsim_vs_ns3.py --ns3-python /tmp/ns3venv/bin/python \\
        --lab data/lab-ns3-dumbbell

100 Mb/s bottleneck, 1.25 MB drop-tail FIFO (100 ms), 10 Cubic flows: 5 "campus" at 10 ms
and 5 "dtn" at 100 ms base RTT, 1 Gb/s access links, 20 s, measured over 5–20 s. The campus
shaper is made transparent (u = 10 Gb/s) because ns-3's dumbbell has none. ns-3 is not a
project dependency: it runs in a throwaway environment (``bench/ns3/dumbbell.py``).

``--lab`` adds a third column: the lab's recording of the same dumbbell
(``examples/lab/ns3-dumbbell.yaml``: veth with TSO/GSO, Linux Cubic with HyStart, the same
bottleneck and buffer), one figure per recorded run over the same window. It tells whether a
gap between the twin and ns-3 is the twin's, or ns-3's distance from Linux. With it,
``--variants hystart,prr,lab-starts,prr+lab-starts`` adds a row of the twin set up as the lab
for each calibration variant (``scidmz.lab.twin``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from scidmz.lab.record import mean_queuing_delay_s, truth_rows
from scidmz.lab.twin import parse_variant, variant_scenario
from scidmz.netsim import layout
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

HERE = Path(__file__).parent
CLASSES = ("campus", "dtn")
NS3_HEADER_BYTES = 54
NS3_IP_BYTES = 1500


NS3_SETTINGS: dict[str, object] = {
    "bottleneck": {"capacity_bps": "100Mbps", "buffer_bytes": "1.25MB"},
    "campus": {"long_flows": 5, "base_rtt_s": "10ms", "line_rate_bps": "1Gbps"},
    "dtn": {"streams": 5, "base_rtt_s": "100ms", "line_rate_bps": "1Gbps"},
    "shaper": {"initial_rate_bps": "10Gbps", "burst_bytes": "10MB"},
    # ns-3's point-to-point link: IPv4 20 + TCP 20 + timestamps 12 + PPP 2 per
    # segment, and no TSO (every segment its own packet)
    "header_bytes": NS3_HEADER_BYTES,
    "min_tso_segments": 1,
}
"""The twin set up as ns-3's dumbbell."""


def lab_settings(dataset: Path) -> dict[str, object]:
    """The twin set up as the lab recorded the dumbbell (its case.json: Ethernet framing,
    TSO bursts as the lab's offloads make them), the shaper open as in ns-3's runs."""
    case_dir = sorted(p.parent for p in dataset.glob("*/case.json"))[0]
    scenario: dict[str, object] = json.loads((case_dir / "case.json").read_text())["scenario"]
    return {**scenario, "shaper": NS3_SETTINGS["shaper"]}


def run_netsim(
    seed: int, duration_s: float, warmup_s: float, settings: dict[str, object] = NS3_SETTINGS
) -> dict[str, dict[str, float]]:
    scenario = parse_scenario({**settings, "seed": seed})
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


def lab_run(case_dir: Path, duration_s: float, warmup_s: float) -> dict[str, dict[str, float]]:
    """One recorded lab run over (warmup, duration]: per class the goodput as IP bytes (as
    ns-3 counts them) and the bottleneck's mean queuing delay (one FIFO: both classes')."""
    case = json.loads((case_dir / "case.json").read_text())
    mss = float(case["scenario"]["mss_bytes"])
    rows = [r for r in truth_rows(case_dir) if warmup_s < r["t_s"] <= duration_s]
    if len(rows) < duration_s - warmup_s - 1:
        raise ValueError(
            f"{case_dir}: {len(rows)} seconds recorded in {warmup_s:g}-{duration_s:g} s; "
            "record the case for at least --duration seconds"
        )
    delay = float(np.nanmean([mean_queuing_delay_s(r) for r in rows]))
    return {
        name: {
            "rate_bps": float(np.nanmean([r[f"{name}_rate_bps"] for r in rows]))
            * NS3_IP_BYTES
            / mss,
            "queuing_delay_s": delay,
        }
        for name in CLASSES
    }


Result = dict[str, dict[str, float]]
"""Per class: rate_bps (IP bytes) and queuing_delay_s."""


def lab_runs(dataset: Path, duration_s: float, warmup_s: float) -> list[Result]:
    """Every successfully recorded case of a ``scidmz lab record`` folder."""
    cases = sorted(p.parent for p in dataset.glob("*/truth.csv"))
    if not cases:
        raise ValueError(f"{dataset}: no recorded case (no */truth.csv)")
    return [lab_run(case, duration_s, warmup_s) for case in cases]


def _diff(value: float, reference: float) -> str:
    return f"{(value - reference) / reference * 100:+.1f} %"


def _spread(values: npt.NDArray[np.float64], scale: float) -> str:
    return f"{values.mean() * scale:.1f} ± {values.std() * scale:.1f}"


def comparison_rows(sources: list[tuple[str, list[Result]]]) -> list[str]:
    """A Markdown table, one row per source (the first is ns-3; a source named "Linux"
    adds columns against it): per-class rates and queuing delay as mean ± std over runs,
    and the rate differences from ns-3 [and Linux]."""
    means = {
        name: {cls: float(np.mean([r[cls]["rate_bps"] for r in runs])) for cls in CLASSES}
        for name, runs in sources
    }
    references = [sources[0][0]] + [name for name, _ in sources if name == "Linux"]
    header = "| run | campus Mb/s | DTN Mb/s | QD ms (campus / DTN) |"
    header += "".join(f" campus vs {ref} | DTN vs {ref} |" for ref in references)
    rows = [header, "|---" * (4 + 2 * len(references)) + "|"]
    for name, runs in sources:
        cells = [name]
        cells += [_spread(np.array([r[c]["rate_bps"] for r in runs]), 1e-6) for c in CLASSES]
        cells.append(
            " / ".join(
                f"{np.mean([r[c]['queuing_delay_s'] for r in runs]) * 1e3:.1f}" for c in CLASSES
            )
        )
        for ref in references:
            cells += ["—" if ref == name else _diff(means[name][c], means[ref][c]) for c in CLASSES]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


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
    parser.add_argument(
        "--ns3-json",
        type=Path,
        help="Use a saved bench/ns3/dumbbell.py result (bench/results/ns3/ holds the 20 s and "
        "120 s runs).",
    )
    parser.add_argument(
        "--lab", type=Path, help="A `scidmz lab record` of examples/lab/ns3-dumbbell.yaml."
    )
    parser.add_argument(
        "--variants",
        default="",
        help="With --lab: comma-separated twin variants (switches hystart, prr, lab-starts "
        "joined by '+') to add as rows of the twin set up as the lab.",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=20.0, help="Simulated seconds.")
    parser.add_argument("--warmup", type=float, default=5.0, help="Seconds left out at the start.")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "netsim_vs_ns3.md")
    args = parser.parse_args()
    try:
        variants = [parse_variant(name) for name in args.variants.split(",") if name]
    except ValueError as error:
        parser.error(f"--variants: {error}")
    if variants and not args.lab:
        parser.error("--variants needs --lab (the rows are the twin set up as the lab)")
    if args.ns3_json:
        reference = json.loads(args.ns3_json.read_text())
    elif args.ns3_python:
        reference = run_ns3(args.ns3_python, args.duration, args.warmup)
    else:
        parser.error("give --ns3-python or --ns3-json")
    started = time.perf_counter()
    seeds = range(1, args.seeds + 1)
    runs = [run_netsim(seed, args.duration, args.warmup) for seed in seeds]
    netsim_wall = (time.perf_counter() - started) / args.seeds
    sources: list[tuple[str, list[Result]]] = [("ns-3", [reference["classes"]])]
    lab_lines: list[str] = []
    if args.lab:
        sources.append(("Linux", lab_runs(args.lab, args.duration, args.warmup)))
        sources.append(("netsim as ns-3", runs))
        settings = lab_settings(args.lab)
        sources.append(
            (
                "netsim as the lab",
                [run_netsim(s, args.duration, args.warmup, settings) for s in seeds],
            )
        )
        for variant in variants:
            varied = variant_scenario(settings, variant)
            sources.append(
                (
                    f"netsim as the lab, {' + '.join(variant.parts) or 'shipped'}",
                    [run_netsim(s, args.duration, args.warmup, varied) for s in seeds],
                )
            )
        lab_lines = [
            f"Linux: real TCP in the lab (`{args.lab}`, {len(sources[1][1])} runs of "
            "`examples/lab/ns3-dumbbell.yaml`; goodput scaled to",
            "IP bytes as ns-3 counts them; queuing delay is the bottleneck's mean backlog, one "
            "FIFO for both classes). netsim as ns-3: no TSO, ns-3's 54 header bytes; netsim as "
            "the lab: the lab's case.json (Ethernet framing, its TSO bursts).",
            "",
        ]
    else:
        sources.append(("netsim", runs))
    rows = comparison_rows(sources)
    source = f"--ns3-json {args.ns3_json}" if args.ns3_json else f"--ns3-python {args.ns3_python}"
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
            f"{source} --duration {args.duration:g} "
            f"--warmup {args.warmup:g}{f' --lab {args.lab}' if args.lab else ''}"
            f"{f' --variants {args.variants}' if variants else ''} "
            f"--out {args.out}`.",
            "",
            *lab_lines,
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
