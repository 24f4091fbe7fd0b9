"""The simulator against real Linux TCP: every case of a `scidmz lab record` dataset.

    scidmz lab record --matrix examples/lab/matrix.yaml --out lab-dataset     # root, ~20 min
    .venv/bin/python bench/netsim_vs_lab.py --dataset lab-dataset [--seeds 3] [--write]
    .venv/bin/python bench/netsim_vs_lab.py --dataset A --dataset B --dataset C   # their mean
    .venv/bin/python bench/netsim_vs_lab.py --dataset A --against-lab B [--against-lab C]

Each case's `case.json` holds the scenario and the campus rate schedule u(t) the lab ran;
the simulator runs the same scenario and schedule (seeds 1..N, mean) and both are cut into
10 s windows, the first left out (iperf3 starts its flows over the first second or two).
Per window: DTN and campus rate (lab: bytes acknowledged per second from TCP_INFO, i.e.
goodput; netsim: payload bytes leaving the bottleneck, whose capacity B counts frames of
MSS + 66 bytes), utilisation, mean queuing delay (lab: the bottleneck's mean backlog / B
from ~100 netlink reads a second, ``queuing_delay_mean_s``; datasets recorded before it
existed have one ``tc`` snapshot a second, which is also shown beside it; netsim: mean
backlog in frames / B), and losses per class over the
case (lab: retransmitted segments; netsim: dropped bytes / MSS at the bottleneck, and the
campus shaper's for the campus).

``--hystart`` runs the twin with Cubic's HyStart on (the lab host's default),
``--prr`` with Linux's proportional rate reduction in loss recovery (also the lab's),
``--bbr-recovery`` with BBR's window in loss recovery as Linux sets it and
``--lab-starts`` starts each class when the lab's iperf3 let it; each variant writes its own
report (``netsim_vs_lab_hystart_lab_starts.md``, ...).

Several ``--dataset`` recordings of the same matrix are one lab, their mean per window and
case: a single 60 s recording is noisy (``--against-lab`` shows by how much), and their mean
is the better estimate of what real TCP does.

``--by-buffer`` also counts the targets met per BR1 buffer: the twin's calibration at the
buffers P4BS's search chooses between (`examples/lab/matrix-buffers.yaml`, 10, 30 and 50
ms; the matrix above is at 100 ms), written to ``netsim_vs_lab_buffers.md`` (with
``--against-lab``, ``lab_vs_lab_buffers.md``: the lab's own scatter at those buffers).

Cases with several DTN hosts (``more_dtns``, as `examples/lab/matrix-two-dtns.yaml`
records them) are also judged per host: each host's rate per window (lab: its sockets'
bytes acknowledged, ``host_<name>_rate_bps``; netsim: its DTN group's payload leaving the
bottleneck), beside the DTN class's sum.

Targets: rates within 10 % or 5 Mb/s and queuing delay within 3 ms in every
window; losses per class within a factor of 1.5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from scidmz.lab.record import mean_queuing_delay_s, truth_rows
from scidmz.lab.topology import LAB_MIN_TSO_SEGMENTS
from scidmz.lab.twin import SHIPPED, Variant, variant_scenario
from scidmz.netsim import layout
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.schedule import RateSchedule, RateStep
from scidmz.netsim.simulator import Simulator

RESULTS = Path(__file__).parent / "results" / "netsim_vs_lab.md"
LAB_VS_LAB = Path(__file__).parent / "results" / "lab_vs_lab.md"
WINDOW_S = 10.0
RATE_TOLERANCE = (0.10, 5e6)
DELAY_TOLERANCE_S = 0.003
LOSS_FACTOR = 1.5


@dataclass(frozen=True)
class Window:
    dtn_bps: float
    campus_bps: float
    utilisation: float
    queuing_delay_s: float
    snapshot_delay_s: float = math.nan
    """Lab only: the mean of one backlog snapshot a second (what datasets before
    2026-11-25 held as their only queuing delay)."""
    host_bps: dict[str, float] = field(default_factory=dict)
    """Each DTN host's rate, by name, when the case has several (``case_hosts``)."""


