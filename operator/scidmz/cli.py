"""The ``scidmz`` command: one entry point for every component."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scidmz.api.flags import within
from scidmz.api.runtime import ConfigError
from scidmz.lab.cli import lab_app

if TYPE_CHECKING:
    import grpc

    from scidmz.learn.identification import CampusLoad
    from scidmz.switch.netsim_source import NetsimSource
    from scidmz.switch.packet_source import PacketTapSource

app = typer.Typer(
    help="scidmz: keep Science DMZ transfers at their target rate on a shared campus link.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
testenv_app = typer.Typer(
    help="A local Kubernetes control plane (etcd, apiserver, kwok).", no_args_is_help=True
)
app.add_typer(testenv_app, name="testenv")
bench_app = typer.Typer(help="Benchmarks that print their figures.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
sim_app = typer.Typer(
    help="The embedded campus / Science DMZ network simulator.", no_args_is_help=True
)
app.add_typer(sim_app, name="sim")
app.add_typer(lab_app, name="lab")

ConfigOption = Annotated[
    Path, typer.Option("--config", help="Runtime config rendered by the operator (YAML).")
]


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _http_port(option: int | None, default: int) -> int:
    """The --http-port option, else $SCIDMZ_HTTP_PORT (set by the operator), else default."""
    import os

    return option if option is not None else int(os.environ.get("SCIDMZ_HTTP_PORT", default))


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def operator(
    namespace: Annotated[
        str | None,
        typer.Option(help="Watch only this namespace (default: all; env SCIDMZ_NAMESPACE)."),
    ] = None,
    standalone: Annotated[
        bool, typer.Option(help="No peering: a single replica (development).")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the DTNTransferPolicy operator (kopf)."""
    import os

    import kopf
    from prometheus_client import REGISTRY, start_http_server

    from scidmz.k8s import handlers  # noqa: F401  (registers the handlers)
    from scidmz.k8s.settings import OperatorSettings
    from scidmz.metrics.http import register_build_info

    if namespace:
        os.environ["SCIDMZ_NAMESPACE"] = namespace
    if standalone:
        os.environ["SCIDMZ_STANDALONE"] = "true"
    settings = OperatorSettings()
    # Bound before kopf starts so that a taken port stops start-up with a clear error and
    # /metrics answers as soon as /healthz does.
    register_build_info(REGISTRY, "operator")  # ScidmzOperatorDown fires on its absence
    try:
        start_http_server(settings.metrics_port)
    except OSError as error:
        _fail(f"cannot serve /metrics on port {settings.metrics_port}: {error}")
    kopf.configure(verbose=verbose, log_prefix=False)
    kopf.run(
        clusterwide=settings.namespace is None,
        namespaces=[settings.namespace] if settings.namespace else [],
        standalone=settings.standalone,
        peering_name=settings.peering_name,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
    )


