"""Is a sample physically possible on this link? The gate every sample passes before control.

One finite but absurd value is enough to wedge an inverse model and its integral: an
active-flow count of 1e30 made the shipped model answer û = 1.2e34 bit/s, the back-calculation
wound the integral to −5.6e32, and u(t) sat at 0 for half an hour while it unwound. The
collector should never report such a value, but a controller must not trust that: a sample
outside what the link can physically show is skipped (counted and logged by the loop), never
fed to the model or the filter.

The bounds come from the link, not from tuning: a class cannot send more than twice the
bottleneck's capacity into it (the tap counts offered bytes before the queue, drops included;
a sample interval that straddles a queue filling reads above the link, never at twice it), no
RTT or queuing delay on a path that still carries TCP lasts a minute, and the data plane
tracks at most so many flows (its flow register's size). A value the collector did not
measure (NaN) is not a problem here: it is filled later as the model was trained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scidmz.contract.state import STATE_VARIABLES, StateVector

MAX_DELAY_S = 60.0
"""No RTT or queuing delay of a path TCP still uses is a minute long."""
RATE_HEADROOM = 2.0
"""A class's offered rate at the tap is at most this many times the bottleneck capacity."""
DEFAULT_MAX_ACTIVE_FLOWS = 65_536
"""The data plane's flow register (p4/README.md): it cannot report more active flows."""


@dataclass(frozen=True)
class SampleBounds:
    """The largest value each variable of y(t) can physically take on this link."""

    max_rate_bps: float
    max_delay_s: float = MAX_DELAY_S
    max_active_flows: float = DEFAULT_MAX_ACTIVE_FLOWS

    @classmethod
    def for_link(
        cls, capacity_bps: float, max_active_flows: float = DEFAULT_MAX_ACTIVE_FLOWS
    ) -> SampleBounds:
        return cls(max_rate_bps=RATE_HEADROOM * capacity_bps, max_active_flows=max_active_flows)

    def limit(self, variable: str) -> float:
        if variable.endswith("_bps"):
            return self.max_rate_bps
        if variable.endswith("_s"):
            return self.max_delay_s
        return self.max_active_flows


def implausible(state: StateVector, bounds: SampleBounds) -> tuple[str, ...]:
    """The variables of ``state`` no link could show: infinite, negative or above their
    bound, each as ``name=value`` (empty: the sample may be used). NaN means not measured
    and passes."""
    found = []
    for name, value in zip(STATE_VARIABLES, state, strict=True):
        if math.isnan(value):
            continue
        if not (math.isfinite(value) and 0 <= value <= bounds.limit(name)):
            found.append(f"{name}={value:g}")
    return tuple(found)


def clamp_model_output(u_hat_bps: float, capacity_bps: float) -> float:
    """û(t) within [0, B_max]: no campus rate outside it means anything, and a model fed an
    input it never saw may answer anything (a non-finite answer is the caller's to replace)."""
    return min(max(u_hat_bps, 0.0), capacity_bps)
