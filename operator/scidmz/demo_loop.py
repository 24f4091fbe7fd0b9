"""The demo's running loop: one policy's workloads as local processes, watched live.

No kubelet runs here, so the collector and controller of ``examples/dtntransferpolicy.yaml``
run as processes with exactly the config the operator rendered into the policy's ConfigMap,
pointed at a local ``scidmz target`` (the simulated switch and campus). A Prometheus
scrapes them when one is installed. The terminal shows y(t), R*, u(t) and the tracking
error every second; at the end a report (CSV, plots, summary) is written.
"""

from __future__ import annotations

import csv
import ipaddress
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from scidmz.api.runtime import RuntimeConfig, dump_runtime_config
from scidmz.api.units import format_duration, format_rate
from scidmz.metrics.http import fetch_state
from scidmz.plotting import finish_panels
from scidmz.testenv.cluster import free_port
from scidmz.testenv.processes import stop_all

COLUMNS = (
    "t_s", "dtn_rate_bps", "target_rate_bps", "campus_rate_bps", "campus_rate_limit_bps",
    "dtn_rtt_s", "campus_rtt_s", "dtn_queuing_delay_s", "campus_queuing_delay_s",
    "active_flows", "mrae",
)  # fmt: skip


@dataclass
class Workloads:
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    controller_port: int = 0
    prometheus_port: int | None = None

    def stop(self) -> None:
        stop_all(self.processes)


def workload_addresses(config: RuntimeConfig) -> tuple[str, str]:
    """A DTN address inside the DTN-r prefix, a campus one inside the remote prefix."""
    dtn = ipaddress.ip_network(config.dtn_prefix)
    campus = ipaddress.ip_network(config.campus_prefix)
    dtn_host = next(iter(dtn.hosts()), dtn.network_address)
    campus_host = next(h for h in campus.hosts() if h not in dtn)
    return str(dtn_host), str(campus_host)


def local_config(rendered: RuntimeConfig, switch: str, collector: str) -> RuntimeConfig:
    """The operator's rendered config with only the addresses changed: the switch (and the
    sim actuators, campus and DTN) at a local ``scidmz target``, the sample stream at
    ``collector``."""
    dtn = rendered.actuator.dtn
    local_dtn = dtn.model_copy(update={"type": "sim", "address": switch}) if dtn else None
    actuator = rendered.actuator.model_copy(
        update={"type": "sim", "sim_address": switch, "dtn": local_dtn}
    )
    return rendered.model_copy(
        update={
            "switch": rendered.switch.model_copy(update={"address": switch}),
            "actuator": actuator,
            "collector_address": collector,
        }
    )


