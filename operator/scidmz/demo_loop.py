"""The demo's running loop: one link's workloads as local processes, watched live.

No kubelet runs here, so the collector and controller of ``examples/borderlink.yaml`` run
as processes with exactly the config the operator rendered into the link's ConfigMap and
the certificates it issued them, pointed at a local ``scidmz target`` (the simulated switch
and campus, over mutual TLS). A Prometheus scrapes them, with the metrics-reader
certificate, when one is installed. The terminal shows y(t), R*, u(t) and the tracking
error every second; at the end a report (CSV, plots, summary) is written.
"""

from __future__ import annotations

import csv
import ipaddress
import math
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

from scidmz.api.runtime import ChannelSecurity, RuntimeConfig, dump_runtime_config
from scidmz.api.units import format_duration, format_rate
from scidmz.auth.identity import WORKLOAD_SERVER_NAME
from scidmz.auth.mtls import http_client_context, load_mutual_tls
from scidmz.control.quality import mrae
from scidmz.metrics.http import fetch_state
from scidmz.plotting import finish_panels
from scidmz.testenv.cluster import ControlPlane, free_port
from scidmz.testenv.installed import pods
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
    reader: Path | None = None
    """The metrics-reader certificate directory (None: the loop runs plaintext)."""
    controller_name: str | None = None
    """The name the controller's certificate carries."""

    def stop(self) -> None:
        stop_all(self.processes)

    def state(self) -> dict[str, Any]:
        """The controller's /state (over mutual TLS when the loop has certificates)."""
        if self.reader is None:
            return fetch_state(f"http://127.0.0.1:{self.controller_port}/state", 1.0) or {}
        context = http_client_context(load_mutual_tls(self.reader))
        url = f"https://127.0.0.1:{self.controller_port}/state"
        return fetch_state(url, 1.0, tls=context, server_name=self.controller_name) or {}


CONTROLLER_HTTP_PORT = 9461
"""The chart's ``workloads.controllerHttpPort``."""


def pod_state(plane: ControlPlane, reader: Path, timeout_s: float = 2.0) -> dict[str, Any]:
    """The link controller's /state straight from its pod on the real node (the host
    routes to the node's pods), over mutual TLS as the metrics reader; {} while there is no
    single running controller or no answer."""
    running = pods(plane, "controller")
    address = running[0]["status"].get("podIP") if len(running) == 1 else None
    if not address:
        return {}
    context = http_client_context(load_mutual_tls(reader))
    url = f"https://{address}:{CONTROLLER_HTTP_PORT}/state"
    return fetch_state(url, timeout_s, tls=context, server_name=WORKLOAD_SERVER_NAME) or {}


@dataclass(frozen=True)
class LocalTls:
    """Where the operator's certificates and the switch's were written for local processes:
    a directory (ca.crt, tls.crt, tls.key) per identity, and the switch's own pair."""

    collector: Path
    controller: Path
    reader: Path
    switch_client: Path
    """The switch TLS Secret's content (the collector's and a sim controller's)."""
    switch_cert: Path
    switch_key: Path


def workload_addresses(config: RuntimeConfig) -> tuple[str, str]:
    """A DTN address inside the DTN-r prefix, a campus one inside the remote prefix."""
    if config.dtn_prefix is None:
        raise ValueError(f"link {config.link} has no admitted policy: no DTN to simulate")
    dtn = ipaddress.ip_network(config.dtn_prefix)
    campus = ipaddress.ip_network(config.campus_prefix)
    dtn_host = next(iter(dtn.hosts()), dtn.network_address)
    campus_host = next(h for h in campus.hosts() if h not in dtn)
    return str(dtn_host), str(campus_host)


def local_config(
    rendered: RuntimeConfig,
    switch: str,
    collector: str,
    identity: Path | None = None,
    switch_tls: bool = False,
) -> RuntimeConfig:
    """The operator's rendered config with only the addresses changed: the switch (and the
    sim actuators, campus and DTN) at a local ``scidmz target``, the sample stream at
    ``collector``; ``identity`` is where this process's certificate was written (None:
    plaintext, as processes on one host may run), and the switch keeps its TLS only with
    ``switch_tls`` (the local target then serves it)."""
    dtn = rendered.actuator.dtn
    local_dtn = dtn.model_copy(update={"type": "sim", "address": switch}) if dtn else None
    actuator = rendered.actuator.model_copy(
        update={"type": "sim", "sim_address": switch, "dtn": local_dtn}
    )
    security = None
    if identity is not None and rendered.security is not None:
        security = rendered.security.model_copy(update={"identity_dir": str(identity)})
    elif identity is not None:
        raise ValueError("a certificate was given but the rendered config runs plaintext")
    switch_update: dict[str, object] = {"address": switch}
    if not switch_tls:
        switch_update |= {"tls_secret": None, "tls_server_name": None}
    return rendered.model_copy(
        update={
            "switch": rendered.switch.model_copy(update=switch_update),
            "actuator": actuator,
            "collector_address": collector,
            "security": security,
        }
    )


