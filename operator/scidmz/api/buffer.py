"""``spec.buffer`` of a BorderLink: the border router's buffer sized while the link runs
(P4BS, seed 003; ``scidmz.control.buffer_search``). The defaults are the P4BS authors' code's
where the paper leaves a value open, and ours where the spec says so (the trial's length)."""

from __future__ import annotations

from typing import Annotated, Literal

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
SettlingWindow = Annotated[Duration, Checked(duration_rule("1s", "60s"))]
LossSignal = Literal["path", "bottleneck", "actuator"]


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


class SettlingSpec(ApiModel):
    """When a trial's queue counts as settled after its buffer change (ours): the mean
    queuing delay over the last ``window`` within ``tolerance`` of the mean over the window
    before (or within 1 ms, for a near-empty queue), no sooner than ``settle`` and no later
    than ``maxWait``. Two whole windows average out a Cubic sawtooth shorter than one."""

    window: SettlingWindow = Field(
        default="2s", description="The window whose mean queuing delay is compared."
    )
    tolerance: float = Field(
        default=0.1, gt=0, le=1, description="The relative change still counted as settled."
    )
    max_wait: TrialDuration = Field(
        default="30s", description="Measure after this long whatever the queue does."
    )


def _loss_signal_readable(spec: BufferSpec) -> bool:
    return spec.loss_signal != "actuator" or spec.actuator.type != "dryRun"


def _wait_bounds(spec: BufferSpec) -> bool:
    least, window = parse_duration(spec.settle), parse_duration(spec.settling.window)
    return parse_duration(spec.settling.max_wait) >= max(least, 2 * window)


def loss_signal_of(spec: BufferSpec) -> LossSignal:
    """The loss the search reads: ``lossSignal``, or by default the queue's own drop counter
    where the buffer actuator reads it (tc, sim) and the path's retransmissions with a dry
    run (ours, measured: on the twin the queue's counter and method 2 kept f̄ within 0.003
    of each other and the path's loss cost 0.024 of it at N = 250; on real TCP at 1 Gb/s the
    kernel counted 0.02–0.05 % of BR1's own loss, method 2 from the tap 0.06–0.17 % and the
    path 0.65–1.9 %, and the search held the same buffers on the counter and on method 2;
    the counter needs nothing of the tap; see ``docs/components/buffer.md``)."""
    if spec.loss_signal is not None:
        return spec.loss_signal
    return "path" if spec.actuator.type == "dryRun" else "actuator"


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
        Rule(
            cel="!has(self.lossSignal) || self.lossSignal != 'actuator' || "
            "(has(self.actuator) && has(self.actuator.type) && self.actuator.type != 'dryRun')",
            check=_loss_signal_readable,
            message="buffer.lossSignal actuator needs a buffer actuator that reads the queue's "
            "drops (buffer.actuator.type tc or sim, not dryRun)",
            violation={"lossSignal": "actuator", "actuator": {"type": "dryRun"}},
            field_path=".lossSignal",
        ),
        Rule(
            cel="!has(self.settling) || !has(self.settling.maxWait) || "
            "(duration(self.settling.maxWait) >= duration(has(self.settle) ? self.settle : '4s')"
            " && duration(self.settling.maxWait) >= duration(has(self.settling.window) ? "
            "self.settling.window : '2s') + duration(has(self.settling.window) ? "
            "self.settling.window : '2s'))",
            check=_wait_bounds,
            message="buffer.settling.maxWait must be at least buffer.settle and two "
            "buffer.settling.windows",
            violation={"settle": "20s", "settling": {"maxWait": "10s"}},
            field_path=".settling.maxWait",
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
    loss_signal: LossSignal | None = Field(
        default=None,
        description="The loss p of the objective: path (the classes' retransmissions at the "
        "tap, P4BS method 1: the campus shaper's drops count too), bottleneck (the border "
        "router's own drops from the tap's counters before and after it, method 2: needs the "
        "egress counters), or actuator (the drops of the queue the buffer actuator sizes, in "
        "bytes: a bfifo's drops weighed by the size of the skbs it queues, the simulator's "
        "exact counts; tc or sim). Default: actuator where the buffer actuator reads it, "
        "path with dryRun.",
    )
    settle: TrialDuration = Field(
        default="4s",
        description="Per trial: the least wait after a buffer change before its queue may "
        "count as settled (see settling).",
    )
    settling: SettlingSpec = Field(
        default_factory=SettlingSpec,
        description="When a trial's queue counts as settled, so its measurement starts.",
    )
    measure: TrialDuration = Field(
        default="5s", description="Per trial: time measured once the queue has settled."
    )
    max_iterations: int = Field(
        default=4, ge=1, le=50, description="Gaussian-process trials per search."
    )
    stop_ei: float = Field(
        default=1e-3, ge=0, le=1, description="Stop the search below this expected improvement."
    )
    stop_noise: float = Field(
        default=1.0,
        ge=0,
        le=10,
        description="Stop the search once the largest expected improvement is below this "
        "many standard errors of a trial's f (its measured noise): an improvement the trials "
        "cannot tell from noise is not worth a trial. 0: stopEI alone.",
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