@dataclass(frozen=True)
class Run:
    windows: list[Window]
    dtn_losses: float
    campus_losses: float
    dtn_segments: float = math.nan
    """Segments delivered over the same seconds as the losses (each class's loss rate is
    losses / segments)."""
    campus_segments: float = math.nan
    snapshots_only: bool = False
    """Lab only: the recording has no mean backlog (before 2026-11-25), so its windows'
    queuing delay is its 1 s snapshots'."""

    @property
    def dtn_loss_per_segment(self) -> float:
        return self.dtn_losses / self.dtn_segments if self.dtn_segments > 0 else math.nan

    @property
    def campus_loss_per_segment(self) -> float:
        return self.campus_losses / self.campus_segments if self.campus_segments > 0 else math.nan


Row = dict[str, float]
"""One second: t_s, dtn_rate_bps, campus_rate_bps, queuing_delay_s and losses per class
(and, with several DTN hosts, ``host_<name>_rate_bps`` per host)."""


def host_column(name: str) -> str:
    """A DTN host's rate column in a row (the lab's truth.csv names it so)."""
    return f"host_{name}_rate_bps"


def windows_of(
    rows: list[Row],
    capacity_bps: float,
    duration_s: float,
    mss_bytes: float = 1448.0,
    hosts: Sequence[str] = (),
) -> Run:
    """The 10 s windows after the first, and the losses and delivered segments over them,
    of per-second rows; each window also holds the mean rate of each of ``hosts``."""
    windows = []
    for start in np.arange(WINDOW_S, duration_s - 1e-9, WINDOW_S):
        inside = [r for r in rows if start < r["t_s"] <= start + WINDOW_S]
        if not inside:
            continue
        dtn = float(np.nanmean([r["dtn_rate_bps"] for r in inside]))
        campus = float(np.nanmean([r["campus_rate_bps"] for r in inside]))
        delay = float(np.nanmean([r["queuing_delay_s"] for r in inside]))
        snapshots = [
            r["queuing_delay_snapshot_s"] for r in inside if "queuing_delay_snapshot_s" in r
        ]
        snapshot = float(np.nanmean(snapshots)) if snapshots else math.nan
        host_bps = {
            name: float(np.nanmean([r[host_column(name)] for r in inside])) for name in hosts
        }
        windows.append(
            Window(dtn, campus, (dtn + campus) / capacity_bps, delay, snapshot, host_bps)
        )
    measured = [r for r in rows if r["t_s"] > WINDOW_S]
    segment_bits = mss_bytes * 8
    return Run(
        windows,
        float(np.nansum([r["dtn_losses"] for r in measured])),
        float(np.nansum([r["campus_losses"] for r in measured])),
        float(np.nansum([r["dtn_rate_bps"] for r in measured])) / segment_bits,
        float(np.nansum([r["campus_rate_bps"] for r in measured])) / segment_bits,
    )


def lab_rows(case_dir: Path) -> list[Row]:
    rows = truth_rows(case_dir)
    for row in rows:
        row["queuing_delay_snapshot_s"] = row["queuing_delay_s"]
        row["queuing_delay_s"] = mean_queuing_delay_s(row)
        row["dtn_losses"] = row["dtn_retransmitted_segments"]
        row["campus_losses"] = row["campus_retransmitted_segments"]
    return rows


def lab_run(case_dir: Path, case: dict[str, Any]) -> Run:
    """One recording of a case, cut into windows."""
    rows = lab_rows(case_dir)
    run = case_run(rows, case)
    return replace(run, snapshots_only=bool(rows) and "queuing_delay_mean_s" not in rows[0])


def mean_run(runs: list[Run]) -> Run:
    """Several runs of one case as one (the twin's seeds, or recordings of the lab): each
    window's rates, utilisation and snapshots, and the losses and segments, are the runs'
    mean; its queuing delay is the mean over the runs with a mean backlog (all of them
    if none has: a recording before 2026-11-25 holds only snapshots)."""
    if len(runs) == 1:
        return runs[0]
    count = min(len(r.windows) for r in runs)
    with_backlog = [r for r in runs if not r.snapshots_only] or runs

    def mean(of: list[Run], k: int, field: str) -> float:
        return float(np.mean([getattr(r.windows[k], field) for r in of]))

    windows = [
        Window(
            mean(runs, k, "dtn_bps"),
            mean(runs, k, "campus_bps"),
            mean(runs, k, "utilisation"),
            mean(with_backlog, k, "queuing_delay_s"),
            mean(runs, k, "snapshot_delay_s"),
            {
                name: float(np.mean([r.windows[k].host_bps[name] for r in runs]))
                for name in runs[0].windows[k].host_bps
            },
        )
        for k in range(count)
    ]
    return Run(
        windows,
        float(np.mean([r.dtn_losses for r in runs])),
        float(np.mean([r.campus_losses for r in runs])),
        float(np.mean([r.dtn_segments for r in runs])),
        float(np.mean([r.campus_segments for r in runs])),
        snapshots_only=all(r.snapshots_only for r in runs),
    )


