"""One lab run of the buffer bench as the twin's episode row (pure: rows in, a row out).

The twin's episode (:func:`scidmz.learn.buffer_bench.episode`) is judged from its ground
truth: eq. (2) on BR1's own loss and mean queuing delay, per sample, after the warm-up and
over the transfer. A lab run records the collector's samples (``samples.csv``, the
controller's ``/state`` once a second) beside the kernel's truth (``truth.csv``); this
module turns them into a :class:`~scidmz.learn.buffer_bench.BufferEpisode`, so the lab's
episodes and the twin's are read, written, judged and compared by the same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scidmz.contract.state import PATH_SIGNALS, PathSignals, StateVector
from scidmz.control.buffer_search import SEARCHING, TunerSample, TunerSettings, tuner_sample
from scidmz.control.quality import finite_mean
from scidmz.learn.buffer_bench import BufferEpisode, min_window_ratio

Row = Mapping[str, object]


def number(row: Row, key: str) -> float:
    """A cell as a float: NaN when missing, empty or not a number (a CSV's '' or None)."""
    value = row.get(key)
    if value is None or value == "":
        return math.nan
    try:
        return float(str(value))
    except ValueError:
        return math.nan


def _in_window(rows: Sequence[Row], from_s: float, to_s: float) -> list[Row]:
    return [row for row in rows if from_s <= number(row, "t_s") <= to_s]


def tuner_view(row: Row, target_bps: float, capacity_bps: float) -> TunerSample:
    """One collector sample as the controller's tuner reads it."""
    state = StateVector(*(number(row, key) for key in StateVector._fields))
    signals = PathSignals(**{key: number(row, key) for key in PATH_SIGNALS})
    return tuner_sample(state, signals, target_bps, capacity_bps, saturated=False)


def lab_episode(
    arm: str,
    run: int,
    samples: Sequence[Row],
    summary: Mapping[str, object],
    warmup_s: float,
    duration_s: float,
    fixed_buffer_s: float | None,
    load: int = 100,
    cca: str = "cubic",
    capacity_bps: float = 1e9,
    truth: Sequence[Row] = (),
) -> BufferEpisode:
    """The episode row of one lab run, over the samples from ``warmup_s`` to the
    transfer's end (``duration_s`` if it did not end). As on the twin, f̄ judges from the
    ground truth (``truth``, the kernel's rows: BR1's own loss, its bytes in less out and
    held, ``bottleneck_loss_ratio``; its time-mean backlog over B, ``queuing_delay_mean_s``),
    and ``search_objective`` is eq. (2) on the tap's view (method 1 and the collector's mean
    queuing delay; a search reading the queue's counters sees the truth's loss). The DTN's
    MRAE and the FCT come from the kernel's figures in ``summary``
    (:func:`scidmz.lab.loop.summarise`); the campus's queuing delay from the collector.
    ``fixed_buffer_s``: the arm's buffer, or None for a searched one (its mean from the
    samples' ``buffer_s``, its trial share from their ``buffer_phase``)."""
    fct_s = number(summary, "fct_s")
    end_s = fct_s if math.isfinite(fct_s) else duration_s
    window = _in_window(samples, warmup_s, end_s)
    kernel = _in_window(truth, warmup_s, end_s)
    settings = TunerSettings(capacity_bps=capacity_bps)
    target = number(summary, "target_rate_bps")
    read = [tuner_view(row, target, capacity_bps) for row in window]
    buffer_s = (
        fixed_buffer_s
        if fixed_buffer_s is not None
        else finite_mean([number(row, "buffer_s") for row in window])
    )
    losses = [number(row, "bottleneck_loss_ratio") for row in kernel]
    delays = [number(row, "queuing_delay_mean_s") for row in kernel]
    judged = [settings.objective(p, d) for p, d in zip(losses, delays, strict=True)]
    phases = [str(row.get("buffer_phase") or "") for row in window]
    in_trials = [p in SEARCHING for p in phases]
    rates = [number(row, "dtn_rate_bps") for row in kernel]
    return BufferEpisode(
        arm=arm, cca=cca, load=load, seed=run,
        objective=finite_mean(judged) if kernel else math.nan,
        loss=finite_mean(losses),
        campus_qd_ms=finite_mean([number(row, "campus_mean_queuing_delay_s") for row in window])
        * 1e3,
        dtn_mrae=number(summary, "mrae_delivered"),
        fct_s=fct_s, buffer_ms=buffer_s * 1e3, capacity_bps=capacity_bps,
        search_objective=finite_mean([settings.objective(r.loss, r.mean_delay_s) for r in read]),
        path_loss=finite_mean([r.loss for r in read]),
        mean_qd_ms=finite_mean(delays) * 1e3,
        trial_share=sum(in_trials) / len(in_trials) if in_trials else 0.0,
        min_window_ratio=min_window_ratio(rates, target) if rates else math.nan,
        tap_border_loss=finite_mean([number(row, "bottleneck_loss_ratio") for row in window]),
    )  # fmt: skip
