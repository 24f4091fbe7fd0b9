"""Slow and idle clients against a link's endpoints, while its loop runs (bench/chaos.py).

An attacker on the pod network, with no certificate, holds connections open as long as the
endpoints let it: ``slow-tls`` completes the TLS handshake (a workload's HTTPS port accepts
clients without a certificate, for the kubelet's probes) and then sends a request a byte
every 1.5 s; ``idle`` opens TCP connections and sends nothing (a gRPC port, or a public
port that wants a certificate at the handshake). Each client comes from its own source
address (127.1.0.0/16), reconnects when it is cut, and backs off a second when refused.

The loop is the example link's, as local processes with mutual TLS (certificates of a
throwaway CA, as the operator issues them): ``scidmz target`` (plaintext switch, the
simulator), ``scidmz collector``, ``scidmz controller`` and, as root, a ``scidmz shaper``
on a veth end in its own network namespace, run as on a node's network (probes on
loopback, mutual TLS only on its public port), which the bench drives as the link's
controller would (SetRate every second). Measured before and during the attack: the
probes' answers (as the kubelet asks: HTTPS without a certificate for pod-network
workloads, plain HTTP on loopback for the shaper, 2 s timeout), the operator's /state reads
(its certificate), the controller's decisions and fail-safe, the shaper's SetRate, and the
processes' open files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from scidmz.api.runtime import ChannelSecurity, RuntimeConfig, dump_runtime_config
from scidmz.auth import identity
from scidmz.auth.channels import ClientTls, open_channel
from scidmz.auth.mtls import MutualTls, http_client_context, load_mutual_tls
from scidmz.auth.pki import KeyPair, issue_certificate, new_certificate_authority
from scidmz.demo_loop import local_config, workload_addresses
from scidmz.metrics.http import fetch_state
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.testenv.cluster import free_port
from scidmz.testenv.processes import stop_all

SERVER_NAME = "loop.chaos.invalid"
SHAPER_NETNS = "scidmz-chaos-dtn"
SHAPER_INTERFACE = "dtn0"
PROBE_TIMEOUT_S = 2.0
"""The kubelet's probe timeout in the chart's manifests."""


# ---- the attacker -------------------------------------------------------------------------


async def _slow_tls(target: tuple[str, int], source: str, stop: asyncio.Event) -> None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection(
                *target, ssl=context, local_addr=(source, 0), server_hostname=SERVER_NAME
            )
            for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.wait_for(stop.wait(), 1.5)
        except (TimeoutError, OSError, ssl.SSLError):
            pass
        else:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def _idle(target: tuple[str, int], source: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(*target, local_addr=(source, 0))
            await asyncio.wait_for(reader.read(1 << 16), 3600)  # until the server cuts it
            writer.close()
        except (TimeoutError, OSError):
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def attack(targets: list[tuple[str, str, int]], clients: int, duration_s: float) -> None:
    """``clients`` of each (mode, host, port) in ``targets`` for ``duration_s``."""
    stop = asyncio.Event()
    tasks = []
    for mode, host, port in targets:
        run = _slow_tls if mode == "slow-tls" else _idle
        for k in range(clients):
            source = f"127.1.{k // 250}.{k % 250 + 1}"
            tasks.append(asyncio.create_task(run((host, port), source, stop)))
    await asyncio.sleep(duration_s)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---- the loop, with mutual TLS ------------------------------------------------------------


def _issue(ca: KeyPair, who: str, directory: Path, now: dt.datetime) -> Path:
    pair = issue_certificate(
        ca, who, now, [SERVER_NAME, identity.WORKLOAD_SERVER_NAME], server=True
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    key = directory / "tls.key"
    key.touch(mode=0o600)
    key.write_bytes(pair.key_pem)
    return directory


def _material(directory: Path) -> MutualTls:
    return load_mutual_tls(directory)


@dataclass
class Probe:
    """One endpoint asked every second: answered or not, and how long it took."""

    name: str
    ask: Callable[[], bool]
    answers: list[tuple[float, bool, float]] = field(default_factory=list)

    def window(self, start: float, end: float) -> tuple[int, int, float]:
        """(answered, asked, p99 latency in ms) between ``start`` and ``end``."""
        inside = [a for a in self.answers if start <= a[0] < end]
        answered = [a for a in inside if a[1]]
        latencies = sorted(a[2] for a in answered)
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0
        return len(answered), len(inside), 1000 * p99


@dataclass
class SlowClientsResult:
    clients: int
    duration_s: float
    targets: list[str]
    probes: dict[str, tuple[tuple[int, int, float], tuple[int, int, float]]]
    """Per probe: (answered, asked, p99 ms) before and during the attack."""
    decisions: tuple[int, int]
    """The controller's decisions seen (distinct samples) before and during."""
    failsafe_during: bool
    open_files_peak: dict[str, int]
    shaper: bool
    exited: dict[str, str] = field(default_factory=dict)
    """The loop's processes that ended before the attack did: their exit code and the last
    lines they logged (none is the only good answer)."""


