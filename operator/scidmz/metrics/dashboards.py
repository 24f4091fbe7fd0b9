"""The Grafana dashboards, built as data from the metric names (``make dashboards``).

Two dashboards, both filtered by ``$link`` (the BorderLinks):

* **overview** — DTN rate against its target, campus rate against u(t), link utilisation,
  RTTs, queuing delays, active flows, tracking MRAE, fail-safe state, and the admitted
  policies with their targets (per policy: namespace, name, DTN host);
* **health** — control-loop latency, sample age, P4Runtime errors, collector poll time,
  operator reconcile errors; the firing alerts, collector/controller up and the fail-safe,
  the sample stream's subscribers and drops, actuator errors.

Every query uses only names from :mod:`scidmz.metrics.names`; a test evaluates each of
them against a real Prometheus scraping a running collector, controller and operator.
"""

from __future__ import annotations

import json
from typing import Any

from scidmz.metrics import names

SELECT = 'link=~"$link"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FIRING_ALERTS = 'sum by (alertname, link) (ALERTS{alertname=~"Scidmz.*", alertstate="firing"})'
"""What the health dashboard's 'Firing alerts' panel shows (data only while one fires)."""


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    title: str,
    targets: list[tuple[str, str]],
    unit: str,
    grid: tuple[int, int, int, int],
    kind: str = "timeseries",
    description: str = "",
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            _target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)
        ],
    }


def _variables() -> dict[str, Any]:
    return {
        "list": [
            {
                "name": "datasource", "type": "datasource", "query": "prometheus",
                "label": "Data source",
            },
            {
                "name": "link", "type": "query", "datasource": DATASOURCE,
                "label": "Border link", "query": f"label_values({names.RATE}, link)",
                "refresh": 2,
                "includeAll": True, "multi": True, "allValue": ".*",
            },
        ]
    }  # fmt: skip


