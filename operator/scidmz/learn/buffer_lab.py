"""One lab run of the buffer bench as the twin's episode row (pure: rows in, a row out).

The twin's episode (:func:`scidmz.learn.buffer_bench.episode`) scores what the tuner reads:
eq. (2) on the collector's loss and mean queuing delay, per sample, after the warm-up and
over the transfer. A lab run records the same collector samples (``samples.csv``, the
controller's ``/state`` once a second) beside the kernel's truth; this module turns them
into a :class:`~scidmz.learn.buffer_bench.BufferEpisode`, so the lab's episodes and the
twin's are read, written and compared by the same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scidmz.contract.state import PATH_SIGNALS, PathSignals, StateVector
from scidmz.control.buffer_search import TunerSample, TunerSettings, tuner_sample
from scidmz.control.quality import finite_mean
from scidmz.learn.buffer_bench import BufferEpisode

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
) -> BufferEpisode:
    """The episode row of one lab run: f̄, the loss (method 1, both classes weighed by
    their rates), the campus's mean queuing delay (collector) and the buffer in force, each
    the mean over the samples from ``warmup_s`` to the transfer's end (``duration_s`` if it
    did not end); the DTN's MRAE and the FCT from the kernel's figures in ``summary``
    (:func:`scidmz.lab.loop.summarise`). ``fixed_buffer_s``: the arm's buffer, or None
    for a searched one (its mean from the samples' ``buffer_s``)."""
    fct_s = number(summary, "fct_s")
    window = _in_window(samples, warmup_s, fct_s if math.isfinite(fct_s) else duration_s)
    settings = TunerSettings(capacity_bps=capacity_bps)
    target = number(summary, "target_rate_bps")
    read = [tuner_view(row, target, capacity_bps) for row in window]
    buffer_s = (
        fixed_buffer_s
        if fixed_buffer_s is not None
        else finite_mean([number(row, "buffer_s") for row in window])
    )
    return BufferEpisode(
        arm=arm,
        cca=cca,
        load=load,
        seed=run,
        objective=finite_mean([settings.objective(r.loss, r.mean_delay_s) for r in read]),
        loss=finite_mean([r.loss for r in read]),
        campus_qd_ms=finite_mean([number(row, "campus_mean_queuing_delay_s") for row in window])
        * 1e3,
        dtn_mrae=number(summary, "mrae_delivered"),
        fct_s=fct_s,
        buffer_ms=buffer_s * 1e3,
        capacity_bps=capacity_bps,
    )
