"""The anti-windup filter of the MLC (paper §3.2, figure 5), as a pure, time-injected step.

Per sample, with e(t) = R_DTN(t) − R*_DTN(t) (the DTN rate error; y − y_d) and the inverse
model's output û(t)::

    ū(t) = û(t) + Kp·e(t) + I(t)                    the filter's unconstrained output
    u(t) = sat(ū(t))                                bounds [min, max] and slew ±Δu
    w(t) = clamp(ū(t), min, max) − ū(t)             the anti-windup signal (0 unless ū is
                                                    beyond a bound; u(t) − ū(t), the slew
                                                    included, with ``slew_in_windup``)
    I(t+T) = I(t) + T·Ki·e(t) + (1 − exp(−Kw·T))·w(t)   integral with back-calculation,
                                                    while |e(t)| ≤ band; outside, only
                                                    the part of that move toward 0
                                                    (I ≡ 0 when Ki = 0: no integral action),
                                                    and never beyond ±the integral's limit

The integral only accumulates while the error is inside ``band`` (``Limits.integral_band_bps``;
*conditional integration*, Åström & Hägglund, Advanced PID Control, 2006, §3.5), our
addition to figure 5; outside it, the integral may only unwind toward zero. Figure 5's
integral also sums the DTN's ramp after every change of R* (TCP takes seconds to fill a
100 ms path), and unwinds that sum later as overshoot: with
it on the twin, Ki = 0.1 took the MLC's tracking error from 4.3 % to 5.9 % MRAE, so the GA
kept Ki = 0, and the integral-free MLC sat ~1 % under R* at constant R* (the inverse
model's bias). Outside the band the error is a transient the proportional and feed-forward
paths handle; inside it, the integral removes the bias. The default band, 5 % of B_max, is
~3 σ of a Cubic DTN's 1 s rate samples around a constant R* on the twin (σ 16–17 Mb/s at
1 Gb/s), so a settled loop integrates on ~all samples; an infinite band is figure 5's filter.

The back-calculation term is figure 5's dI/dt = Kw·w integrated exactly over the step
(w decays as exp(−Kw·t) while saturated), not by Euler: Euler's T·Kw·w overshoots the
boundary when Kw·T > 1 and oscillates for ever when Kw·T > 2 (a GA-tuned Kw = 2.9 at
T = 1 s made u swing between two slew limits at constant R*). For Kw·T ≪ 1 the two agree.
The paper leaves the saturator's "±Δu(t) interval" open; here ū is clamped to
``[min, max]`` and then to ``u(t−T) ± maxStep`` (docs/design/index.md), where u(t−T)
is first moved by any change of the feed-forward set point (``follow_setpoint``). The
campus filter's back-calculation acts on the bounds only: what the slew holds back for a
sample is a transient of û, and integrated it left the integral tens of Mb/s off for minutes
after one odd sample (Kw·T = 0.03 unwinds 3 % a sample); u catches up at maxStep a sample
instead. The DTN cap's filter keeps the slew in w (``Limits.slew_in_windup``).
Sign: a DTN below target gives e < 0, so the filter lowers the campus rate u. Gains are ≥ 0 (eq. 2's
constraint); Kp is dimensionless, Ki and Kw are per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scidmz.api.types import MAX_GAIN


class ControlConfigError(ValueError):
    """Gains or limits the filter cannot use; the message names the value."""


@dataclass(frozen=True)
class Gains:
    kp: float
    ki: float
    kw: float

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kw"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_GAIN):
                raise ControlConfigError(f"gain {name} must be within 0..{MAX_GAIN}, got {value}")


@dataclass(frozen=True)
class Limits:
    """Bounds of u(t) (bit/s), its largest change per sample time, the error band within
    which the integral accumulates (infinite: always, as figure 5), and the largest the
    integral may grow either way (the controller sets it to B_max: an integral beyond the
    whole range of u only stores windup that takes minutes to unwind)."""

    min_bps: float
    max_bps: float
    max_step_bps: float
    integral_band_bps: float = math.inf
    integral_limit_bps: float = math.inf
    slew_in_windup: bool = False
    """Whether the back-calculation also answers what the slew limit holds back. Off for
    the campus filter (those deficits are transients of the model's û); on for the DTN cap's
    filter, whose deficits come from its own proportional term and whose gains were tuned
    with them (off, its tracking MRAE rose from 3.05 to 3.16–3.47 % in the benchmark)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_bps) and math.isfinite(self.max_bps)):
            raise ControlConfigError("limits must be finite rates")
        if self.min_bps < 0:
            raise ControlConfigError(f"limits.min must be >= 0, got {self.min_bps}")
        if self.min_bps > self.max_bps:
            raise ControlConfigError(
                f"limits.min ({self.min_bps:g} bit/s) exceeds limits.max ({self.max_bps:g} bit/s)"
            )
        if not self.max_step_bps > 0:
            raise ControlConfigError(f"limits.maxStep must be > 0, got {self.max_step_bps}")
        if not self.integral_band_bps > 0:
            raise ControlConfigError(
                f"limits.integralBand must be > 0, got {self.integral_band_bps}"
            )
        if not self.integral_limit_bps > 0:
            raise ControlConfigError(
                f"the integral's limit must be > 0, got {self.integral_limit_bps}"
            )

    def with_floor(self, floor_bps: float) -> Limits:
        """These limits with ``min`` raised to ``floor_bps`` (never above ``max``)."""
        if not math.isfinite(floor_bps) or floor_bps <= self.min_bps:
            return self
        return replace(self, min_bps=min(floor_bps, self.max_bps))

    def with_ceiling(self, ceiling_bps: float) -> Limits:
        """These limits with ``max`` lowered to ``ceiling_bps`` (never below ``min``)."""
        if not math.isfinite(ceiling_bps) or ceiling_bps >= self.max_bps:
            return self
        return replace(self, max_bps=max(ceiling_bps, self.min_bps))

    def saturate(self, value_bps: float, previous_bps: float | None) -> float:
        """Clamp to [min, max], then to ``previous ± max_step`` (no slew on the first)."""
        value = min(max(value_bps, self.min_bps), self.max_bps)
        if previous_bps is not None:
            value = min(
                max(value, previous_bps - self.max_step_bps), previous_bps + self.max_step_bps
            )
        return value