class SecureLoop:
    """The example link's loop as local processes with mutual TLS (and, as root, a DTN
    shaper agent on a dummy interface in a network namespace)."""

    def __init__(self, rendered: RuntimeConfig, workdir: Path, with_shaper: bool) -> None:
        self.workdir = workdir
        now = dt.datetime.now(dt.UTC)
        ca = new_certificate_authority("scidmz chaos CA", now)
        link = rendered.link
        ids = workdir / "ids"
        self.dirs = {
            name: _issue(ca, who, ids / name, now)
            for name, who in (
                ("collector", identity.link_identity(link, identity.COLLECTOR)),
                ("controller", identity.link_identity(link, identity.CONTROLLER)),
                ("dtn-shaper", identity.link_identity(link, identity.DTN_SHAPER, "dtn-1")),
                ("operator", identity.OPERATOR),
            )
        }
        self.switch = f"127.0.0.1:{free_port()}"
        self.collector_grpc = free_port()
        self.collector_http, self.controller_http = free_port(), free_port()
        self.shaper_http, self.shaper_grpc = free_port(), free_port()
        self.with_shaper = with_shaper
        security = ChannelSecurity(
            identity_dir="unused",
            collector_server_name=SERVER_NAME,
            dtn_shaper_server_name=SERVER_NAME,
        )
        secured = rendered.model_copy(update={"security": security})
        self.paths: dict[str, Path] = {}
        for name in ("collector", "controller"):
            config = local_config(
                secured, self.switch, f"127.0.0.1:{self.collector_grpc}", self.dirs[name]
            )
            self.paths[name] = workdir / f"{name}.yaml"
            self.paths[name].write_text(dump_runtime_config(config))
        self.config = config
        if with_shaper:
            # the agent reads the link's own config: its tc cap, its fail-safe and bounds
            if rendered.actuator.dtn is None or rendered.actuator.dtn.type != "tc":
                raise ValueError("a DTN shaper needs the link's DTN host with a tc shaper")
            own = security.model_copy(update={"identity_dir": str(self.dirs["dtn-shaper"])})
            self.paths["dtn-shaper"] = workdir / "dtn-shaper.yaml"
            self.paths["dtn-shaper"].write_text(
                dump_runtime_config(rendered.model_copy(update={"security": own}))
            )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.operator_tls = http_client_context(_material(self.dirs["operator"]))
        self.operator_tls.check_hostname = False

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        command = [sys.executable, "-m", "scidmz.cli", *args]
        # as the operator runs them: their open-files limit raised to the chart's default
        env = {**os.environ, "SCIDMZ_FD_LIMIT": "65536", **(env or {})}
        self.processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env
        )

    def start(self) -> SecureLoop:
        if self.with_shaper:
            # a veth's end in a namespace of its own stands for the DTN host's interface
            # (no dummy module on every kernel)
            subprocess.run(["ip", "netns", "add", SHAPER_NETNS], check=True)
            for command in (
                ["link", "add", SHAPER_INTERFACE, "type", "veth", "peer", "name", "dtn0p"],
                ["link", "set", SHAPER_INTERFACE, "up"],
            ):
                subprocess.run(["ip", "-n", SHAPER_NETNS, *command], check=True)
        try:
            self._spawn_all()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_all(self) -> None:
        dtn, campus = workload_addresses(self.config)
        self._spawn("target", ["target", "--listen", self.switch, "--dtn-address", dtn,
                               "--campus-address", campus])  # fmt: skip
        self._spawn("collector", ["collector", "--config", str(self.paths["collector"]),
                                  "--http-port", str(self.collector_http),
                                  "--listen", f"127.0.0.1:{self.collector_grpc}"])  # fmt: skip
        self._spawn("controller", ["controller", "--config", str(self.paths["controller"]),
                                   "--http-port", str(self.controller_http)])  # fmt: skip
        if self.with_shaper:
            self._spawn(
                "dtn-shaper",
                ["shaper", "--interface", SHAPER_INTERFACE, "--netns", SHAPER_NETNS,
                 "--config", str(self.paths["dtn-shaper"]), "--http-port",
                 str(self.shaper_http), "--listen", f"0.0.0.0:{self.shaper_grpc}"],
                {"SCIDMZ_PROBES_ON_LOOPBACK": "true"},
            )  # fmt: skip

    def stop(self) -> None:
        stop_all(list(self.processes.items()))
        if self.with_shaper:
            subprocess.run(
                ["ip", "netns", "delete", SHAPER_NETNS], check=False, capture_output=True
            )

    def state(self) -> dict[str, Any] | None:
        return fetch_state(
            f"https://127.0.0.1:{self.controller_http}/state",
            PROBE_TIMEOUT_S,
            tls=self.operator_tls,
            server_name=SERVER_NAME,
        )

    def exited(self) -> dict[str, str]:
        """Each process that has ended: its code and the tail of its log."""
        out = {}
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.workdir / f"{name}.log"
                tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
                out[name] = f"exit {process.returncode}: " + " | ".join(tail)
        return out

    def wait_ready(self, deadline_s: float = 90.0) -> None:
        """Until the controller controls and (with one) the shaper answers its probe."""
        deadline = time.monotonic() + deadline_s
        shaper_probe = _kubelet_probe(f"http://127.0.0.1:{self.shaper_http}/healthz")
        while True:
            state = self.state() or {}
            controlling = bool((state.get("state") or {}).get("sequence"))
            if controlling and (not self.with_shaper or shaper_probe()):
                return
            if (gone := self.exited()) or time.monotonic() > deadline:
                what = f"ended: {gone}" if gone else "never became ready"
                raise TimeoutError(f"the loop {what} (see the logs in {self.workdir})")
            time.sleep(0.5)

    def open_files(self) -> dict[str, int]:
        out = {}
        for name, process in self.processes.items():
            with contextlib.suppress(OSError):
                out[name] = sum(1 for _ in Path(f"/proc/{process.pid}/fd").iterdir())
        return out