@app.command()
def collector(
    config: ConfigOption,
    listen: Annotated[
        str | None,
        typer.Option(help="host:port of the sample stream (default: collectorAddress's port)."),
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
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Telemetry collector: P4Runtime client computing the seven state variables y(t)."""

    from scidmz.api.runtime import load_runtime_config
    from scidmz.telemetry.collector_config import collector_settings, listen_address
    from scidmz.telemetry.service import CollectorProcess

    _configure_logging(verbose)
    try:
        runtime = load_runtime_config(config)
        settings = collector_settings(runtime, pipeline_dir, tls_dir)
    except ConfigError as error:
        _fail(str(error))
        return
    if check:
        typer.echo(f"{config}: a valid collector config for {runtime.namespace}/{runtime.policy}")
        return
    port = _http_port(http_port, 9460)
    process = CollectorProcess(settings, listen or listen_address(runtime), port)
    message = process.run_until_signalled()
    if message:
        _fail(message)


@app.command()
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
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Validate the config and the model, and exit (0: it would run)."
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """MLC controller: ANN inverse model + anti-windup PI setting u(t) every T.

    The config file is watched: a new target rate, gains, limits or fail-safe settings are
    taken live within a sample time (at once on SIGHUP); other changes need a restart."""
    import asyncio

    from scidmz.api.runtime import load_runtime_config
    from scidmz.control.service import ControllerProcess
    from scidmz.control.settings import (
        controller_settings,
        load_model,
        open_actuator,
        open_dtn_actuator,
    )

    _configure_logging(verbose)
    try:
        runtime = load_runtime_config(config)
        settings = controller_settings(runtime)
        inverse = load_model(runtime, model)
    except ConfigError as error:
        _fail(str(error))
        return
    if check:
        typer.echo(f"{config}: a valid controller config for {runtime.namespace}/{runtime.policy}")
        return
    port = _http_port(http_port, 9461)

    async def main() -> str | None:
        import signal

        try:
            actuator = await open_actuator(runtime, netns)
            dtn_actuator = await open_dtn_actuator(runtime)
        except ConfigError as error:
            return str(error)
        process = ControllerProcess(
            settings, actuator, inverse, port, dtn_actuator, config=(config, runtime)
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, process.reload_requested.set)
        await process.serve(stop)
        return None

    message = asyncio.run(main())
    if message:
        _fail(message)


@app.command()
def shaper(
    interface: Annotated[str, typer.Option(help="Interface whose egress tbf carries the rate.")],
    failsafe_rate: Annotated[
        str | None,
        typer.Option(help="Rate applied when no SetRate came for --stale-after, e.g. 600Mbps."),
    ] = None,
    listen: Annotated[str, typer.Option(help="host:port of scidmz.v1.Shaper.")] = "0.0.0.0:9470",
    stale_after: Annotated[
        str | None,
        typer.Option(help="Apply the fail-safe rate after this long without a rate (10s)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="The policy's runtime config (what the operator mounts): the fail-safe is "
            "actuator.dtn's failsafe rate after staleAfter + 2T, followed live as the file "
            "changes. Instead of --failsafe-rate and --stale-after."
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="Port of /metrics, /healthz, /readyz (default: $SCIDMZ_HTTP_PORT or 9471)."
        ),
    ] = None,
    netns: Annotated[str | None, typer.Option(help="Network namespace of the interface.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """A tbf on this node's interface driven by the controller (the DTN actuator's tc
    agent); holds its own fail-safe rate if the controller goes quiet."""
    import asyncio

    from scidmz.api.policy import MAX_RATE_BPS
    from scidmz.api.units import UnitError, parse_duration, parse_rate
    from scidmz.control.actuators import ActuatorError, TcActuator

    _configure_logging(verbose)
    if config is not None:
        if failsafe_rate is not None or stale_after is not None:
            _fail("--config gives the fail-safe: drop --failsafe-rate and --stale-after")
        try:
            rate, stale = _shaper_failsafe_from(config)
        except ValueError as error:
            _fail(f"--config: {error}")
            return
    else:
        if failsafe_rate is None:
            _fail("--failsafe-rate (or --config) is required")
            return
        try:
            rate = parse_rate(failsafe_rate)
            stale = parse_duration(stale_after or "10s")
        except UnitError as error:
            _fail(f"--failsafe-rate / --stale-after: {error}")
            return
        if not 0 < stale <= 3600:
            _fail(f"--stale-after must be > 0 and at most 60m, got {stale_after}")
        if not 0 < rate <= MAX_RATE_BPS:
            _fail(f"--failsafe-rate must be above 0 and at most 10Tbps, got {failsafe_rate}")
    port = _http_port(http_port, 9471)

    async def main() -> str | None:
        import signal

        import grpc
        from prometheus_client import CollectorRegistry

        from scidmz.control.shaper import ShaperService, follow_config
        from scidmz.metrics.http import Health, register_build_info, serve_http
        from scidmz.proto import telemetry_pb2_grpc

        try:
            actuator = await TcActuator.open(interface, netns)
        except ActuatorError as error:
            return f"--interface: {error}"
        service = ShaperService(actuator, rate, stale)
        server = grpc.aio.server()
        telemetry_pb2_grpc.add_ShaperServicer_to_server(service, server)
        try:
            bound = server.add_insecure_port(listen)
        except RuntimeError as error:
            bound = 0
            log_error = str(error)
        else:
            log_error = "port in use or address invalid"
        if not bound:
            await actuator.close()
            return f"--listen {listen}: cannot bind ({log_error})"
        await service.apply_failsafe()  # a known rate from the start
        registry = CollectorRegistry()
        register_build_info(registry, "shaper")
        health = Health()
        try:
            http = serve_http(port, health, registry=registry)
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
            asyncio.create_task(follow_config(service, config, _shaper_failsafe_from))
            if config is not None
            else None
        )
        try:
            await service.watch(stop)
        finally:
            if follower is not None:
                follower.cancel()
            await server.stop(0.5)
            await actuator.close()
            http.shutdown()
        return None

    message = asyncio.run(main())
    if message:
        _fail(message)


def _shaper_failsafe_from(path: Path) -> tuple[float, float]:
    """The DTN agent's fail-safe (cap, quiet time) from a runtime config; ValueError
    (``ConfigError``) naming what is wrong."""
    from scidmz.api.runtime import load_runtime_config, shaper_failsafe

    return shaper_failsafe(load_runtime_config(path))


@app.command()
def crd(
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the DTNTransferPolicy CRD generated from the API models."""
    from scidmz.api.crd import render_crd_yaml

    text = render_crd_yaml()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


@app.command()
def p4info(
    arch: Annotated[str, typer.Option(help="v1model or tna.")] = "v1model",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here (default: standard output).")
    ] = None,
) -> None:
    """Render the P4Info of the p4/ programs from the pipeline contract (text format)."""
    from google.protobuf import text_format

    from scidmz.contract.pipeline import build_p4info

    if arch not in ("v1model", "tna"):
        _fail(f"--arch must be v1model or tna, not {arch!r}")
    text = text_format.MessageToString(build_p4info(arch))  # type: ignore[arg-type]
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


