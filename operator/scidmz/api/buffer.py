"""``spec.buffer`` of a BorderLink: the border router's buffer sized while the link runs
(P4BS, seed 003; ``scidmz.control.buffer_search``). The defaults are the P4BS authors' code's
where the paper leaves a value open, and ours where the spec says so (the trial's length)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from scidmz.api.rules import Checked, Rule
from scidmz.api.types import (
    ActuatorType,
    ApiModel,
    Duration,
    HostPort,
    Interface,
    ObjectName,
    duration_rule,
    tc_settings_required,
)
from scidmz.api.units import parse_duration

BufferSize = Annotated[Duration, Checked(duration_rule("1ms", "1s"))]
"""A buffer as the time it takes to drain at line rate."""
TrialDuration = Annotated[Duration, Checked(duration_rule("1s", "10m"))]


class BufferTc(ApiModel):
    """The router port whose bfifo qdisc's limit is the buffer."""

    node_name: ObjectName = Field(
        description="Node that owns the interface: the campus actuator's (the controller sets "
        "both from there)."
    )
    interface: Interface = Field(
        description="Interface whose root bfifo (or root tbf's bfifo child) holds the queue, "
        "e.g. eth2. Not the campus shaper's interface."
    )


class BufferSim(ApiModel):
    address: HostPort | None = Field(
        default=None, description="Simulator's control endpoint; default: switch.address."
    )


class BufferActuatorSpec(ApiModel):
    """Where the buffer is set."""

    RULES = (tc_settings_required("buffer.actuator"),)

    type: ActuatorType = Field(
        default="dryRun",
        description="tc: a Linux router port's bfifo limit (changed in place: the queue is "
        "kept); sim: the embedded simulator's bottleneck; dryRun: search and export only.",
    )
    tc: BufferTc | None = Field(default=None, description="Required when type is tc.")
    sim: BufferSim | None = Field(default=None, description="Options when type is sim.")


class BufferWeights(ApiModel):
    """w1 and w2 of P4BS eq. (2)."""

    RULES = (
        Rule(
            cel="(has(self.loss) ? self.loss : 0.5) + (has(self.delay) ? self.delay : 0.5) > 0.0",
            check=lambda w: w.loss + w.delay > 0,
            message="buffer.weights.loss and buffer.weights.delay must not both be 0",
            violation={"loss": 0.0, "delay": 0.0},
        ),
    )

    loss: float = Field(default=0.5, ge=0, le=1, description="Weight of the loss term.")
    delay: float = Field(default=0.5, ge=0, le=1, description="Weight of the delay term.")


class ChangeDetectorSpec(ApiModel):
    """The smoothed z-score that restarts the search from HOLD."""

    lag: int = Field(default=50, ge=5, le=1000, description="Samples of history.")
    threshold: float = Field(
        default=10.0, gt=0, le=100, description="Standard deviations that signal a change."
    )
    influence: float = Field(
        default=0.1, ge=0, le=1, description="Weight of a signalled sample in the history."
    )


def _min_max(spec: BufferSpec) -> bool:
    return parse_duration(spec.min) <= parse_duration(spec.max)


def _default_within(spec: BufferSpec) -> bool:
    return parse_duration(spec.min) <= parse_duration(spec.default) <= parse_duration(spec.max)


class BufferSpec(ApiModel):
    """Size the border router's buffer while the link runs (P4BS: a Gaussian process over
    buffer trials, minimising loss and queuing delay while the DTN holds its target)."""

    RULES = (
        Rule(
            cel="duration(self.min) <= duration(self.max)",
            check=_min_max,
            message="buffer.min must not exceed buffer.max",
            violation={"min": "300ms", "max": "200ms"},
            field_path=".min",
        ),
        Rule(
            cel="duration(self.min) <= duration(self.default) && "
            "duration(self.default) <= duration(self.max)",
            check=_default_within,
            message="buffer.default must lie within buffer.min and buffer.max",
            violation={"default": "5ms"},
            field_path=".default",
        ),
    )

    actuator: BufferActuatorSpec = Field(
        default_factory=BufferActuatorSpec, description="Where the buffer is set."
    )
    min: BufferSize = Field(default="10ms", description="The smallest buffer tried.")
    max: BufferSize = Field(default="200ms", description="The largest buffer tried.")
    default: BufferSize = Field(
        default="100ms",
        description="The buffer set when the search starts, and the fail-safe buffer: set "
        "again when telemetry goes stale and when the controller stops.",
    )
    max_queue_delay: BufferSize = Field(
        default="200ms",
        description="d̂: the delay term's scale in the objective, and the expansion's ceiling.",
    )
    loss_scale: float = Field(
        default=0.05, gt=0, le=1, description="The loss term's scale in the objective."
    )
    weights: BufferWeights = Field(
        default_factory=BufferWeights, description="w1 (loss) and w2 (delay) of eq. (2)."
    )
    settle: TrialDuration = Field(
        default="5s", description="Per trial: time left to TCP before measuring."
    )
    measure: TrialDuration = Field(default="5s", description="Per trial: time measured.")
    max_iterations: int = Field(
        default=4, ge=1, le=50, description="Gaussian-process trials per search."
    )
    stop_ei: float = Field(
        default=1e-3, ge=0, le=1, description="Stop the search below this expected improvement."
    )
    utilisation_gate: float = Field(
        default=0.98,
        gt=0,
        le=1,
        description="Search only while the link is this full: the measured DTN and campus "
        "rates over B's payload share (1448/1514; B counts frames, the rates what the tap "
        "sees of them).",
    )
    change_detector: ChangeDetectorSpec = Field(
        default_factory=ChangeDetectorSpec, description="Restarts the search from HOLD."
    )
