"""A picture of a Grafana dashboard, drawn from its own panels and queries.

No Grafana server runs where scidmz is built and tested, so the docs' dashboard pictures are
drawn here instead: every panel of the dashboard JSON at its grid position, with its title,
unit and legend, and the series its PromQL returned from a real Prometheus. The drawing is
pure (series in, PNG out); fetching the series is the caller's (``fetch_series``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRID_COLUMNS = 24
"""Grafana's grid is 24 units wide; a unit of height is 30 px."""


@dataclass(frozen=True)
class Series:
    """One line of a panel: its legend and its points (seconds since the start, value)."""

    legend: str
    times_s: Sequence[float]
    values: Sequence[float]


SeriesSource = Callable[[str, str], list[Series]]
"""(PromQL expression, legend format) -> the series it returns."""

_SCALES: Mapping[str, tuple[float, str]] = {
    "bps": (1e-6, "Mb/s"),
    "s": (1e3, "ms"),
    "percentunit": (100.0, "%"),
    "reqps": (1.0, "/s"),
    "ops": (1.0, "/s"),
    "short": (1.0, ""),
    "bool_on_off": (1.0, ""),
}


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format filled from a series' labels."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()


def with_variables(expr: str, values: Mapping[str, str]) -> str:
    """A panel's query with its template variables (``$namespace``) replaced."""
    for name, value in values.items():
        expr = expr.replace(f"${name}", value)
    return expr


HEADER_ROWS = 1.5
"""Grid units of height above the panels, for the dashboard's title."""


def _axes_box(grid: Mapping[str, int], rows: int) -> tuple[float, float, float, float]:
    """A panel's grid position as a figure box (left, bottom, width, height), leaving half a
    unit above it for its title and most of a unit below it for the time axis."""
    total = rows + HEADER_ROWS
    left = grid["x"] / GRID_COLUMNS + 0.035
    width = grid["w"] / GRID_COLUMNS - 0.045
    bottom = 1 - (grid["y"] + HEADER_ROWS + grid["h"] - 0.9) / total
    height = (grid["h"] - 1.5) / total
    return (left, bottom, width, height)


def draw(
    dashboard: Mapping[str, Any], series: Mapping[int, list[list[Series]]], path: Path
) -> None:
    """Draw ``dashboard`` with ``series[panel id][target index]`` into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(16, (rows + HEADER_ROWS) * 0.36))
    figure.suptitle(
        dashboard["title"], x=0.01, y=1 - 0.4 / (rows + HEADER_ROWS), ha="left",
        fontsize=13, fontweight="bold",
    )  # fmt: skip
    for panel in panels:
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        scale, suffix = _SCALES.get(unit, (1.0, ""))
        axis = figure.add_axes(_axes_box(panel["gridPos"], rows))
        axis.set_title(panel["title"], loc="left", fontsize=10)
        lines = [s for target in series.get(panel["id"], []) for s in target]
        if not lines:
            axis.text(0.5, 0.5, "No data", ha="center", va="center", color="grey")
            axis.set_xticks([])
            axis.set_yticks([])
            continue
        if panel["type"] == "stat":
            last = lines[-1].values[-1] if lines[-1].values else float("nan")
            shown = ("on" if last else "off") if unit == "bool_on_off" else f"{last * scale:g}"
            axis.text(0.5, 0.5, shown, ha="center", va="center", fontsize=28)
            axis.set_xticks([])
            axis.set_yticks([])
            continue
        for line in lines:
            values = [v * scale for v in line.values]
            if panel["type"] == "state-timeline":
                axis.step(line.times_s, values, where="post", label=line.legend)
            else:
                axis.plot(line.times_s, values, label=line.legend, linewidth=1.2)
        axis.set_ylabel(suffix, fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6, loc="upper left", ncol=2, frameon=False)
    figure.text(
        0.99, 0.003, "time axes: seconds since the start of the run", ha="right", fontsize=7,
        color="grey",
    )  # fmt: skip
    figure.savefig(path, dpi=90)
    plt.close(figure)


def fetch_series(
    prometheus_url: str, start_s: float, end_s: float, step_s: float, variables: Mapping[str, str]
) -> SeriesSource:
    """A ``SeriesSource`` reading Prometheus's range API (``/api/v1/query_range``)."""

    def source(expr: str, legend_format: str) -> list[Series]:
        query = urllib.parse.urlencode(
            {
                "query": with_variables(expr, variables),
                "start": f"{start_s:.3f}",
                "end": f"{end_s:.3f}",
                "step": f"{step_s:g}",
            }
        )
        url = f"{prometheus_url.rstrip('/')}/api/v1/query_range?{query}"
        with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 (our own URL)
            result = json.load(reply)["data"]["result"]
        return [
            Series(
                legend(legend_format, item["metric"]),
                [float(t) - start_s for t, _ in item["values"]],
                [float(v) for _, v in item["values"]],
            )
            for item in result
        ]

    return source


def render(dashboard: Mapping[str, Any], source: SeriesSource, path: Path) -> int:
    """Query every panel's targets through ``source`` and draw the dashboard at ``path``;
    the number of panels that had data."""
    series = {
        panel["id"]: [source(t["expr"], t.get("legendFormat", "")) for t in panel["targets"]]
        for panel in dashboard["panels"]
    }
    draw(dashboard, series, path)
    return sum(1 for targets in series.values() if any(targets))