def _parse_ports(text: str) -> dict[str, int]:
    ports: dict[str, int] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in ("campus", "dtn", "bottleneck") or not value.strip().isdigit():
            raise ValueError(f"--ports wants campus=N,dtn=N,bottleneck=N, got {text!r}")
        ports[name.strip()] = int(value)
    if set(ports) != {"campus", "dtn", "bottleneck"}:
        raise ValueError(f"--ports wants campus=N,dtn=N,bottleneck=N, got {text!r}")
    return ports


def _target_credentials(
    cert: Path | None, key: Path | None, client_ca: Path | None
) -> grpc.ServerCredentials | None:
    """The target's TLS credentials (None: plaintext); bad flags exit 2 naming them."""
    if cert is None and key is None:
        if client_ca is not None:
            _fail("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        _fail("--tls-cert and --tls-key go together")
    assert cert is not None and key is not None
    from scidmz.switch.server import server_credentials
    from scidmz.telemetry.tls import looks_like_pem

    try:
        pems = [p.read_bytes() if p is not None else None for p in (cert, key, client_ca)]
    except OSError as error:
        _fail(f"{error.filename}: {error.strerror}")
        return None
    for path, pem in zip((cert, key, client_ca), pems, strict=True):
        if pem is not None and not looks_like_pem(pem):
            _fail(f"{path}: not PEM")
    return server_credentials(pems[0] or b"", pems[1] or b"", pems[2])


@app.command()
def target(
    source: Annotated[
        str,
        typer.Option(
            help="Packet source: sim (the network simulator), packets (a packet tap on "
            "--taps), lab (the packet tap of `scidmz lab up`)."
        ),
    ] = "sim",
    taps: Annotated[
        str,
        typer.Option(
            help="--source packets: the interfaces carrying each side of BR1, "
            "campus=IF,dtn=IF,bottleneck=IF,acks=IF (bottleneck: frames leaving the queue; "
            "acks: the returning ACKs)."
        ),
    ] = "",
    netns: Annotated[
        str | None, typer.Option(help="--source packets: the network namespace of --taps.")
    ] = None,
    capture_stats: Annotated[
        Path | None,
        typer.Option(
            help="--source packets/lab: where the tap writes its per-interface "
            "frame and kernel-drop counters every second (default: a temp file)."
        ),
    ] = None,
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="Scenario YAML for --source sim (default: the paper's)."),
    ] = None,
    listen: Annotated[str, typer.Option(help="host:port of the P4Runtime server.")] = (
        "127.0.0.1:9559"
    ),
    device_id: Annotated[int, typer.Option(help="P4Runtime device id.")] = 1,
    speedup: Annotated[
        float,
        typer.Option(help="Simulated seconds per wall-clock second.", callback=within(0, 1e6)),
    ] = 1.0,
    ports: Annotated[
        str, typer.Option(help="Tap wiring: which switch port sees which side of BR1.")
    ] = "campus=1,dtn=2,bottleneck=3",
    dtn_address: Annotated[
        str, typer.Option(help="Where the simulated DTN streams go (inside the DTN-r prefix).")
    ] = "203.0.113.10",
    campus_address: Annotated[
        str, typer.Option(help="Where simulated campus flows go (inside the remote prefix).")
    ] = "198.51.100.10",
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serve TLS with this PEM certificate (chain).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The PEM private key of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(help="Require client certificates signed by this PEM CA (mutual TLS)."),
    ] = None,
) -> None:
    """Software P4Runtime target running the scidmz pipeline over the network simulator.

    With --tls-cert/--tls-key the one port (P4Runtime and the sim actuator) speaks TLS only.
    """
    import asyncio
    import signal

    from scidmz.contract.pipeline import build_p4info
    from scidmz.lab.topology import LabError
    from scidmz.netsim.scenario import ScenarioError
    from scidmz.switch.observation import PacketSource
    from scidmz.switch.packet_source import PacketTapSource
    from scidmz.switch.runner import Target

    if source not in ("sim", "packets", "lab"):
        _fail(f"--source must be sim, packets or lab, not {source!r}")
    credentials = _target_credentials(tls_cert, tls_key, tls_client_ca)
    packet_source: PacketSource
    try:
        wired = _parse_ports(ports)
        if source != "sim":
            packet_source = _packet_tap(source, taps, netns, wired, capture_stats)
        else:
            packet_source = _netsim_source(scenario, wired, dtn_address, campus_address, speedup)
    except (ValueError, ScenarioError, LabError) as error:
        _fail(str(error))
        return

    async def main() -> None:
        device = Target(build_p4info("v1model"), packet_source, device_id=device_id)
        try:
            await device.start(listen, credentials)
        except OSError as error:
            _fail(str(error))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        described = f"sim at {speedup:g}x" if source == "sim" else f"{source} ({taps or 'lab'})"
        typer.echo(
            f"scidmz target: device {device_id} on {listen}, source {described}, "
            f"ports {ports}; Ctrl-C stops it"
        )
        stopping = asyncio.create_task(stop.wait())
        failing = asyncio.create_task(device.failed())
        await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
        failure = failing.result() if failing.done() else None
        failing.cancel()
        stopping.cancel()
        await device.stop()
        if failure is not None:
            _fail(f"the packet source failed: {failure}")

    try:
        if isinstance(packet_source, PacketTapSource):
            packet_source.start()
        asyncio.run(main())
    except RuntimeError as error:  # the tap reader refused an interface, or died
        _fail(str(error))
    finally:
        if isinstance(packet_source, PacketTapSource):
            packet_source.close()


