"""`scidmz collector|controller --config FILE` as real processes."""

import os
import signal
import subprocess
import sys
import time
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


@pytest.mark.parametrize("component", ["controller"])
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


def _collector_config(tmp_path, example_policy, switch_port, **spec_changes):
    spec = example_policy["spec"]
    spec["switch"]["address"] = f"127.0.0.1:{switch_port}"
    spec["campus"]["remotePrefix"] = "198.51.100.0/24"
    for key, value in spec_changes.items():
        spec[key] = value
    config = resolve_runtime_config("p", "ns", 1, parse_spec(spec), f"127.0.0.1:{free_port()}")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    return path


def test_collector_and_target_processes_measure_together(tmp_path, example_policy):
    switch_port, http_port = free_port(), free_port()
    target = _run(["target", "--listen", f"127.0.0.1:{switch_port}"])
    path = _collector_config(tmp_path, example_policy, switch_port, sampleTime="200ms")
    collector = _run(["collector", "--config", str(path), "--http-port", str(http_port)])
    try:
        wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 30, collector)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1) as r:
            assert b"primary" in r.read()
        body = b""
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=1) as r:
                body = r.read()
            if b"scidmz_rate_bytes_per_second{" in body:
                break
            time.sleep(0.1)
        assert b'scidmz_rate_bytes_per_second{class="dtn"' in body
        assert b'scidmz_build_info{component="collector"' in body
    finally:
        for proc in (collector, target):
            proc.send_signal(signal.SIGTERM)
        collector.wait(timeout=10)
        target.wait(timeout=10)
    assert collector.returncode == 0 and target.returncode == 0


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"ports": {"campus": 1, "dtn": 2, "bottleneck": 600}}, "bottleneck=600"),
        ({"prefix": "198.51.100.77/32"}, "overlap"),
    ],
)
def test_collector_refuses_bad_wiring_before_connecting(
    tmp_path, example_policy, changes, fragment
):
    path = _collector_config(tmp_path, example_policy, free_port())
    text = path.read_text()
    if "ports" in changes:
        text = text.replace("bottleneck_port: 3", "bottleneck_port: 600")
    else:
        text = text.replace("campus_prefix: 198.51.100.0/24", "campus_prefix: 198.51.100.77/32")
        text = text.replace("dtn_prefix: 203.0.113.10/32", "dtn_prefix: 198.51.100.0/24")
    path.write_text(text)
    proc = _run(["collector", "--config", str(path)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert fragment in err, err


def test_target_refuses_bad_options():
    proc = _run(["target", "--ports", "campus=1,dtn=1,bottleneck=3"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "distinct" in err
    proc = _run(["target", "--source", "pcap"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--source must be sim" in err