def start_workloads(
    rendered: RuntimeConfig, workdir: Path, controller_port: int, log: Any
) -> Workloads:
    switch, grpc_port, collector_http = free_port(), free_port(), free_port()
    local = local_config(rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}")
    config = workdir / "config.yaml"
    config.write_text(dump_runtime_config(local))
    dtn, campus = workload_addresses(local)
    workloads = Workloads(controller_port=controller_port)

    def spawn(name: str, args: list[str]) -> None:
        out = (workdir / f"{name}.log").open("ab")
        workloads.processes.append((
            name,
            subprocess.Popen(
                [sys.executable, "-m", "scidmz.cli", *args], stdout=out, stderr=subprocess.STDOUT
            ),
        ))  # fmt: skip
        log(f"  {name}: scidmz {' '.join(args)}  (log {workdir / f'{name}.log'})")

    spawn("target", ["target", "--listen", f"127.0.0.1:{switch}", "--dtn-address", dtn,
                     "--campus-address", campus])  # fmt: skip
    spawn("collector", ["collector", "--config", str(config), "--http-port", str(collector_http)])
    spawn("controller", ["controller", "--config", str(config), "--http-port",
                         str(controller_port)])  # fmt: skip
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        log("  prometheus: not installed (apt install prometheus); skipping it")
        return workloads
    port = free_port()
    scrape = {
        "global": {"scrape_interval": "2s"},
        "scrape_configs": [
            {"job_name": "scidmz", "static_configs": [{"targets": [
                f"127.0.0.1:{collector_http}", f"127.0.0.1:{controller_port}"]}]},
        ],
    }  # fmt: skip
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(scrape))
    workloads.processes.append((
        "prometheus",
        subprocess.Popen(
            [prometheus, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=(workdir / "prometheus.log").open("ab"), stderr=subprocess.STDOUT,
        ),
    ))  # fmt: skip
    workloads.prometheus_port = port
    log(f"  prometheus: http://127.0.0.1:{port} (try scidmz_rate_bytes_per_second * 8)")
    return workloads


def _fmt(value: Any, kind: str) -> str:
    if not isinstance(value, int | float):
        return "—"
    if kind == "rate":
        return format_rate(max(float(value), 0.0))
    if kind == "time":
        return format_duration(max(float(value), 0.0))
    if kind == "pct":
        return f"{value:.1%}"
    return f"{value:.0f}"


def _view(row: dict[str, Any], policy: str, elapsed: float, total: float) -> Table:
    table = Table(title=f"{policy}: the loop, live ({elapsed:.0f}/{total:.0f} s)")
    table.add_column("")
    table.add_column("DTN", justify="right")
    table.add_column("campus", justify="right")
    table.add_row(
        "rate", _fmt(row.get("dtn_rate_bps"), "rate"), _fmt(row.get("campus_rate_bps"), "rate")
    )
    table.add_row(
        "target R* / limit u(t)",
        _fmt(row.get("target_rate_bps"), "rate"),
        _fmt(row.get("campus_rate_limit_bps"), "rate"),
    )
    table.add_row("RTT", _fmt(row.get("dtn_rtt_s"), "time"), _fmt(row.get("campus_rtt_s"), "time"))
    table.add_row(
        "queuing delay",
        _fmt(row.get("dtn_queuing_delay_s"), "time"),
        _fmt(row.get("campus_queuing_delay_s"), "time"),
    )
    table.add_row("active flows", _fmt(row.get("active_flows"), "n"), "")
    table.add_row("tracking error (MRAE)", _fmt(row.get("mrae"), "pct"), "")
    return table  # fmt: skip


def watch(
    workloads: Workloads, policy: str, target_rate_bps: float, duration_s: float,
    console: Console,
) -> list[dict[str, Any]]:  # fmt: skip
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with Live(console=console, refresh_per_second=2) as live:
        while (elapsed := time.monotonic() - started) < duration_s:
            state = fetch_state(f"http://127.0.0.1:{workloads.controller_port}/state", 1.0) or {}
            sample = state.get("state") or {}
            row = {
                "t_s": round(elapsed, 2),
                "target_rate_bps": target_rate_bps,
                "campus_rate_limit_bps": state.get("campus_rate_limit_bps"),
                "mrae": (state.get("tracking") or {}).get("mrae"),
                **{k: sample.get(k) for k in COLUMNS if k in sample},
            }
            if sample:
                rows.append(row)
            live.update(_view(row, policy, elapsed, duration_s))
            time.sleep(1.0)
    return rows


def dashboard_pictures(
    prometheus_port: int | None, start_s: float, end_s: float, out: Path,
    log: Callable[[str], None],
) -> list[Path]:  # fmt: skip
    """``dashboard-<name>.png`` for each Grafana dashboard, drawn from its own queries
    against the demo's Prometheus (no Grafana runs here); nothing without a Prometheus."""
    if prometheus_port is None:
        return []
    from scidmz.metrics.dashboards import DASHBOARDS
    from scidmz.metrics.preview import fetch_series, render

    out.mkdir(parents=True, exist_ok=True)
    source = fetch_series(
        f"http://127.0.0.1:{prometheus_port}", start_s, end_s, step_s=2.0,
        variables={"namespace": ".*", "policy": ".*"},
    )  # fmt: skip
    written = []
    for name, build in DASHBOARDS.items():
        path = out / f"dashboard-{name}.png"
        dashboard = build()
        with_data = render(dashboard, source, path)
        log(f"  dashboard {name}: {with_data} of {len(dashboard['panels'])} panels with data")
        written.append(path)
    return written


def write_report(rows: list[dict[str, Any]], out: Path, policy: str) -> list[Path]:
    """samples.csv, demo.png (DTN vs R*, campus vs u, delays), summary.md."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "samples.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    written = [out / "samples.csv"]
    if rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = [r["t_s"] for r in rows]

        def series(key: str, scale: float = 1.0) -> list[float]:
            return [(r.get(key) or float("nan")) * scale for r in rows]

        figure, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
        axes[0].plot(t, series("dtn_rate_bps", 1e-6), label="DTN rate")
        axes[0].plot(t, series("target_rate_bps", 1e-6), "--", label="target R*")
        axes[0].set_ylabel("Mb/s")
        axes[1].plot(t, series("campus_rate_bps", 1e-6), label="campus rate")
        axes[1].step(t, series("campus_rate_limit_bps", 1e-6), where="post", label="limit u(t)")
        axes[1].set_ylabel("Mb/s")
        axes[2].plot(t, series("dtn_queuing_delay_s", 1e3), label="DTN queuing delay")
        axes[2].plot(t, series("campus_rtt_s", 1e3), label="campus RTT")
        axes[2].set_ylabel("ms")
        title = f"{policy}: scidmz demo (simulated campus, real loop)"
        finish_panels(figure, axes, title, out / "demo.png")
        written.append(out / "demo.png")
    last = rows[-10:]
    dtn = [r["dtn_rate_bps"] for r in last if isinstance(r.get("dtn_rate_bps"), float)]
    summary = [
        f"# scidmz demo: {policy}",
        "",
        f"- samples: {len(rows)}",
        f"- target R*: {format_rate(rows[0]['target_rate_bps']) if rows else '—'}",
        f"- DTN rate, mean of the last 10 s: {format_rate(sum(dtn) / len(dtn)) if dtn else '—'}",
        f"- tracking error (MRAE) at the end: {_fmt(rows[-1].get('mrae'), 'pct') if rows else '—'}",
        "",
        "![the run](demo.png)" if len(written) > 1 else "",
        "",
    ]
    (out / "summary.md").write_text("\n".join(summary))
    written.append(out / "summary.md")
    return written
