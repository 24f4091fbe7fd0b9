"""The base of scidmz's exporters: metric families rendered at scrape time from the latest
immutable snapshot a loop publishes, so a scrape never sees half of an update."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

S = TypeVar("S")
LABELS = ("link",)


class SnapshotExporter(Collector, Generic[S]):
    """``collect`` renders ``snapshot()`` (None: nothing yet) with the link's label."""

    def __init__(
        self,
        link: str,
        snapshot: Callable[[], S | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._labels = [link]
        self._snapshot = snapshot
        self._clock = clock

    def describe(self) -> Iterator[Metric]:
        return iter(())  # values appear with the first snapshot; describe nothing up front

    def gauge(self, name: str, doc: str, value: float | None) -> Iterator[Metric]:
        """One gauge with the link's label; none for a missing or non-finite value
        (PromQL then sees "absent", not NaN)."""
        if value is None or not math.isfinite(value):
            return
        family = GaugeMetricFamily(name, doc, labels=list(LABELS))
        family.add_metric(self._labels, value)
        yield family
