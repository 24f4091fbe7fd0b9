"""One policy's loop as local processes, for fault injection.

``scidmz target`` (the simulator behind a P4Runtime switch, and the sim actuators),
``scidmz collector`` and ``scidmz controller`` run as child processes with one runtime
config, each of which can be signalled (SIGKILL, SIGSTOP, SIGCONT) and started again. Three
probe threads record, at ``PROBE_S`` intervals and independently of each other (a stopped
process must not stall the others' probes): the campus rate limit in force at the simulator
(its ground truth, what the network actually gets), the simulator's journal of every rate
it applied, and the controller's ``/state``. Used by ``bench/chaos.py`` and its short form
in the tests.
"""

from __future__ import annotations

import signal
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
from prometheus_client.parser import text_string_to_metric_families

from scidmz.api.runtime import RuntimeConfig, dump_runtime_config
from scidmz.demo_loop import local_config, workload_addresses
from scidmz.metrics.http import fetch_state
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.testenv.cluster import free_port
from scidmz.testenv.processes import stop_all

PROBE_S = 0.05
"""The probes' period: the resolution of every time the chaos benchmark reports."""
COMPONENTS = ("target", "collector", "controller")
PROBE_CHANNEL = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 100),
]


@dataclass(frozen=True)
class TruthProbe:
    t: float
    u_bps: float | None
    """The campus rate limit in force at the simulator; None while it cannot be read."""


@dataclass(frozen=True)
class Actuation:
    t: float
    """When the simulator applied it (CLOCK_MONOTONIC, shared by the processes here)."""
    rate_bps: float
    target_run: int
    """Which run of the target applied it (a restarted target starts a new journal)."""


@dataclass(frozen=True)
class ControllerProbe:
    t: float
    reachable: bool
    failsafe: bool = False
    sequence: int | None = None
    """The sequence of the last sample the controller decided on."""


@dataclass
class Probes:
    truth: list[TruthProbe] = field(default_factory=list)
    actuations: list[Actuation] = field(default_factory=list)
    """Every campus rate the simulator was set to, in order (its journal, read in full)."""
    controller: list[ControllerProbe] = field(default_factory=list)