def sim_rows(case: dict[str, Any], seed: int, variant: Variant = SHIPPED) -> list[Row]:
    """The case's scenario and u schedule through the simulator's own per-sample path,
    optionally as a variant of the twin (``Variant``)."""
    raw = dict(variant_scenario(case["scenario"], variant), seed=seed)
    # Datasets recorded before case.json carried it ran with the lab's GSO setting.
    raw.setdefault("min_tso_segments", LAB_MIN_TSO_SEGMENTS)
    scenario = parse_scenario(raw, f"case {case['name']}")
    schedule = RateSchedule(
        steps=[RateStep(at=float(t), rate=float(u)) for t, u in case["u_schedule"]]
    )
    sim = Simulator(scenario)
    capacity, mss, period = (
        scenario.bottleneck.capacity_bps,
        scenario.mss_bytes,
        scenario.sample_time_s,
    )
    rows = []
    dtn = sim.layout.dtn_columns
    hosts = case_hosts(case)
    departed = sim.groups[layout.G_DEPARTED].copy()
    for _ in range(math.ceil(float(case["duration_s"]) / period - 1e-9)):
        start = sim.now
        sample = sim.run_sample(schedule.changes(start, start + period))
        # each DTN group's payload leaving the bottleneck (their sum is dtn_rate_bps)
        host_bps = (sim.groups[layout.G_DEPARTED] - departed) * 8 / period
        departed = sim.groups[layout.G_DEPARTED].copy()
        rows.append(
            {host_column(name): float(host_bps[g]) for g, name in enumerate(hosts)}
            | {
                # BBR's max-filtered bandwidth summed over the streams (0 for Cubic: unset),
                # and its min-RTT estimate, mean over them
                "dtn_bandwidth_estimate_bps": float(sim.flow_f[layout.BTL_BW, dtn].sum()) * 8,
                "dtn_min_rtt_estimate_s": float(sim.flow_f[layout.MIN_RTT, dtn].mean()),
                "t_s": sample.time_s,
                "dtn_rate_bps": sample.dtn_rate_bps,
                "campus_rate_bps": sample.campus_rate_bps,
                # the twin's queue holds payload; the lab's backlog counts frames
                "queuing_delay_s": sample.queue_bytes / sim.payload_fraction * 8 / capacity,
                "dtn_losses": sample.dtn_dropped_bytes / mss,
                "campus_losses": (sample.campus_dropped_bytes + sample.shaper_dropped_bytes) / mss,
            }
        )
    return rows


def rate_ok(sim: float, lab: float) -> bool:
    relative, absolute = RATE_TOLERANCE
    return abs(sim - lab) <= max(relative * abs(lab), absolute)


def loss_ok(sim: float, lab: float) -> bool:
    if lab == 0 or sim == 0:
        return lab == sim
    return 1 / LOSS_FACTOR <= sim / lab <= LOSS_FACTOR


def ratio(sim: float, lab: float) -> str:
    return f"{sim / lab:.2f}×" if lab > 0 else ("—" if sim == 0 else "∞")


def loss_rates(run: Run) -> str:
    """Each class's losses per segment delivered, and the DTN's over the campus's: how the
    drops are shared between the classes, apart from how many there are."""
    dtn, campus = run.dtn_loss_per_segment, run.campus_loss_per_segment
    share = f"{dtn / campus:.2f}" if campus > 0 else "—"
    return f"DTN {dtn:.3%}, campus {campus:.3%} (DTN / campus {share})"


def case_mss(case: dict[str, Any]) -> float:
    """A case's segment size (datasets recorded before case.json carried it used 1448)."""
    return float(case["scenario"].get("mss_bytes", 1448))


def case_hosts(case: dict[str, Any]) -> list[str]:
    """A case's DTN hosts by name when it has several (none: the one DTN is the class)."""
    scenario = case["scenario"]
    more = [str(dtn["name"]) for dtn in scenario.get("more_dtns", [])]
    return [str(scenario.get("dtn", {}).get("name", "dtn-1")), *more] if more else []


