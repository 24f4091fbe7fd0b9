"""bench/chaos.py in short form: faults on the loop's processes, malformed P4Runtime
requests, a Subscribe storm, and the alerts (with real Prometheus) and dashboard panel each
fault lights. The figures (times against their targets) are the benchmark's; these tests
check the behaviour: fail-safe, resume, no jump above maxStep, the right status codes,
memory released, the right alerts."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from scidmz.api.runtime import RuntimeConfig
from scidmz.chaos.faults import Fault, actuation_trace, run_fault
from scidmz.chaos.local_loop import LocalLoop
from scidmz.chaos.p4runtime_abuse import malformed_requests, write_error_model
from scidmz.chaos.slow_clients import run_slow_clients
from scidmz.chaos.storm import run_storm
from scidmz.metrics import names
from scidmz.metrics.dashboards import FIRING_ALERTS
from scidmz.testenv.cluster import REPO_ROOT, free_port

HEALTH = REPO_ROOT / "dashboards" / "health.json"
FAULT_ALERTS = {
    "ScidmzTelemetryStale", "ScidmzFailsafeActive", "ScidmzControllerDown",
    "ScidmzCollectorDown", "ScidmzActuatorFailing",
}  # fmt: skip


def _config(sample_time: str, stale_after: str | None = None) -> RuntimeConfig:
    from tests.loops import plaintext_link_spec, render

    failsafe = {"rate": "100Mbps", **({"staleAfter": stale_after} if stale_after else {})}
    link = plaintext_link_spec(sampleTime=sample_time, failsafe=failsafe)
    return render(link, collector="unused:1")


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    with LocalLoop(_config("500ms"), tmp_path_factory.mktemp("loop")) as running:
        running.wait_until(running.controlling, 90, "first control")
        yield running


@pytest.mark.parametrize(
    "fault",
    [Fault("collector", "kill"), Fault("target", "stop"), Fault("target", "kill"),
     Fault("controller", "kill"), Fault("controller", "stop")],
    ids=lambda f: f"{f.component}-{f.kind}",
)  # fmt: skip
def test_a_fault_fails_safe_and_control_resumes_without_a_jump(loop, fault):
    config = loop.config
    outage = config.failsafe.stale_after_s + 2 * config.sample_time_s
    struck = time.monotonic()
    result = run_fault(loop, fault, outage, observe_s=2.0, resume_timeout_s=30)
    assert result.resume_s is not None, loop.log("controller")[-3000:]
    trace = actuation_trace(loop, struck)
    assert result.max_jump_bps <= config.controller.max_step_bps + 1.0, f"{result}\n{trace}"
    if fault.component == "controller":
        assert result.held  # the rate in force stays while the controller is down
    else:
        assert result.failsafe_s is not None, result


def test_malformed_requests_get_their_codes_and_the_loop_runs_on(loop):
    loop.wait_until(loop.controlling, 30, "control")
    reconnects = loop.collector_metric(names.SWITCH_RECONNECTS)
    since = time.monotonic()
    refusals = malformed_requests(loop)
    sw = loop.config.switch
    refusals += write_error_model(loop.switch, sw.device_id, sw.election_id)
    wrong = [r for r in refusals if not r.ok]
    assert not wrong, wrong
    assert len(refusals) >= 18
    time.sleep(4 * loop.config.sample_time_s)
    assert loop.alive("target") and loop.controlling()
    assert not any(p.failsafe for p in loop.probes.controller if p.t > since)
    # the collector kept its session and its mastership throughout
    assert loop.collector_metric(names.SWITCH_RECONNECTS) == reconnects
    assert loop.collector_metric(names.SWITCH_PRIMARY) == 1.0


def test_a_subscribe_storm_is_released_and_the_others_stay_served(tmp_path):
    # staleAfter 2 s, not 3T = 0.3 s: a CI machine's hiccup must not read as starvation
    # (bench/chaos.py judges the default)
    with LocalLoop(_config("100ms", stale_after="2s"), tmp_path) as storm_loop:
        storm_loop.wait_until(storm_loop.controlling, 90, "first control")
        result = run_storm(storm_loop, clients=50, duration_s=12.0, baseline_s=3.0)
    assert result.opened == 50 and result.subscribers_peak >= 52, result
    assert result.subscribers_after == 2, result  # the watcher and the controller: no leak
    assert result.missed == 0 and not result.controller_failsafe, result
    assert result.rss_peak_mb - result.rss_before_mb < 50, result


def test_slow_and_idle_clients_leave_the_probes_answered_and_the_loop_controlling(tmp_path):
    """The slow-client attack in short form (bench/chaos.py: 100 per port for 60 s)."""
    from tests.loops import plaintext_link_spec, render

    host = {**plaintext_link_spec()["dtnHosts"][0],
            "shaper": {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "dtn0"}}}  # fmt: skip
    config = render(plaintext_link_spec(dtnHosts=[host]), collector="unused:1")
    result = run_slow_clients(config, tmp_path, clients=30, duration_s=8.0, baseline_s=3.0)
    assert not result.exited, result.exited
    for name, (before, during) in result.probes.items():
        answered, asked, _ = during
        assert asked >= 6 and answered == asked, (name, before, during, result)
    assert not result.failsafe_during and result.decisions[1] >= 6, result


# ---- alerts and the dashboard ---------------------------------------------------------------
def _query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]["result"]


def _firing(port: int) -> set[str]:
    try:
        return {r["metric"]["alertname"] for r in _query(port, FIRING_ALERTS)}
    except OSError:
        return set()


@pytest.fixture
def prometheus(loop, tmp_path):
    """Real Prometheus scraping the loop every second, with the shipped alert rules made
    immediate (their ``for`` dropped: promtool's tests in dashboards/ check the delays)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (hack/system-deps.sh installs it)")
    rules = yaml.safe_load((REPO_ROOT / "dashboards" / "alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "rules.yaml")],
        "scrape_configs": [
            {"job_name": name, "scrape_timeout": "900ms", "static_configs": [{
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"namespace": "ns", "service": f"chaos-{name}"}}]}
            for name, port in (("collector", loop.collector_http),
                               ("controller", loop.controller_http))
        ],
    }  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=15)


