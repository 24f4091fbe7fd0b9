"""Open-loop runs of the simulator, streamed to disk (``scidmz sim run``).

Writes into the output directory:

* ``samples.csv`` — one row per sample time T, columns ``records.SAMPLE_COLUMNS`` (documented in
  ``records.SAMPLE_COLUMN_DOCS`` and docs/simulator.md);
* ``flows.csv`` — one row per completed flow: ``serial,kind,start_s,end_s,fct_s,size_bytes``;
* ``summary.json`` — what ``summarise`` returns.

Rows are written as they are produced, so memory stays flat however long the run.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from scidmz.netsim import layout
from scidmz.netsim.records import SAMPLE_COLUMNS
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.schedule import RateSchedule
from scidmz.netsim.simulator import Simulator

FloatArray = npt.NDArray[np.float64]
Progress = Callable[[int, int], None]

FLOW_COLUMNS = ("serial", "kind", "start_s", "end_s", "fct_s", "size_bytes")
_KIND_NAMES = {layout.LONG: "long", layout.SHORT: "short", layout.DTN_STREAM: "dtn"}


def jain_index(values: FloatArray) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²); 1 is perfectly fair."""
    if values.size == 0 or not np.any(values):
        return math.nan
    return float(values.sum() ** 2 / (values.size * np.square(values).sum()))


@dataclass
class _Totals:
    """Running sums over samples; means are taken at the end."""

    samples: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    short_fct: list[FloatArray] = field(default_factory=list)
    dtn_stream_done_s: list[float] = field(default_factory=list)
    short_started: int = 0

    def add(self, row: dict[str, float | int]) -> None:
        """Count one sample's row (``Sample.as_row``)."""
        self.samples += 1
        for name, value in row.items():
            if isinstance(value, float) and math.isnan(value):
                continue
            self.sums[name] = self.sums.get(name, 0.0) + float(value)
            self.counts[name] = self.counts.get(name, 0) + 1

    def mean(self, name: str) -> float:
        count = self.counts.get(name, 0)
        return self.sums[name] / count if count else math.nan


def _flow_kinds(sim: Simulator, columns: FloatArray) -> list[str]:
    kinds = sim.flow_i[layout.KIND, columns.astype(np.int64)]
    return [_KIND_NAMES[int(k)] for k in kinds]


def _record_events(sim: Simulator, writer: Any, totals: _Totals) -> None:
    events = sim.drain_event_array()
    if events.shape[1] == 0:
        return
    kinds = events[layout.EV_KIND]
    totals.short_started += int(
        np.count_nonzero(
            (kinds == layout.FLOW_START)
            & (sim.flow_i[layout.KIND, events[layout.EV_COLUMN].astype(np.int64)] == layout.SHORT)
        )
    )
    done = events[:, kinds == layout.FLOW_DONE]
    if done.shape[1] == 0:
        return
    names = _flow_kinds(sim, done[layout.EV_COLUMN])
    for k, name in enumerate(names):
        end = float(done[layout.EV_TIME, k])
        fct = float(done[layout.EV_VALUE, k])
        writer.writerow(
            [int(done[layout.EV_SERIAL, k]), name, f"{end - fct:.6f}", f"{end:.6f}", f"{fct:.6f}",
             f"{done[layout.EV_SIZE, k]:.0f}"]
        )  # fmt: skip
        if name == "dtn":
            totals.dtn_stream_done_s.append(end)
    short = np.array([n == "short" for n in names])
    if short.any():
        totals.short_fct.append(done[layout.EV_VALUE, short].copy())


def _percentiles(values: FloatArray) -> dict[str, float]:
    if values.size == 0:
        return {}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "mean_s": float(values.mean()),
        "p50_s": float(p50),
        "p95_s": float(p95),
        "p99_s": float(p99),
    }


