"""The resolved runtime configuration of one link's loop: the BorderLink and its admitted
policies, with every default filled in, in SI units.

The operator writes it into the link's ConfigMap (key ``config.yaml``); ``scidmz
collector``, ``scidmz controller`` and ``scidmz shaper`` read it with ``--config``.
Resolution is a pure function of the link and the admitted policies, so the same inputs
always render byte-identical config (the ConfigMap is only rewritten when something really
changed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from scidmz.api.buffer import BufferSpec, LossSignal, loss_signal_of
from scidmz.api.errors import load_yaml_model
from scidmz.api.link import BorderLinkSpec, DtnHost, DtnShaperSpec, HeldDtnHost
from scidmz.api.policy import DTNTransferPolicySpec
from scidmz.api.types import (
    MAX_GAIN,
    MAX_RATE_BPS,
    ActuatorType,
    ConfigMapKey,
    CongestionControl,
    HostPort,
    Strategy,
)
from scidmz.api.units import parse_duration, parse_rate
from scidmz.auth.mtls import TlsConfigError, load_mutual_tls
from scidmz.auth.tls_source import TlsSource
from scidmz.contract.classes import DTN_CLASSES, FIRST_DTN_CLASS, dtn_class

CONFIG_KEY = "config.yaml"
DEFAULT_MAX_STEP_FRACTION = 0.2
TUNED_INTEGRAL_BAND_FRACTION: dict[str, float | None] = {"cubic": 0.05, "bbr": None}
"""The campus filter's default integral band per DTN congestion control, as a fraction of
B_max (``control.antiwindup``: for Cubic ~3 σ of the DTN's 1 s rate samples at 1 Gb/s);
None: integrate always (figure 5). A band is tuned with the gains it goes with: the shipped
BBR gains were tuned without one, and under a 5 % band their campus filter limit-cycled
beside the DTN cap (std u 19.6 % of B at a constant R*, transfers at 0.94 R*)."""


def default_integral_band_bps(congestion_control: str, capacity_bps: float) -> float:
    """The campus filter's integral band when the link sets none (the capacity: always)."""
    fraction = TUNED_INTEGRAL_BAND_FRACTION.get(congestion_control)
    return fraction * capacity_bps if fraction is not None else capacity_bps


DEFAULT_DTN_MIN_FRACTION = 0.5
"""A DTN cap's floor when the link gives none: this fraction of the policy's target."""
DEFAULT_STALE_SAMPLES = 3
"""failsafe.staleAfter when the link gives none: this many sample times."""

# Paper table 4: GA-tuned anti-windup PI gains (Kp, Ki, Kw) per DTN congestion control,
# for the paper's testbed.
PAPER_GAINS: dict[str, tuple[float, float, float]] = {
    "cubic": (0.285, 1.486, 1.565),
    "bbr": (0.388, 1.918, 1.340),
}

# The defaults: the same GA (paper §3.3) run on this project's twin by `scidmz tune`, per
# DTN congestion control and filter (mlc, pi: the campus filter; dtn: the DTN cap's).
# models/<cca>/gains.yaml holds them with their fitness and search settings; a test keeps
# the two equal.
TUNED_GAINS: dict[str, dict[str, tuple[float, float, float]]] = {
    "cubic": {
        "mlc": (0.2618, 0.133, 0.0283),
        "pi": (0.2618, 0.19, 1.5542),
        "dtn": (1.2345, 1.1254, 1.7643),
    },
    "bbr": {
        "mlc": (2.1178, 1.0848, 0.0),
        "pi": (2.4142, 1.4313, 0.0),
        "dtn": (0.0729, 0.0673, 1.4698),
    },
}


HOUR_S = 3600.0

# Every number of a runtime config is finite and within the range the API allows: a config
# handed straight to ``scidmz collector|controller --config`` is checked as hard as a link.
Rate = Annotated[float, Field(ge=0, le=MAX_RATE_BPS)]
PositiveRate = Annotated[float, Field(gt=0, le=MAX_RATE_BPS)]
Gain = Annotated[float, Field(ge=0, le=MAX_GAIN)]
Window = Annotated[float, Field(gt=0, le=HOUR_S)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GainsConfig(_Frozen):
    kp: Gain
    ki: Gain
    kw: Gain


class SwitchConfig(_Frozen):
    address: HostPort
    device_id: int = Field(ge=0, lt=2**64)
    election_id: int = Field(ge=1, lt=2**128)
    # the tap ports' range and distinctness are the collector's checks (collector_config)
    campus_port: int
    dtn_port: int
    bottleneck_port: int
    pipeline_config_map: str | None = None
    p4info_key: str | None = None
    device_config_key: str | None = None
    tls_secret: str | None = None
    tls_server_name: str | None = None
    tap_server_name: str | None = Field(
        default=None,
        max_length=253,
        description="The switch is the software tap the operator runs: the collector dials "
        "it with its own identity (security.identity_dir) and checks this name.",
    )


class ControllerConfig(_Frozen):
    strategy: Strategy
    gains: GainsConfig
    min_rate_bps: Rate
    max_rate_bps: PositiveRate
    max_step_bps: PositiveRate
    integral_band_bps: PositiveRate | None = Field(
        default=None,
        description="The campus filter integrates only while |e| is within this band; "
        "None (a config from before the band existed): the congestion control's default.",
    )
    desired_dtn_rtt_s: float | None = Field(default=None, gt=0, le=60)
    desired_campus_rtt_s: float | None = Field(default=None, gt=0, le=60)
    desired_state_mode: Literal["reachable", "table3"] = "reachable"
    pinned_after_s: float = Field(default=60.0, ge=1, le=3600)
    inverse_model_config_map: str | None = Field(
        default=None,
        max_length=253,
        description="The administrators' ConfigMap holding a custom inverse model "
        "(spec.controller.modelRef), mounted into the controller.",
    )
    inverse_model_key: ConfigMapKey | None = Field(
        default=None,
        description="Key of the model in that ConfigMap: the file name under the mount.",
    )
    inverse_model_digest: str | None = Field(
        default=None,
        max_length=64,
        description="sha256 of the custom model as the operator read it: a new model "
        "restarts the controller.",
    )
    strategy_note: str | None = Field(
        default=None,
        max_length=512,
        description="Why the strategy differs from spec.controller.strategy (mlc on DTNs "
        "of mixed congestion control runs as pi).",
    )

    @field_validator("inverse_model_key")
    @classmethod
    def _a_file_in_the_mount(cls, key: str | None) -> str | None:
        # the key is joined to the mount's path: "." or ".." would leave it
        if key in (".", ".."):
            raise ValueError("inverse_model_key must name a file, not . or ..")
        return key


MAX_ADMITTED = 64
"""The most policies a link admits at once: one per DTN host (``contract.classes``)."""


class ActuatorConfig(_Frozen):
    type: ActuatorType
    tc_node_name: str | None = None
    tc_interface: str | None = None
    sim_address: HostPort | None = None
    dtn: DtnActuatorConfig | None = None
    more_dtns: list[DtnActuatorConfig] = Field(
        default_factory=list,
        max_length=MAX_ADMITTED,
        description="The caps of the other admitted DTN hosts with a shaper (``dtn`` is "
        "the first), each on its own host's target.",
    )

    @property
    def dtns(self) -> list[DtnActuatorConfig]:
        """Every DTN cap, the first one first."""
        return self.more_dtns if self.dtn is None else [self.dtn, *self.more_dtns]


class DtnActuatorConfig(_Frozen):
    """A DTN host's cap: its actuator and filter."""

    type: ActuatorType
    host: str = Field(default="dtn", min_length=1, max_length=63, description="The DTN host.")
    tc_node_name: str | None = None
    tc_interface: str | None = None
    address: HostPort | None = Field(
        default=None,
        description="sim: the target's address; tc: the `scidmz shaper` agent's host:port.",
    )
    gains: GainsConfig
    failsafe_rate_bps: Rate
    min_rate_bps: Rate = Field(
        default=0.0,
        description="The lowest cap the filter sets and the shaper agent applies.",
    )
    held: bool = Field(
        default=False,
        description="No admitted policy on the host (it is held, ``api.holds``): the "
        "controller leaves the cap alone and the agent holds its fail-safe.",
    )
    target_rate_bps: Rate | None = Field(
        default=None,
        description="R*_i, the host's own target (its policy's); None: the link's R*.",
    )
    server_name: str | None = Field(
        default=None,
        max_length=253,
        description="tc: the name the host's shaper agent's certificate is checked against "
        "(None: security.dtn_shaper_server_name).",
    )


class FailsafeConfig(_Frozen):
    stale_after_s: Window
    rate_bps: Rate


class BufferConfig(_Frozen):
    """``spec.buffer`` in SI units (the buffer as seconds at line rate)."""

    actuator_type: ActuatorType
    tc_interface: str | None = None
    sim_address: HostPort | None = None
    min_s: float = Field(gt=0, le=1)
    max_s: float = Field(gt=0, le=1)
    default_s: float = Field(gt=0, le=1)
    max_queue_delay_s: float = Field(gt=0, le=1)
    loss_scale: float = Field(gt=0, le=1)
    loss_weight: float = Field(ge=0, le=1)
    delay_weight: float = Field(ge=0, le=1)
    loss_signal: LossSignal = "path"
    settle_s: float = Field(ge=1, le=600)
    settling_window_s: float = Field(default=2.0, ge=1, le=60)
    settling_tolerance: float = Field(default=0.1, gt=0, le=1)
    max_wait_s: float = Field(default=30.0, ge=1, le=600)
    measure_s: float = Field(ge=1, le=600)
    max_iterations: int = Field(ge=1, le=50)
    stop_ei: float = Field(ge=0, le=1)
    stop_noise: float = Field(default=1.0, ge=0, le=10)
    utilisation_gate: float = Field(gt=0, le=1)
    change_lag: int = Field(ge=5, le=1000)
    change_threshold: float = Field(gt=0, le=100)
    change_influence: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> BufferConfig:
        if not self.min_s <= self.default_s <= self.max_s:
            raise ValueError("buffer: min_s <= default_s <= max_s must hold")
        if self.loss_weight + self.delay_weight <= 0:
            raise ValueError("buffer: the loss and delay weights must not both be 0")
        return self


class TelemetryConfig(_Frozen):
    """Estimator settings (defaults: ``TelemetrySpec``'s)."""

    rtt_smoothing: float = Field(default=0.875, ge=0, lt=1)
    flow_timeout_s: Window = 2.0
    active_flow_packets: int = Field(default=10, ge=1, le=65535)
    active_flow_window_s: Window = 0.1
    idle_timeout_s: Window = 2.0
    rtt_horizon_s: Window = 1.0
    digest_hold_s: float = Field(default=0.01, ge=0.001, le=30)
    max_active_flows: int = Field(default=65536, ge=1, le=10_000_000)


class AdmittedPolicyConfig(_Frozen):
    """A policy the loop holds a rate for (labels, per-policy reports, the DTN cap)."""

    namespace: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253)
    dtn_host: str = Field(min_length=1, max_length=63)
    target_rate_bps: PositiveRate


class DtnClassConfig(_Frozen):
    """A DTN host the collector measures as its own class (``contract.pipeline``)."""

    host: str = Field(min_length=1, max_length=63)
    prefix: str = Field(min_length=1, max_length=43, description="Its receiver prefix.")
    class_id: int = Field(
        ge=FIRST_DTN_CLASS,
        lt=FIRST_DTN_CLASS + DTN_CLASSES,
        description="2 + the host's index in the link's spec.dtnHosts.",
    )


class ChannelSecurity(_Frozen):
    """Mutual TLS on scidmz's own channels (the sample stream, the DTN shapers, /metrics
    and /state). Absent: plaintext, for processes on one host in development only."""

    identity_dir: str = Field(
        min_length=1,
        max_length=4096,
        description="This workload's certificate directory (ca.crt, tls.crt, tls.key).",
    )
    collector_server_name: str = Field(
        min_length=1,
        max_length=253,
        description="The name the collector's certificate is checked against.",
    )
    dtn_shaper_server_name: str | None = Field(
        default=None,
        max_length=253,
        description="The name the DTN shaper agent's certificate is checked against.",
    )


class RuntimeConfig(_Frozen):
    """Everything the collector, controller and shaper agents of one link need, with
    units in the field names."""

    api_version: Literal["scidmz.io/runtime/v3"] = "scidmz.io/runtime/v3"
    link: str = Field(min_length=1, max_length=253)
    link_uid: str = Field(
        default="",
        max_length=64,
        description="The BorderLink's metadata.uid: part of every identity of its loop "
        "(``auth.identity``); empty for a loop run without a cluster.",
    )
    generation: int = Field(ge=0)
    policies: list[AdmittedPolicyConfig] = Field(default_factory=list, max_length=MAX_ADMITTED)
    target_rate_bps: Rate = Field(
        description="R*, the admitted targets' sum; 0 with none admitted (the loop then "
        "leaves the campus the whole link)."
    )
    bottleneck_capacity_bps: PositiveRate
    sample_time_s: float = Field(ge=0.1, le=60)
    dtn_classes: list[DtnClassConfig] = Field(
        default_factory=list,
        max_length=MAX_ADMITTED,
        description="The DTN hosts measured, each its own class: the admitted policies' "
        "hosts and a held one. Taken live by the collector (it re-programs the switch).",
    )
    dtn_congestion_control: CongestionControl
    campus_prefix: str
    switch: SwitchConfig
    controller: ControllerConfig
    actuator: ActuatorConfig
    failsafe: FailsafeConfig
    telemetry: TelemetryConfig = TelemetryConfig()
    collector_address: HostPort = Field(
        description="host:port of the collector's sample stream, as the controller dials it.",
    )
    security: ChannelSecurity | None = None
    buffer: BufferConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeConfig:
        """The API's cross-field rules, in SI units, for configs that skipped the API."""
        capacity = self.bottleneck_capacity_bps
        c = self.controller
        dtn = self.actuator.dtn
        admitted = sum(p.target_rate_bps for p in self.policies)
        checks = (
            (self.target_rate_bps < capacity, "target_rate_bps must be below the capacity"),
            (abs(admitted - self.target_rate_bps) <= 1e-6 * capacity or not self.policies,
             "target_rate_bps must be the sum of the policies' targets"),
            (c.min_rate_bps <= c.max_rate_bps, "controller.min_rate_bps exceeds max_rate_bps"),
            (c.max_rate_bps <= capacity, "controller.max_rate_bps must not exceed the capacity"),
            (c.max_step_bps <= capacity, "controller.max_step_bps must not exceed the capacity"),
            (self.failsafe.rate_bps <= capacity, "failsafe.rate_bps must not exceed the capacity"),
            (dtn is None or dtn.failsafe_rate_bps <= capacity,
             "actuator.dtn.failsafe_rate_bps must not exceed the capacity"),
            (self.failsafe.stale_after_s >= self.sample_time_s,
             "failsafe.stale_after_s must be at least sample_time_s"),
            (2 * self.telemetry.digest_hold_s <= self.sample_time_s,
             "telemetry.digest_hold_s must be at most half of sample_time_s"),
        )  # fmt: skip
        problems = [message for ok, message in checks if not ok]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def dtn_prefixes(self) -> list[str]:
        return [c.prefix for c in self.dtn_classes]

    @property
    def dtn_prefix(self) -> str | None:
        """The first DTN class's prefix (the demo's one DTN host); None idle."""
        return self.dtn_classes[0].prefix if self.dtn_classes else None


class DtnHostReport(BaseModel):
    """One DTN host's own class in the latest sample (SI units; None where not measured)."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    host: str = Field(max_length=63)
    rate_bps: float | None = None
    rtt_s: float | None = None
    queuing_delay_s: float | None = None
    active_flows: float | None = None


class SampleReport(BaseModel):
    """y(t) of the latest fresh sample (SI units; None where not measured)."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    dtn_rate_bps: float | None = None
    campus_rate_bps: float | None = None
    dtn_rtt_s: float | None = None
    campus_rtt_s: float | None = None
    dtn_queuing_delay_s: float | None = None
    campus_queuing_delay_s: float | None = None
    active_flows: float | None = None
    dtn_retransmission_ratio: float | None = Field(
        default=None, description="Beyond y(t): resent / sent DTN data packets (P4BS method 1)."
    )
    campus_retransmission_ratio: float | None = None
    bottleneck_loss_ratio: float | None = Field(
        default=None, description="BR1's own drops / bytes in (P4BS method 2)."
    )
    dtn_mean_queuing_delay_s: float | None = None
    campus_mean_queuing_delay_s: float | None = None
    long_flows: float | None = None
    dtn_hosts: list[DtnHostReport] = Field(
        default_factory=list,
        max_length=MAX_ADMITTED,
        description="Each measured DTN host's own figures (several DTNs on one link).",
    )
    sampled_at: str = Field(description="When the collector measured it (RFC 3339).")
    sequence: int = Field(ge=0)
    interval_s: float | None = Field(
        default=None, description="The time the rates cover, by the switch's tap clock."
    )
    tap_clock_ns: int | None = Field(
        default=None,
        ge=0,
        description="The switch's tap clock at the interval's end (its own clock, ns, modulo "
        "its register's width).",
    )


class TrackingReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    mrae: float | None = Field(default=None, description="Eq. 3 over the window.")
    window: int = Field(default=0, ge=0, description="Samples in the window.")


class BufferReport(BaseModel):
    """The buffer search's state (``spec.buffer``), SI units."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    buffer_s: float | None = Field(default=None, description="The buffer in force, s at B.")
    phase: Literal["idle", "expand", "search", "hold"] = "idle"
    best_buffer_s: float | None = None
    best_objective: float | None = Field(default=None, description="P4BS eq. 2's f, best.")
    trials: int = Field(default=0, ge=0, description="Trials in the current search.")
    searches: int = Field(default=0, ge=0)
    loss_signal: LossSignal | None = Field(default=None, description="The loss it reads.")
    message: str | None = Field(
        default=None,
        max_length=1024,
        description="What the search cannot do (no feasible buffer, no loss to read).",
    )
    degraded: bool = Field(
        default=False, description="The search is stopped: its loss signal is not measured."
    )


class PolicyTargetReport(BaseModel):
    """An admitted policy's target as the running controller holds it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    namespace: str = Field(max_length=63)
    name: str = Field(max_length=253)
    dtn_host: str = Field(max_length=63)
    target_rate_bps: float
    dtn_rate_limit_bps: float | None = Field(
        default=None,
        description="The cap in force on its DTN host (None: its host has no shaper, or no "
        "cap is in force yet; its rate is then held only through the link's sum).",
    )
    capped: bool = Field(
        default=False, description="Whether its DTN host has a cap loop of its own."
    )


class ControllerState(BaseModel):
    """The controller's ``/state`` (snake_case JSON, SI units like ``RuntimeConfig``): what
    the operator copies into the link's and its policies' status, and the demo and the lab
    record."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    component: Literal["controller"] = "controller"
    link: str
    strategy: Strategy
    failsafe_active: bool
    target_rate_bps: float | None = Field(
        default=None, description="R* the controller decides on (taken live from its config)."
    )
    policies: list[PolicyTargetReport] = Field(
        default_factory=list,
        max_length=MAX_ADMITTED,
        description="Each admitted policy's share of R*, as the controller holds them.",
    )
    campus_rate_limit_bps: float | None = None
    dtn_rate_limit_bps: float | None = None
    tracking: TrackingReport = TrackingReport()
    state: SampleReport | None = None
    buffer: BufferReport | None = None


class ConfigError(ValueError):
    """A runtime config file that cannot be used; the message names the problem."""


@dataclass(frozen=True)
class Admitted:
    """An admitted policy as the resolver needs it."""

    namespace: str
    name: str
    spec: DTNTransferPolicySpec


def resolve_runtime_config(
    link_name: str,
    generation: int,
    link: BorderLinkSpec,
    admitted: Sequence[Admitted],
    collector_address: str,
    dtn_shaper_address: str | Mapping[str, tuple[str, str]] | None = None,
    security: ChannelSecurity | None = None,
    held: Sequence[HeldDtnHost] = (),
    link_uid: str = "",
    tap: tuple[str, str] | None = None,
    model_digest: str | None = None,
) -> RuntimeConfig:
    """Fill every default of ``link`` (tuned gains, limits, fail-safe rates) for the
    ``admitted`` policies (one per DTN host; none: the loop runs idle, leaving the campus
    the whole link). ``dtn_shaper_address``: where the `scidmz shaper` of a tc DTN cap
    runs, one address for every host (a loop run by hand) or, per host, its address and
    the name its certificate carries (the operator's); ``held``: hosts whose shaper is
    kept at its fail-safe after their policy went (``api.holds``), whose classes stay
    measured so that nothing restarts; ``tap``: the address of the software tap the
    operator runs for ``link.switch.tap`` and the name its certificate carries;
    ``model_digest``: the sha256 of ``spec.controller.modelRef``'s model as read."""
    switch_address = link.switch.address or (tap[0] if tap else None)
    if switch_address is None:
        raise ValueError("switch.tap: the software tap's address comes from the operator")
    target = sum(parse_rate(p.spec.target_rate) for p in admitted)
    capacity = parse_rate(link.capacity)
    ctl = link.controller
    cca, strategy, note = campus_model(ctl.model, ctl.strategy, admitted)
    tuned = TUNED_GAINS[cca]
    kp, ki, kw = tuned["pi" if strategy == "pi" else "mlc"]
    gains = (
        GainsConfig(kp=ctl.gains.kp, ki=ctl.gains.ki, kw=ctl.gains.kw)
        if ctl.gains is not None
        else GainsConfig(kp=kp, ki=ki, kw=kw)
    )
    limits = ctl.limits
    desired = ctl.desired_state
    pipeline = link.switch.pipeline
    trivial_rate = capacity - target
    failsafe_rate = (
        trivial_rate if link.failsafe.rate == "trivial" else parse_rate(link.failsafe.rate)
    )
    act = link.actuator
    hosts = [(p, link.dtn_host(p.spec.dtn_host)) for p in admitted]
    busy = {p.spec.dtn_host for p in admitted}
    holds = [h for h in held if h.host not in busy]
    kept = [h for h in (link.dtn_host(hold.host) for hold in holds) if h is not None]

    def shaper_at(host: str) -> tuple[str | None, str | None]:
        if dtn_shaper_address is None or isinstance(dtn_shaper_address, str):
            return dtn_shaper_address, None
        return dtn_shaper_address.get(host, (None, None))

    caps = [
        *_dtn_actuators(link, hosts, shaper_at),
        *(c for c in (_held_dtn_actuator(link, h, shaper_at) for h in holds) if c is not None),
    ]
    return RuntimeConfig(
        link=link_name,
        link_uid=link_uid,
        generation=generation,
        policies=[
            AdmittedPolicyConfig(
                namespace=p.namespace,
                name=p.name,
                dtn_host=p.spec.dtn_host,
                target_rate_bps=parse_rate(p.spec.target_rate),
            )
            for p in admitted
        ],
        target_rate_bps=target,
        bottleneck_capacity_bps=capacity,
        sample_time_s=parse_duration(link.sample_time),
        dtn_classes=[
            DtnClassConfig(
                host=h.name, prefix=h.receiver_prefix, class_id=dtn_class(link.dtn_hosts.index(h))
            )
            for h in [*(h for _, h in hosts if h is not None), *kept]
        ],
        dtn_congestion_control=cca,
        campus_prefix=link.campus.remote_prefix,
        switch=SwitchConfig(
            address=switch_address,
            device_id=link.switch.device_id,
            election_id=link.switch.election_id,
            campus_port=link.switch.ports.campus,
            dtn_port=link.switch.ports.dtn,
            bottleneck_port=link.switch.ports.bottleneck,
            pipeline_config_map=pipeline.config_map_ref.name if pipeline else None,
            p4info_key=pipeline.config_map_ref.p4info_key if pipeline else None,
            device_config_key=pipeline.config_map_ref.device_config_key if pipeline else None,
            tls_secret=link.switch.tls.secret_name if link.switch.tls else None,
            tls_server_name=link.switch.tls.server_name if link.switch.tls else None,
            tap_server_name=tap[1] if tap and link.switch.tap else None,
        ),
        controller=ControllerConfig(
            strategy=strategy,
            strategy_note=note,
            gains=gains,
            min_rate_bps=parse_rate(limits.min),
            max_rate_bps=parse_rate(limits.max) if limits.max is not None else capacity,
            max_step_bps=(
                parse_rate(limits.max_step)
                if limits.max_step is not None
                else DEFAULT_MAX_STEP_FRACTION * capacity
            ),
            # |e| never exceeds the capacity, so a wider band is the same filter
            integral_band_bps=(
                min(parse_rate(limits.integral_band), capacity)
                if limits.integral_band is not None
                else default_integral_band_bps(cca, capacity)
            ),
            desired_dtn_rtt_s=parse_duration(desired.dtn_rtt) if desired.dtn_rtt else None,
            desired_campus_rtt_s=(
                parse_duration(desired.campus_rtt) if desired.campus_rtt else None
            ),
            desired_state_mode=desired.mode,
            pinned_after_s=parse_duration(ctl.pinned_after),
            inverse_model_config_map=ctl.model_ref.config_map_name if ctl.model_ref else None,
            inverse_model_key=ctl.model_ref.model_key if ctl.model_ref else None,
            inverse_model_digest=model_digest if ctl.model_ref else None,
        ),
        actuator=ActuatorConfig(
            type=act.type,
            tc_node_name=act.tc.node_name if act.tc else None,
            tc_interface=act.tc.interface if act.tc else None,
            sim_address=(
                (act.sim.address if act.sim and act.sim.address else switch_address)
                if act.type == "sim"
                else None
            ),
            dtn=caps[0] if caps else None,
            more_dtns=caps[1:],
        ),
        failsafe=FailsafeConfig(
            stale_after_s=(
                parse_duration(link.failsafe.stale_after)
                if link.failsafe.stale_after is not None
                else DEFAULT_STALE_SAMPLES * parse_duration(link.sample_time)
            ),
            rate_bps=failsafe_rate,
        ),
        telemetry=TelemetryConfig(
            rtt_smoothing=link.telemetry.rtt_smoothing,
            flow_timeout_s=parse_duration(link.telemetry.flow_timeout),
            active_flow_packets=link.telemetry.active_flow_packets,
            active_flow_window_s=parse_duration(link.telemetry.active_flow_window),
            idle_timeout_s=parse_duration(link.telemetry.idle_timeout),
            rtt_horizon_s=parse_duration(link.telemetry.rtt_horizon),
            digest_hold_s=parse_duration(link.telemetry.digest_hold),
            max_active_flows=link.telemetry.max_active_flows,
        ),
        collector_address=collector_address,
        security=security,
        buffer=_buffer_config(link),
    )


def campus_model(
    model: CongestionControl | None, strategy: Strategy, admitted: Sequence[Admitted]
) -> tuple[CongestionControl, Strategy, str | None]:
    """The campus loop's model (the DTN congestion control whose inverse model and tuned
    gains it runs), its strategy, and why the strategy is not the link's. The model is the
    administrators' (``spec.controller.model``); unset, the admitted DTNs' own when they
    share one. No model is identified on mixed congestion control, so there ``mlc`` runs
    as ``pi`` (on the Cubic gains), and the note says so."""
    if model is not None:
        return model, strategy, None
    ccas = sorted({p.spec.congestion_control for p in admitted})
    if len(ccas) <= 1:
        return (ccas[0] if ccas else "cubic"), strategy, None
    if strategy != "mlc":
        return "cubic", strategy, None
    note = (
        f"mlc runs as pi: the admitted DTNs mix congestion control ({', '.join(ccas)}) and no "
        "inverse model is identified on such mixes; set spec.controller.model to run one"
    )
    return "cubic", "pi", note


def _buffer_config(link: BorderLinkSpec) -> BufferConfig | None:
    b = link.buffer
    if b is None:
        return None
    a = b.actuator
    sim = a.sim.address if a.sim and a.sim.address else link.switch.address
    return buffer_config(b, sim if a.type == "sim" else None)


def buffer_config(b: BufferSpec, sim_address: str | None = None) -> BufferConfig:
    """``spec.buffer`` in SI units (``sim_address``: the simulator's, for type sim)."""
    a = b.actuator
    return BufferConfig(
        actuator_type=a.type,
        tc_interface=a.tc.interface if a.tc else None,
        sim_address=sim_address,
        min_s=parse_duration(b.min),
        max_s=parse_duration(b.max),
        default_s=parse_duration(b.default),
        max_queue_delay_s=parse_duration(b.max_queue_delay),
        loss_scale=b.loss_scale,
        loss_weight=b.weights.loss,
        delay_weight=b.weights.delay,
        loss_signal=loss_signal_of(b),
        settle_s=parse_duration(b.settle),
        settling_window_s=parse_duration(b.settling.window),
        settling_tolerance=b.settling.tolerance,
        max_wait_s=parse_duration(b.settling.max_wait),
        measure_s=parse_duration(b.measure),
        max_iterations=b.max_iterations,
        stop_ei=b.stop_ei,
        stop_noise=b.stop_noise,
        utilisation_gate=b.utilisation_gate,
        change_lag=b.change_detector.lag,
        change_threshold=b.change_detector.threshold,
        change_influence=b.change_detector.influence,
    )


ShaperAt = Callable[[str], tuple[str | None, str | None]]
"""A DTN host's shaper agent: its address and the name its certificate carries."""


def _dtn_actuators(
    link: BorderLinkSpec,
    hosts: Sequence[tuple[Admitted, DtnHost | None]],
    shaper_at: ShaperAt,
) -> list[DtnActuatorConfig]:
    """The cap of each admitted host with a shaper, on its own policy's target (a host
    without one is held only through the link's sum)."""
    return [
        _dtn_actuator(link, policy, host, shaper_at)
        for policy, host in hosts
        if host is not None and host.shaper is not None
    ]


def _dtn_gains(shaper: DtnShaperSpec, cca: CongestionControl) -> GainsConfig:
    """A host's cap gains: the administrators' (``shaper.gains``), else those tuned for
    its DTN's congestion control (the cap holds that DTN alone)."""
    if shaper.gains is not None:
        return GainsConfig(kp=shaper.gains.kp, ki=shaper.gains.ki, kw=shaper.gains.kw)
    kp, ki, kw = TUNED_GAINS[cca]["dtn"]
    return GainsConfig(kp=kp, ki=ki, kw=kw)


def _dtn_actuator(
    link: BorderLinkSpec, policy: Admitted, host: DtnHost, shaper_at: ShaperAt
) -> DtnActuatorConfig:
    """One admitted host's cap (its shaper's type, gains, bounds and fail-safe)."""
    assert host.shaper is not None
    shaper = host.shaper
    target_bps = parse_rate(policy.spec.target_rate)
    address: str | None
    server_name: str | None = None
    if shaper.type == "sim":
        address = shaper.sim.address if shaper.sim and shaper.sim.address else link.switch.address
    elif shaper.type == "tc":
        address, server_name = shaper_at(host.name)
    else:
        address = None
    return DtnActuatorConfig(
        type=shaper.type,
        host=host.name,
        tc_node_name=shaper.tc.node_name if shaper.tc else None,
        tc_interface=shaper.tc.interface if shaper.tc else None,
        address=address,
        server_name=server_name,
        gains=_dtn_gains(shaper, policy.spec.congestion_control),
        failsafe_rate_bps=(
            target_bps if shaper.failsafe_rate == "target" else parse_rate(shaper.failsafe_rate)
        ),
        min_rate_bps=(
            parse_rate(shaper.min_rate)
            if shaper.min_rate is not None
            else DEFAULT_DTN_MIN_FRACTION * target_bps
        ),
        target_rate_bps=target_bps,
    )


def _held_dtn_actuator(
    link: BorderLinkSpec, held: HeldDtnHost, shaper_at: ShaperAt
) -> DtnActuatorConfig | None:
    """The cap of a held host: its agent holds ``held.failsafe_rate`` (and never goes
    below it: the floor is the same rate, so no stray request can lower it)."""
    host = link.dtn_host(held.host)
    shaper = host.shaper if host is not None else None
    if host is None or shaper is None or shaper.tc is None:
        return None
    tc = shaper.tc
    rate = parse_rate(held.failsafe_rate)
    address, server_name = shaper_at(host.name)
    return DtnActuatorConfig(
        type=shaper.type,
        host=host.name,
        tc_node_name=tc.node_name,
        tc_interface=tc.interface,
        address=address,
        server_name=server_name,
        gains=_dtn_gains(shaper, "cubic"),
        failsafe_rate_bps=rate,
        min_rate_bps=rate,
        held=True,
    )


def dump_runtime_config(config: RuntimeConfig) -> str:
    """Deterministic YAML (stable key order) so unchanged policies render identical bytes."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=True)


LIVE_CONFIG_FIELDS: tuple[tuple[str, ...], ...] = (
    ("generation",),
    ("policies",),
    ("dtn_classes",),
    ("target_rate_bps",),
    ("dtn_congestion_control",),
    ("bottleneck_capacity_bps",),
    ("controller", "gains"),
    ("controller", "min_rate_bps"),
    ("controller", "max_rate_bps"),
    ("controller", "max_step_bps"),
    ("controller", "integral_band_bps"),
    ("controller", "desired_dtn_rtt_s"),
    ("controller", "desired_campus_rtt_s"),
    ("controller", "pinned_after_s"),
    ("controller", "strategy_note"),
    ("failsafe", "stale_after_s"),
    ("failsafe", "rate_bps"),
    ("actuator", "dtn"),
    ("actuator", "more_dtns"),
)
"""Parts of a runtime config a running controller takes from its reloaded file
(``control.live_config``; the DTN caps whole: it opens and closes their actuators live), the
generation, which only labels the file, and the DTN classes, which only the collector reads
(live). The collector reads none of the others. The
tenant's fields are among them (its target, and its DTN's
congestion control, which picks the inverse model and the default gains): no edit of a
policy rolls the loop's pods. The strategy is live between ``mlc`` and ``pi``
(``RATE_LOOP_STRATEGIES``): a policy whose DTN's congestion control makes a mix turns
``mlc`` into ``pi``, and the running controller switches."""

RATE_LOOP_STRATEGIES = frozenset({"mlc", "pi"})
"""Strategies a running controller switches between live: both run the figure-5 filter
on a base rate (the inverse model's, or B − R*), so a switch is a new base rate under the
slew limit."""


CAP_LIVE_FIELDS = frozenset(
    {"gains", "failsafe_rate_bps", "min_rate_bps", "held", "target_rate_bps"}
)
"""A DTN cap's fields its agent and the controller take live (the rest is its wiring)."""


COLLECTOR_FIELDS = frozenset(
    {"api_version", "link", "link_uid", "sample_time_s", "campus_prefix", "switch",
     "telemetry", "bottleneck_capacity_bps", "collector_address", "security"}
)  # fmt: skip
"""What ``scidmz collector`` reads of its config at start; ``dtn_classes`` it follows
live (``telemetry.collector.Collector.set_plan``)."""
SHAPER_FIELDS = frozenset({"api_version", "link", "link_uid", "security", "actuator"})
"""What a DTN host's ``scidmz shaper`` reads at start: its identity and its interface (its
fail-safe and bounds it follows live)."""


def restart_relevant(
    config: RuntimeConfig, component: str = "controller", dtn_host: str | None = None
) -> dict[str, Any]:
    """What ``component``'s process is built around: for the controller, ``config``
    without its ``LIVE_CONFIG_FIELDS``; for the collector and a DTN shaper, the parts they
    read at start (``COLLECTOR_FIELDS``, ``SHAPER_FIELDS``, live parts left out). Two
    configs that agree here differ only in what the running process takes live or never
    reads, so the operator rolls a component's pods only when this changes."""
    data: dict[str, Any] = config.model_dump(mode="json")
    for path in LIVE_CONFIG_FIELDS:
        parent = data
        for key in path[:-1]:
            parent = parent.get(key) or {}
        parent.pop(path[-1], None)
    if data["controller"]["strategy"] in RATE_LOOP_STRATEGIES:
        data["controller"]["strategy"] = "mlc|pi"  # switched live
    if component == "collector":
        return {k: v for k, v in data.items() if k in COLLECTOR_FIELDS}
    if component == "dtn-shaper":
        # a host's agent reads its own cap's entry (``dtn_host``; None: the first cap)
        shaper = {k: v for k, v in data.items() if k in SHAPER_FIELDS}
        caps = [c for c in config.actuator.dtns if dtn_host in (None, c.host)]
        shaper["actuator"] = (
            caps[0].model_dump(mode="json", exclude=set(CAP_LIVE_FIELDS)) if caps else None
        )
        return shaper
    return data


def read_config_bytes(path: Path) -> bytes | None:
    """A config file's bytes, to tell whether it changed (None: unreadable now, e.g.
    mid-way through a ConfigMap update)."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def config_changed(seen: bytes | None, current: bytes | None) -> bool:
    """Whether a followed config file changed: new bytes that differ from those last
    acted on. An unreadable file (None) is no change: the process runs on as configured
    and acts when the file is readable again (and only if it then differs)."""
    return current is not None and current != seen


async def config_changes(
    path: Path, wake: asyncio.Event, interval_s: Callable[[], float]
) -> AsyncIterator[None]:
    """Yield each time ``path`` holds new bytes, looking every ``interval_s()`` (at once when
    ``wake`` is set, e.g. on SIGHUP); see ``config_changed`` for what counts."""
    seen = read_config_bytes(path)
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval_s())
        wake.clear()
        current = read_config_bytes(path)
        if config_changed(seen, current):
            seen = current
            yield


def load_runtime_config(path: Path) -> RuntimeConfig:
    """Read and validate a config file; raise :class:`ConfigError` naming what is wrong."""
    return load_yaml_model(path, RuntimeConfig, "config", ConfigError)


def workload_tls(config: RuntimeConfig) -> TlsSource | None:
    """This workload's own mutual-TLS material (``security.identity_dir``), followed as
    the operator rotates it; None when the config runs plaintext. ``ConfigError`` naming
    the files that are missing or bad at start."""
    if config.security is None:
        return None
    directory = Path(config.security.identity_dir)
    try:
        initial = load_mutual_tls(directory)
    except TlsConfigError as error:
        raise ConfigError(f"security.identity_dir: {error}") from None
    return TlsSource(lambda: load_mutual_tls(directory), initial, where=str(directory))


def _tc_dtn(config: RuntimeConfig, host: str | None = None) -> tuple[DtnActuatorConfig, str]:
    """DTN host ``host``'s tc cap (None: the first one) and its interface; ValueError when
    the config has none."""
    for dtn in config.actuator.dtns:
        if dtn.type == "tc" and dtn.tc_interface is not None and host in (None, dtn.host):
            return dtn, dtn.tc_interface
    which = f"DTN host {host}" if host else "a DTN host"
    raise ValueError(f"the config has no tc DTN cap for {which} (a shaper of type tc)")


def shaper_failsafe(config: RuntimeConfig, host: str | None = None) -> tuple[float, float]:
    """A tc DTN cap's agent's own fail-safe: the cap (its host's ``failsafeRate``) and how
    long the controller must have been quiet before it applies it, staleAfter + 2T (the
    controller's own fail-safe comes first). ValueError without that tc cap."""
    dtn, _ = _tc_dtn(config, host)
    return dtn.failsafe_rate_bps, config.failsafe.stale_after_s + 2 * config.sample_time_s


def shaper_bounds(config: RuntimeConfig, host: str | None = None) -> tuple[float, float]:
    """The range a DTN shaper agent clamps every requested cap to: its host's floor
    (``min_rate_bps``) to the link's capacity. ValueError without that tc cap."""
    dtn, _ = _tc_dtn(config, host)
    return dtn.min_rate_bps, config.bottleneck_capacity_bps


def shaper_agent_args(
    config: RuntimeConfig, listen: str, config_path: str | None = None, host: str | None = None
) -> list[str]:
    """``scidmz shaper`` arguments for the link's tc DTN cap, wherever it runs: its
    interface and its own fail-safe (``shaper_failsafe``). With ``config_path`` (the
    operator's Deployment, which mounts the link's ConfigMap there) the agent reads its
    fail-safe from that file and follows it live, so a new target rate does not roll the
    pod; without it (the lab) the fail-safe is given as options."""
    _, interface = _tc_dtn(config, host)
    args = ["shaper", "--interface", interface]
    if config_path is not None:
        args += ["--config", config_path]
        if host is not None:
            args += ["--dtn-host", host]
    else:
        rate, quiet_s = shaper_failsafe(config, host)
        args += ["--failsafe-rate", f"{rate:.0f}bps", "--stale-after", f"{quiet_s:g}s"]
    return [*args, "--listen", listen]