class LocalLoop:
    """Start with ``start()`` (or as a context manager), then ``signal``/``restart``."""

    def __init__(
        self, rendered: RuntimeConfig, workdir: Path, workloads: tuple[str, str] | None = None
    ) -> None:
        """``workloads``: the simulator's DTN and campus addresses (default: inside the
        admitted DTN's prefix and the campus's; a link with nothing admitted names them)."""
        self.workdir = workdir
        self.workloads = workloads
        workdir.mkdir(parents=True, exist_ok=True)
        self.switch = f"127.0.0.1:{free_port()}"
        self.collector_grpc = f"127.0.0.1:{free_port()}"
        self.collector_http, self.controller_http = free_port(), free_port()
        self.config = local_config(rendered, self.switch, self.collector_grpc)
        self.config_path = workdir / "config.yaml"
        self.config_path.write_text(dump_runtime_config(self.config))
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.probes = Probes()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # one channel per probe thread; a restarted target must be seen at once, not after
        # gRPC's reconnect back-off (up to 120 s by default) has grown over the outage
        self._truth_stub = telemetry_pb2_grpc.SimActuatorStub(
            grpc.insecure_channel(self.switch, options=PROBE_CHANNEL)
        )
        self._journal_stub = telemetry_pb2_grpc.SimActuatorStub(
            grpc.insecure_channel(self.switch, options=PROBE_CHANNEL)
        )
        self._journal_next = 0
        self._target_run = 0

    # ---- processes ------------------------------------------------------------------------
    def _args(self, name: str) -> list[str]:
        if name == "target":
            dtn, campus = self.workloads or workload_addresses(self.config)
            return ["target", "--listen", self.switch, "--dtn-address", dtn,
                    "--campus-address", campus]  # fmt: skip
        port = self.collector_http if name == "collector" else self.controller_http
        return [name, "--config", str(self.config_path), "--http-port", str(port)]

    def spawn(self, name: str) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "scidmz.cli", *self._args(name)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.processes[name].send_signal(sig)
        if sig == signal.SIGKILL:
            self.processes[name].wait(timeout=10)

    def alive(self, name: str) -> bool:
        return self.processes[name].poll() is None

    def start(self) -> LocalLoop:
        for name in COMPONENTS:
            self.spawn(name)
        for probe in (self._probe_truth, self._probe_actuations, self._probe_controller):
            thread = threading.Thread(target=self._every, args=(probe,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        stop_all(list(self.processes.items()))
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> LocalLoop:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    # ---- probes ---------------------------------------------------------------------------
    def _every(self, probe: Callable[[], None]) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            probe()
            self._stop.wait(max(PROBE_S - (time.monotonic() - started), 0.0))

    def _probe_truth(self) -> None:
        try:
            truth = self._truth_stub.GetGroundTruth(telemetry_pb2.GroundTruthRequest(), timeout=0.5)
            u: float | None = truth.campus_rate_limit_bps
        except grpc.RpcError:
            u = None
        self.probes.truth.append(TruthProbe(time.monotonic(), u))

    def _probe_actuations(self) -> None:
        request = telemetry_pb2.ActuationsRequest(after=self._journal_next)
        try:
            answer = self._journal_stub.GetActuations(request, timeout=0.5)
            if answer.next < self._journal_next:  # a new target: its journal starts again
                self._target_run += 1
                answer = self._journal_stub.GetActuations(
                    telemetry_pb2.ActuationsRequest(after=0), timeout=0.5
                )
        except grpc.RpcError:
            return
        self._journal_next = answer.next
        self.probes.actuations.extend(
            Actuation(a.monotonic_s, a.rate_bps, self._target_run)
            for a in answer.actuations
            if a.shaper == "campus"
        )

    def _probe_controller(self) -> None:
        state: dict[str, Any] | None = fetch_state(
            f"http://127.0.0.1:{self.controller_http}/state", 0.5
        )
        now = time.monotonic()
        if state is None:
            self.probes.controller.append(ControllerProbe(now, reachable=False))
            return
        sample = state.get("state") or {}
        self.probes.controller.append(
            ControllerProbe(
                now,
                reachable=True,
                failsafe=bool(state.get("failsafe_active")),
                sequence=sample.get("sequence"),
            )
        )

    # ---- waiting --------------------------------------------------------------------------
    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Poll ``predicate`` at the probes' period; the monotonic time it held. Raises
        TimeoutError naming ``what`` (and the processes that died)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return time.monotonic()
            time.sleep(PROBE_S / 2)
        dead = [n for n in self.processes if not self.alive(n)]
        raise TimeoutError(f"{what} did not happen in {timeout_s:.0f} s (dead: {dead or 'none'})")

    def resumed_at(self, cleared_at: float) -> float | None:
        """When control resumed after a fault cleared at ``cleared_at``: the first
        controller probe since then that is reachable, off its fail-safe and deciding on a
        sample other than the one it decided on at ``cleared_at`` (a restarted collector
        numbers its samples afresh, so 'other', not 'later')."""
        before = [p for p in self.probes.controller if p.t <= cleared_at and p.reachable]
        held = before[-1].sequence if before else None
        for probe in list(self.probes.controller):
            if probe.t <= cleared_at or not probe.reachable or probe.failsafe:
                continue
            if probe.sequence is not None and probe.sequence != held:
                return probe.t
        return None

    def controlling(self) -> bool:
        """The controller's last probe is reachable, off its fail-safe, with a decision,
        and the simulator's rate in force is readable."""
        if not self.probes.controller or not self.probes.truth:
            return False
        last = self.probes.controller[-1]
        return (
            last.reachable
            and not last.failsafe
            and last.sequence is not None
            and self.probes.truth[-1].u_bps is not None
        )

    def collector_metric(self, name: str) -> float | None:
        """One sample's value from the collector's /metrics (None: unreachable, absent)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.collector_http}/metrics", timeout=2
            ) as response:
                text = response.read().decode()
        except (OSError, urllib.error.URLError):
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
        return None
