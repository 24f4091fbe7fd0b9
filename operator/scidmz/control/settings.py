"""From the operator's runtime config to a running controller: settings, model, actuator.

Everything that can stop start-up is checked here, before any rate is applied: gains out
of range, limits.min > limits.max, a model whose interface is not 22 features → 1 rate,
an actuator interface that does not exist. Each raises ``ConfigError`` with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from scidmz.api.runtime import (
    ConfigError,
    DtnActuatorConfig,
    RuntimeConfig,
    default_integral_band_bps,
    workload_tls,
)
from scidmz.auth.channels import ClientTls
from scidmz.auth.mtls import TlsConfigError
from scidmz.auth.switch_tls import load_channel_tls
from scidmz.auth.switch_tls import open_channel as open_switch_channel
from scidmz.control.actuators import (
    Actuator,
    ActuatorError,
    DryRunActuator,
    ShaperActuator,
    SimActuator,
    SimDtnActuator,
    TcActuator,
)
from scidmz.control.antiwindup import ControlConfigError, Gains, Limits
from scidmz.control.buffer_actuators import (
    BufferActuator,
    DryRunBufferActuator,
    SimBufferActuator,
    TcBufferActuator,
)
from scidmz.control.buffer_loop import BufferLoop
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import PolicyTarget, Setpoint
from scidmz.control.loop import ControllerSettings
from scidmz.control.model import InverseModel, ModelError

T = TypeVar("T")

SWITCH_TLS_DIR = Path("/etc/scidmz-tls")
MODEL_DIR = Path("/etc/scidmz-model")
"""Where the operator mounts a link's custom inverse model (spec.controller.modelRef)."""
"""Where the operator mounts the switch's TLS Secret (the collector's, and a sim
actuator's controller)."""