def _netsim_source(
    scenario: Path | None, wired: dict[str, int], dtn_address: str, campus_address: str,
    speedup: float,
) -> NetsimSource:  # fmt: skip
    import ipaddress

    from scidmz.netsim.scenario import Scenario, load_scenario
    from scidmz.switch.netsim_source import NetsimSource, Wiring

    wiring = Wiring(
        campus_port=wired["campus"],
        dtn_port=wired["dtn"],
        bottleneck_port=wired["bottleneck"],
        dtn_address=ipaddress.ip_address(dtn_address),
        campus_address=ipaddress.ip_address(campus_address),
    )
    chosen = load_scenario(scenario) if scenario is not None else Scenario()
    return NetsimSource(chosen, wiring, speedup=speedup)


def _packet_tap(
    source: str, taps: str, netns: str | None, wired: dict[str, int], stats: Path | None
) -> PacketTapSource:
    """The packet tap of --source packets (--taps, --netns) or --source lab (the lab's)."""
    import tempfile

    from scidmz.lab import native, runner, topology
    from scidmz.switch.packet_source import PacketTapSource, TapWiring

    if source == "lab":
        runner.read_state()  # a clear error when no lab is up
        interfaces = dict(topology.TAP_INTERFACES)
        netns = topology.BORDER
    else:
        roles = ("campus", "dtn", "bottleneck", "acks")
        interfaces = {}
        for part in taps.split(","):
            role, _, interface = part.partition("=")
            if role.strip() not in roles or not interface.strip():
                raise ValueError(
                    f"--taps wants campus=IF,dtn=IF,bottleneck=IF,acks=IF, got {taps!r}"
                )
            interfaces[role.strip()] = interface.strip()
        if set(interfaces) != set(roles):
            raise ValueError(f"--taps wants campus=IF,dtn=IF,bottleneck=IF,acks=IF, got {taps!r}")
    wiring = TapWiring(
        campus_in=interfaces["campus"],
        dtn_in=interfaces["dtn"],
        bottleneck_out=interfaces["bottleneck"],
        acks_in=interfaces["acks"],
        campus_port=wired["campus"],
        dtn_port=wired["dtn"],
        bottleneck_port=wired["bottleneck"],
    )
    reader = [str(native.binary("tapreader"))]
    if netns:
        reader = ["ip", "netns", "exec", netns, *reader]
    if stats is None:
        stats = Path(tempfile.mkdtemp(prefix="scidmz-tap-")) / "capture.json"
    stats.unlink(missing_ok=True)
    return PacketTapSource(wiring, reader, stats)


