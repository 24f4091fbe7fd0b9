"""``scidmz target``: the software P4Runtime switch over the simulator or a packet tap."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scidmz.api.flags import host_port, within
from scidmz.cli.common import fail

if TYPE_CHECKING:
    import grpc

    from scidmz.metrics.endpoint import Endpoint
    from scidmz.switch.netsim_source import NetsimSource
    from scidmz.switch.observation import PacketSource
    from scidmz.switch.packet_source import PacketTapSource


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
            "acks: the returning ACKs; dtn may repeat, one per link from DTN hosts), or "
            "border=IF in place of bottleneck and acks: one mirror port carrying both "
            "directions of the border link (needs --remote-prefix)."
        ),
    ] = "",
    netns: Annotated[
        str | None, typer.Option(help="--source packets: the network namespace of --taps.")
    ] = None,
    mirror_ports: Annotated[
        bool,
        typer.Option(
            help="--source packets: every --taps interface is a mirror port, whose frames "
            "arrive on it, the bottleneck side's too (default: the bottleneck interface is "
            "BR1's own egress, read as it transmits, as in the lab).",
        ),
    ] = False,
    remote_prefix: Annotated[
        str,
        typer.Option(
            help="--source packets with border=IF: the border link's remote side, "
            "comma-separated (the link's campus.remotePrefix and its DTN hosts' "
            "receiverPrefix): frames to them are data leaving BR1, frames from them ACKs.",
        ),
    ] = "",
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
    listen: Annotated[
        str, typer.Option(help="host:port of the P4Runtime server.", callback=host_port)
    ] = "127.0.0.1:9559",
    device_id: Annotated[int, typer.Option(help="P4Runtime device id.")] = 1,
    speedup: Annotated[
        float,
        typer.Option(help="Simulated seconds per wall-clock second.", callback=within(0, 1e6)),
    ] = 1.0,
    ports: Annotated[
        str, typer.Option(help="Tap wiring: which switch port sees which side of BR1.")
    ] = "campus=1,dtn=2,bottleneck=3",
    dtn_address: Annotated[
        str,
        typer.Option(
            help="Where the simulated DTN streams go (inside the DTN-r prefix); with several "
            "DTN hosts in the scenario (more_dtns), one address each, comma-separated, or one: "
            "the others follow it (203.0.113.10, .11, ...)."
        ),
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
    identity_dir: Annotated[
        Path | None,
        typer.Option(
            help="Serve mutual TLS from this certificate directory (ca.crt, tls.crt, "
            "tls.key: the identity the operator mounts), following it as it is rotated; "
            "instead of --tls-cert, --tls-key and --tls-client-ca."
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="Serve /healthz, /readyz and /metrics (the tap's frames and kernel drops per "
            "interface) on this port; with --identity-dir over mutual TLS for the operator "
            "and metrics readers, and plain HTTP probes on 127.0.0.1.",
            callback=within(0, 65535),
        ),
    ] = None,
    p4runtime_client: Annotated[
        list[str] | None,
        typer.Option(
            help="With --tls-client-ca: P4Runtime answers only client certificates of this "
            "common name or workload identity (spiffe:// URI; repeatable; default: every "
            "one the CA signed)."
        ),
    ] = None,
    actuator_client: Annotated[
        list[str] | None,
        typer.Option(
            help="With --tls-client-ca: the simulator's actuators answer only client "
            "certificates of this common name (repeatable; default: every one)."
        ),
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
    from scidmz.switch.packet_source import PacketTapSource
    from scidmz.switch.runner import Target

    if source not in ("sim", "packets", "lab"):
        fail(f"--source must be sim, packets or lab, not {source!r}")
    credentials = _target_credentials(tls_cert, tls_key, tls_client_ca)
    if identity_dir is not None:
        if credentials is not None:
            fail("--identity-dir replaces --tls-cert, --tls-key and --tls-client-ca")
        credentials = _identity_credentials(identity_dir)
    if (p4runtime_client or actuator_client) and tls_client_ca is None and identity_dir is None:
        fail("--p4runtime-client and --actuator-client need --tls-client-ca or --identity-dir")
    packet_source: PacketSource
    try:
        wired = _parse_ports(ports)
        if source != "sim":
            packet_source = _packet_tap(
                source, taps, netns, wired, capture_stats, mirror_ports,
                parse_prefixes(remote_prefix),
            )  # fmt: skip
        else:
            packet_source = _netsim_source(scenario, wired, dtn_address, campus_address, speedup)
    except (ValueError, ScenarioError, LabError) as error:
        fail(str(error))
        return

    async def main() -> None:
        device = Target(build_p4info("v1model"), packet_source, device_id=device_id)
        device.p4runtime_clients = frozenset(p4runtime_client) if p4runtime_client else None
        device.actuator_clients = frozenset(actuator_client) if actuator_client else None
        try:
            await device.start(listen, credentials)
            endpoint = _serve_health(http_port, packet_source, identity_dir)
        except OSError as error:
            fail(str(error))
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
        if endpoint is not None:
            endpoint.shutdown()
        if failure is not None:
            fail(f"the packet source failed: {failure}")

    try:
        if isinstance(packet_source, PacketTapSource):
            packet_source.start()
        asyncio.run(main())
    except RuntimeError as error:  # the tap reader refused an interface, or died
        fail(str(error))
    finally:
        if isinstance(packet_source, PacketTapSource):
            packet_source.close()


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
            fail("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        fail("--tls-cert and --tls-key go together")
    assert cert is not None and key is not None
    from scidmz.auth.switch_tls import looks_like_pem
    from scidmz.switch.server import server_credentials

    try:
        pems = [p.read_bytes() if p is not None else None for p in (cert, key, client_ca)]
    except OSError as error:
        fail(f"{error.filename}: {error.strerror}")
        return None
    for path, pem in zip((cert, key, client_ca), pems, strict=True):
        if pem is not None and not looks_like_pem(pem):
            fail(f"{path}: not PEM")
    return server_credentials(pems[0] or b"", pems[1] or b"", pems[2])


def _serve_health(
    port: int | None, source: PacketSource, identity_dir: Path | None
) -> Endpoint | None:
    """/healthz, /readyz and /metrics once the target serves (None: no --http-port)."""
    if not port:
        return None
    from prometheus_client import CollectorRegistry

    from scidmz.auth.tls_source import TlsSource
    from scidmz.metrics.endpoint import serve_http
    from scidmz.metrics.http import Health
    from scidmz.switch.packet_source import PacketTapSource
    from scidmz.switch.tap_metrics import CaptureCollector

    registry = CollectorRegistry()
    if isinstance(source, PacketTapSource):
        registry.register(CaptureCollector(source.capture_stats))
    health = Health()
    health.set_ready(True, "serving P4Runtime")
    tls = TlsSource.from_directory(identity_dir) if identity_dir is not None else None
    return serve_http(port, health, registry=registry, tls=tls, probes_on_loopback=tls is not None)


def _identity_credentials(directory: Path) -> grpc.ServerCredentials:
    """Mutual TLS from a mounted identity, followed as it rotates; exit 2 naming what is
    missing."""
    from scidmz.auth.mtls import TlsConfigError
    from scidmz.auth.tls_source import TlsSource

    try:
        return TlsSource.from_directory(directory).grpc_server_credentials()
    except TlsConfigError as error:
        fail(f"--identity-dir: {error}")
        raise


def _netsim_source(
    scenario: Path | None, wired: dict[str, int], dtn_address: str, campus_address: str,
    speedup: float,
) -> NetsimSource:  # fmt: skip
    import ipaddress

    from scidmz.netsim.scenario import Scenario, load_scenario
    from scidmz.switch.netsim_source import NetsimSource, Wiring

    chosen = load_scenario(scenario) if scenario is not None else Scenario()
    try:
        given = [ipaddress.ip_address(a.strip()) for a in dtn_address.split(",")]
        hosts = len(chosen.dtns)
        if len(given) == 1:
            given += [given[0] + k for k in range(1, hosts)]
    except ValueError as error:
        fail(f"--dtn-address: {error}")
    if len(given) != hosts:
        fail(f"--dtn-address: {len(given)} addresses for the scenario's {hosts} DTN hosts")
    wiring = Wiring(
        campus_port=wired["campus"],
        dtn_port=wired["dtn"],
        bottleneck_port=wired["bottleneck"],
        dtn_address=given[0],
        campus_address=ipaddress.ip_address(campus_address),
        more_dtn_addresses=tuple(given[1:]),
    )
    return NetsimSource(chosen, wiring, speedup=speedup)


TAP_ROLES = ("campus", "dtn", "bottleneck", "acks", "border")
MAX_TAPS = 32
"""Interfaces one tap reader reads (``tapreader.c``'s MAX_IFACES)."""


def parse_taps(taps: str) -> dict[str, list[str]]:
    """``--taps campus=IF,dtn=IF[,dtn=IF…],bottleneck=IF,acks=IF`` (or ``border=IF`` for
    both of the last two: one mirror port with both directions of the border link) as
    interfaces per role; ValueError naming what is wrong (a role missing or given twice,
    an interface read twice)."""
    usage = (
        "--taps wants campus=IF,dtn=IF,bottleneck=IF,acks=IF (dtn may repeat; border=IF "
        "for one mirror port carrying both directions of the border link)"
    )
    interfaces: dict[str, list[str]] = {}
    for part in taps.split(","):
        role, _, interface = (p.strip() for p in part.partition("="))
        if role not in TAP_ROLES or not interface:
            raise ValueError(f"{usage}, got {taps!r}")
        interfaces.setdefault(role, []).append(interface)
    if "border" in interfaces and {"bottleneck", "acks"} & set(interfaces):
        raise ValueError(f"{usage}: border replaces bottleneck and acks, got {taps!r}")
    needed = ("campus", "dtn", *(("border",) if "border" in interfaces else ("bottleneck", "acks")))
    missing = [r for r in needed if r not in interfaces]
    if missing:
        raise ValueError(f"{usage}: {', '.join(missing)} missing in {taps!r}")
    repeated = [r for r in interfaces if r != "dtn" and len(interfaces[r]) > 1]
    if repeated:
        raise ValueError(f"{usage}: {', '.join(repeated)} given twice in {taps!r}")
    every = [i for names in interfaces.values() for i in names]
    twice = sorted({i for i in every if every.count(i) > 1})
    if twice:
        raise ValueError(f"{usage}: interface {', '.join(twice)} given twice in {taps!r}")
    if len(every) > MAX_TAPS:
        raise ValueError(f"{usage}: at most {MAX_TAPS} interfaces, got {len(every)}")
    if "border" in interfaces:
        interfaces["bottleneck"] = interfaces["acks"] = interfaces.pop("border")
    return interfaces


def parse_prefixes(text: str) -> tuple[IPv4Network, ...]:
    """``--remote-prefix`` as networks; ValueError naming a bad one."""
    prefixes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            prefixes.append(IPv4Network(part))
        except ValueError as error:
            raise ValueError(f"--remote-prefix: {error}") from None
    return tuple(prefixes)


def _packet_tap(
    source: str,
    taps: str,
    netns: str | None,
    wired: dict[str, int],
    stats: Path | None,
    mirror_ports: bool = False,
    remote_prefixes: tuple[IPv4Network, ...] = (),
) -> PacketTapSource:
    """The packet tap of --source packets (--taps, --netns) or --source lab (the lab's)."""
    import tempfile

    from scidmz.lab import native, runner, topology
    from scidmz.switch.packet_source import PacketTapSource, TapWiring

    if source == "lab":
        interfaces = topology.tap_interfaces(runner.read_state().scenario)
        netns = topology.BORDER
    else:
        interfaces = parse_taps(taps)
    wiring = TapWiring(
        campus_in=interfaces["campus"][0],
        dtn_in=interfaces["dtn"][0],
        bottleneck_out=interfaces["bottleneck"][0],
        acks_in=interfaces["acks"][0],
        campus_port=wired["campus"],
        dtn_port=wired["dtn"],
        bottleneck_port=wired["bottleneck"],
        more_dtn_in=tuple(interfaces["dtn"][1:]),
        mirrored=mirror_ports and source == "packets",
        remote_prefixes=remote_prefixes,
    )
    reader = [str(native.binary("tapreader"))]
    if netns:
        reader = ["ip", "netns", "exec", netns, *reader]
    if stats is None:
        stats = Path(tempfile.mkdtemp(prefix="scidmz-tap-")) / "capture.json"
    stats.unlink(missing_ok=True)
    return PacketTapSource(wiring, reader, stats)
