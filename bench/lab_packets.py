"""The bottleneck packet by packet: which GSO packets real drop-tail drops, and the twin's
(how the bottleneck allocates losses between the classes).

    sudo .venv/bin/python bench/lab_packets.py [--case cubic-50-steps ...] [--seconds 25]
        [--seeds 3] [--write]                                           # ~40 s a case

Per case (a scenario of the lab's recorded matrix, ``data/lab-2026-11-25/<case>``, run with
the campus unshaped, u = B): a fresh lab, ``tcpdump`` on the border capturing the frames
each class brings to the bottleneck (``bc``, ``bd``, ingress) and those that leave its queue
(``bn``, egress), the flows for ``--seconds``, then the two sides matched on (sender, port,
sequence number): a frame that entered and never left was dropped (of a sequence number
sent twice, the earlier copy: the resend exists because it was lost). From 5 s on (slow
start over), per class: GSO packets per flow per second and their size in segments, each
packet's chance to be dropped by its size, bytes lost per byte offered; per millisecond:
how often one holds a drop, the DTN's share of the bytes arriving in all of them and in
those with a drop, and how evenly the campus's packets arrive (variance / mean of their
count per ms; 1 for independent arrivals).

The twin's figures come from the same scenario at 1 ms: a flow's "packet" is what it sends
in a step, dropped if any of it was (``--seeds`` runs). What the lab measured (2026-11-26,
the four default cases) and what it says about the twin is in
docs/design/netsim-calibration.md ("Tried and dropped": packet-level admission).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dpkt
import numpy as np

from scidmz.lab import topology
from scidmz.netsim import layout
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

RESULTS = Path(__file__).parent / "results" / "lab_packets.md"
DATASET = Path("data/lab-2026-11-25")
CASES = ("cubic-10-steps", "cubic-50-steps", "cubic-100-steps-1g", "bbr-50-steps")
SETTLED_S = 5.0
UNJUDGED_TAIL_S = 0.5
"""Frames entering this close to the end of the capture may still be queued: not judged."""
SIZE_BINS = ((1, 2), (3, 5), (6, 9), (10, 13), (14, 44))
"""GSO packet sizes, segments (44: the largest 64 kB packet), for the drop chance by size."""
CLASS_NETS = {
    "campus": ipaddress.ip_network(topology.CAMPUS_NET),
    "dtn": ipaddress.ip_network(topology.DTN_NET),
}
"""The lab's senders' networks, by class."""


def sender_class(address: bytes) -> str | None:
    """The class whose network holds an IPv4 source address, or None."""
    source = ipaddress.IPv4Address(address)
    return next((name for name, net in CLASS_NETS.items() if source in net), None)


@dataclass(frozen=True)
class Sent:
    """One packet (a GSO packet in the lab; a flow's send of one step in the twin)."""

    t_s: float
    traffic_class: str
    flow: int
    payload_bytes: float
    lost_bytes: float

    @property
    def dropped(self) -> bool:
        return self.lost_bytes > 0.0

    def segments(self, mss_bytes: float) -> int:
        """Its size in segments of the case's MSS (at least one)."""
        return max(round(self.payload_bytes / mss_bytes), 1)


@dataclass(frozen=True)
class Frame:
    t_s: float
    traffic_class: str
    port: int
    seq: int
    payload_bytes: int


def read_frames(path: Path) -> list[Frame]:
    """The TCP data frames of a capture (Ethernet, IPv4) whose sender is one of the lab's
    classes; ACKs (no payload) and other hosts' frames are left out."""
    frames = []
    with path.open("rb") as handle:
        for t_s, raw in dpkt.pcap.Reader(handle):
            ether = dpkt.ethernet.Ethernet(raw)
            ip = ether.data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            traffic_class = sender_class(ip.src)
            tcp = ip.data
            # a snap length cuts the payload: the IP total length says what it carried
            payload = ip.len - ip.hl * 4 - tcp.off * 4
            if traffic_class is None or payload <= 0:
                continue
            frames.append(Frame(float(t_s), traffic_class, tcp.sport, tcp.seq, payload))
    return frames


def judge(entered: Sequence[Frame], left: Sequence[Frame]) -> list[Sent]:
    """Each frame that entered the bottleneck, dropped or not: of the copies of one (port,
    sequence number) the earliest ``entered - left`` never left. Frames entering in the
    capture's last ``UNJUDGED_TAIL_S`` are left out (they may still be queued)."""
    if not entered or not left:
        return []
    end_s = max(frame.t_s for frame in left) - UNJUDGED_TAIL_S
    copies = Counter((f.traffic_class, f.port, f.seq) for f in entered)
    departed = Counter((f.traffic_class, f.port, f.seq) for f in left)
    seen: Counter[tuple[str, int, int]] = Counter()
    judged = []
    for frame in sorted(entered, key=lambda f: f.t_s):
        key = (frame.traffic_class, frame.port, frame.seq)
        nth = seen[key]
        seen[key] += 1
        if frame.t_s > end_s:
            continue
        lost = nth < copies[key] - departed[key]
        judged.append(
            Sent(
                frame.t_s, frame.traffic_class, frame.port, float(frame.payload_bytes),
                float(frame.payload_bytes) if lost else 0.0,
            )
        )  # fmt: skip
    return judged


@dataclass(frozen=True)
class ClassFigures:
    packets_per_flow_s: float
    mean_segments: float
    percentiles: tuple[float, float, float]
    loss_per_byte: float
    drop_by_size: tuple[float, ...]
    """Per ``SIZE_BINS``; NaN where a bin holds fewer than 50 packets."""


def class_figures(
    sent: Iterable[Sent], traffic_class: str, seconds: float, mss_bytes: float
) -> ClassFigures:
    """One class's packets over ``seconds`` (summed over runs), sized in ``mss_bytes``."""
    mine = [s for s in sent if s.traffic_class == traffic_class]
    if not mine:
        nan = math.nan
        return ClassFigures(nan, nan, (nan, nan, nan), nan, tuple(nan for _ in SIZE_BINS))
    segments = np.array([s.segments(mss_bytes) for s in mine])
    dropped = np.array([s.dropped for s in mine])
    flows = len({s.flow for s in mine})
    drops = []
    for low, high in SIZE_BINS:
        inside = dropped[(low <= segments) & (segments <= high)]
        drops.append(float(inside.mean()) if len(inside) >= 50 else math.nan)
    p10, p50, p90 = np.percentile(segments, [10, 50, 90])
    return ClassFigures(
        packets_per_flow_s=len(mine) / flows / seconds,
        mean_segments=float(segments.mean()),
        percentiles=(float(p10), float(p50), float(p90)),
        loss_per_byte=sum(s.lost_bytes for s in mine) / sum(s.payload_bytes for s in mine),
        drop_by_size=tuple(drops),
    )


@dataclass(frozen=True)
class MillisecondFigures:
    drop_fraction: float
    dtn_share: float
    dtn_share_when_dropping: float
    campus_count_dispersion: float


def millisecond_figures(sent: Iterable[Sent], start_s: float, end_s: float) -> MillisecondFigures:
    """Per millisecond of [start_s, end_s): bytes per class, campus packets, drops."""
    first, count = math.floor(start_s * 1000), math.floor((end_s - start_s) * 1000)
    dtn, campus, campus_packets = np.zeros(count), np.zeros(count), np.zeros(count)
    dropping = np.zeros(count, bool)
    for s in sent:
        k = math.floor(s.t_s * 1000) - first
        if not 0 <= k < count:
            continue
        if s.traffic_class == "dtn":
            dtn[k] += s.payload_bytes
        else:
            campus[k] += s.payload_bytes
            campus_packets[k] += 1
        dropping[k] |= s.dropped
    total = dtn + campus
    mean_packets = campus_packets.mean()
    return MillisecondFigures(
        drop_fraction=float(dropping.mean()),
        dtn_share=float(dtn.sum() / total.sum()) if total.sum() else math.nan,
        dtn_share_when_dropping=float(dtn[dropping].sum() / total[dropping].sum())
        if dropping.any()
        else math.nan,
        campus_count_dispersion=float(campus_packets.var() / mean_packets)
        if mean_packets
        else math.nan,
    )


def mean_figures(runs: Sequence[MillisecondFigures]) -> MillisecondFigures:
    """The field-by-field mean of several runs' figures."""
    return MillisecondFigures(
        *(
            float(np.mean([getattr(r, f) for r in runs]))
            for f in MillisecondFigures.__dataclass_fields__
        )
    )


def twin_sent(raw_scenario: dict[str, Any], seconds: float, seed: int) -> list[Sent]:
    """The twin's sends from ``SETTLED_S`` on, one per flow and 1 ms step with data."""
    scenario = parse_scenario(dict(raw_scenario, seed=seed, sample_time_s=0.001), "case")
    sim = Simulator(scenario)
    dtn = np.zeros(sim.flow_f.shape[1], bool)
    dtn[sim.layout.dtn_columns] = True
    sent_before = sim.flow_f[layout.SENT].copy()
    dropped_before = sim.flow_f[layout.DROPPED].copy()
    records = []
    for _ in range(round(seconds / scenario.step_s)):
        sample = sim.run_sample([])
        sent_now = sim.flow_f[layout.SENT].copy()
        dropped_now = sim.flow_f[layout.DROPPED].copy()
        t_s = sample.time_s - scenario.step_s
        if t_s >= SETTLED_S:
            sent, lost = sent_now - sent_before, dropped_now - dropped_before
            for i in np.nonzero(sent > 0.0)[0]:
                records.append(
                    Sent(t_s, "dtn" if dtn[i] else "campus", int(i), float(sent[i]),
                         float(lost[i]))
                )  # fmt: skip
        sent_before, dropped_before = sent_now, dropped_now
    return records


def capture_lab(raw_scenario: dict[str, Any], seconds: float, out: Path) -> list[Sent]:
    """Run the case on a fresh lab with tcpdump on the border; the judged frames."""
    from scidmz.lab import runner
    from scidmz.lab.traffic import record_truth

    if shutil.which("tcpdump") is None:
        raise SystemExit("bench/lab_packets.py needs tcpdump: apt-get install tcpdump (root)")
    out.mkdir(parents=True, exist_ok=True)
    scenario = parse_scenario(raw_scenario, "case")
    state = out / "state"
    lab = runner.up(scenario, state_dir=state)
    dumps = []
    try:
        for interface, direction in (("bc", "in"), ("bd", "in"), ("bn", "out")):
            pcap = out / f"{interface}.pcap"
            pcap.unlink(missing_ok=True)
            dumps.append(
                runner.spawn(
                    topology.BORDER,
                    ["tcpdump", "-i", interface, "-Q", direction, "-s", "96", "-B", "262144",
                     "-w", str(pcap), "tcp"],
                    out / f"tcpdump-{interface}.log",
                )
            )  # fmt: skip
        time.sleep(1.0)
        record_truth(lab, seconds, out)
    finally:
        for dump in dumps:
            os.killpg(dump.pid, signal.SIGINT)
        for dump in dumps:
            dump.wait(timeout=10)
        runner.down(state)
    captures = [out / f"{interface}.pcap" for interface in ("bc", "bd", "bn")]
    missing = [str(path) for path in captures if not path.exists() or path.stat().st_size == 0]
    if missing:
        raise SystemExit(f"tcpdump wrote nothing to {', '.join(missing)}: see {out}/tcpdump-*.log")
    entered = read_frames(captures[0]) + read_frames(captures[1])
    left = read_frames(captures[2])
    if not entered or not left:
        raise SystemExit(f"no data frames captured in {out}: did the flows run? ({out}/iperf3-*)")
    start = min(f.t_s for f in left)  # the flows' first frame: their t = 0
    return [
        Sent(s.t_s - start, s.traffic_class, s.flow, s.payload_bytes, s.lost_bytes)
        for s in judge(entered, left)
        if s.t_s - start >= SETTLED_S
    ]


def _fmt(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def class_row(case: str, source: str, name: str, figures: ClassFigures) -> str:
    p10, p50, p90 = figures.percentiles
    drops = " / ".join(_fmt(100 * p, 2) for p in figures.drop_by_size)
    return (
        f"| {case} | {source} | {name} | {_fmt(figures.packets_per_flow_s, 0)} | "
        f"{_fmt(figures.mean_segments, 1)} ({p10:.0f} / {p50:.0f} / {p90:.0f}) | "
        f"{_fmt(100 * figures.loss_per_byte, 3)} | {drops} |"
    )


def ms_row(case: str, source: str, figures: MillisecondFigures) -> str:
    return (
        f"| {case} | {source} | {_fmt(100 * figures.drop_fraction, 1)} | "
        f"{_fmt(figures.dtn_share, 3)} / {_fmt(figures.dtn_share_when_dropping, 3)} | "
        f"{_fmt(figures.campus_count_dispersion)} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help=f"default: {', '.join(CASES)}")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/scidmz-lab-packets"))
    parser.add_argument("--write", action="store_true", help=f"Write {RESULTS}.")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/lab_packets.py builds the lab: run it as root", file=sys.stderr)
        return 2
    measured = args.seconds - SETTLED_S - UNJUDGED_TAIL_S
    class_lines, ms_lines = [], []
    for case in args.case or CASES:
        case_json = args.dataset / case / "case.json"
        if not case_json.exists():
            print(f"{case_json}: no such case", file=sys.stderr)
            return 2
        raw = json.loads(case_json.read_text())["scenario"]
        mss_bytes = parse_scenario(raw, f"case {case}").mss_bytes
        print(f"{case}: lab ({args.seconds:.0f} s of flows) …", flush=True)
        runs = {"lab": [capture_lab(raw, args.seconds, args.out / case)]}
        print(f"{case}: twin ({args.seeds} seeds) …", flush=True)
        runs["twin"] = [twin_sent(raw, args.seconds, seed) for seed in range(1, args.seeds + 1)]
        for source, sent_runs in runs.items():
            everything = [s for sent in sent_runs for s in sent]
            for name in ("dtn", "campus"):
                figures = class_figures(everything, name, measured * len(sent_runs), mss_bytes)
                class_lines.append(class_row(case, source, name, figures))
                print(class_lines[-1], flush=True)
            per_run = [
                millisecond_figures(sent, SETTLED_S, SETTLED_S + measured) for sent in sent_runs
            ]
            ms_lines.append(ms_row(case, source, mean_figures(per_run)))
            print(ms_lines[-1], flush=True)
    bins = " / ".join(f"{low}–{high}" if high < 44 else f"{low}+" for low, high in SIZE_BINS)
    report = [
        "# The bottleneck packet by packet: lab against twin",
        "",
        f"`sudo .venv/bin/python bench/lab_packets.py --seconds {args.seconds:.0f} "
        f"--seeds {args.seeds} --write`: each case's scenario from `{args.dataset}` with the "
        f"campus unshaped, from {SETTLED_S:.0f} s on. Lab: tcpdump at the border, frames "
        "entering the bottleneck matched with those leaving it; twin: a flow's send of one "
        "1 ms step is its packet.",
        "",
        f"| case | source | class | packets / flow / s | segments: mean (p10 / p50 / p90) | "
        f"lost / offered, % | drop chance by size ({bins} segments), % |",
        "|---|---|---|---:|---|---:|---|",
        *class_lines,
        "",
        "| case | source | ms with a drop, % | DTN share of bytes: all ms / ms with a drop | "
        "campus packets per ms, variance / mean |",
        "|---|---|---:|---|---:|",
        *ms_lines,
    ]
    if args.write:
        RESULTS.write_text("\n".join(report) + "\n")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
