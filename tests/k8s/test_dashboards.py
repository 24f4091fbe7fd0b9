"""Every dashboard query and every series an alert reads return data from a real Prometheus
that scrapes a running collector and controller (with the target behind them) and the
operator."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request

import yaml

from scidmz.api.runtime import dump_runtime_config
from scidmz.demo_loop import local_config
from scidmz.metrics.dashboards import DASHBOARDS, FIRING_ALERTS, queries
from scidmz.testenv.cluster import REPO_ROOT, free_port
from scidmz.testenv.processes import stop_all
from tests.k8s.conftest import wait_for
from tests.loops import link_spec, plaintext_link_spec, render


def _run(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args], env=os.environ.copy(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _target_health(port: int) -> list[tuple[str, str, str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as response:
        targets = json.load(response)["data"]["activeTargets"]
    return [(t["labels"]["job"], t["health"], t["lastError"]) for t in targets]


def promtool_problems(exposition: str) -> str:
    """What ``promtool check metrics`` (Prometheus's own exposition linter) reports."""
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    return "" if result.returncode == 0 else (result.stdout + result.stderr).strip()


def test_promtool_flags_a_planted_naming_error():
    bad = "# HELP scidmz_x_bytes counted\n# TYPE scidmz_x_bytes counter\nscidmz_x_bytes 1\n"
    assert "_total" in promtool_problems(bad)


def _concrete(promql: str) -> str:
    return promql.replace("$link", ".*")


def test_every_dashboard_and_alert_query_returns_data(operator, tmp_path):
    host = {**link_spec()["dtnHosts"][0], "shaper": {"type": "sim"}}
    spec = plaintext_link_spec(
        sampleTime="500ms", campus={"remotePrefix": "198.51.100.0/24"},
        actuator={"type": "sim"}, controller={"strategy": "pi"}, dtnHosts=[host],
        buffer={"actuator": {"type": "sim"}},  # the buffer search's series too
    )  # fmt: skip
    switch, grpc_port, collector_http, controller_http, prom = (free_port() for _ in range(5))
    rendered = render(spec, collector="unused:1")
    config = local_config(rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}")
    (tmp_path / "config.yaml").write_text(dump_runtime_config(config))
    scrape = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "collector", "static_configs": [{
                "targets": [f"127.0.0.1:{collector_http}"],
                "labels": {"namespace": "ns", "service": "campus-border-collector"}}]},
            {"job_name": "controller", "static_configs": [{
                "targets": [f"127.0.0.1:{controller_http}"],
                "labels": {"namespace": "ns", "service": "campus-border-controller"}}]},
            {"job_name": "operator", "static_configs": [{
                "targets": [f"127.0.0.1:{operator.process.metrics_port}"]}]},
        ],
    }  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape))
    processes = [
        _run(["target", "--listen", f"127.0.0.1:{switch}"]),
        _run(["collector", "--config", str(tmp_path / "config.yaml"),
              "--http-port", str(collector_http)]),
        _run(["controller", "--config", str(tmp_path / "config.yaml"),
              "--http-port", str(controller_http)]),
        subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    try:
        # two scrapes of every job: a rate over them exists (it may be 0 for the operator)
        ready = (
            "rate(scidmz_control_loop_seconds_count[5m]) > 0",
            "rate(scidmz_collector_poll_seconds_count[5m]) > 0",
            "rate(scidmz_operator_reconciles_total[5m]) >= 0",
        )

        def warm() -> bool:
            try:
                return all(_query(prom, promql) for promql in ready)
            except OSError:
                return False

        try:
            wait_for(warm, 60, "scrapes with a rate to compute", interval=1.0)
        except AssertionError as error:
            raise AssertionError(f"{error}; targets: {_target_health(prom)}") from None
        lint = {}
        for job, port in (("collector", collector_http), ("controller", controller_http),
                          ("operator", operator.process.metrics_port)):  # fmt: skip
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                lint[job] = promtool_problems(r.read().decode())
        assert not any(lint.values()), f"promtool check metrics: {lint}"
        missing = []
        for name, build in DASHBOARDS.items():
            for promql in queries(build()):
                # data only during a fault: tests/telemetry/test_chaos.py checks it then
                if promql == FIRING_ALERTS:
                    continue
                if not _query(prom, _concrete(promql)):
                    missing.append(f"{name}: {promql}")
        alerts = yaml.safe_load((REPO_ROOT / "dashboards" / "alerts.yaml").read_text())
        for rule in alerts["groups"][0]["rules"]:
            # an alert only returns data while it fires; what it reads must exist now
            for selector in re.findall(r"\b(?:scidmz_\w+|up)(?:\{[^}]*\})?", rule["expr"]):
                if not _query(prom, selector):
                    missing.append(f"alert {rule['alert']}: {selector}")
        assert not missing, "no data for:\n" + "\n".join(missing)
    finally:
        # the controller first: it restores its fail-safe through the switch's sim shaper
        stop_all(
            list(zip(("target", "collector", "controller", "prometheus"), processes, strict=True))
        )