def summarise(sim: Simulator, totals: _Totals, duration_s: float, wall_s: float) -> dict[str, Any]:
    """The figures a person looks at first; every rate in bit/s, every time in seconds."""
    s = sim.scenario
    flows = sim.flow_table()
    long_acked = flows.acked_bytes[sim.layout.long_columns]
    dtn_acked = flows.acked_bytes[sim.layout.dtn_columns]
    short_fct = np.concatenate(totals.short_fct) if totals.short_fct else np.zeros(0)
    dtn_done = len(totals.dtn_stream_done_s) == s.dtn.streams and s.dtn.transfer_bytes
    conservation = sim.conservation()
    sent = conservation["sent_bytes"]
    return {
        "simulated_s": duration_s,
        "steps": sim.step_index,
        "wall_s": round(wall_s, 3),
        "speedup": round(duration_s / wall_s, 1) if wall_s > 0 else None,
        "samples": totals.samples,
        "mean": {
            name: totals.mean(name)
            for name in (
                "campus_rate_limit_bps",
                "dtn_rate_bps",
                "campus_rate_bps",
                "dtn_rtt_s",
                "campus_rtt_s",
                "dtn_queuing_delay_s",
                "campus_queuing_delay_s",
                "utilisation",
                "queue_bytes",
                "shaper_delay_s",
                "tap_active_flows",
            )
        },
        "loss_rate": conservation["dropped_bytes"] / sent if sent > 0 else 0.0,
        "jain_index": {
            "campus_long_flows": jain_index(long_acked),
            "dtn_streams": jain_index(dtn_acked),
        },
        "dtn_transfer": {
            "bytes": s.dtn.transfer_bytes,
            "completed": bool(dtn_done),
            "fct_s": max(totals.dtn_stream_done_s) if dtn_done else None,
        },
        "short_flows": {
            "enabled": s.campus.short_flows.enabled,
            "started": totals.short_started,
            "completed": int(short_fct.size),
            "deferred_arrivals": int(sim.glob_f[layout.DEFERRED]),
            "fct": _percentiles(short_fct),
        },
        "conservation_residual_bytes": conservation["residual_bytes"],
    }


def _schedule_changes(schedule: RateSchedule | None, start: float, end: float) -> Any:
    return schedule.changes(start, end) if schedule is not None else ()


def run_simulation(
    scenario: Scenario,
    duration_s: float,
    out_dir: Path,
    schedule: RateSchedule | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run open loop for ``duration_s`` (rounded up to whole samples), streaming to ``out_dir``."""
    if not math.isfinite(duration_s) or duration_s <= 0:
        raise ValueError(f"duration must be a positive number of seconds, got {duration_s!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    sim = Simulator(scenario)
    n_samples = math.ceil(duration_s / scenario.sample_time_s - 1e-9)
    totals = _Totals()
    started = time.perf_counter()
    with (
        (out_dir / "samples.csv").open("w", newline="") as samples_file,
        (out_dir / "flows.csv").open("w", newline="") as flows_file,
    ):
        sample_writer = csv.writer(samples_file)
        flow_writer = csv.writer(flows_file)
        sample_writer.writerow(SAMPLE_COLUMNS)
        flow_writer.writerow(FLOW_COLUMNS)
        for index in range(n_samples):
            start = sim.now
            sample = sim.run_sample(
                _schedule_changes(schedule, start, start + scenario.sample_time_s)
            )
            row = sample.as_row()
            sample_writer.writerow(_format_row(row))
            totals.add(row)
            _record_events(sim, flow_writer, totals)
            if progress is not None:
                progress(index + 1, n_samples)
    wall = time.perf_counter() - started
    summary = summarise(sim, totals, n_samples * scenario.sample_time_s, wall)
    summary["scenario"] = scenario.model_dump(mode="json")
    _write_json(out_dir / "summary.json", summary)
    return summary


def _format_row(row: dict[str, float | int]) -> list[str]:
    return [f"{value:.9g}" if isinstance(value, float) else str(value) for value in
            row.values()]  # fmt: skip


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    with path.open("w") as handle:
        _dump(payload, handle)


def _dump(payload: dict[str, Any], handle: TextIO) -> None:
    json.dump(_finite(payload), handle, indent=2, sort_keys=True)
    handle.write("\n")


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
