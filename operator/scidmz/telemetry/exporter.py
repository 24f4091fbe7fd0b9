"""Prometheus exposition of the collector: y(t) from the latest snapshot, and self-metrics.

``StateExporter`` is a custom collector over an immutable ``Snapshot`` the loop replaces
each sample time; a scrape never sees half a sample. Its exposition, for one link::

    scidmz_rate_bytes_per_second{class="dtn",link="campus-border"} 7.5e+07
    scidmz_rtt_seconds{class="campus",link="campus-border"} 0.0112
    scidmz_queuing_delay_seconds{class="dtn",link="campus-border"} 0.0013
    scidmz_active_flows{link="campus-border"} 108.0
    scidmz_class_bytes_total{class="dtn",link="campus-border"} 1.2e+10
    scidmz_state_valid{link="campus-border",variable="dtn_rtt_s"} 1.0
    scidmz_sample_age_seconds{link="campus-border"} 0.4
    scidmz_sample_stale{link="campus-border"} 0.0
    scidmz_retransmission_ratio{class="campus",link="campus-border"} 0.004
    scidmz_bottleneck_loss_ratio{link="campus-border"} 0.003
    scidmz_mean_queuing_delay_seconds{class="campus",link="campus-border"} 0.0125
    scidmz_long_flows{link="campus-border"} 100.0
    scidmz_dtn_host_rate_bytes_per_second{dtn_host="dtn-1",link="campus-border"} 5e+07
    scidmz_dtn_host_rtt_seconds{dtn_host="dtn-1",link="campus-border"} 0.101

Values that were not measured (no packets of a class yet) are left out rather than
exported as NaN, so PromQL sees "absent", not a number.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scidmz.contract.state import STATE_VARIABLES, DtnFigures, NetworkState, PathSignals
from scidmz.metrics import names
from scidmz.metrics.snapshot import LABELS, SnapshotExporter


@dataclass(frozen=True)
class Snapshot:
    state: NetworkState
    stale: bool
    dtn_bytes: int
    campus_bytes: int
    sequence: int = 0
    interval_s: float = float("nan")


class StateExporter(SnapshotExporter[Snapshot]):
    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None:
            return
        s = snap.state
        by_class = [*LABELS, "class"]
        rate = GaugeMetricFamily(
            names.RATE, "Class rate at the tap, y1/y2 (algorithm 3).", labels=by_class
        )
        rtt = GaugeMetricFamily(
            names.RTT, "Class round-trip time, y3/y4 (algorithm 4).", labels=by_class
        )
        qd = GaugeMetricFamily(
            names.QUEUING_DELAY,
            "Class queuing delay in the border router, y5/y6 (algorithm 6).",
            labels=by_class,
        )
        for cls, rate_bps, rtt_s, qd_s in (
            ("dtn", s.dtn_rate_bps, s.dtn_rtt_s, s.dtn_queuing_delay_s),
            ("campus", s.campus_rate_bps, s.campus_rtt_s, s.campus_queuing_delay_s),
        ):
            labels = [*self._labels, cls]
            if math.isfinite(rate_bps):
                rate.add_metric(labels, rate_bps / 8.0)
            if math.isfinite(rtt_s):
                rtt.add_metric(labels, rtt_s)
            if math.isfinite(qd_s):
                qd.add_metric(labels, qd_s)
        yield rate
        yield rtt
        yield qd
        flows = GaugeMetricFamily(
            names.ACTIVE_FLOWS, "Active flows, y7 (algorithm 8).", labels=list(LABELS)
        )
        flows.add_metric(self._labels, s.active_flows)
        yield flows
        total = CounterMetricFamily(
            names.CLASS_BYTES, "Data bytes per class at the tap (direct counters).", labels=by_class
        )
        total.add_metric([*self._labels, "dtn"], snap.dtn_bytes)
        total.add_metric([*self._labels, "campus"], snap.campus_bytes)
        yield total
        valid = GaugeMetricFamily(
            names.STATE_VALID,
            "1 when the state variable was measured in the latest sample.",
            labels=[*LABELS, "variable"],
        )
        for name, ok in zip(STATE_VARIABLES, s.valid(), strict=True):
            valid.add_metric([*self._labels, name], 1.0 if ok and not snap.stale else 0.0)
        yield valid
        yield from self.gauge(
            names.SAMPLE_AGE, names.SAMPLE_AGE_HELP, max(0.0, self._clock() - s.measured_at_s)
        )
        yield from self.gauge(
            names.SAMPLE_STALE, "1 while the switch cannot be read.", 1.0 if snap.stale else 0.0
        )
        yield from _signals(s.signals, self._labels, stale=snap.stale)
        yield from _dtn_hosts(s.dtns, self._labels, stale=snap.stale)


DTN_HOST_FAMILIES = (
    (names.DTN_HOST_RATE, "rate_bps", 1 / 8.0, "A DTN host's data rate at the tap."),
    (names.DTN_HOST_RTT, "rtt_s", 1.0, "A DTN host's round-trip time."),
    (names.DTN_HOST_QUEUING_DELAY, "queuing_delay_s", 1.0, "A DTN host's last BR1 sojourn."),
    (
        names.DTN_HOST_MEAN_QUEUING_DELAY,
        "mean_queuing_delay_s",
        1.0,
        "A DTN host's mean BR1 sojourn over the last sample time.",
    ),
    (
        names.DTN_HOST_RETRANSMISSION_RATIO,
        "retransmission_ratio",
        1.0,
        "A DTN host's resent over sent data packets (P4BS loss method 1).",
    ),
    (names.DTN_HOST_ACTIVE_FLOWS, "active_flows", 1.0, "A DTN host's active flows."),
)


def _dtn_hosts(dtns: tuple[DtnFigures, ...], link: list[str], stale: bool) -> Iterator[Metric]:
    """Each DTN host's own class (label ``dtn_host``, one per host of the link: bounded by
    the API's 64); nothing while stale."""
    for name, attribute, scale, doc in DTN_HOST_FAMILIES:
        family = GaugeMetricFamily(name, doc, labels=[*LABELS, "dtn_host"])
        if not stale:
            for dtn in dtns:
                value = float(getattr(dtn, attribute))
                if math.isfinite(value) and dtn.host:
                    family.add_metric([*link, dtn.host], value * scale)
        yield family