def _dashboard(uid: str, title: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    return {
        "uid": uid,
        "title": title,
        "tags": ["scidmz"],
        "timezone": "utc",
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "schemaVersion": 39,
        "editable": False,
        "templating": _variables(),
        "panels": panels,
    }


def overview() -> dict[str, Any]:
    by = "link"
    return _dashboard("scidmz-overview", "scidmz / overview", [
        _panel("DTN rate and its target", [
            (f'{names.RATE}{{class="dtn", {SELECT}}} * 8', "{{link}} DTN rate"),
            (f"{names.TARGET_RATE}{{{SELECT}}} * 8", "{{link}} target R*"),
            (f"{names.DTN_RATE_LIMIT}{{{SELECT}}} * 8", "{{link}} DTN cap"),
        ], "bps", (0, 0, 12, 8), description="y1 against R* (paper eq. 3's two terms), and "
           "the DTN's sending-rate cap where a DTN actuator is configured."),
        _panel("Campus rate and the limit u(t)", [
            (f'{names.RATE}{{class="campus", {SELECT}}} * 8', "{{link}} campus rate"),
            (f"{names.CAMPUS_RATE_LIMIT}{{{SELECT}}} * 8", "{{link}} u(t)"),
            (f"{names.MODEL_OUTPUT}{{{SELECT}}} * 8", "{{link}} model û(t)"),
        ], "bps", (12, 0, 12, 8)),
        _panel("Link utilisation", [
            (f"sum by ({by}) ({names.RATE}{{{SELECT}}}) / on ({by}) "
             f"max by ({by}) ({names.CAPACITY}{{{SELECT}}})", "{{link}}"),
        ], "percentunit", (0, 8, 8, 8), description="ρ (paper eq. 4): both classes over B_max."),
        _panel("Round-trip times", [
            (f"{names.RTT}{{{SELECT}}}", "{{link}} {{class}}"),
        ], "s", (8, 8, 8, 8)),
        _panel("Queuing delays", [
            (f"{names.QUEUING_DELAY}{{{SELECT}}}", "{{link}} {{class}}"),
            (f"{names.MEAN_QUEUING_DELAY}{{{SELECT}}}", "{{link}} {{class}} mean"),
        ], "s", (16, 8, 8, 8), description="y5/y6 (the last packet's sojourn in BR1, "
           "algorithm 6) and each class's mean over the sample time."),
        _panel("Active flows", [
            (f"{names.ACTIVE_FLOWS}{{{SELECT}}}", "{{link}} active"),
            (f"{names.LONG_FLOWS}{{{SELECT}}}", "{{link}} long (>= 2 s)"),
        ], "short", (0, 16, 8, 8)),
        _panel("Tracking error (MRAE)", [
            (f"{names.TRACKING_MRAE}{{{SELECT}}}", "{{link}}"),
        ], "percentunit", (8, 16, 8, 8), description="Eq. 3 over the last 120 samples."),
        _panel("Fail-safe", [
            (f"max by ({by}) ({names.FAILSAFE_ACTIVE}{{{SELECT}}})", "{{link}}"),
        ], "bool_on_off", (16, 16, 8, 8), kind="stat"),
        _panel("Admitted policies and their targets", [
            (f"{names.POLICY_TARGET_RATE}{{{SELECT}}} * 8",
             "{{namespace}}/{{policy}} on {{link}}/{{dtn_host}}"),
        ], "bps", (0, 24, 24, 8), description="What each research group's DTNTransferPolicy "
           "was granted: the link's loop holds their sum, R*."),
        _panel("Losses", [
            (f"{names.RETRANSMISSION_RATIO}{{{SELECT}}}", "{{link}} {{class}} resent"),
            (f"{names.BOTTLENECK_LOSS_RATIO}{{{SELECT}}}", "{{link}} dropped in BR1"),
        ], "percentunit", (0, 32, 24, 8), description="Resent over sent data packets per "
           "class (path loss, the campus shaper's drops included), and BR1's own drops over "
           "what entered it (P4BS's loss methods 1 and 2)."),
        _panel("Each DTN host's rate and its policy's target", [
            (f"{names.DTN_HOST_RATE}{{{SELECT}}} * 8", "{{link}}/{{dtn_host}} rate"),
            (f"sum by (link, dtn_host) ({names.POLICY_TARGET_RATE}{{{SELECT}}}) * 8",
             "{{link}}/{{dtn_host}} target"),
        ], "bps", (0, 40, 16, 8), description="Several DTN hosts on one link: each host is "
           "its own class at the tap; the DTN rate above is their sum."),
        _panel("Each DTN host's RTT", [
            (f"{names.DTN_HOST_RTT}{{{SELECT}}}", "{{link}}/{{dtn_host}}"),
        ], "s", (16, 40, 8, 8)),
    ])  # fmt: skip


def health() -> dict[str, Any]:
    by = "link"
    return _dashboard("scidmz-health", "scidmz / health", [
        _panel("Control loop latency (p99)", [
            (f"histogram_quantile(0.99, sum by (le, {by}) "
             f"(rate({names.CONTROL_LOOP}_bucket{{{SELECT}}}[5m])))", "{{link}}"),
        ], "s", (0, 0, 12, 8), description="Sample received to actuator called."),
        _panel("Sample age", [
            (f"{names.SAMPLE_AGE}{{{SELECT}}}", "{{link}} {{job}}"),
        ], "s", (12, 0, 12, 8)),
        _panel("P4Runtime errors", [
            (f"sum by ({by}) (rate({names.P4RUNTIME_ERRORS}{{{SELECT}}}[5m])) "
             f"or 0 * max by ({by}) ({names.SWITCH_CONNECTED}{{{SELECT}}})", "{{link}}"),
        ], "reqps", (0, 8, 8, 8), description="Failed P4Runtime calls per second (0 when none)."),
        _panel("Collector poll time (p99)", [
            (f"histogram_quantile(0.99, sum by (le, {by}) "
             f"(rate({names.POLL_DURATION}_bucket{{{SELECT}}}[5m])))", "{{link}}"),
        ], "s", (8, 8, 8, 8)),
        _panel("Operator reconcile errors", [
            (f"sum(rate({names.OPERATOR_RECONCILE_ERRORS}[5m]))", "errors/s"),
            (f"sum(rate({names.OPERATOR_RECONCILES}[5m]))", "reconciles/s"),
        ], "ops", (16, 8, 8, 8)),
        _panel("Firing alerts", [
            (FIRING_ALERTS, "{{alertname}} {{link}}"),
        ], "short", (0, 16, 12, 8), kind="state-timeline", description="Every scidmz alert "
           "while it fires (dashboards/alerts.yaml), all links: each fault of "
           "bench/chaos.py shows here, and the panels beside it show which process."),
        _panel("Collector and controller up, fail-safe", [
            ('up{service=~"($link)-(collector|controller)"}', "{{service}} up"),
            (f"max by ({by}) ({names.FAILSAFE_ACTIVE}{{{SELECT}}})", "{{link}} fail-safe"),
        ], "short", (12, 16, 12, 8), kind="state-timeline"),
        _panel("Sample stream", [
            (f"{names.STREAM_SUBSCRIBERS}{{{SELECT}}}", "{{link}} subscribers"),
            (f"rate({names.STREAM_DROPPED}{{{SELECT}}}[5m])", "{{link}} dropped/s"),
        ], "short", (0, 24, 12, 8), description="Open Subscribe streams of each collector, and "
           "the samples it drops for readers that fell 64 behind."),
        _panel("Actuator errors", [
            (f"sum by ({by}) (rate({names.ACTUATOR_ERRORS}{{{SELECT}}}[5m])) "
             f"or 0 * max by ({by}) ({names.FAILSAFE_ACTIVE}{{{SELECT}}})", "{{link}}"),
        ], "reqps", (12, 24, 12, 8), description="Failed calls to the shaper per second "
           "(0 when none): the rate in force is not the one the controller chose."),
    ])  # fmt: skip


DASHBOARDS = {"overview": overview, "health": health}


def render(name: str) -> str:
    """Formatted, stable JSON (reviewable in diffs)."""
    return json.dumps(DASHBOARDS[name](), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (panels and variables' metric names)."""
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