def _wait_alerts(loop: LocalLoop, port: int, expected: set[str], what: str) -> None:
    loop.wait_until(lambda: expected <= _firing(port), 45, f"{sorted(expected)} for {what}")


def test_each_fault_fires_its_alerts_and_the_dashboard_panel_shows_them(loop, prometheus):
    loop.wait_until(loop.controlling, 30, "control")

    def scraped() -> bool:
        try:
            return len(_query(prometheus, "up == 1")) == 2
        except OSError:
            return False

    loop.wait_until(scraped, 30, "both processes scraped")
    time.sleep(3)
    assert not _firing(prometheus) & FAULT_ALERTS, "a healthy loop fires no fault alert"

    loop.signal("collector", signal.SIGKILL)
    _wait_alerts(loop, prometheus, {"ScidmzCollectorDown", "ScidmzFailsafeActive"}, "collector")
    loop.spawn("collector")
    loop.wait_until(
        lambda: not _firing(prometheus) & {"ScidmzCollectorDown", "ScidmzFailsafeActive"},
        45, "the collector's alerts to clear",
    )  # fmt: skip

    loop.signal("target", signal.SIGSTOP)
    try:
        _wait_alerts(loop, prometheus, {"ScidmzTelemetryStale", "ScidmzActuatorFailing"}, "switch")
    finally:
        loop.signal("target", signal.SIGCONT)
    loop.wait_until(loop.controlling, 30, "control after the switch")

    loop.signal("controller", signal.SIGKILL)
    _wait_alerts(loop, prometheus, {"ScidmzControllerDown"}, "controller")
    loop.spawn("controller")
    loop.wait_until(loop.controlling, 30, "control after the controller")
    # what the 'Firing alerts' panel plots is the query these checks ran, in the shipped JSON
    panel = next(
        p for p in json.loads(HEALTH.read_text())["panels"] if p["title"] == "Firing alerts"
    )
    assert [t["expr"] for t in panel["targets"]] == [FIRING_ALERTS]
