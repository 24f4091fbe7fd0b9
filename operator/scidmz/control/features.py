"""The desired state y_d(t) (paper table 3) and the inverse model's 22 inputs (eq. 1).

Input order is the model's contract, recorded in every model card:
``[y_d(t) (7), y(t−T) (7), y(t−2T) (7), u(t−T)]``, each y in ``STATE_VARIABLES`` order
(DTN rate, campus rate, DTN RTT, campus RTT, DTN QD, campus QD, AF), SI units (bit/s,
seconds, a count). Normalisation lives inside the ONNX graph, so these are raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scidmz.telemetry.state import STATE_VARIABLES

N_STATE = len(STATE_VARIABLES)
N_FEATURES = 3 * N_STATE + 1
FEATURE_NAMES: tuple[str, ...] = (
    *(f"desired_{name}" for name in STATE_VARIABLES),
    *(f"previous_{name}" for name in STATE_VARIABLES),
    *(f"before_previous_{name}" for name in STATE_VARIABLES),
    "previous_campus_rate_limit_bps",
)


@dataclass(frozen=True)
class Setpoint:
    """What the administrator asked for (the policy), in SI units."""

    target_rate_bps: float
    capacity_bps: float
    dtn_rtt_s: float | None = None
    campus_rtt_s: float | None = None


def desired_state(
    setpoint: Setpoint,
    last_active_flows: float,
    base_dtn_rtt_s: float,
    base_campus_rtt_s: float,
) -> tuple[float, ...]:
    """Table 3: R* for the DTN, B_max − R* for the campus, the RTT targets (configured, or
    else the measured base RTTs), zero queuing delays, and the last measured AF."""
    return (
        setpoint.target_rate_bps,
        setpoint.capacity_bps - setpoint.target_rate_bps,
        setpoint.dtn_rtt_s if setpoint.dtn_rtt_s is not None else base_dtn_rtt_s,
        setpoint.campus_rtt_s if setpoint.campus_rtt_s is not None else base_campus_rtt_s,
        0.0,
        0.0,
        last_active_flows,
    )


def features(
    desired: Sequence[float],
    previous: Sequence[float],
    before_previous: Sequence[float],
    previous_rate_limit_bps: float,
) -> npt.NDArray[np.float32]:
    """The ``(1, 22)`` float32 input row of eq. 1; raises on a wrong length or a NaN."""
    for name, values in (
        ("desired", desired),
        ("previous", previous),
        ("before_previous", before_previous),
    ):
        if len(values) != N_STATE:
            raise ValueError(f"{name} state has {len(values)} values, not {N_STATE}")
    row = [*desired, *previous, *before_previous, previous_rate_limit_bps]
    if not all(math.isfinite(v) for v in row):
        raise ValueError("every feature must be a finite number")
    return np.asarray([row], dtype=np.float32)


def fill_missing(state: Sequence[float], fallback: Sequence[float]) -> tuple[float, ...]:
    """y(t) with every unmeasured (NaN) value replaced, the same way in training and in
    control: a rate or queuing delay not measured is 0 (no packets of that class), an RTT
    or the active-flow count keeps ``fallback`` (the last finite value, or a base RTT)."""
    if len(state) != N_STATE or len(fallback) != N_STATE:
        raise ValueError(f"states have {N_STATE} values")
    filled = []
    for index, (value, previous) in enumerate(zip(state, fallback, strict=True)):
        if math.isfinite(value):
            filled.append(float(value))
        elif index in (0, 1, 4, 5):  # rates and queuing delays
            filled.append(0.0)
        else:
            filled.append(float(previous))
    return tuple(filled)
