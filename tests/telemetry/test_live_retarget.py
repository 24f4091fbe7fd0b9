"""A running `scidmz controller` takes a new target rate from its config file without a
restart (SIGHUP, or the next poll), refuses an invalid file and runs on, and says which
changes need a restart. The loop is the chaos harness's: target (simulator), collector and
controller as processes; what the network gets is read from the simulator's journal."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scidmz.api.runtime import RuntimeConfig, dump_runtime_config
from scidmz.chaos.local_loop import LocalLoop
from scidmz.metrics import names
from scidmz.metrics.http import fetch_state

CAPACITY = 1e9


def _config() -> RuntimeConfig:
    from tests.loops import plaintext_link_spec, render

    link = plaintext_link_spec(sampleTime="500ms", controller={"strategy": "trivial"})
    return render(link, collector="unused:1")


def _retargeted(config: RuntimeConfig, target_bps: float) -> RuntimeConfig:
    """As the operator renders a policy's new targetRate: its share, the sum, the fail-safe."""
    failsafe = config.failsafe.model_copy(update={"rate_bps": CAPACITY - target_bps})
    policies = [p.model_copy(update={"target_rate_bps": target_bps}) for p in config.policies]
    return config.model_copy(
        update={"target_rate_bps": target_bps, "failsafe": failsafe, "policies": policies}
    )


def _reloads(loop: LocalLoop, result: str) -> float:
    url = f"http://127.0.0.1:{loop.controller_http}/metrics"
    with urllib.request.urlopen(url, timeout=2) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == names.CONFIG_RELOADS and sample.labels.get("result") == result:
                return float(sample.value)
    return 0.0


def _u(loop: LocalLoop) -> float | None:
    actuations = loop.probes.actuations
    return actuations[-1].rate_bps if actuations else None


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory):
    with LocalLoop(_config(), tmp_path_factory.mktemp("live")) as running:
        running.wait_until(running.controlling, 90, "first control")
        running.wait_until(lambda: _u(running) == pytest.approx(4e8), 10, "u = B − R* = 400")
        yield running


def _write(path: Path, config: RuntimeConfig) -> None:
    path.write_text(dump_runtime_config(config))


def test_a_new_target_is_taken_live_on_sighup(loop: LocalLoop) -> None:
    pid = loop.processes["controller"].pid
    _write(loop.config_path, _retargeted(loop.config, 7e8))
    sent = time.monotonic()
    loop.signal("controller", signal.SIGHUP)
    # trivial: u = B − R* = 300 Mb/s at the next decision, by the same process
    taken = loop.wait_until(lambda: _u(loop) == pytest.approx(3e8), 5, "u = 300 Mb/s")
    assert taken - sent < 2 * loop.config.sample_time_s + 0.5
    assert loop.processes["controller"].pid == pid and loop.alive("controller")
    state = fetch_state(f"http://127.0.0.1:{loop.controller_http}/state", 1.0) or {}
    assert state["target_rate_bps"] == 7e8 and not state["failsafe_active"]
    assert _reloads(loop, "applied") >= 1
    assert "took setpoint, failsafe_rate_bps, policies live" in loop.log("controller")


def test_without_a_signal_the_next_poll_takes_it(loop: LocalLoop) -> None:
    _write(loop.config_path, _retargeted(loop.config, 5e8))
    loop.wait_until(lambda: _u(loop) == pytest.approx(5e8), 5, "u = 500 Mb/s")


def test_an_invalid_file_is_refused_and_the_controller_runs_on(loop: LocalLoop) -> None:
    before = _u(loop)
    rejected = _reloads(loop, "rejected")
    text = dump_runtime_config(_retargeted(loop.config, 2e8))
    loop.config_path.write_text(text.replace("target_rate_bps: 200000000.0", "target_rate_bps: -5"))
    loop.signal("controller", signal.SIGHUP)
    loop.wait_until(lambda: _reloads(loop, "rejected") > rejected, 5, "the reload refused")
    assert "target_rate_bps" in loop.log("controller").split("not taken")[-1]
    time.sleep(2 * loop.config.sample_time_s)
    assert loop.alive("controller") and _u(loop) == before


def test_a_change_that_needs_a_restart_is_named_and_the_rest_is_taken(loop: LocalLoop) -> None:
    controller = loop.config.controller.model_copy(update={"strategy": "pi"})
    wanted = _retargeted(loop.config, 6e8).model_copy(update={"controller": controller})
    _write(loop.config_path, wanted)
    loop.signal("controller", signal.SIGHUP)
    loop.wait_until(lambda: _u(loop) == pytest.approx(4e8), 5, "u = 400 Mb/s")
    assert _reloads(loop, "restart_needed") >= 1
    assert "strategy changed and take effect only after a restart" in loop.log("controller")
    state = fetch_state(f"http://127.0.0.1:{loop.controller_http}/state", 1.0) or {}
    assert state["strategy"] == "trivial"
