"""`scidmz collector|controller --config FILE` as real processes."""

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from scidmz.api.policy import parse_spec
from scidmz.api.runtime import dump_runtime_config, resolve_runtime_config
from scidmz.testenv.cluster import free_port, wait_http_ok


def _run(args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("component", ["collector", "controller"])
def test_bad_config_stops_start_up_with_a_clear_error(tmp_path, component):
    path = tmp_path / "config.yaml"
    path.write_text("policy: p\ntarget_rate_bps: -5\n")
    proc = _run([component, "--config", str(path)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "target_rate_bps" in err and "namespace" in err


@pytest.mark.parametrize("component", ["collector", "controller"])
def test_valid_config_serves_health_and_stops_on_sigterm(tmp_path, component, example_policy):
    config = resolve_runtime_config("p", "ns", 1, parse_spec(example_policy["spec"]), "x:1")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    port = free_port()
    proc = _run(
        [component, "--config", str(path)], env={**os.environ, "SCIDMZ_HTTP_PORT": str(port)}
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", 20, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            assert b"ns/p" in r.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            assert f'scidmz_build_info{{component="{component}"'.encode() in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0