@app.command()
def train(
    cca: Annotated[str, typer.Option(help="The DTN's congestion control: cubic or bbr.")],
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: models/<cca>).")
    ] = None,
    duration: Annotated[
        float,
        typer.Option(
            help="Identification run, simulated seconds (paper: 28,800).",
            callback=within(0, 1e7),
        ),
    ] = 28_800.0,
    seed: Annotated[int, typer.Option(help="Seeds the simulator, excitation and network.")] = 1,
    folds: Annotated[int, typer.Option(help="Cross-validation folds.")] = 3,
    max_epochs: Annotated[int, typer.Option(help="Epoch limit per fit.")] = 200,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="Scenario YAML (default: the paper's).")
    ] = None,
    dtn_cap_excitation: Annotated[
        bool | None,
        typer.Option(
            help="Also excite the DTN's sending-rate cap (the DTN actuator). Default: on for "
            "bbr (a BBR DTN takes the link whatever u is, leaving u unidentifiable), off for "
            "cubic (the paper's excitation)."
        ),
    ] = None,
    campus_flows: Annotated[
        str,
        typer.Option(
            help="Campus long flows during identification: MIN..MAX varies the load "
            "(log-uniform levels held 60-300 s, a fifth of them application-limited); one "
            "number N holds N flows throughout (the paper's 100)."
        ),
    ] = "10..250",
) -> None:
    """Identify the network on the simulator and train the MLC inverse model (ONNX)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from scidmz.netsim.scenario import ScenarioError, load_scenario

    try:
        from scidmz.learn.inverse_model import FitSettings
        from scidmz.learn.train import TrainSettings
        from scidmz.learn.train import train as run_training
    except ImportError as error:
        _fail(f"training needs the [train] extra (pip install 'scidmz[train]'): {error}")
        return
    if cca not in ("cubic", "bbr"):
        _fail(f"--cca must be cubic or bbr, not {cca!r}")
    if not duration >= 60 or folds < 2 or max_epochs < 1:
        _fail("--duration must be >= 60 s, --folds >= 2 and --max-epochs >= 1")
    try:
        chosen = load_scenario(scenario) if scenario is not None else None
        load = _campus_load(campus_flows)
    except (ScenarioError, ValueError) as error:
        _fail(str(error))
        return
    settings = TrainSettings(
        cca=cca,
        out_dir=out or Path("models") / cca,
        duration_s=duration,
        seed=seed,
        folds=folds,
        fit=FitSettings(max_epochs=max_epochs, seed=seed),
        scenario=chosen,
        dtn_cap_excitation=cca == "bbr" if dtn_cap_excitation is None else dtn_cap_excitation,
        campus_load=load,
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as bar:
        tasks: dict[str, object] = {}

        def progress(stage: str, done: float, total: float) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)  # type: ignore[arg-type]

        report = run_training(settings, progress)
    typer.echo(
        f"{cca}: {report.samples} rows; cross-validated relative error where the shaper "
        f"binds {report.mean('binding'):.1%} (naive {report.mean('naive_binding'):.1%}), "
        f"overall against the binding rate {report.mean('overall'):.1%} "
        f"(naive {report.mean('naive_overall'):.1%}); {report.seconds / 60:.1f} min; "
        f"wrote {settings.out_dir}/inverse.onnx and card.md"
    )


def _campus_load(text: str) -> CampusLoad:
    """``--campus-flows``: ``MIN..MAX`` or ``N``, each at most 10,000 flows."""
    from scidmz.learn.identification import CampusLoad

    low, dots, high = text.partition("..")
    parts = (low, high) if dots else (low, low)
    if not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--campus-flows wants MIN..MAX or N (whole numbers), got {text!r}")
    least, most = (int(p) for p in parts)
    if not 1 <= least <= most <= 10_000:
        raise ValueError(f"--campus-flows must satisfy 1 <= MIN <= MAX <= 10000, got {text!r}")
    return CampusLoad(least, most) if dots and least < most else CampusLoad.fixed(most)


@app.command()
def tune(
    cca: Annotated[str, typer.Option(help="The DTN's congestion control: cubic or bbr.")],
    models: Annotated[
        Path | None, typer.Option(help="Models folder (default: the shipped models/).")
    ] = None,
    filters: Annotated[
        str, typer.Option(help="Comma-separated filters to tune: pi, mlc, dtn.")
    ] = "pi,mlc,dtn",
    generations: Annotated[int, typer.Option(help="Generations (paper: 100).")] = 100,
    population: Annotated[int, typer.Option(help="Solutions per population (paper: 30).")] = 30,
    parents: Annotated[int, typer.Option(help="Parents mating (paper: 15).")] = 15,
    episodes: Annotated[int, typer.Option(help="120 s runs averaged per fitness.")] = 1,
    steady_episodes: Annotated[
        int,
        typer.Option(
            help="Runs at a constant R* (600 Mb/s) added to the fitness; 0: the paper's "
            "fitness (tracking only)."
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seeds the GA and the tuning runs.")] = 1,
    workers: Annotated[int, typer.Option(help="Worker processes for the fitness.")] = 1,
) -> None:
    """Tune the anti-windup gains with a genetic algorithm (paper §3.3, table 2) on the
    simulator; writes models/<cca>/gains.yaml with the fitness and the search settings."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from scidmz.control.settings import default_models_dir
    from scidmz.learn.gains import FILTERS, GAINS_FILE, dump_gains
    from scidmz.learn.tune import SearchSettings
    from scidmz.learn.tune import tune as run_tuning

    if cca not in ("cubic", "bbr"):
        _fail(f"--cca must be cubic or bbr, not {cca!r}")
    chosen = tuple(f.strip() for f in filters.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FILTERS]
    if unknown or not chosen:
        _fail(f"--filters: unknown {', '.join(unknown) or '(none given)'}; use pi, mlc, dtn")
    if generations < 1 or population < 2 or not 1 <= parents <= population:
        _fail("--generations must be >= 1, --population >= 2, 1 <= --parents <= --population")
    if episodes < 1 or workers < 1:
        _fail("--episodes and --workers must be >= 1")
    if steady_episodes < 0:
        _fail("--steady-episodes must be >= 0")
    folder = models or default_models_dir()
    if ("mlc" in chosen or "dtn" in chosen) and not (folder / cca / "inverse.onnx").is_file():
        _fail(f"tuning mlc or dtn needs {folder / cca / 'inverse.onnx'} (scidmz train)")
    search = SearchSettings(
        generations=generations, parents_mating=parents, population=population,
        episodes=episodes, steady_episodes=steady_episodes, seed=seed, workers=workers,
    )  # fmt: skip
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as bar:
        tasks: dict[str, object] = {}

        def progress(name: str, generation: int, best_iae: float) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{cca} {name}", total=generations, best="")
            best = f"best IAE {best_iae / 1e9:.2f} Gbit"
            bar.update(tasks[name], completed=generation, best=best)  # type: ignore[arg-type]
            if not bar.console.is_terminal and (generation % 10 == 0 or generation == 1):
                # logs and CI get a line now and then instead of a live bar
                typer.echo(f"{cca} {name}: generation {generation}/{generations}, {best}", err=True)

        gains, results = run_tuning(cca, folder, search, chosen, progress)
    command = (
        f"scidmz tune --cca {cca} --filters {','.join(chosen)} --generations {generations} "
        f"--population {population} --parents {parents} --episodes {episodes} "
        + (f"--steady-episodes {steady_episodes} " if steady_episodes else "")
        + f"--seed {seed}"
    )
    path = folder / cca / GAINS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [name for name in FILTERS if name not in chosen]
    header = f"Anti-windup gains for the {cca} DTN, tuned by `{command}`" + (
        f"; {', '.join(kept)} kept from the file's earlier tuning." if kept else "."
    )
    path.write_text(dump_gains(gains, header))
    for r in results:
        typer.echo(
            f"{cca} {r.name}: Kp {r.gains.kp:g} Ki {r.gains.ki:g} Kw {r.gains.kw:g}, "
            f"IAE {r.iae_bits / 1e9:.2f} Gbit (paper table 4 gains: "
            f"{r.paper_iae_bits / 1e9:.2f} Gbit), {r.evaluations} runs"
        )
    typer.echo(f"wrote {path}")


