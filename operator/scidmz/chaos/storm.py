"""200 Subscribe clients on a collector's sample stream, judged by a well-behaved one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import grpc
import psutil

from scidmz.chaos.local_loop import LocalLoop
from scidmz.metrics import names
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc


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
        [sys.executable, "-m", "scidmz.chaos.storm_clients", "--address",
         loop.collector_grpc, "--clients", str(clients), "--duration", str(duration_s),
         "--stalled", str(stalled), "--slow-read", str(slow_read_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak_subscribers = 0
    while storm.poll() is None:
        rss.append((time.monotonic(), collector.memory_info().rss))
        count = loop.collector_metric(names.STREAM_SUBSCRIBERS)
        peak_subscribers = max(peak_subscribers, int(count or 0))
        time.sleep(1.0)
    ended = time.monotonic()
    summary = json.loads((storm.stdout.read() if storm.stdout else "") or "{}")
    time.sleep(5.0)  # the collector notices the cancelled streams
    after = int(loop.collector_metric(names.STREAM_SUBSCRIBERS) or 0)
    dropped = int(loop.collector_metric(names.STREAM_DROPPED) or 0)
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