def case_run(rows: list[Row], case: dict[str, Any]) -> Run:
    """``windows_of`` one run of a case (lab or twin), with the case's capacity, duration,
    segment size and DTN hosts."""
    capacity = float(case["scenario"]["bottleneck"]["capacity_bps"])
    return windows_of(rows, capacity, float(case["duration_s"]), case_mss(case), case_hosts(case))


Model = Callable[[str, dict[str, Any]], Run]
"""What a case is compared with: (case name, case.json) -> its windows."""


def simulated(seeds: int, variant: Variant = SHIPPED) -> Model:
    def model(name: str, case: dict[str, Any]) -> Run:
        return mean_run(
            [case_run(sim_rows(case, seed, variant), case) for seed in range(1, seeds + 1)]
        )

    return model


def recorded(datasets: list[Path]) -> Model:
    """Other recordings of the same matrix (their mean): how far the lab is from itself."""

    def model(name: str, case: dict[str, Any]) -> Run:
        return mean_run([lab_run(dataset / name, case) for dataset in datasets])

    return model


def _cases(dataset: Path) -> dict[str, dict[str, Any]]:
    """A recording's index: each case's status (and error)."""
    cases: dict[str, dict[str, Any]] = json.loads((dataset / "index.json").read_text())["cases"]
    return cases


def unrecorded(indexes: dict[Path, dict[str, dict[str, Any]]], name: str) -> str | None:
    """Why a case is missing from one of the recordings (each with its ``_cases``), or None."""
    for dataset, cases in indexes.items():
        entry = cases.get(name, {})
        if entry.get("status") != "ok" or not (dataset / name / "truth.csv").exists():
            return f"{dataset}: {entry.get('error', 'no truth.csv')}"
    return None


def case_buffer_ms(case: dict[str, Any]) -> float:
    """BR1's drop-tail buffer of a case, in ms at its capacity (the scenario's default:
    100 ms)."""
    bottleneck = case["scenario"]["bottleneck"]
    if bottleneck.get("buffer_bytes") is not None:
        return float(bottleneck["buffer_bytes"]) * 8 / float(bottleneck["capacity_bps"]) * 1e3
    buffer_s = bottleneck.get("buffer_s")
    return (float(buffer_s) if buffer_s is not None else 0.1) * 1e3


def group_label(group: str) -> str:
    """A tally's column heading: every case, a DTN's congestion control, or a buffer."""
    if group == "all":
        return "met"
    if group.endswith(" ms"):
        return f"met ({group} buffer)"
    return f"met ({group} DTN)"


def group_order(groups: Sequence[str]) -> list[str]:
    """'all', then the buffers from the smallest, then the DTNs' congestion controls."""
    buffers = sorted((g for g in groups if g.endswith(" ms")), key=lambda g: float(g.split()[0]))
    rest = sorted(g for g in groups if g != "all" and not g.endswith(" ms"))
    return ["all", *buffers, *rest]