@bench_app.command("control")
def bench_control(
    quick: Annotated[bool, typer.Option(help="3 seeds and N_s = 100 only.")] = False,
    seeds: Annotated[int | None, typer.Option(help="Seeds per case (default 10, quick 3).")] = None,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path(
        "bench/results/control_quality"
    ),
    models: Annotated[
        Path | None, typer.Option(help="Models folder (default: the shipped models/).")
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Worker processes (results do not depend on it).")
    ] = 2,
    cca: Annotated[
        str | None, typer.Option(help="Only this DTN congestion control (default: both).")
    ] = None,
    from_csv: Annotated[
        Path | None,
        typer.Option(
            "--from-csv",
            help="Render the report from a saved episodes.csv instead of running the episodes.",
        ),
    ] = None,
) -> None:
    """The paper's §4 experiments and the ones it lacks, on the simulator, per controller
    arm: a report with the targets, tables, paired comparisons and CDFs; every episode's
    figures in episodes.csv beside it."""
    from scidmz.control.settings import default_models_dir
    from scidmz.learn.evaluation import TRANSFER_FLOWS, run_all
    from scidmz.learn.report import episodes_csv, markdown, parse_episodes, plots

    count = seeds or (3 if quick else 10)
    flows = (100,) if quick else TRANSFER_FLOWS
    if count < 1 or workers < 1:
        _fail("--seeds and --workers must be >= 1")
    if cca not in (None, "cubic", "bbr"):
        _fail(f"--cca must be cubic or bbr, not {cca!r}")
    out.mkdir(parents=True, exist_ok=True)
    if from_csv is not None:
        try:
            episodes = parse_episodes(from_csv.read_text())
        except (OSError, ValueError) as error:
            _fail(f"--from-csv {from_csv}: {error}")
            return
        command = f"scidmz bench control --from-csv {from_csv}"
    else:
        command = (
            "scidmz bench control"
            + (" --quick" if quick else "")
            + (f" --seeds {seeds}" if seeds else "")
            + (f" --cca {cca}" if cca else "")
        )
        episodes = run_all(
            models or default_models_dir(), count, flows,
            progress=lambda what: typer.echo(f"  {what}", err=True),
            ccas=(cca,) if cca else ("cubic", "bbr"), workers=workers,
        )  # fmt: skip
        (out / "episodes.csv").write_text(episodes_csv(episodes))
    text = markdown(episodes, command)
    (out / "report.md").write_text(text)
    written = plots(episodes, out)
    typer.echo(text)
    typer.echo(f"wrote {out / 'report.md'}, " + ", ".join(str(p) for p in written))


