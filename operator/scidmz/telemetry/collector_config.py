"""From the operator's runtime config to the collector's settings, checking what it can.

Everything that can be judged without the switch is judged here, before any connection,
and reported together: tap ports that are not distinct 9-bit port numbers, class prefixes
that longest-prefix match cannot separate, an unreadable pipeline to push. (Whether the
switch has those ports, and whether its P4Info fits, is judged at connection time.)
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

from scidmz.api.runtime import ConfigError, RuntimeConfig, workload_tls
from scidmz.api.types import PREFIX_OVERLAP_MESSAGE, prefixes_conflict
from scidmz.auth.mtls import TlsConfigError
from scidmz.auth.switch_tls import ChannelTls, load_channel_tls
from scidmz.telemetry.collector import CollectorSettings
from scidmz.telemetry.program import DtnClass, Plan
from scidmz.telemetry.sampling import EstimatorSettings

MAX_PORT = 511  # ports are bit<9> in v1model and TNA


def _problems(config: RuntimeConfig) -> list[str]:
    found = []
    sw = config.switch
    ports = {"campus": sw.campus_port, "dtn": sw.dtn_port, "bottleneck": sw.bottleneck_port}
    if len(set(ports.values())) != len(ports):
        found.append(f"switch ports must be distinct, got {ports}")
    for name, port in ports.items():
        if not 0 <= port <= MAX_PORT:
            found.append(f"switch port {name}={port} is not a switch port number (0..{MAX_PORT})")
    prefixes_ok = True
    for name, prefix in (
        *(("dtn prefix", dtn) for dtn in config.dtn_prefixes),
        ("campus prefix", config.campus_prefix),
    ):
        try:
            ipaddress.ip_network(prefix)
        except ValueError as error:
            found.append(f"{name} {prefix!r}: {error}")
            prefixes_ok = False
    if prefixes_ok:
        for dtn in config.dtn_prefixes:
            if prefixes_conflict(dtn, config.campus_prefix):
                found.append(f"{PREFIX_OVERLAP_MESSAGE} ({dtn}, {config.campus_prefix})")
        for k, dtn in enumerate(config.dtn_prefixes):
            for other in config.dtn_prefixes[k + 1 :]:
                if prefixes_conflict(dtn, other) or prefixes_conflict(other, dtn):
                    found.append(f"dtn prefixes {dtn} and {other} overlap")
    for what in ("host", "class_id"):
        values = [getattr(c, what) for c in config.dtn_classes]
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            found.append(f"dtn classes: {what} {', '.join(repeated)} given twice")
    return found


def check_runtime_config(config: RuntimeConfig) -> None:
    """Raise ``ConfigError`` listing every problem the collector can see without the
    switch (at start, and in a reloaded config before its DTN classes are taken)."""
    problems = _problems(config)
    if problems:
        raise ConfigError("; ".join(problems))


def _pipeline(config: RuntimeConfig, pipeline_dir: Path) -> tuple[p4i.P4Info, bytes] | None:
    sw = config.switch
    if not sw.pipeline_config_map:
        return None
    p4info_path = pipeline_dir / (sw.p4info_key or "p4info.txtpb")
    device_path = pipeline_dir / (sw.device_config_key or "device_config.bin")
    try:
        info = text_format.Parse(p4info_path.read_text(), p4i.P4Info())
    except OSError as error:
        raise ConfigError(f"pipeline P4Info {p4info_path}: {error.strerror}") from None
    except text_format.ParseError as error:
        raise ConfigError(f"pipeline P4Info {p4info_path}: not a text P4Info: {error}") from None
    device_config = device_path.read_bytes() if device_path.exists() else b""
    return info, device_config


def collector_settings(
    config: RuntimeConfig, pipeline_dir: Path, tls_dir: Path
) -> CollectorSettings:
    """Raise ``ConfigError`` listing every problem; nothing connects before this passes.

    ``pipeline_dir`` and ``tls_dir`` are where the pipeline ConfigMap and the TLS Secret
    are mounted; each is read only when the config names one.
    """
    check_runtime_config(config)
    t = config.telemetry
    sw = config.switch
    switch_tls_dir, server_name = (tls_dir, sw.tls_server_name) if sw.tls_secret else (None, None)
    if sw.tap_server_name:
        # the operator's software tap: dialled with this workload's own identity
        if config.security is None:
            raise ConfigError("a software tap is dialled over the loop's mutual TLS: no security")
        switch_tls_dir, server_name = Path(config.security.identity_dir), sw.tap_server_name
    return CollectorSettings(
        link=config.link,
        link_uid=config.link_uid,
        address=sw.address,
        device_id=sw.device_id,
        election_id=sw.election_id,
        sample_time_s=config.sample_time_s,
        plan=Plan(
            dtn_classes=dtn_plan(config),
            campus_prefix=config.campus_prefix,
            campus_port=sw.campus_port,
            dtn_port=sw.dtn_port,
            bottleneck_port=sw.bottleneck_port,
            active_flow_packets=t.active_flow_packets,
            active_flow_window_ns=round(t.active_flow_window_s * 1e9),
            idle_timeout_ns=round(t.idle_timeout_s * 1e9),
            rtt_horizon_ns=round(t.rtt_horizon_s * 1e9),
            digest_max_timeout_ns=round(t.digest_hold_s * 1e9),
        ),
        estimator=EstimatorSettings(
            rtt_smoothing=t.rtt_smoothing,
            flow_timeout_s=t.flow_timeout_s,
            capacity_bps=config.bottleneck_capacity_bps,
        ),
        pipeline=_pipeline(config, pipeline_dir),
        tls=_switch_tls(switch_tls_dir, server_name) if switch_tls_dir else None,
        tls_dir=switch_tls_dir,
        channel_tls=workload_tls(config),
    )


def _switch_tls(directory: Path, server_name: str | None) -> ChannelTls:
    try:
        return load_channel_tls(directory, server_name)
    except TlsConfigError as error:
        raise ConfigError(str(error)) from None


def dtn_plan(config: RuntimeConfig) -> tuple[DtnClass, ...]:
    """The DTN classes of a runtime config, as the collector programs them."""
    return tuple(DtnClass(c.host, c.prefix, c.class_id) for c in config.dtn_classes)


def listen_address(config: RuntimeConfig) -> str:
    """Where the sample stream listens: all interfaces, on the port the controller dials."""
    _, _, port = config.collector_address.rpartition(":")
    return f"[::]:{port}"