def compare(
    datasets: list[Path],
    other: Model,
    other_datasets: Sequence[Path] = (),
    by_buffer: bool = False,
) -> tuple[list[str], dict[str, Counter[str]]]:
    """Every case of the recordings (the lab: their mean, ``mean_run``) against
    ``other`` (when it is other recordings, ``other_datasets``: a case missing from any
    recording is reported and not compared): the report's tables and the counts of
    targets met, in all, per DTN congestion control and (``by_buffer``) per BR1 buffer."""
    lines: list[str] = []
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    indexes = {dataset: _cases(dataset) for dataset in [*datasets, *other_datasets]}
    lab_model = recorded(datasets)
    for name in indexes[datasets[0]]:
        missing = unrecorded(indexes, name)
        if missing is not None:
            lines.append(f"\n### {name}: not recorded ({missing})\n")
            continue
        case = json.loads((datasets[0] / name / "case.json").read_text())
        tally = [counts["all"], counts[str(case["scenario"]["dtn"]["congestion_control"])]]
        if by_buffer:
            tally.append(counts[f"{case_buffer_ms(case):g} ms"])
        lab = lab_model(name, case)
        sim = other(name, case)
        print(f"{name}: {len(lab.windows)} windows", file=sys.stderr, flush=True)
        hosts = case_hosts(case)
        lines += [
            f"\n### {name}\n",
            "| window | DTN lab / sim Mb/s | campus lab / sim Mb/s | ρ lab / sim "
            "| QD lab / sim ms | QD lab, 1 s snapshots |"
            + "".join(f" {host} lab / sim Mb/s |" for host in hosts),
            "|---|---:|---:|---:|---:|---:|" + "---:|" * len(hosts),
        ]
        for k, (real, model) in enumerate(zip(lab.windows, sim.windows, strict=False)):
            dtn_ok = rate_ok(model.dtn_bps, real.dtn_bps)
            campus_ok = rate_ok(model.campus_bps, real.campus_bps)
            delay_ok = abs(model.queuing_delay_s - real.queuing_delay_s) <= DELAY_TOLERANCE_S
            snapshot_ok = abs(model.queuing_delay_s - real.snapshot_delay_s) <= DELAY_TOLERANCE_S
            hosts_ok = [rate_ok(model.host_bps[host], real.host_bps[host]) for host in hosts]
            for count in tally:
                count["windows"] += 1
                count["dtn"] += dtn_ok
                count["campus"] += campus_ok
                count["delay"] += delay_ok
                count["delay_snapshot"] += snapshot_ok
                count["host_windows"] += len(hosts)
                count["host"] += sum(hosts_ok)
            start = (k + 1) * WINDOW_S
            lines.append(
                f"| {start:.0f}–{start + WINDOW_S:.0f} s | {real.dtn_bps / 1e6:.1f} / "
                f"{model.dtn_bps / 1e6:.1f}{'' if dtn_ok else ' ✗'} | "
                f"{real.campus_bps / 1e6:.1f} / {model.campus_bps / 1e6:.1f}"
                f"{'' if campus_ok else ' ✗'} | {real.utilisation:.1%} / {model.utilisation:.1%} "
                f"| {real.queuing_delay_s * 1e3:.1f} / {model.queuing_delay_s * 1e3:.1f}"
                f"{'' if delay_ok else ' ✗'} | {real.snapshot_delay_s * 1e3:.1f}"
                f"{'' if snapshot_ok else ' ✗'} |"
                + "".join(
                    f" {real.host_bps[host] / 1e6:.1f} / {model.host_bps[host] / 1e6:.1f}"
                    f"{'' if ok else ' ✗'} |"
                    for host, ok in zip(hosts, hosts_ok, strict=True)
                )
            )
        losses = loss_ok(sim.dtn_losses, lab.dtn_losses) and loss_ok(
            sim.campus_losses, lab.campus_losses
        )
        for count in tally:
            count["cases"] += 1
            count["losses"] += losses
        lines.append(
            f"\nLosses after {WINDOW_S:.0f} s (segments): DTN lab {lab.dtn_losses:.0f}, sim "
            f"{sim.dtn_losses:.0f} ({ratio(sim.dtn_losses, lab.dtn_losses)}); campus lab "
            f"{lab.campus_losses:.0f}, sim {sim.campus_losses:.0f} "
            f"({ratio(sim.campus_losses, lab.campus_losses)}){'' if losses else ' ✗'}. "
            f"Per segment delivered: lab {loss_rates(lab)}; sim {loss_rates(sim)}\n"
        )
    return lines, dict(counts)