def _signals(signals: PathSignals, link: list[str], stale: bool) -> Iterator[Metric]:
    """The loss telemetry (``contract.state.PathSignals``); nothing while stale, as the
    switch was not read."""
    by_class = [*LABELS, "class"]
    retrans = GaugeMetricFamily(
        names.RETRANSMISSION_RATIO,
        "Resent over sent data packets of a class at BR1's ingress (P4BS loss method 1).",
        labels=by_class,
    )
    mean_qd = GaugeMetricFamily(
        names.MEAN_QUEUING_DELAY,
        "Mean BR1 queuing delay of a class's packets over the last sample time.",
        labels=by_class,
    )
    loss = GaugeMetricFamily(
        names.BOTTLENECK_LOSS_RATIO,
        "BR1's own drops over the bytes that entered it (P4BS loss method 2).",
        labels=list(LABELS),
    )
    long_flows = GaugeMetricFamily(
        names.LONG_FLOWS, "Flows active for at least 2 s (P4BS's N).", labels=list(LABELS)
    )
    if not stale:
        for cls, ratio, delay in (
            ("dtn", signals.dtn_retransmission_ratio, signals.dtn_mean_queuing_delay_s),
            ("campus", signals.campus_retransmission_ratio, signals.campus_mean_queuing_delay_s),
        ):
            if math.isfinite(ratio):
                retrans.add_metric([*link, cls], ratio)
            if math.isfinite(delay):
                mean_qd.add_metric([*link, cls], delay)
        if math.isfinite(signals.bottleneck_loss_ratio):
            loss.add_metric(link, signals.bottleneck_loss_ratio)
        if math.isfinite(signals.long_flows):
            long_flows.add_metric(link, signals.long_flows)
    yield retrans
    yield mean_qd
    yield loss
    yield long_flows


class StreamExporter:
    """The sample stream's subscribers, and the samples dropped for those that fell
    ``QUEUE_DEPTH`` behind (a slow reader costs itself samples, never the others)."""

    def __init__(self, stream: StreamCounts, labels: tuple[str]) -> None:
        self._stream = stream
        self._labels = list(labels)

    def collect(self) -> Iterator[Metric]:
        subscribers = GaugeMetricFamily(
            names.STREAM_SUBSCRIBERS, "Open Subscribe streams.", labels=list(LABELS)
        )
        subscribers.add_metric(self._labels, self._stream.subscribers)
        yield subscribers
        dropped = CounterMetricFamily(
            names.STREAM_DROPPED,
            "Samples dropped for subscribers that fell behind (oldest first).",
            labels=list(LABELS),
        )
        dropped.add_metric(self._labels, self._stream.dropped)
        yield dropped


class StreamCounts(Protocol):
    @property
    def subscribers(self) -> int: ...

    dropped: int


@dataclass(frozen=True)
class SelfMetrics:
    """The collector's own health, labelled by link."""

    poll_seconds: Histogram
    p4runtime_errors: Counter
    digests: Counter
    samples: Counter
    connected: Gauge
    primary: Gauge
    reconnects: Counter
    overruns: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> SelfMetrics:
        labels = list(LABELS)

        def counter(name: str, doc: str, *by: str) -> Counter:
            return Counter(name, doc, [*labels, *by], registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry)

        return cls(
            poll_seconds=Histogram(
                names.POLL_DURATION,
                "Time to read the switch and compute one sample.",
                labels,
                buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
                registry=registry,
            ),
            p4runtime_errors=counter(names.P4RUNTIME_ERRORS, "Failed P4Runtime calls.", "code"),
            digests=counter(names.DIGESTS_RECEIVED, "Digest entries received.", "digest"),
            samples=counter(names.SAMPLES_PUBLISHED, "Samples published.", "stale"),
            connected=gauge(names.SWITCH_CONNECTED, "1 while the P4Runtime stream is up."),
            primary=gauge(
                names.SWITCH_PRIMARY, "1 while this collector is the primary controller."
            ),
            reconnects=counter(names.SWITCH_RECONNECTS, "Connection attempts after the first."),
            overruns=counter(names.LOOP_OVERRUNS, "Sample times missed because a poll overran."),
        )
