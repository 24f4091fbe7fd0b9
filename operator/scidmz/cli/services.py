"""The long-running services: ``operator``, ``collector``, ``controller``, ``shaper``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from scidmz.api.flags import host_port, within
from scidmz.api.runtime import ConfigError
from scidmz.cli.common import (
    ConfigOption,
    VerboseOption,
    configure_logging,
    fail,
    probes_on_loopback,
    raise_fd_limit,
    resolve_http_port,
)


def operator(
    standalone: Annotated[
        bool, typer.Option(help="No peering: a single replica (development).")
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """Run the scidmz operator (kopf): BorderLinks and the DTNTransferPolicies on them."""
    import os

    import kopf
    from prometheus_client import REGISTRY

    from scidmz.k8s import handlers  # noqa: F401  (registers the handlers)
    from scidmz.k8s.settings import OperatorSettings
    from scidmz.metrics.endpoint import serve_http
    from scidmz.metrics.http import Health, register_build_info

    if standalone:
        os.environ["SCIDMZ_STANDALONE"] = "true"
    raise_fd_limit()
    settings = OperatorSettings()
    # Bound before kopf starts so that a taken port stops start-up with a clear error and
    # /metrics answers as soon as /healthz does.
    register_build_info(REGISTRY, "operator")  # ScidmzOperatorDown fires on its absence
    # /readyz turns true once start-up has reached the API server and holds the CA: a
    # replica that cannot is not counted as available (kopf's /healthz answers before)
    health = Health()
    try:
        serve_http(settings.metrics_port, health)
    except OSError as error:
        fail(f"cannot serve /metrics on port {settings.metrics_port}: {error}")
    kopf.configure(verbose=verbose, log_prefix=False)
    # cluster-wide: links are cluster-scoped and tenants' policies are in their namespaces
    kopf.run(
        clusterwide=True,
        standalone=settings.standalone,
        peering_name=settings.peering_name,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
        memo=kopf.Memo(health=health),
    )


def collector(
    config: ConfigOption,
    listen: Annotated[
        str | None,
        typer.Option(
            help="host:port of the sample stream (default: collectorAddress's port).",
            callback=host_port,
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="Port of /metrics, /healthz, /readyz (default: $SCIDMZ_HTTP_PORT or 9460)."
        ),
    ] = None,
    pipeline_dir: Annotated[
        Path, typer.Option(help="Where the pipeline ConfigMap to push is mounted.")
    ] = Path("/etc/scidmz-pipeline"),
    tls_dir: Annotated[
        Path,
        typer.Option(help="Where the switch TLS Secret (ca.crt, tls.crt, tls.key) is mounted."),
    ] = Path("/etc/scidmz-tls"),
    check: Annotated[
        bool, typer.Option("--check", help="Validate the config and exit (0: it would run).")
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """Telemetry collector: P4Runtime client computing the seven state variables y(t)."""

    from scidmz.api.runtime import load_runtime_config
    from scidmz.telemetry.collector_config import collector_settings, listen_address
    from scidmz.telemetry.service import CollectorProcess

    configure_logging(verbose)
    raise_fd_limit()
    try:
        runtime = load_runtime_config(config)
        settings = collector_settings(runtime, pipeline_dir, tls_dir)
    except ConfigError as error:
        fail(str(error))
        return
    if check:
        typer.echo(f"{config}: a valid collector config for link {runtime.link}")
        return
    port = resolve_http_port(http_port, 9460)
    process = CollectorProcess(
        settings, listen or listen_address(runtime), port, config=(config, runtime)
    )
    message = process.run_until_signalled()
    if message:
        fail(message)


def controller(
    config: ConfigOption,
    model: Annotated[
        Path | None,
        typer.Option(help="Inverse model (default: <models dir>/<cca>/inverse.onnx)."),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="Port of /metrics, /healthz, /readyz, /state (default: $SCIDMZ_HTTP_PORT or 9461)."
        ),
    ] = None,
    netns: Annotated[
        str | None, typer.Option(help="Network namespace of the tc actuator's interface.")
    ] = None,
    buffer_netns: Annotated[
        str | None,
        typer.Option(
            help="Network namespace of the tc buffer actuator's interface (default: --netns). "
            "On a node both interfaces are the node's; the lab keeps BR1 and the campus "
            "shaper in two namespaces."
        ),
    ] = None,
    switch_tls_dir: Annotated[
        Path,
        typer.Option(
            help="Where the switch TLS Secret is mounted (a sim actuator talks to the "
            "simulator on the switch's port)."
        ),
    ] = Path("/etc/scidmz-tls"),
    restore_for: Annotated[
        float,
        typer.Option(
            help="On SIGTERM, seconds to keep trying to restore the fail-safe rates when the "
            "shapers refuse them; exit 1 if they never take them.",
            callback=within(0, 3600, low_open=False),
        ),
    ] = 20.0,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Validate the config and the model, and exit (0: it would run)."
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """MLC controller: ANN inverse model + anti-windup PI setting u(t) every T.

    The config file is watched: a new target rate, gains, limits or fail-safe settings are
    taken live within a sample time (at once on SIGHUP); other changes need a restart."""
    import asyncio

    from scidmz.api.runtime import load_runtime_config, workload_tls
    from scidmz.control.service import ControllerProcess
    from scidmz.control.settings import (
        controller_settings,
        load_model,
        more_dtn_actuators,
        open_actuator,
        open_buffer_actuator,
        open_dtn_actuator,
    )

    configure_logging(verbose)
    raise_fd_limit()
    try:
        runtime = load_runtime_config(config)
        settings = replace(controller_settings(runtime), restore_for_s=restore_for)
        inverse = load_model(runtime, model)
        tls = workload_tls(runtime)
    except ConfigError as error:
        fail(str(error))
        return
    if check:
        typer.echo(f"{config}: a valid controller config for link {runtime.link}")
        return
    port = resolve_http_port(http_port, 9461)

    async def main() -> str | None:
        import signal

        try:
            actuator = await open_actuator(runtime, netns, switch_tls_dir)
            dtn_actuator = await open_dtn_actuator(runtime, switch_tls_dir)
            more_caps = more_dtn_actuators(runtime, switch_tls_dir)
            buffer_actuator = await open_buffer_actuator(
                runtime, buffer_netns or netns, switch_tls_dir
            )
        except ConfigError as error:
            return str(error)
        process = ControllerProcess(
            settings, actuator, inverse, port, dtn_actuator, config=(config, runtime), tls=tls,
            buffer_actuator=buffer_actuator, model_path=model,
            probes_on_loopback=probes_on_loopback(), more_dtn_actuators=more_caps,
        )  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, process.reload_requested.set)
        try:
            restored = await process.serve(stop)
        except ConfigError as error:
            return str(error)
        if not restored:
            raise RestoreFailed
        return None

    _run_to_the_end(main(), "restoring the fail-safe rates")


class RestoreFailed(Exception):
    """A stopping service could not leave its fail-safe rate in force."""


def _run_to_the_end(main: Coroutine[Any, Any, str | None], fail_safe: str) -> None:
    """Run a service's ``main``: its message (a refused start) exits 2, a stop that could
    not leave ``fail_safe`` in force exits 1."""
    try:
        message = asyncio.run(main)
    except RestoreFailed:
        fail(f"stopped without {fail_safe} (see the log above)", code=1)
    if message:
        fail(message)


def shaper(
    interface: Annotated[str, typer.Option(help="Interface whose egress tbf carries the rate.")],
    failsafe_rate: Annotated[
        str | None,
        typer.Option(help="Rate applied when no SetRate came for --stale-after, e.g. 600Mbps."),
    ] = None,
    listen: Annotated[
        str, typer.Option(help="host:port of scidmz.v1.Shaper.", callback=host_port)
    ] = "0.0.0.0:9470",
    stale_after: Annotated[
        str | None,
        typer.Option(help="Apply the fail-safe rate after this long without a rate (10s)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="The link's runtime config (what the operator mounts): the fail-safe is "
            "its host's cap's failsafe rate (--dtn-host) after staleAfter + 2T, every cap is "
            "clamped to the "
            "host's minRate..capacity, both followed live as the file changes, and with "
            "security set it serves mutual TLS to the link's controller alone. Instead of "
            "--failsafe-rate and --stale-after."
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="Port of /metrics, /healthz, /readyz (default: $SCIDMZ_HTTP_PORT or 9471)."
        ),
    ] = None,
    netns: Annotated[str | None, typer.Option(help="Network namespace of the interface.")] = None,
    dtn_host: Annotated[
        str | None,
        typer.Option(
            help="With --config: the DTN host (spec.dtnHosts[].name) whose cap this agent "
            "holds (default: the config's first tc cap)."
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the interface's original root qdisc is recorded before the agent "
            "first replaces it (a directory on the node that outlives the pod)."
        ),
    ] = None,
    restore: Annotated[
        bool,
        typer.Option(
            "--restore",
            help="Put the recorded original root qdisc back (with --state-dir) and exit: what "
            "the operator runs on the node once the shaper is removed for good.",
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """The DTN actuator's tc agent: a tbf on this node's interface, set by the controller.

    It holds its own fail-safe rate when the controller goes quiet, so a dead or
    partitioned controller never leaves a stale cap on the DTN."""
    if restore:
        _restore_interface(interface, netns, state_dir)
        return
    import asyncio

    from scidmz.api.runtime import load_runtime_config, workload_tls
    from scidmz.api.types import MAX_RATE_BPS
    from scidmz.api.units import UnitError, parse_duration, parse_rate
    from scidmz.auth.channels import add_port, server_options
    from scidmz.auth.identity import PeerPolicy, controller_only
    from scidmz.auth.tls_source import TlsSource
    from scidmz.control.actuators import ActuatorError, TcActuator

    configure_logging(verbose)
    raise_fd_limit()
    tls: TlsSource | None = None
    peers: PeerPolicy | None = None
    bounds: tuple[float, float] | None = None
    if config is not None:
        if failsafe_rate is not None or stale_after is not None:
            fail("--config gives the fail-safe: drop --failsafe-rate and --stale-after")
        try:
            rate, stale, bounds = _shaper_failsafe_from(config, dtn_host)
            runtime = load_runtime_config(config)
            tls = workload_tls(runtime)
        except ValueError as error:
            fail(f"--config: {error}")
            return
        peers = controller_only(runtime.link, runtime.link_uid) if tls is not None else None
    else:
        if failsafe_rate is None:
            fail("--failsafe-rate (or --config) is required")
            return
        try:
            rate = parse_rate(failsafe_rate)
            stale = parse_duration(stale_after or "10s")
        except UnitError as error:
            fail(f"--failsafe-rate / --stale-after: {error}")
            return
        if not 0 < stale <= 3600:
            fail(f"--stale-after must be > 0 and at most 60m, got {stale_after}")
        if not 0 < rate <= MAX_RATE_BPS:
            fail(f"--failsafe-rate must be above 0 and at most 10Tbps, got {failsafe_rate}")
    port = resolve_http_port(http_port, 9471)

    async def main() -> str | None:
        import signal

        import grpc
        from prometheus_client import CollectorRegistry

        from scidmz.control.interface_state import record_original
        from scidmz.control.shaper import ShaperService, follow_config
        from scidmz.metrics.endpoint import serve_http
        from scidmz.metrics.http import Health, register_build_info
        from scidmz.proto import telemetry_pb2_grpc

        try:
            if state_dir is not None:
                typer.echo(await record_original(state_dir, interface, netns), err=True)
            actuator = await TcActuator.open(interface, netns)
        except ActuatorError as error:
            return f"--interface: {error}"
        except OSError as error:
            return f"--state-dir: {error}"
        service = ShaperService(actuator, rate, stale, peers=peers, bounds=bounds)
        server = grpc.aio.server(options=server_options())
        telemetry_pb2_grpc.add_ShaperServicer_to_server(service, server)
        if not add_port(server, listen, tls):
            await actuator.close()
            return f"--listen {listen}: cannot bind (port in use or address invalid)"
        await service.apply_failsafe("starting")  # a known rate from the start
        registry = CollectorRegistry()
        register_build_info(registry, "shaper")
        health = Health()
        try:
            http = serve_http(
                port,
                health,
                registry=registry,
                tls=tls,
                probes_on_loopback=probes_on_loopback() and tls is not None,
            )
        except OSError as error:
            await actuator.close()
            return f"cannot serve /healthz on port {port}: {error}"
        health.set_ready(True, f"shaping {interface}")
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        typer.echo(f"shaper on {interface}: scidmz.v1.Shaper at {listen}", err=True)
        follower = (
            asyncio.create_task(
                follow_config(service, config, lambda p: _shaper_failsafe_from(p, dtn_host))
            )
            if config is not None
            else None
        )
        try:
            restored = await service.watch(stop)
        finally:
            if follower is not None:
                follower.cancel()
            await server.stop(0.5)
            await actuator.close()
            http.shutdown()
        if not restored:
            raise RestoreFailed
        return None

    _run_to_the_end(main(), "applying the fail-safe rate")


def _restore_interface(interface: str, netns: str | None, state_dir: Path | None) -> None:
    import asyncio

    from scidmz.control.actuators import ActuatorError
    from scidmz.control.interface_state import restore_original

    configure_logging(False)
    if state_dir is None:
        fail("--restore needs --state-dir (where the original was recorded)")
    try:
        typer.echo(asyncio.run(restore_original(state_dir, interface, netns)))
    except (ActuatorError, OSError, ValueError) as error:
        fail(f"--restore: {error}", code=1)


def _shaper_failsafe_from(
    path: Path, host: str | None = None
) -> tuple[float, float, tuple[float, float] | None]:
    """DTN host ``host``'s agent's fail-safe (cap, quiet time) and bounds from a runtime
    config (None: its first tc cap); ValueError (``ConfigError``) naming what is wrong."""
    from scidmz.api.runtime import load_runtime_config, shaper_bounds, shaper_failsafe

    runtime = load_runtime_config(path)
    return (*shaper_failsafe(runtime, host), shaper_bounds(runtime, host))