@app.command()
def dashboards(
    out: Annotated[Path, typer.Option(help="Folder for <name>.json.")] = Path("dashboards"),
) -> None:
    """Write the Grafana dashboards (formatted JSON generated from the metric names)."""
    from scidmz.metrics.dashboards import DASHBOARDS, render

    out.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (out / f"{name}.json").write_text(render(name))
        typer.echo(f"wrote {out / f'{name}.json'}")


@testenv_app.command("up")
def testenv_up(
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Keep state here (default: a temporary directory).")
    ] = None,
) -> None:
    """Start the local control plane and keep it running until Ctrl-C."""
    import signal
    import threading

    from scidmz.testenv.cluster import ControlPlaneError, start_control_plane

    try:
        plane = start_control_plane(workdir=workdir)
    except ControlPlaneError as error:
        _fail(str(error))
        return
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}\nCtrl-C stops it.")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    plane.stop()


@app.command()
def demo(
    keep: Annotated[
        bool,
        typer.Option(help="Leave everything running until Ctrl-C instead of cleaning up at once."),
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for Ready.", callback=within(0, 86_400))
    ] = 60.0,
    duration: Annotated[
        float,
        typer.Option(help="Seconds to run the example's loop live.", callback=within(0, 86_400)),
    ] = 60.0,
    report: Annotated[Path, typer.Option(help="Where the run's report (CSV, plots) goes.")] = Path(
        "demo-report"
    ),
) -> None:
    """Local control plane + operator + examples/*.yaml, then one policy's loop running live."""
    from scidmz.demo import DemoError, run_demo

    logging.basicConfig(level=logging.WARNING)
    try:
        run_demo(keep=keep, timeout_s=timeout, duration_s=duration, report_dir=report)
    except DemoError as error:
        _fail(str(error))