def results_path(variant: Variant, recordings: int = 1) -> Path:
    """Where --write puts a variant's report (the shipped twin's against one recording
    is RESULTS; against several, ``_recordings``)."""
    suffix = "".join(f"_{part.replace('-', '_')}" for part in variant.parts)
    if recordings > 1:
        suffix += "_recordings"
    return RESULTS.with_name(f"{RESULTS.stem}{suffix}.md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        action="append",
        help="A recording of the lab matrix (default lab-dataset). Given more than once, "
        "the lab is the recordings' mean per window and case (the same matrix recorded "
        "again); the report is then netsim_vs_lab_recordings.md.",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--against-lab",
        type=Path,
        action="append",
        metavar="DATASET",
        help="Compare with another recording of the same matrix instead of netsim (the "
        "lab's distance from itself; its 'sim' columns are that recording's, or the mean "
        f"of several). Writes {LAB_VS_LAB.name}.",
    )
    parser.add_argument(
        "--hystart",
        action="store_true",
        help="Run the twin with Cubic's HyStart (scenario cubic_hystart: true, as the lab "
        "host's tcp_cubic runs).",
    )
    parser.add_argument(
        "--prr",
        action="store_true",
        help="Run the twin with Linux's loss recovery (scenario proportional_rate_reduction: "
        "true, PRR as the lab's kernel sends in recovery).",
    )
    parser.add_argument(
        "--bbr-recovery",
        action="store_true",
        help="Run the twin with BBR's window in loss recovery as Linux sets it (scenario "
        "bbr_loss_recovery: true).",
    )
    parser.add_argument(
        "--lab-starts",
        action="store_true",
        help="Start each class when the lab's iperf3 did ((3 + flows) base RTTs).",
    )
    parser.add_argument(
        "--by-buffer",
        action="store_true",
        help="Also count the targets met per BR1 buffer (examples/lab/matrix-buffers.yaml).",
    )
    parser.add_argument("--write", action="store_true")
    parser.add_argument(
        "--out", type=Path, help="Where --write puts the report (default: by the options)."
    )
    args = parser.parse_args()
    variant = Variant(
        hystart=args.hystart,
        lab_starts=args.lab_starts,
        prr=args.prr,
        bbr_recovery=args.bbr_recovery,
    )
    datasets: list[Path] = args.dataset or [Path("lab-dataset")]
    others: list[Path] = args.against_lab or []
    for dataset in [*datasets, *others]:
        if not (dataset / "index.json").exists():
            print(f"{dataset}: no index.json; record one with `scidmz lab record`")
            return 2
    model = recorded(others) if others else simulated(args.seeds, variant)
    body, counts = compare(datasets, model, others, args.by_buffer)
    groups = group_order(list(counts))

    def met(key: str, of: str) -> str:
        return " | ".join(f"{counts[g][key]} / {counts[g][of]}" for g in groups)

    command = "python bench/netsim_vs_lab.py" + "".join(f" --dataset {d}" for d in datasets)
    lab = " and ".join(str(d) for d in datasets)
    if len(datasets) > 1:
        lab = f"the mean of {lab} (per window and case; queuing delay over the recordings "
        lab += "with a mean backlog)"
    if others:
        heading = [
            "# The lab against itself: recordings of the same matrix",
            "",
            f"`{command}{''.join(f' --against-lab {d}' for d in others)}`: every case, "
            f"{WINDOW_S:.0f} s windows after the first; in the tables 'lab' is {lab} and "
            f"'sim' is {' and '.join(str(d) for d in others)}"
            f"{' (their mean)' if len(others) > 1 else ''}, judged by the twin's targets for "
            "the twin. Where a recording has no mean queuing delay (before 2026-11-25) its 1 s "
            "snapshots stand in.",
        ]
    else:
        heading = [
            "# netsim against real Linux TCP (the lab's recorded matrix)",
            "",
            f"`{command} --seeds {args.seeds}"
            f"{''.join(f' --{part}' for part in variant.parts)}`: "
            f"every case, {WINDOW_S:.0f} s windows after the first; 'lab' is {lab}, netsim "
            f"the mean of seeds 1–{args.seeds}. ✗ marks a window or case outside the target.",
        ]
    summary = [
        *heading,
        "",
        "| target | " + " | ".join(group_label(g) for g in groups) + " |",
        "|---|" + "---:|" * len(groups),
        f"| DTN rate within 10 % or 5 Mb/s, per window | {met('dtn', 'windows')} |",
        f"| campus rate within 10 % or 5 Mb/s, per window | {met('campus', 'windows')} |",
        f"| mean queuing delay within 3 ms, per window | {met('delay', 'windows')} |",
        f"| (the same against the lab's 1 s snapshots) | {met('delay_snapshot', 'windows')} |",
        f"| losses per class within ×1.5, per case | {met('losses', 'cases')} |",
    ]
    if any(counts[g]["host_windows"] for g in groups):
        summary.append(
            "| each DTN host's rate within 10 % or 5 Mb/s, per window and host "
            f"(cases with several) | {met('host', 'host_windows')} |"
        )
    report = "\n".join(summary + body) + "\n"
    print(report)
    if args.write:
        target = args.out or (LAB_VS_LAB if others else results_path(variant, len(datasets)))
        if args.by_buffer and args.out is None:
            target = target.with_name(f"{target.stem}_buffers.md")
        target.write_text(report)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