@dataclass(frozen=True)
class FilterState:
    integral_bps: float = 0.0
    applied_bps: float | None = None
    """u(t−T), the last rate applied (None before the first sample)."""


def follow_setpoint(state: FilterState, shift_bps: float, limits: Limits) -> FilterState:
    """Move the slew window's centre, u(t−T), by a change of the feed-forward set point.

    ±maxStep bounds what the filter itself does from one sample to the next; a new R* is
    an operator's command, applied at once as the trivial token bucket applies it (with
    the centre kept inside [min, max]). Without this a 500 Mb/s step of R* took the
    filtered strategies three samples at a 0.2·B slew while the fixed split took one.
    """
    if state.applied_bps is None or shift_bps == 0.0 or not math.isfinite(shift_bps):
        return state
    moved = min(max(state.applied_bps + shift_bps, limits.min_bps), limits.max_bps)
    return FilterState(integral_bps=state.integral_bps, applied_bps=moved)


@dataclass(frozen=True)
class FilterOutput:
    """One step's signals, all in bit/s (exported as metrics)."""

    u_bps: float
    u_bar_bps: float
    u_hat_bps: float
    proportional_bps: float
    integral_bps: float
    windup_bps: float

    @property
    def saturated(self) -> bool:
        return self.windup_bps != 0.0

    @property
    def held_up(self) -> bool:
        """The saturator kept u above what the filter asked (w > 0): the campus rate could
        not fall further, so the campus loop could give the DTN no more. Held *down* (at
        the ceiling, e.g. B − Σ caps while capped DTNs hold their own rates) the DTN lacks
        nothing."""
        return self.windup_bps > 0.0


def _towards_zero(integral_bps: float, change_bps: float) -> float:
    """Outside the band the integral only unwinds: it moves toward zero, never away from it
    and never past it. Frozen instead, a value wound in before the error left the band
    could hold it outside for good: on real TCP the back-calculation wound 123 Mb/s in
    against the empty-queue floor in the second sample, the integral then held u 85 Mb/s
    above B − R* and the DTN 110 Mb/s under R* (outside a 50 Mb/s band) for 120 s."""
    if integral_bps * change_bps >= 0:
        return integral_bps
    moved = integral_bps + change_bps
    return moved if moved * integral_bps > 0 else 0.0


def step(
    state: FilterState,
    error_bps: float,
    u_hat_bps: float,
    dt_s: float,
    gains: Gains,
    limits: Limits,
) -> tuple[FilterState, FilterOutput]:
    """One sample of figure 5. ``dt_s`` is the time since the previous step (normally T)."""
    if not (math.isfinite(error_bps) and math.isfinite(u_hat_bps)):
        raise ValueError("error and model output must be finite")
    if not dt_s > 0:
        raise ValueError(f"dt must be > 0, got {dt_s}")
    proportional = gains.kp * error_bps
    u_bar = u_hat_bps + proportional + state.integral_bps
    u = limits.saturate(u_bar, state.applied_bps)
    # the campus filter's back-calculation answers the bounds, not the slew: a deficit the
    # slew leaves is a transient of û (the model's answer to one odd sample), which the
    # integral, there to remove the model's bias, must not remember
    windup = (u if limits.slew_in_windup else limits.saturate(u_bar, None)) - u_bar
    # (1 − exp(−Kw·dt))·w is exact for dI/dt = Kw·w
    change = dt_s * gains.ki * error_bps - math.expm1(-gains.kw * dt_s) * windup
    if gains.ki == 0:
        # Without integral action there is nothing for the back-calculation to unwind: alone
        # it would integrate the saturator's error and keep it once the saturation ends (it
        # held u 17 Mb/s high for 40 s after a floor let go), so such a filter keeps none.
        integral = 0.0
    elif abs(error_bps) <= limits.integral_band_bps:
        integral = state.integral_bps + change
    else:
        integral = _towards_zero(state.integral_bps, change)
    integral = min(max(integral, -limits.integral_limit_bps), limits.integral_limit_bps)
    output = FilterOutput(
        u_bps=u,
        u_bar_bps=u_bar,
        u_hat_bps=u_hat_bps,
        proportional_bps=proportional,
        integral_bps=state.integral_bps,
        windup_bps=windup,
    )
    return FilterState(integral_bps=integral, applied_bps=u), output


def pinned_by_integral(output: FilterOutput, limits: Limits) -> bool:
    """Whether u(t) sits at a bound of ``limits`` because of the integral: û + Kp·e alone
    would be inside, the integral pushes past it. A controller that stays so does not
    control (its integral holds u against the bound whatever the network does) and says
    so (``Controller.pinned``)."""
    without_integral = output.u_hat_bps + output.proportional_bps
    return (
        output.u_bps >= limits.max_bps
        and output.integral_bps > 0
        and without_integral < limits.max_bps
    ) or (
        output.u_bps <= limits.min_bps
        and output.integral_bps < 0
        and without_integral > limits.min_bps
    )
