"""Tracking quality of the DTN rate: MRAE (paper eq. 3) and IAE (eq. 2), pure; and the mean
of the values that were measured."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def mrae(targets_bps: Sequence[float], rates_bps: Sequence[float]) -> float:
    """Eq. 3: the mean over t_N samples of |(R*(t) − R(t)) / R*(t)|. Samples with a
    non-finite rate or a zero target are skipped; NaN when none is left."""
    if len(targets_bps) != len(rates_bps):
        raise ValueError("targets and rates must have the same length")
    terms = [
        abs((target - rate) / target)
        for target, rate in zip(targets_bps, rates_bps, strict=True)
        if target != 0 and math.isfinite(rate) and math.isfinite(target)
    ]
    return sum(terms) / len(terms) if terms else math.nan


def iae(targets_bps: Sequence[float], rates_bps: Sequence[float], dt_s: float) -> float:
    """Eq. 2 in discrete time: Σ |R*(t) − R(t)|·dt (bit), skipping non-finite samples."""
    if len(targets_bps) != len(rates_bps):
        raise ValueError("targets and rates must have the same length")
    return sum(
        abs(target - rate) * dt_s
        for target, rate in zip(targets_bps, rates_bps, strict=True)
        if math.isfinite(rate) and math.isfinite(target)
    )


def finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (NaN marks one not measured); NaN if there is none."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan
