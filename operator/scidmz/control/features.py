"""The desired state y_d(t) and the inverse model's 22 inputs (eq. 1), by name.

Input order is the model's contract, recorded in every model card:
``[y_d(t) (7), y(t−T) (7), y(t−2T) (7), u(t−T)]``, each y a ``StateVector`` (DTN rate,
campus rate, DTN RTT, campus RTT, DTN QD, campus QD, AF), SI units (bit/s, seconds, a
count). Normalisation lives inside the ONNX graph, so these are raw values.

Training (``learn.identification``) and control (``control.loop``) fill unmeasured values
with the same ``fill_missing`` and the same ``FALLBACK_STATE``, so the model is fed at
control time exactly what it was trained on.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from scidmz.contract.state import STATE_VARIABLES, StateVector

N_STATE = len(STATE_VARIABLES)
N_FEATURES = 3 * N_STATE + 1
FEATURE_NAMES: tuple[str, ...] = (
    *(f"desired_{name}" for name in STATE_VARIABLES),
    *(f"previous_{name}" for name in STATE_VARIABLES),
    *(f"before_previous_{name}" for name in STATE_VARIABLES),
    "previous_campus_rate_limit_bps",
)

FALLBACK_STATE = StateVector(
    dtn_rate_bps=0.0,
    campus_rate_bps=0.0,
    dtn_rtt_s=0.100,
    campus_rtt_s=0.010,
    dtn_queuing_delay_s=0.0,
    campus_queuing_delay_s=0.0,
    active_flows=0.0,
)
"""What stands in for a value never measured yet: no traffic, the paper testbed's path RTTs
(table 3: 100 ms DTN, 10 ms campus), no flows. Used before the first measurement only;
after it, an RTT or AF that goes unmeasured keeps its last value."""

DesiredStateMode = Literal["reachable", "table3"]


@dataclass(frozen=True)
class Setpoint:
    """What the loop holds (the admitted policies' targets on the link), in SI units."""

    target_rate_bps: float
    capacity_bps: float
    dtn_rtt_s: float | None = None
    campus_rtt_s: float | None = None


@dataclass(frozen=True)
class PolicyTarget:
    """One admitted policy's share of R* (exported per policy)."""

    namespace: str
    name: str
    dtn_host: str
    target_rate_bps: float


@dataclass(frozen=True)
class BaseRtts:
    """The lowest RTTs measured so far (table 3's RTT targets when none are configured).

    Only measured values enter the minimum: a fallback can never become the base RTT, so a
    path whose real base RTT is above ``FALLBACK_STATE``'s is learned as it is."""

    dtn_rtt_s: float = math.inf
    campus_rtt_s: float = math.inf

    def update(self, measured: StateVector) -> BaseRtts:
        """Fold in one sample's RTTs (NaN, unmeasured, leaves a minimum as it is)."""
        return BaseRtts(
            _lowest(self.dtn_rtt_s, measured.dtn_rtt_s),
            _lowest(self.campus_rtt_s, measured.campus_rtt_s),
        )

    def or_fallback(self) -> tuple[float, float]:
        """(DTN, campus) base RTTs, ``FALLBACK_STATE``'s before any measurement."""
        return (
            self.dtn_rtt_s if math.isfinite(self.dtn_rtt_s) else FALLBACK_STATE.dtn_rtt_s,
            self.campus_rtt_s if math.isfinite(self.campus_rtt_s) else FALLBACK_STATE.campus_rtt_s,
        )


def _lowest(current: float, value: float) -> float:
    return min(current, value) if math.isfinite(value) and value > 0 else current


SATURATED_QUEUE_S = 0.001
"""A bottleneck whose queuing delay (either class) is at least this is full: it holds a
standing queue, so what left it over the interval is all it can carry."""
FULL_LINK_SHARE = 0.9
"""The least share of B_max a full link carries as goodput: headers take under 10 % of a
frame for any TCP MSS of 536 bytes or more (66 of 1514 at the usual 1448). A sample below
it with a queue is a burst's sojourn (a capped DTN and an application-limited campus read
2 ms of queue at 638 Mb/s of 1 Gb/s), not a full link."""
LINK_GOODPUT_WINDOW = 31
"""How many of the latest saturated samples ``LinkGoodput`` takes the median of."""


def bottleneck_saturated(measured: StateVector) -> bool | None:
    """Whether the bottleneck held a standing queue (either class's queuing delay at least
    ``SATURATED_QUEUE_S``); None when neither queuing delay was measured."""
    delays = [
        d
        for d in (measured.dtn_queuing_delay_s, measured.campus_queuing_delay_s)
        if math.isfinite(d)
    ]
    return max(delays) >= SATURATED_QUEUE_S if delays else None


@dataclass(frozen=True)
class LinkGoodput:
    """The bottleneck's goodput when full, G: the median of what y(t)'s two rates added up
    to over the latest ``LINK_GOODPUT_WINDOW`` samples in which it held a standing queue
    and carried at least ``FULL_LINK_SHARE`` of B_max.

    The collector counts payload (as TCP_INFO does), the link carries frames, so G is below
    B_max: 95.6 % of it for 1448-byte segments with 66 bytes of headers. Table 3's campus
    rate B_max − R* asks for a total the link never carries; G − R* is the campus rate a
    full link carries with the DTN at R*. G is learned from what the collector measures,
    so it holds whatever the tap counts and whatever the MTU. A median, not a mean: the tap
    counts bytes before the queue, so a sample in which the queue fills reads above the
    link (1,078 Mb/s of 1 Gb/s at a transfer's start), one in which it drains below."""

    recent_bps: tuple[float, ...] = ()

    def update(self, measured: StateVector, capacity_bps: float) -> LinkGoodput:
        """Fold in one sample: only one with both rates measured, a standing queue, and a
        total of at least ``FULL_LINK_SHARE`` of B_max counts."""
        total = measured.dtn_rate_bps + measured.campus_rate_bps
        full = math.isfinite(total) and total >= FULL_LINK_SHARE * capacity_bps
        if not (full and bottleneck_saturated(measured)):
            return self
        return LinkGoodput((*self.recent_bps, total)[-LINK_GOODPUT_WINDOW:])

    @property
    def total_bps(self) -> float:
        """G (NaN before the link was first seen full)."""
        return statistics.median(self.recent_bps) if self.recent_bps else math.nan

    def or_capacity(self, capacity_bps: float) -> float:
        """G, or B_max (table 3's implicit total) before the link was first seen full."""
        return self.total_bps if self.recent_bps else capacity_bps


def desired_state(
    setpoint: Setpoint,
    previous: StateVector,
    base: BaseRtts,
    mode: DesiredStateMode = "reachable",
    link: LinkGoodput = LinkGoodput(),
) -> StateVector:
    """y_d(t): R* for the DTN and the last measured active-flow count (paper table 3, both
    modes). The campus rate and the delays differ by mode:

    * ``table3`` — the paper's: B_max − R* for the campus, RTTs at their targets
      (configured, else the base RTTs measured so far) and zero queuing delays. A
      drop-tail bottleneck kept full never visits that state, so the inverse model
      extrapolates there (the shipped models' cards measure how far).
    * ``reachable`` (default) — the state nearest the paper's intent that a full link
      visits: the campus gets G − R*, G the link's goodput when full (``LinkGoodput``;
      B_max until the link was first seen full), because the rates y(t) counts are
      goodput and B_max − R* asks for ~4 % of B_max more than the link carries; and the
      delays of ``previous`` = y(t−T), because the shaper moves the split of a full link,
      not its queue (the buffer and the loss-based senders set that). Configured RTT
      targets still win.
    """
    target = setpoint.target_rate_bps
    dtn_base, campus_base = base.or_fallback()
    if mode == "table3":
        dtn_rtt = setpoint.dtn_rtt_s if setpoint.dtn_rtt_s is not None else dtn_base
        campus_rtt = setpoint.campus_rtt_s if setpoint.campus_rtt_s is not None else campus_base
        dtn_qd = campus_qd = 0.0
        total = setpoint.capacity_bps
    else:
        dtn_rtt = setpoint.dtn_rtt_s if setpoint.dtn_rtt_s is not None else previous.dtn_rtt_s
        campus_rtt = (
            setpoint.campus_rtt_s if setpoint.campus_rtt_s is not None else previous.campus_rtt_s
        )
        dtn_qd, campus_qd = previous.dtn_queuing_delay_s, previous.campus_queuing_delay_s
        total = min(link.or_capacity(setpoint.capacity_bps), setpoint.capacity_bps)
    return StateVector(
        dtn_rate_bps=target,
        campus_rate_bps=max(total - target, 0.0),
        dtn_rtt_s=dtn_rtt,
        campus_rtt_s=campus_rtt,
        dtn_queuing_delay_s=dtn_qd,
        campus_queuing_delay_s=campus_qd,
        active_flows=previous.active_flows,
    )


def features(
    desired: StateVector,
    previous: StateVector,
    before_previous: StateVector,
    previous_rate_limit_bps: float,
) -> npt.NDArray[np.float32]:
    """The ``(1, 22)`` float32 input row of eq. 1; raises on a NaN or an infinity."""
    row = [*desired, *previous, *before_previous, previous_rate_limit_bps]
    if len(row) != N_FEATURES:
        raise ValueError(f"eq. 1 has {N_FEATURES} inputs, got {len(row)}")
    if not all(math.isfinite(v) for v in row):
        raise ValueError("every feature must be a finite number")
    return np.asarray([row], dtype=np.float32)


def fill_missing(state: StateVector, fallback: StateVector) -> StateVector:
    """y(t) with every unmeasured (NaN) value replaced, the same way in training and in
    control: a rate or a queuing delay not measured is 0 (no packets of that class), an
    RTT or the active-flow count keeps ``fallback``'s (the last filled state, or
    ``FALLBACK_STATE`` before the first)."""

    def keep(value: float, instead: float) -> float:
        return float(value) if math.isfinite(value) else float(instead)

    return StateVector(
        dtn_rate_bps=keep(state.dtn_rate_bps, 0.0),
        campus_rate_bps=keep(state.campus_rate_bps, 0.0),
        dtn_rtt_s=keep(state.dtn_rtt_s, fallback.dtn_rtt_s),
        campus_rtt_s=keep(state.campus_rtt_s, fallback.campus_rtt_s),
        dtn_queuing_delay_s=keep(state.dtn_queuing_delay_s, 0.0),
        campus_queuing_delay_s=keep(state.campus_queuing_delay_s, 0.0),
        active_flows=keep(state.active_flows, fallback.active_flows),
    )