def _kubelet_probe(url: str) -> Callable[[], bool]:
    """GET as the kubelet does: no certificate, none checked, a 2 s timeout; any HTTP
    answer counts (a not-ready controller answers 503 in time)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    def ask() -> bool:
        try:
            with urllib.request.urlopen(  # noqa: S310 - the bench's own https:// URLs
                url, timeout=PROBE_TIMEOUT_S, context=context
            ) as reply:
                reply.read()
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    return ask


class _ShaperDriver:
    """SetRate as the link's controller, from its own event loop (thread)."""

    def __init__(self, loop: SecureLoop) -> None:
        tls = ClientTls(_material(loop.dirs["controller"]), SERVER_NAME)
        self._loop = asyncio.new_event_loop()
        self._address = f"127.0.0.1:{loop.shaper_grpc}"
        self._channel = self._loop.run_until_complete(self._open(tls))
        threading.Thread(target=self._loop.run_forever, daemon=True).start()

    async def _open(self, tls: ClientTls) -> grpc.aio.Channel:
        return open_channel(self._address, tls)

    def ask(self) -> bool:
        async def call() -> bool:
            stub = telemetry_pb2_grpc.ShaperStub(self._channel)
            try:
                await stub.SetRate(telemetry_pb2.RateLimit(rate_bps=6e8), timeout=PROBE_TIMEOUT_S)
                return True
            except grpc.aio.AioRpcError:
                return False

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)


