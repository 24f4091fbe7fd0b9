"""Faults on the simulated loop and what they cost: the measurements of ``bench/chaos.py``.

Each fault signals one process of a running ``LocalLoop`` (SIGKILL, then a restart; or
SIGSTOP, then SIGCONT) for ``outage_s``, then watches the loop come back. Measured from the
probes, on the monotonic clock, to the probes' resolution (``PROBE_S``):

- time to fail-safe: from the fault to the fail-safe rate in force at the simulator (a
  collector fault) or to the controller's fail-safe mode (a switch fault: the simulator,
  which is also the actuator, is gone with it). Target: ≤ staleAfter + T. Not applicable to
  a controller fault: the rate in force then simply stays (checked: ``held``).
- time to resume: from the restart (or SIGCONT) to the controller deciding on fresh
  samples again, off its fail-safe. Target: < 10 s.
- the largest jump of u(t) in force from the restart until ``observe_s`` after the resume,
  steps into the fail-safe rate excluded (the fail-safe is the point of a fault, not a
  control decision). Target: ≤ maxStep.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import grpc
import psutil
from finsy.proto import p4r, p4r_grpc
from prometheus_client.parser import text_string_to_metric_families

from scidmz.metrics import names
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.testenv.cluster import REPO_ROOT, ControlPlane, start_control_plane
from scidmz.testenv.local_loop import LocalLoop, TruthProbe
from scidmz.testenv.operator_process import start_operator
from scidmz.testenv.policies import example_policies, policy_name

RATE_MATCH_BPS = 1.0
"""Rates read back through the simulator's float32 state compare within this."""


@dataclass(frozen=True)
class Fault:
    component: str  # target | collector | controller
    kind: str  # kill | stop

    @property
    def label(self) -> str:
        how = "SIGKILL + restart" if self.kind == "kill" else "SIGSTOP + SIGCONT"
        name = "switch (target)" if self.component == "target" else self.component
        return f"{name}: {how}"


ALL_FAULTS = tuple(
    Fault(component, kind)
    for component in ("collector", "target", "controller")
    for kind in ("kill", "stop")
)


@dataclass(frozen=True)
class FaultResult:
    fault: Fault
    outage_s: float
    failsafe_s: float | None
    """From the fault to the fail-safe; None when not applicable or never reached."""
    resume_s: float | None
    """From clearing the fault to control resumed; None if it did not resume."""
    max_jump_bps: float
    """The largest step of u(t) in force after the fault cleared (fail-safe steps excluded)."""
    held: bool | None
    """For a controller fault: the rate in force stayed unchanged while it was down."""


def _is(rate: float | None, expected: float) -> bool:
    return rate is not None and abs(rate - expected) <= RATE_MATCH_BPS


def max_jump(truth: list[TruthProbe], since: float, until: float, failsafe_bps: float) -> float:
    """The largest |Δu| between consecutive readable probes in [since, until], steps onto
    the fail-safe rate excluded (pure: the benchmark's figure from its probes)."""
    window = [p for p in truth if since <= p.t <= until]
    jumps = [
        abs(b.u_bps - a.u_bps)
        for a, b in pairwise(window)
        if a.u_bps is not None and b.u_bps is not None and not _is(b.u_bps, failsafe_bps)
    ]
    return max(jumps, default=0.0)


def failsafe_reached(loop: LocalLoop, fault: Fault, since: float) -> float | None:
    """When the fail-safe took hold after a fault at ``since`` (None: not applicable)."""
    failsafe = loop.config.failsafe.rate_bps
    if fault.component == "controller":
        return None
    if fault.component == "collector":
        for probe in list(loop.probes.truth):
            if probe.t > since and _is(probe.u_bps, failsafe):
                return probe.t
        return None
    for c in list(loop.probes.controller):
        if c.t > since and c.reachable and c.failsafe:
            return c.t
    return None