def default_models_dir() -> Path:
    """``$SCIDMZ_MODELS_DIR``, else the repository's (or image's) ``models/``."""
    env = os.environ.get("SCIDMZ_MODELS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "models"


def _checked(field: str, build: Callable[[], T]) -> T:
    """``build()``, with a filter's config error turned into a ConfigError naming ``field``."""
    try:
        return build()
    except ControlConfigError as error:
        raise ConfigError(f"{field}: {error}") from None


def _client_tls(config: RuntimeConfig, server_name: str) -> ClientTls:
    material = workload_tls(config)
    assert material is not None  # only called with config.security set
    return ClientTls(material, server_name)


def controller_settings(config: RuntimeConfig) -> ControllerSettings:
    c = config.controller
    gains = _checked("controller.gains", lambda: Gains(c.gains.kp, c.gains.ki, c.gains.kw))
    band_bps = (
        c.integral_band_bps
        if c.integral_band_bps is not None
        else default_integral_band_bps(
            config.dtn_congestion_control, config.bottleneck_capacity_bps
        )
    )
    capacity = config.bottleneck_capacity_bps
    limits = _checked(
        "controller.limits",
        lambda: Limits(c.min_rate_bps, c.max_rate_bps, c.max_step_bps, band_bps, capacity),
    )
    caps = [_dtn_control(cap, c.max_step_bps, capacity) for cap in config.actuator.dtns]
    return ControllerSettings(
        link=config.link,
        strategy=c.strategy,
        setpoint=Setpoint(
            target_rate_bps=config.target_rate_bps,
            capacity_bps=config.bottleneck_capacity_bps,
            dtn_rtt_s=c.desired_dtn_rtt_s,
            campus_rtt_s=c.desired_campus_rtt_s,
        ),
        gains=gains,
        limits=limits,
        sample_time_s=config.sample_time_s,
        stale_after_s=config.failsafe.stale_after_s,
        failsafe_rate_bps=config.failsafe.rate_bps,
        collector_address=config.collector_address,
        collector_tls=_client_tls(config, config.security.collector_server_name)
        if config.security is not None
        else None,
        desired_state_mode=c.desired_state_mode,
        dtn=caps[0] if caps else None,
        more_dtns=tuple(caps[1:]),
        max_active_flows=config.telemetry.max_active_flows,
        pinned_after_s=c.pinned_after_s,
        policies=tuple(
            PolicyTarget(p.namespace, p.name, p.dtn_host, p.target_rate_bps)
            for p in config.policies
        ),
    )


def _dtn_control(dtn: DtnActuatorConfig, max_step_bps: float, capacity_bps: float) -> DtnControl:
    """One DTN host's cap filter, on its own target."""
    where = "actuator.dtn" if not dtn.host else f"actuator.dtn ({dtn.host})"
    return DtnControl(
        gains=_checked(f"{where}.gains", lambda: Gains(dtn.gains.kp, dtn.gains.ki, dtn.gains.kw)),
        # the cap moves over the link's range at the campus limit's slew; its integral
        # is figure 5's, unconditional: its feed-forward (a cap at R*) leaves the DTN a
        # steady ~8 % of R* under target (a BBR DTN in the benchmark), beyond any band
        # the campus filters use, so a band would stop it where it is needed
        # and its back-calculation answers the slew too, as its gains were tuned
        # floored where the shaper agent clamps too (the host's minRate)
        limits=Limits(
            min(dtn.min_rate_bps, capacity_bps),
            capacity_bps,
            max_step_bps,
            integral_limit_bps=capacity_bps,
            slew_in_windup=True,
        ),
        failsafe_rate_bps=dtn.failsafe_rate_bps,
        held=dtn.held,
        host=dtn.host,
        target_bps=dtn.target_rate_bps,
    )


def load_model(config: RuntimeConfig, path: Path | None) -> InverseModel | None:
    if config.controller.strategy != "mlc":
        return None
    custom = config.controller.inverse_model_key
    chosen = path or (
        MODEL_DIR / custom
        if custom
        else default_models_dir() / config.dtn_congestion_control / "inverse.onnx"
    )
    try:
        return InverseModel(chosen)
    except ModelError as error:
        raise ConfigError(str(error)) from None


def _simulator_channel(config: RuntimeConfig, address: str, switch_tls_dir: Path) -> Any:
    """The channel to a simulator behind the switch's port: with the switch's TLS when the
    link has it (the collector's credentials, mounted here too for a sim actuator)."""
    if not config.switch.tls_secret:
        return None
    try:
        tls = load_channel_tls(switch_tls_dir, config.switch.tls_server_name, actuator=True)
    except TlsConfigError as error:
        raise ConfigError(str(error)) from None
    return open_switch_channel(address, tls)


async def open_actuator(
    config: RuntimeConfig, netns: str | None = None, switch_tls_dir: Path = SWITCH_TLS_DIR
) -> Actuator:
    a = config.actuator
    if a.type == "dryRun":
        return DryRunActuator()
    if a.type == "sim":
        address = a.sim_address or config.switch.address
        return SimActuator(address, channel=_simulator_channel(config, address, switch_tls_dir))
    if not a.tc_interface:
        raise ConfigError("actuator.tc.interface is required for the tc actuator")
    try:
        return await TcActuator.open(a.tc_interface, netns)
    except ActuatorError as error:
        raise ConfigError(str(error)) from None


async def open_buffer_actuator(
    config: RuntimeConfig, netns: str | None = None, switch_tls_dir: Path = SWITCH_TLS_DIR
) -> BufferActuator | None:
    """The buffer actuator of ``spec.buffer``, or None without one. A tc buffer is a port
    of the node the controller runs on (the API requires the campus shaper's node)."""
    b = config.buffer
    if b is None:
        return None
    if b.actuator_type == "dryRun":
        return DryRunBufferActuator()
    if b.actuator_type == "sim":
        address = b.sim_address or config.switch.address
        return SimBufferActuator(
            address, channel=_simulator_channel(config, address, switch_tls_dir)
        )
    if not b.tc_interface:
        raise ConfigError("buffer.actuator.tc.interface is required for the tc buffer actuator")
    try:
        return await TcBufferActuator.open(b.tc_interface, netns)
    except ActuatorError as error:
        raise ConfigError(f"buffer: {error}") from None


def buffer_loop(
    config: RuntimeConfig, actuator: BufferActuator | None, registry: CollectorRegistry
) -> BufferLoop | None:
    """The controller's buffer search over ``actuator`` (None without ``spec.buffer``)."""
    if config.buffer is None or actuator is None:
        return None
    return BufferLoop(
        config.buffer,
        actuator,
        config.bottleneck_capacity_bps,
        config.sample_time_s,
        config.link,
        registry,
    )


def dtn_cap_actuator(
    config: RuntimeConfig, dtn: DtnActuatorConfig, switch_tls_dir: Path = SWITCH_TLS_DIR
) -> Actuator:
    """One DTN host's cap actuator. A tc DTN actuator is reached through the `scidmz
    shaper` on the DTN host (the operator runs it beside the policy)."""
    if dtn.type == "dryRun":
        return DryRunActuator()
    if not dtn.address:
        field = "actuator.dtn.sim.address" if dtn.type == "sim" else "the shaper address"
        raise ConfigError(f"the {dtn.type} DTN actuator of {dtn.host} needs {field}")
    if dtn.type == "sim":
        return SimDtnActuator(
            dtn.address,
            dtn_host=dtn.host,
            channel=_simulator_channel(config, dtn.address, switch_tls_dir),
        )
    security = config.security
    server_name = (
        dtn.server_name
        or (security.dtn_shaper_server_name if security is not None else None)
        or dtn.address.rpartition(":")[0]
    )
    tls = _client_tls(config, server_name) if security is not None else None
    return ShaperActuator(dtn.address, tls=tls)


async def open_dtn_actuator(
    config: RuntimeConfig, switch_tls_dir: Path = SWITCH_TLS_DIR
) -> Actuator | None:
    """The first DTN cap's actuator, or None without one."""
    dtn = config.actuator.dtn
    return None if dtn is None else dtn_cap_actuator(config, dtn, switch_tls_dir)


def more_dtn_actuators(
    config: RuntimeConfig, switch_tls_dir: Path = SWITCH_TLS_DIR
) -> dict[str, Actuator]:
    """The other DTN caps' actuators, by host."""
    return {
        dtn.host: dtn_cap_actuator(config, dtn, switch_tls_dir) for dtn in config.actuator.more_dtns
    }