def start_workloads(
    rendered: RuntimeConfig,
    workdir: Path,
    controller_port: int,
    log: Any,
    tls: LocalTls | None = None,
    operator_metrics_port: int | None = None,
) -> Workloads:
    switch, grpc_port, collector_http = free_port(), free_port(), free_port()
    configs = {}
    for component in ("collector", "controller"):
        identity = getattr(tls, component) if tls is not None else None
        local = local_config(
            rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}", identity,
            switch_tls=tls is not None,
        )  # fmt: skip
        configs[component] = workdir / f"{component}.yaml"
        configs[component].write_text(dump_runtime_config(local))
    dtn, campus = workload_addresses(local)
    security = rendered.security if tls is not None else None
    workloads = Workloads(
        controller_port=controller_port,
        reader=tls.reader if tls is not None else None,
        controller_name=WORKLOAD_SERVER_NAME if security else None,
    )

    def spawn(name: str, args: list[str]) -> None:
        out = (workdir / f"{name}.log").open("ab")
        workloads.processes.append((
            name,
            subprocess.Popen(
                [sys.executable, "-m", "scidmz.cli", *args], stdout=out, stderr=subprocess.STDOUT
            ),
        ))  # fmt: skip
        log(f"  {name}: scidmz {' '.join(args)}  (log {workdir / f'{name}.log'})")

    target = ["target", "--listen", f"127.0.0.1:{switch}", "--dtn-address", dtn,
              "--campus-address", campus]  # fmt: skip
    switch_tls: list[str] = []
    if tls is not None and rendered.switch.tls_secret:
        target += ["--tls-cert", str(tls.switch_cert), "--tls-key", str(tls.switch_key),
                   "--tls-client-ca", str(tls.switch_client / "ca.crt")]  # fmt: skip
        switch_tls = [str(tls.switch_client)]
    spawn("target", target)
    tls_dir = ["--tls-dir", *switch_tls] if switch_tls else []
    spawn("collector", ["collector", "--config", str(configs["collector"]), "--http-port",
                        str(collector_http), *tls_dir])  # fmt: skip
    spawn("controller", ["controller", "--config", str(configs["controller"]), "--http-port",
                         str(controller_port),
                         *(["--switch-tls-dir", *switch_tls] if switch_tls else [])])  # fmt: skip
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        log("  prometheus: not installed (apt install prometheus); skipping it")
        return workloads
    port = free_port()
    scrape: dict[str, Any] = {
        "global": {"scrape_interval": "2s"},
        "scrape_configs": [
            _scrape_job(component, f"127.0.0.1:{http}", tls, security, rendered.link)
            for component, http in (("collector", collector_http), ("controller", controller_port))
        ],
    }
    if operator_metrics_port is not None:
        # the operator's own /metrics (reconciles, errors: the health dashboard)
        scrape["scrape_configs"].append({
            "job_name": "operator",
            "static_configs": [{"targets": [f"127.0.0.1:{operator_metrics_port}"]}],
        })  # fmt: skip
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


def _scrape_job(
    component: str,
    target: str,
    tls: LocalTls | None,
    security: ChannelSecurity | None,
    link: str,
) -> dict[str, Any]:
    """A Prometheus job for one workload: over mutual TLS with the metrics-reader
    certificate (the server's name checked as in the cluster), or plaintext."""
    # the labels a ServiceMonitor gives in the cluster (the health dashboard's "up" panel)
    labels = {"service": f"{link}-{component}"}
    job: dict[str, Any] = {
        "job_name": component,
        "static_configs": [{"targets": [target], "labels": labels}],
    }
    if tls is not None and security is not None:
        job["scheme"] = "https"
        job["tls_config"] = {
            "ca_file": str(tls.reader / "ca.crt"),
            "cert_file": str(tls.reader / "tls.crt"),
            "key_file": str(tls.reader / "tls.key"),
            "server_name": WORKLOAD_SERVER_NAME,
        }
    return job


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
    table = Table(title=f"the loop, live ({elapsed:.0f}/{total:.0f} s): {policy}")
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


FIRST_DECISION_TIMEOUT_S = 300.0
"""The simulated switch compiles its kernel on a cold cache (~40 s on 2 cores) before the
first sample; the demo's clock starts after that, at the loop's first decision."""


