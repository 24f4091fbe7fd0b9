"""The resolved runtime configuration: a policy with every default filled in, in SI units.

The operator writes it into the policy's ConfigMap (key ``config.yaml``); ``scidmz collector``
and ``scidmz controller`` read it with ``--config``. Resolution is a pure function of the
spec, so the same policy always renders byte-identical config (the ConfigMap is only
rewritten when the policy really changed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from scidmz.api.errors import load_yaml_model
from scidmz.api.policy import (
    MAX_GAIN,
    MAX_RATE_BPS,
    ActuatorType,
    CongestionControl,
    DTNTransferPolicySpec,
    HostPort,
    Strategy,
)
from scidmz.api.units import parse_duration, parse_rate

CONFIG_KEY = "config.yaml"
DEFAULT_MAX_STEP_FRACTION = 0.2
TUNED_INTEGRAL_BAND_FRACTION: dict[str, float | None] = {"cubic": 0.05, "bbr": None}
"""The campus filter's default integral band per DTN congestion control, as a fraction of
B_max (``control.antiwindup``: for Cubic ~3 σ of the DTN's 1 s rate samples at 1 Gb/s);
None: integrate always (figure 5). A band is tuned with the gains it goes with: the shipped
BBR gains were tuned without one, and under a 5 % band their campus filter limit-cycled
beside the DTN cap (std u 19.6 % of B at a constant R*, transfers at 0.94 R*)."""


def default_integral_band_bps(congestion_control: str, capacity_bps: float) -> float:
    """The campus filter's integral band when the policy sets none (the capacity: always)."""
    fraction = TUNED_INTEGRAL_BAND_FRACTION.get(congestion_control)
    return fraction * capacity_bps if fraction is not None else capacity_bps


DEFAULT_STALE_SAMPLES = 3
"""failsafe.staleAfter when the policy gives none: this many sample times."""

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
# handed straight to ``scidmz collector|controller --config`` is checked as hard as a policy.
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


class ActuatorConfig(_Frozen):
    type: ActuatorType
    tc_node_name: str | None = None
    tc_interface: str | None = None
    sim_address: HostPort | None = None
    dtn: DtnActuatorConfig | None = None


class DtnActuatorConfig(_Frozen):
    """The DTN cap's actuator and filter."""

    type: ActuatorType
    tc_node_name: str | None = None
    tc_interface: str | None = None
    address: HostPort | None = Field(
        default=None,
        description="sim: the target's address; tc: the `scidmz shaper` agent's host:port.",
    )
    gains: GainsConfig
    failsafe_rate_bps: Rate


class FailsafeConfig(_Frozen):
    stale_after_s: Window
    rate_bps: Rate


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


class RuntimeConfig(_Frozen):
    """Everything the collector and controller need, with units in the field names."""

    api_version: Literal["scidmz.io/runtime/v1"] = "scidmz.io/runtime/v1"
    policy: str
    namespace: str
    generation: int = Field(ge=0)
    target_rate_bps: PositiveRate
    bottleneck_capacity_bps: PositiveRate
    sample_time_s: float = Field(ge=0.1, le=60)
    dtn_prefix: str
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

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeConfig:
        """The API's cross-field rules, in SI units, for configs that skipped the API."""
        capacity = self.bottleneck_capacity_bps
        c = self.controller
        dtn = self.actuator.dtn
        checks = (
            (self.target_rate_bps < capacity, "target_rate_bps must be below the capacity"),
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
    sampled_at: str = Field(description="When the collector measured it (RFC 3339).")
    sequence: int = Field(ge=0)


class TrackingReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    mrae: float | None = Field(default=None, description="Eq. 3 over the window.")
    window: int = Field(default=0, ge=0, description="Samples in the window.")


class ControllerState(BaseModel):
    """The controller's ``/state`` (snake_case JSON, SI units like ``RuntimeConfig``): what
    the operator copies into the policy's status, and the demo and the lab record."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="null")

    component: Literal["controller"] = "controller"
    policy: str
    strategy: Strategy
    failsafe_active: bool
    target_rate_bps: float | None = Field(
        default=None, description="R* the controller decides on (taken live from its config)."
    )
    campus_rate_limit_bps: float | None = None
    dtn_rate_limit_bps: float | None = None
    tracking: TrackingReport = TrackingReport()
    state: SampleReport | None = None


class ConfigError(ValueError):
    """A runtime config file that cannot be used; the message names the problem."""


def resolve_runtime_config(
    name: str,
    namespace: str,
    generation: int,
    spec: DTNTransferPolicySpec,
    collector_address: str,
    dtn_shaper_address: str | None = None,
) -> RuntimeConfig:
    """Fill every default of ``spec`` (tuned gains, limits, fail-safe rates).
    ``dtn_shaper_address`` is where the operator runs the `scidmz shaper` of a tc DTN
    actuator."""
    target = parse_rate(spec.target_rate)
    capacity = parse_rate(spec.bottleneck_capacity)
    ctl = spec.controller
    tuned = TUNED_GAINS[spec.dtn.congestion_control]
    kp, ki, kw = tuned["pi" if ctl.strategy == "pi" else "mlc"]
    gains = (
        GainsConfig(kp=ctl.gains.kp, ki=ctl.gains.ki, kw=ctl.gains.kw)
        if ctl.gains is not None
        else GainsConfig(kp=kp, ki=ki, kw=kw)
    )
    limits = ctl.limits
    desired = ctl.desired_state
    pipeline = spec.switch.pipeline
    trivial_rate = capacity - target
    failsafe_rate = (
        trivial_rate if spec.failsafe.rate == "trivial" else parse_rate(spec.failsafe.rate)
    )
    act = spec.actuator
    return RuntimeConfig(
        policy=name,
        namespace=namespace,
        generation=generation,
        target_rate_bps=target,
        bottleneck_capacity_bps=capacity,
        sample_time_s=parse_duration(spec.sample_time),
        dtn_prefix=spec.dtn.receiver_prefix,
        dtn_congestion_control=spec.dtn.congestion_control,
        campus_prefix=spec.campus.remote_prefix,
        switch=SwitchConfig(
            address=spec.switch.address,
            device_id=spec.switch.device_id,
            election_id=spec.switch.election_id,
            campus_port=spec.switch.ports.campus,
            dtn_port=spec.switch.ports.dtn,
            bottleneck_port=spec.switch.ports.bottleneck,
            pipeline_config_map=pipeline.config_map_ref.name if pipeline else None,
            p4info_key=pipeline.config_map_ref.p4info_key if pipeline else None,
            device_config_key=pipeline.config_map_ref.device_config_key if pipeline else None,
            tls_secret=spec.switch.tls.secret_name if spec.switch.tls else None,
            tls_server_name=spec.switch.tls.server_name if spec.switch.tls else None,
        ),
        controller=ControllerConfig(
            strategy=ctl.strategy,
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
                else default_integral_band_bps(spec.dtn.congestion_control, capacity)
            ),
            desired_dtn_rtt_s=parse_duration(desired.dtn_rtt) if desired.dtn_rtt else None,
            desired_campus_rtt_s=(
                parse_duration(desired.campus_rtt) if desired.campus_rtt else None
            ),
            desired_state_mode=desired.mode,
            pinned_after_s=parse_duration(ctl.pinned_after),
        ),
        actuator=ActuatorConfig(
            type=act.type,
            tc_node_name=act.tc.node_name if act.tc else None,
            tc_interface=act.tc.interface if act.tc else None,
            sim_address=(
                (act.sim.address if act.sim and act.sim.address else spec.switch.address)
                if act.type == "sim"
                else None
            ),
            dtn=_dtn_actuator(spec, target, tuned["dtn"], dtn_shaper_address),
        ),
        failsafe=FailsafeConfig(
            stale_after_s=(
                parse_duration(spec.failsafe.stale_after)
                if spec.failsafe.stale_after is not None
                else DEFAULT_STALE_SAMPLES * parse_duration(spec.sample_time)
            ),
            rate_bps=failsafe_rate,
        ),
        telemetry=TelemetryConfig(
            rtt_smoothing=spec.telemetry.rtt_smoothing,
            flow_timeout_s=parse_duration(spec.telemetry.flow_timeout),
            active_flow_packets=spec.telemetry.active_flow_packets,
            active_flow_window_s=parse_duration(spec.telemetry.active_flow_window),
            idle_timeout_s=parse_duration(spec.telemetry.idle_timeout),
            rtt_horizon_s=parse_duration(spec.telemetry.rtt_horizon),
            digest_hold_s=parse_duration(spec.telemetry.digest_hold),
            max_active_flows=spec.telemetry.max_active_flows,
        ),
        collector_address=collector_address,
    )


def _dtn_actuator(
    spec: DTNTransferPolicySpec,
    target_bps: float,
    default_gains: tuple[float, float, float],
    shaper_address: str | None,
) -> DtnActuatorConfig | None:
    dtn = spec.actuator.dtn
    if dtn is None:
        return None
    kp, ki, kw = (dtn.gains.kp, dtn.gains.ki, dtn.gains.kw) if dtn.gains else default_gains
    address: str | None
    if dtn.type == "sim":
        address = dtn.sim.address if dtn.sim and dtn.sim.address else spec.switch.address
    elif dtn.type == "tc":
        address = shaper_address
    else:
        address = None
    return DtnActuatorConfig(
        type=dtn.type,
        tc_node_name=dtn.tc.node_name if dtn.tc else None,
        tc_interface=dtn.tc.interface if dtn.tc else None,
        address=address,
        gains=GainsConfig(kp=kp, ki=ki, kw=kw),
        failsafe_rate_bps=(
            target_bps if dtn.failsafe_rate == "target" else parse_rate(dtn.failsafe_rate)
        ),
    )


def dump_runtime_config(config: RuntimeConfig) -> str:
    """Deterministic YAML (stable key order) so unchanged policies render identical bytes."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=True)


LIVE_CONFIG_FIELDS: tuple[tuple[str, ...], ...] = (
    ("generation",),
    ("target_rate_bps",),
    ("bottleneck_capacity_bps",),
    ("controller", "gains"),
    ("controller", "min_rate_bps"),
    ("controller", "max_rate_bps"),
    ("controller", "max_step_bps"),
    ("controller", "integral_band_bps"),
    ("controller", "desired_dtn_rtt_s"),
    ("controller", "desired_campus_rtt_s"),
    ("controller", "pinned_after_s"),
    ("failsafe", "stale_after_s"),
    ("failsafe", "rate_bps"),
    ("actuator", "dtn", "gains"),
    ("actuator", "dtn", "failsafe_rate_bps"),
)
"""Parts of a runtime config a running controller takes from its reloaded file
(``control.live_config``), and the generation, which only labels the file. The collector
reads none of them."""


def restart_relevant(config: RuntimeConfig) -> dict[str, Any]:
    """``config`` without its ``LIVE_CONFIG_FIELDS``: what the processes are built around.
    Two configs that agree here differ only in what a running controller takes live, so the
    operator rolls the pods only when this changes."""
    data: dict[str, Any] = config.model_dump(mode="json")
    for path in LIVE_CONFIG_FIELDS:
        parent = data
        for key in path[:-1]:
            parent = parent.get(key) or {}
        parent.pop(path[-1], None)
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


def load_runtime_config(path: Path) -> RuntimeConfig:
    """Read and validate a config file; raise :class:`ConfigError` naming what is wrong."""
    return load_yaml_model(path, RuntimeConfig, "config", ConfigError)


def _tc_dtn(config: RuntimeConfig) -> tuple[DtnActuatorConfig, str]:
    """The tc DTN actuator and its interface; ValueError when the policy has none."""
    dtn = config.actuator.dtn
    if dtn is None or dtn.type != "tc" or dtn.tc_interface is None:
        raise ValueError("the policy has no tc DTN actuator (actuator.dtn.type: tc)")
    return dtn, dtn.tc_interface


def shaper_failsafe(config: RuntimeConfig) -> tuple[float, float]:
    """The tc DTN actuator's agent's own fail-safe: the cap (``actuator.dtn.failsafeRate``)
    and how long the controller must have been quiet before it applies it, staleAfter + 2T
    (the controller's own fail-safe comes first). ValueError without a tc DTN actuator."""
    dtn, _ = _tc_dtn(config)
    return dtn.failsafe_rate_bps, config.failsafe.stale_after_s + 2 * config.sample_time_s


def shaper_agent_args(
    config: RuntimeConfig, listen: str, config_path: str | None = None
) -> list[str]:
    """``scidmz shaper`` arguments for the policy's tc DTN actuator, wherever it runs: its
    interface and its own fail-safe (``shaper_failsafe``). With ``config_path`` (the
    operator's Deployment, which mounts the policy's ConfigMap there) the agent reads its
    fail-safe from that file and follows it live, so a new target rate does not roll the
    pod; without it (the lab) the fail-safe is given as options."""
    _, interface = _tc_dtn(config)
    args = ["shaper", "--interface", interface]
    if config_path is not None:
        args += ["--config", config_path]
    else:
        rate, quiet_s = shaper_failsafe(config)
        args += ["--failsafe-rate", f"{rate:.0f}bps", "--stale-after", f"{quiet_s:g}s"]
    return [*args, "--listen", listen]
