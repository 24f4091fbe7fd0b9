"""The software tap's own health on /metrics: frames read and frames the kernel dropped
before it could read them, per mirror interface (``tapreader`` writes both every second).

A tap that drops frames reads low rates without any other sign, so these are what says
whether its figures can be trusted (``bench/tap_capture.py`` measures where that starts).

Exposition::

    scidmz_tap_frames_total{interface="ens1f0"} 1.2e+06
    scidmz_tap_kernel_drops_total{interface="ens1f0"} 0.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from scidmz.metrics import names


class CaptureCollector(Collector):
    """Reads ``stats()`` (``PacketTapSource.capture_stats``) at each scrape."""

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        frames = CounterMetricFamily(
            names.TAP_FRAMES.removesuffix("_total"),
            "Frames the tap read from a mirror interface.",
            labels=["interface"],
        )
        drops = CounterMetricFamily(
            names.TAP_DROPS.removesuffix("_total"),
            "Frames the kernel dropped before the tap read them.",
            labels=["interface"],
        )
        for interface, counts in sorted(self._stats().items()):
            frames.add_metric([interface], float(counts.get("frames", 0)))
            drops.add_metric([interface], float(counts.get("kernel_drops", 0)))
        yield frames
        yield drops