def run_fault(
    loop: LocalLoop, fault: Fault, outage_s: float, observe_s: float, resume_timeout_s: float
) -> FaultResult:
    """One fault on a loop that is controlling; leaves it controlling again (or raises
    TimeoutError when it does not come back within ``resume_timeout_s``)."""
    loop.wait_until(loop.controlling, 60, "control before the fault")
    struck = time.monotonic()
    loop.signal(fault.component, signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
    time.sleep(outage_s)
    cleared = time.monotonic()
    if fault.kind == "kill":
        loop.spawn(fault.component)
    else:
        loop.signal(fault.component, signal.SIGCONT)
    failsafe_at = failsafe_reached(loop, fault, struck)
    resumed_at: float | None
    try:
        resumed_at = loop.wait_until(
            lambda: loop.resumed_at(cleared) is not None, resume_timeout_s, "resumed control"
        )
        resumed_at = loop.resumed_at(cleared)
    except TimeoutError:
        resumed_at = None
    time.sleep(observe_s)
    held = None
    if fault.component == "controller":
        during = [p.u_bps for p in loop.probes.truth if struck < p.t < cleared and p.u_bps]
        held = bool(during) and max(during) - min(during) <= RATE_MATCH_BPS
    return FaultResult(
        fault=fault,
        outage_s=cleared - struck,
        failsafe_s=None if failsafe_at is None else failsafe_at - struck,
        resume_s=None if resumed_at is None else resumed_at - cleared,
        max_jump_bps=max_jump(
            loop.probes.truth, cleared, time.monotonic(), loop.config.failsafe.rate_bps
        ),
        held=held,
    )


# ---- many subscribers ----------------------------------------------------------------------
@dataclass(frozen=True)
class StormResult:
    clients: int
    stalled: int
    opened: int
    duration_s: float
    latency_before_ms: tuple[float, float]
    """p50 and p99 of a well-behaved subscriber's sample latency (receipt − measured_at)
    before the storm."""
    latency_during_ms: tuple[float, float]
    max_gap_during_s: float
    """The well-behaved subscriber's longest wait between two samples during the storm."""
    missed: int
    """Samples the well-behaved subscriber never got (gaps in its sequence numbers)."""
    rss_before_mb: float
    rss_peak_mb: float
    rss_after_mb: float
    subscribers_peak: int
    subscribers_after: int
    dropped: int
    controller_failsafe: bool
    """The controller went to its fail-safe during the storm (it should not)."""


def _percentiles_ms(values: list[float]) -> tuple[float, float]:
    if not values:
        return (math.nan, math.nan)
    ordered = sorted(values)

    def at(q: float) -> float:
        return 1000.0 * ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    return (at(0.5), at(0.99))


def _collector_metric(loop: LocalLoop, name: str) -> float | None:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{loop.collector_http}/metrics", timeout=2
        ) as response:
            text = response.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