def run_slow_clients(
    rendered: RuntimeConfig,
    workdir: Path,
    clients: int = 100,
    duration_s: float = 60.0,
    baseline_s: float = 20.0,
    with_shaper: bool | None = None,
) -> SlowClientsResult:
    """The loop up and controlling, ``baseline_s`` of probes, then ``clients`` attackers on
    every public port for ``duration_s`` while the probes go on."""
    shaper = (
        (os.geteuid() == 0 and shutil.which("ip") is not None)
        if with_shaper is None
        else with_shaper
    )
    loop = SecureLoop(rendered, workdir, shaper).start()
    stop = threading.Event()
    try:
        loop.wait_ready()
        probes = [
            Probe(
                "collector /healthz (kubelet)",
                _kubelet_probe(f"https://127.0.0.1:{loop.collector_http}/healthz"),
            ),
            Probe(
                "controller /readyz (kubelet)",
                _kubelet_probe(f"https://127.0.0.1:{loop.controller_http}/readyz"),
            ),
            Probe("controller /state (operator)", lambda: loop.state() is not None),
        ]
        if shaper:
            driver = _ShaperDriver(loop)
            probes += [
                Probe(
                    "shaper /healthz (kubelet, loopback)",
                    _kubelet_probe(f"http://127.0.0.1:{loop.shaper_http}/healthz"),
                ),
                Probe("shaper SetRate (controller)", driver.ask),
            ]
        sequences: list[tuple[float, int, bool]] = []
        peak: dict[str, int] = {}

        def every_second(probe: Probe) -> None:
            while not stop.is_set():
                started = time.monotonic()
                ok = probe.ask()
                probe.answers.append((started, ok, time.monotonic() - started))
                stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

        def watch() -> None:
            while not stop.is_set():
                state = loop.state() or {}
                sample = state.get("state") or {}
                if isinstance(sample, dict) and sample.get("sequence") is not None:
                    sequences.append(
                        (
                            time.monotonic(),
                            int(sample["sequence"]),
                            bool(state.get("failsafe_active")),
                        )
                    )
                for name, count in loop.open_files().items():
                    peak[name] = max(peak.get(name, 0), count)
                stop.wait(0.5)

        threads = [threading.Thread(target=every_second, args=(p,), daemon=True) for p in probes]
        threads.append(threading.Thread(target=watch, daemon=True))
        for thread in threads:
            thread.start()
        time.sleep(baseline_s)
        attack_start = time.monotonic()
        targets = [
            ("slow-tls", "127.0.0.1", loop.collector_http),
            ("slow-tls", "127.0.0.1", loop.controller_http),
            ("idle", "127.0.0.1", loop.collector_grpc),
        ]
        if shaper:
            targets += [
                ("idle", "127.0.0.1", loop.shaper_grpc),
                ("idle", "127.0.0.2", loop.shaper_http),
            ]
        attacker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scidmz.chaos.slow_clients",
                "--clients",
                str(clients),
                "--duration",
                str(duration_s),
                *(f"{m}:{h}:{p}" for m, h, p in targets),
            ],
        )
        attacker.wait(timeout=duration_s + 60)
        attack_end = attack_start + duration_s
        stop.set()
        for thread in threads:
            thread.join(timeout=5)

        def decisions(start: float, end: float) -> int:
            return len({s for t, s, _ in sequences if start <= t < end})

        return SlowClientsResult(
            clients=clients,
            duration_s=duration_s,
            targets=[f"{m} :{p}" for m, _, p in targets],
            probes={
                p.name: (
                    p.window(attack_start - baseline_s, attack_start),
                    p.window(attack_start, attack_end),
                )
                for p in probes
            },
            decisions=(
                decisions(attack_start - baseline_s, attack_start),
                decisions(attack_start, attack_end),
            ),
            failsafe_during=any(f for t, _, f in sequences if attack_start <= t < attack_end),
            open_files_peak=peak,
            shaper=shaper,
            exited=loop.exited(),
        )
    finally:
        stop.set()
        loop.stop()


def main() -> None:
    """``python -m scidmz.chaos.slow_clients [--clients N] [--duration S] mode:host:port...``
    (the bench runs the attacker as its own process)."""
    parser = argparse.ArgumentParser(description="slow and idle clients (an attacker)")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("targets", nargs="+", help="slow-tls|idle:host:port")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    targets = []
    for text in args.targets:
        mode, host, port = text.split(":")
        targets.append((mode, host, int(port)))
    asyncio.run(attack(targets, args.clients, args.duration))


if __name__ == "__main__":
    main()