def watch(
    state: Callable[[], dict[str, Any]], policy: str, duration_s: float, console: Console,
    first_decision_timeout_s: float = FIRST_DECISION_TIMEOUT_S,
) -> list[dict[str, Any]]:  # fmt: skip
    """One row a second of the controller's /state for ``duration_s``, counted from its
    first decision (so a cold start is not in the window). Raises ``TimeoutError`` when no
    decision comes within ``first_decision_timeout_s``."""
    waited = time.monotonic()
    with console.status("waiting for the loop's first decision (a cold simulator compiles "
                        "its kernel first, ~40 s)") as status:  # fmt: skip
        while not (state().get("state") or {}).get("sampled_at"):
            elapsed = time.monotonic() - waited
            if elapsed > first_decision_timeout_s:
                raise TimeoutError(f"no decision within {first_decision_timeout_s:.0f} s")
            status.update(f"waiting for the loop's first decision ({elapsed:.0f} s; a cold "
                          "simulator compiles its kernel first, ~40 s)")  # fmt: skip
            time.sleep(0.5)
    console.print(f"  first decision after {time.monotonic() - waited:.0f} s; the clock starts")
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with Live(console=console, refresh_per_second=2) as live:
        while (elapsed := time.monotonic() - started) < duration_s:
            now = state()
            sample = now.get("state") or {}
            row = {
                "t_s": round(elapsed, 2),
                "target_rate_bps": now.get("target_rate_bps"),
                "campus_rate_limit_bps": now.get("campus_rate_limit_bps"),
                "mrae": (now.get("tracking") or {}).get("mrae"),
                **{k: sample.get(k) for k in COLUMNS if k in sample},
            }
            if sample:
                rows.append(row)
            live.update(_view(row, policy, elapsed, duration_s))
            time.sleep(1.0)
    console.print()
    return rows


def dashboard_pictures(
    prometheus_url: str | None, start_s: float, end_s: float, out: Path,
    log: Callable[[str], None],
) -> list[Path]:  # fmt: skip
    """``dashboard-<name>.png`` for each Grafana dashboard, drawn from its own queries
    against the demo's Prometheus (no Grafana runs here); nothing without a Prometheus."""
    if prometheus_url is None:
        return []
    from scidmz.metrics.dashboards import DASHBOARDS
    from scidmz.metrics.preview import fetch_series, render

    out.mkdir(parents=True, exist_ok=True)
    source = fetch_series(prometheus_url, start_s, end_s, step_s=2.0, variables={"link": ".*"})
    written = []
    for name, build in DASHBOARDS.items():
        path = out / f"dashboard-{name}.png"
        dashboard = build()
        with_data = render(dashboard, source, path)
        log(f"  dashboard {name}: {with_data} of {len(dashboard['panels'])} panels with data")
        written.append(path)
    return written


SETTLE_S = 20.0
"""The demo's settled error counts the samples from this long after the first decision."""


def summary_lines(rows: list[dict[str, Any]], settle_s: float = SETTLE_S) -> list[str]:
    """The run in a few Markdown bullets: the settled tracking error (eq. 3 over the
    samples from ``settle_s`` on, with the window it covers) beside the controller's own
    windowed figure, which includes the start."""
    if not rows:
        return ["- no sample was recorded"]
    settled = [r for r in rows if r["t_s"] >= settle_s] or rows
    targets = [float(r.get("target_rate_bps") or math.nan) for r in settled]
    rates = [float(r.get("dtn_rate_bps") or math.nan) for r in settled]
    dtn = [x for x in rates if math.isfinite(x)]
    held = sorted({format_rate(t) for t in targets if math.isfinite(t)})
    window = f"t = {settled[0]['t_s']:.0f}–{settled[-1]['t_s']:.0f} s, {len(settled)} samples"
    return [
        f"- samples: {len(rows)} over {rows[-1]['t_s']:.0f} s from the loop's first decision",
        f"- target R*: {', '.join(held) or '—'}",
        f"- DTN rate, mean over {window}: {format_rate(sum(dtn) / len(dtn)) if dtn else '—'}",
        f"- tracking error (MRAE, eq. 3) settled, over {window}: "
        f"{_fmt(mrae(targets, rates), 'pct')}",
        f"- the controller's own MRAE at the end (its window includes the start): "
        f"{_fmt(rows[-1].get('mrae'), 'pct')}",
    ]


def write_report(
    rows: list[dict[str, Any]], out: Path, policy: str, settle_s: float = SETTLE_S,
    how: str = "simulated campus, the loop as local processes",
) -> list[Path]:  # fmt: skip
    """samples.csv, demo.png (DTN vs R*, campus vs u, delays), summary.md; ``how`` the
    loop ran, for the titles."""
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
        title = f"scidmz demo: {policy}\n{how}"
        finish_panels(figure, axes, title, out / "demo.png")
        written.append(out / "demo.png")
    summary = [f"# scidmz demo: {policy}", "", f"{how}.", "", *summary_lines(rows, settle_s), ""]
    if len(written) > 1:
        summary += ["![the run](demo.png)", ""]
    (out / "summary.md").write_text("\n".join(summary))
    written.append(out / "summary.md")
    return written