@sim_app.command("run")
def sim_run(
    duration: Annotated[
        float,
        typer.Option(
            help="Simulated seconds (rounded up to whole sample times).", callback=within(0, 1e7)
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for samples.csv, flows.csv, summary.json.")
    ],
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="Scenario YAML (default: the paper's testbed)."),
    ] = None,
    u_schedule: Annotated[
        Path | None,
        typer.Option("--u-schedule", help="u(t) schedule, YAML (steps or random) or CSV."),
    ] = None,
) -> None:
    """Run the simulator open loop and write per-sample ground truth and a summary."""
    import json

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from scidmz.netsim.run import run_simulation
    from scidmz.netsim.scenario import Scenario, ScenarioError, load_scenario
    from scidmz.netsim.schedule import ScheduleError, load_schedule

    try:
        chosen = load_scenario(scenario) if scenario is not None else Scenario()
        schedule = load_schedule(u_schedule) if u_schedule is not None else None
    except (ScenarioError, ScheduleError) as error:
        _fail(str(error))
        return
    if not duration > 0:
        _fail("--duration must be a positive number of seconds")
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("sim", total=duration)
        step = chosen.sample_time_s

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done * step, total=total * step)

        try:
            summary = run_simulation(chosen, duration, out, schedule, progress=advance)
        except ScenarioError as error:
            _fail(str(error))
            return
    summary.pop("scenario", None)
    typer.echo(json.dumps(summary, indent=2, default=str))
    typer.echo(f"wrote {out / 'samples.csv'}, {out / 'flows.csv'}, {out / 'summary.json'}")


if __name__ == "__main__":
    app()