class _Subscriber(threading.Thread):
    """A well-behaved subscriber: every sample's latency and arrival time."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.arrivals: list[tuple[float, float]] = []  # (monotonic, latency s)
        self.sequences: list[int] = []
        self._channel = grpc.insecure_channel(
            address, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self._call: Any = None

    def run(self) -> None:
        stub = telemetry_pb2_grpc.TelemetryStub(self._channel)
        self._call = stub.Subscribe(telemetry_pb2.SubscribeRequest())
        try:
            for sample in self._call:
                latency = time.time() - sample.measured_at.ToNanoseconds() / 1e9
                self.arrivals.append((time.monotonic(), latency))
                self.sequences.append(sample.sequence)
        except grpc.RpcError:
            return

    def stop(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._channel.close()


def run_storm(
    loop: LocalLoop, clients: int, duration_s: float, baseline_s: float = 10.0,
    stalled: float = 0.5, slow_read_s: float = 5.0,
) -> StormResult:  # fmt: skip
    """``clients`` Subscribe clients (``subscribe_storm``) on the loop's collector for
    ``duration_s``, judged against a well-behaved subscriber and the collector's RSS."""
    loop.wait_until(loop.controlling, 60, "control before the storm")
    collector = psutil.Process(loop.processes["collector"].pid)
    watcher = _Subscriber(loop.collector_grpc)
    watcher.start()
    rss: list[tuple[float, float]] = []
    time.sleep(baseline_s)
    rss_before = collector.memory_info().rss
    started = time.monotonic()
    storm = subprocess.Popen(
        [sys.executable, "-m", "scidmz.testenv.subscribe_storm", "--address",
         loop.collector_grpc, "--clients", str(clients), "--duration", str(duration_s),
         "--stalled", str(stalled), "--slow-read", str(slow_read_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak_subscribers = 0
    while storm.poll() is None:
        rss.append((time.monotonic(), collector.memory_info().rss))
        count = _collector_metric(loop, names.STREAM_SUBSCRIBERS)
        peak_subscribers = max(peak_subscribers, int(count or 0))
        time.sleep(1.0)
    ended = time.monotonic()
    summary = json.loads((storm.stdout.read() if storm.stdout else "") or "{}")
    time.sleep(5.0)  # the collector notices the cancelled streams
    after = int(_collector_metric(loop, names.STREAM_SUBSCRIBERS) or 0)
    dropped = int(_collector_metric(loop, names.STREAM_DROPPED) or 0)
    rss_after = collector.memory_info().rss
    watcher.stop()
    before = [lat for t, lat in watcher.arrivals if t < started]
    during = [(t, lat) for t, lat in watcher.arrivals if started <= t <= ended]
    gaps = [b - a for (a, _), (b, _) in pairwise(during)]
    failsafe = any(p.failsafe for p in loop.probes.controller if started <= p.t <= ended)
    return StormResult(
        clients=clients,
        stalled=int(summary.get("stalled", 0)),
        opened=int(summary.get("opened", 0)),
        duration_s=ended - started,
        latency_before_ms=_percentiles_ms(before),
        latency_during_ms=_percentiles_ms([lat for _, lat in during]),
        max_gap_during_s=max(gaps, default=math.nan),
        missed=sum(max(b - a - 1, 0) for a, b in pairwise(watcher.sequences)),
        rss_before_mb=rss_before / 2**20,
        rss_peak_mb=max((r for _, r in rss), default=rss_before) / 2**20,
        rss_after_mb=rss_after / 2**20,
        subscribers_peak=peak_subscribers,
        subscribers_after=after,
        dropped=dropped,
        controller_failsafe=failsafe,
    )


# ---- malformed P4Runtime requests ----------------------------------------------------------
@dataclass(frozen=True)
class Refusal:
    request: str
    expected: str
    got: str

    @property
    def ok(self) -> bool:
        return self.expected == self.got


def _code(call: Callable[[], object]) -> str:
    try:
        call()
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


def _stream_code(first: bytes | p4r.StreamMessageRequest, channel: grpc.Channel) -> str:
    """The status a StreamChannel ends with after one message (raw bytes or a request)."""
    if isinstance(first, bytes):
        call: Any = channel.stream_stream("/p4.v1.P4Runtime/StreamChannel")(
            iter([first]), timeout=3
        )
    else:
        call = p4r_grpc.P4RuntimeStub(channel).StreamChannel(iter([first]), timeout=3)
    try:
        for _ in call:
            pass
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


def malformed_requests(loop: LocalLoop) -> list[Refusal]:
    """Requests a buggy or hostile client sends to the switch while the collector holds
    mastership, each with the status P4Runtime (or gRPC) prescribes."""
    sw = loop.config.switch
    device, other = sw.device_id, sw.device_id + 8
    backup = p4r.Uint128(low=max(sw.election_id - 7, 1))  # below the collector's: a backup
    with grpc.insecure_channel(loop.switch) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        raw_write = channel.unary_unary("/p4.v1.P4Runtime/Write")
        huge = p4r.WriteRequest(device_id=device, election_id=backup)
        huge.updates.add().entity.table_entry.match.add().exact.value = b"x" * (5 << 20)
        unknown_table = p4r.ReadRequest(device_id=device)
        unknown_table.entities.add().table_entry.table_id = 0x0277_7777
        other_device = p4r.ReadRequest(device_id=other)
        other_device.entities.add().table_entry.table_id = 0
        pipeline = p4r.SetForwardingPipelineConfigRequest(
            device_id=device, election_id=backup,
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )  # fmt: skip
        cases: list[tuple[str, str, Callable[[], str]]] = [
            ("Write of bytes that are no protobuf", "INVALID_ARGUMENT",
             lambda: _code(lambda: raw_write(b"\xff\xff\xff\xff", timeout=3))),
            ("StreamChannel message of bytes that are no protobuf", "INVALID_ARGUMENT",
             lambda: _stream_code(b"\x0a\xff\xff\xff\xff\x0f", channel)),
            ("Write from a backup (lower election id)", "PERMISSION_DENIED",
             lambda: _code(lambda: stub.Write(
                 p4r.WriteRequest(device_id=device, election_id=backup), timeout=3))),
            ("Write to a device the switch does not have", "NOT_FOUND",
             lambda: _code(lambda: stub.Write(
                 p4r.WriteRequest(device_id=other, election_id=backup), timeout=3))),
            ("Read of a table id the pipeline does not have", "NOT_FOUND",
             lambda: _code(lambda: list(stub.Read(unknown_table, timeout=3)))),
            ("Read from a device the switch does not have", "NOT_FOUND",
             lambda: _code(lambda: list(stub.Read(other_device, timeout=3)))),
            ("SetForwardingPipelineConfig from a backup", "PERMISSION_DENIED",
             lambda: _code(lambda: stub.SetForwardingPipelineConfig(pipeline, timeout=3))),
            ("GetForwardingPipelineConfig of another device", "NOT_FOUND",
             lambda: _code(lambda: stub.GetForwardingPipelineConfig(
                 p4r.GetForwardingPipelineConfigRequest(device_id=other), timeout=3))),
            ("arbitration for another device", "NOT_FOUND",
             lambda: _stream_code(_arbitration(other, 3), channel)),
            ("arbitration with the collector's election id", "INVALID_ARGUMENT",
             lambda: _stream_code(_arbitration(device, sw.election_id), channel)),
            ("a 5 MiB Write (above the 4 MiB message limit)", "RESOURCE_EXHAUSTED",
             lambda: _code(lambda: stub.Write(huge, timeout=5))),
            ("a method P4Runtime does not have", "UNIMPLEMENTED",
             lambda: _code(lambda: channel.unary_unary("/p4.v1.P4Runtime/Reboot")(
                 b"", timeout=3))),
        ]  # fmt: skip
        return [Refusal(what, expected, run()) for what, expected, run in cases]


def _arbitration(device: int, election: int) -> p4r.StreamMessageRequest:
    return p4r.StreamMessageRequest(
        arbitration=p4r.MasterArbitrationUpdate(
            device_id=device, election_id=p4r.Uint128(low=election)
        )
    )


# ---- operator fail-over --------------------------------------------------------------------
@dataclass(frozen=True)
class FailoverResult:
    policies: int
    lifetime_s: int
    ready_before: int
    takeover_s: float | None
    """From SIGKILL of the active replica to the standby resuming (its log says so)."""
    reconciled_s: float | None
    """From SIGKILL to a spec change made right after it reaching the policy's ConfigMap."""
    ready_after: int
    standby_rss_mb: float


def _ready_count(plane: ControlPlane) -> int:
    items = json.loads(plane.kubectl("get", "dtp", "-o", "json").stdout)["items"]
    return sum(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions", [])
        )
        for p in items
    )


def run_operator_failover(
    policies: int, lifetime_s: int, ready_timeout_s: float = 240.0,
    log: Callable[[str], None] = print,
) -> FailoverResult:  # fmt: skip
    """Two operator replicas with ``policies`` Ready policies; SIGKILL the active one, then
    change one policy's target rate at once and time the standby's takeover and that
    change's reconcile."""
    plane = start_control_plane(crds=(REPO_ROOT / "crds",), log=lambda _: None)
    env = {"SCIDMZ_PEERING_LIFETIME_S": str(lifetime_s)}
    active = start_operator(
        plane, plane.workdir / "active.log", {**env, "SCIDMZ_PEERING_PRIORITY": "100"}
    )
    standby = start_operator(
        plane, plane.workdir / "standby.log", {**env, "SCIDMZ_PEERING_PRIORITY": "50"}
    )
    try:
        plane.kubectl("apply", "-f", "-", input_text=example_policies(policies))
        deadline = time.monotonic() + ready_timeout_s
        while (ready := _ready_count(plane)) < policies and time.monotonic() < deadline:
            time.sleep(1.0)
        log(f"  {ready}/{policies} policies Ready; SIGKILL of the active replica")
        name = policy_name(policies // 2)
        killed = time.monotonic()
        active.proc.kill()
        active.proc.wait(timeout=10)
        plane.kubectl(
            "patch", "dtp", name, "--type=merge", "-p", '{"spec":{"targetRate":"777Mbps"}}'
        )
        takeover = reconciled = None
        while time.monotonic() - killed < 120 and (takeover is None or reconciled is None):
            if takeover is None and "Resuming operations" in standby.log_path.read_text():
                takeover = time.monotonic() - killed
            if reconciled is None:
                config = plane.kubectl(
                    "get", "configmap", f"{name}-config", "-o", "jsonpath={.data}", check=False
                ).stdout
                if "777000000" in config:
                    reconciled = time.monotonic() - killed
            time.sleep(0.1)
        time.sleep(3.0)
        return FailoverResult(
            policies=policies,
            lifetime_s=lifetime_s,
            ready_before=ready,
            takeover_s=takeover,
            reconciled_s=reconciled,
            ready_after=_ready_count(plane),
            standby_rss_mb=psutil.Process(standby.proc.pid).memory_info().rss / 2**20,
        )
    finally:
        for replica in (active, standby):
            if replica.alive():
                replica.stop()
        plane.stop()
