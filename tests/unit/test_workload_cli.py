"""`scidmz collector|controller --config FILE` as real processes."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from scidmz.api.runtime import dump_runtime_config
from scidmz.testenv.certs import generate_switch_tls
from scidmz.testenv.cluster import free_port, wait_http_ok
from tests.loops import plaintext_link_spec, render


def _run(args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _terminate(*procs):
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=10)


@pytest.mark.parametrize("component", ["collector", "controller"])
def test_bad_config_stops_start_up_with_a_clear_error(tmp_path, component):
    path = tmp_path / "config.yaml"
    path.write_text("link: l\ntarget_rate_bps: -5\n")
    proc = _run([component, "--config", str(path)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "target_rate_bps" in err and "generation" in err


def test_controller_serves_health_state_and_stops_on_sigterm(tmp_path):
    # dryRun: a fail-safe it can restore
    config = render(plaintext_link_spec(actuator={"type": "dryRun"}), collector="x:1")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    port = free_port()
    proc = _run(
        ["controller", "--config", str(path)], env={**os.environ, "SCIDMZ_HTTP_PORT": str(port)}
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", 20, proc)
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
        assert not_ready.value.code == 503  # no samples from the collector yet
        assert b"waiting for samples" in not_ready.value.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=1) as r:
            state = json.loads(r.read())
        assert state["link"] == "campus-border" and state["strategy"] == "mlc"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            assert b'scidmz_build_info{component="controller"' in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0
    err = proc.stderr.read()
    assert "stopped: fail-safe rates restored" in err and "WITHOUT" not in err


def test_a_controller_that_cannot_restore_its_failsafe_says_so_and_exits_1(tmp_path):
    # the simulated shaper it should restore is not there: SIGTERM must not claim it did
    actuator = {"type": "sim", "sim": {"address": f"127.0.0.1:{free_port()}"}}
    config = render(plaintext_link_spec(actuator=actuator), collector="x:1")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    port = free_port()
    proc = _run(["controller", "--config", str(path), "--http-port", str(port),
                 "--restore-for", "1.5"])  # fmt: skip
    wait_http_ok(f"http://127.0.0.1:{port}/healthz", 20, proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "stopped WITHOUT restoring the fail-safe rates" in err
    assert "fail-safe rates restored" not in err
    assert 1.0 <= time.monotonic() - started < 15  # it kept trying for --restore-for


def _collector_config(tmp_path, switch_port, **spec_changes):
    spec = plaintext_link_spec()
    spec["switch"]["address"] = f"127.0.0.1:{switch_port}"
    spec["campus"]["remotePrefix"] = "198.51.100.0/24"
    for key, value in spec_changes.items():
        spec[key] = value
    config = render(spec, collector=f"127.0.0.1:{free_port()}")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    return path


def test_collector_and_target_processes_measure_together(tmp_path):
    switch_port, http_port = free_port(), free_port()
    target = _run(["target", "--listen", f"127.0.0.1:{switch_port}"])
    path = _collector_config(tmp_path, switch_port, sampleTime="200ms")
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
        _terminate(collector, target)
    assert collector.returncode == 0 and target.returncode == 0


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"ports": {"campus": 1, "dtn": 2, "bottleneck": 600}}, "bottleneck=600"),
        ({"prefix": "198.51.100.77/32"}, "overlap"),
    ],
)
def test_collector_refuses_bad_wiring_before_connecting(tmp_path, changes, fragment):
    path = _collector_config(tmp_path, free_port())
    text = path.read_text()
    if "ports" in changes:
        text = text.replace("bottleneck_port: 3", "bottleneck_port: 600")
    else:
        text = text.replace("campus_prefix: 198.51.100.0/24", "campus_prefix: 198.51.100.77/32")
        text = text.replace("prefix: 203.0.113.10/32", "prefix: 198.51.100.0/24")
    path.write_text(text)
    proc = _run(["collector", "--config", str(path)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert fragment in err, err


def test_collector_and_target_processes_speak_mutual_tls(tmp_path):
    pki = generate_switch_tls(tmp_path / "pki", "tofino-1.campus.example")
    switch_port, http_port = free_port(), free_port()
    target = _run(["target", "--listen", f"127.0.0.1:{switch_port}",
                   "--tls-cert", str(pki.switch_cert), "--tls-key", str(pki.switch_key),
                   "--tls-client-ca", str(pki.ca_cert)])  # fmt: skip
    tls = {"secretName": "switch-tls", "serverName": "tofino-1.campus.example"}
    switch = {"address": f"127.0.0.1:{switch_port}", "tls": tls}
    path = _collector_config(tmp_path, switch_port, switch=switch)
    collector = _run(["collector", "--config", str(path), "--http-port", str(http_port),
                      "--tls-dir", str(pki.collector_dir)])  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 30, collector)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1) as r:
            assert b"primary" in r.read()
    finally:
        _terminate(collector, target)
    assert collector.returncode == 0 and target.returncode == 0


def test_collector_refuses_a_tls_secret_without_its_ca(tmp_path):
    switch = {"address": "127.0.0.1:1", "tls": {"secretName": "switch-tls"}}
    path = _collector_config(tmp_path, free_port(), switch=switch)
    (tmp_path / "tls").mkdir()
    proc = _run(["collector", "--config", str(path), "--tls-dir", str(tmp_path / "tls")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "switch TLS" in err and "ca.crt: missing" in err, err


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--tls-cert", "CERT"], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", "CERT"], "--tls-client-ca needs --tls-cert and --tls-key"),
        (["--tls-cert", "CERT", "--tls-key", "MISSING"], "No such file"),
        (["--tls-cert", "JUNK", "--tls-key", "JUNK"], "not PEM"),
    ],
)
def test_target_refuses_bad_tls_options(tmp_path, flags, fragment):
    pki = generate_switch_tls(tmp_path / "pki", "switch.example")
    (tmp_path / "junk").write_text("junk")
    paths = {"CERT": str(pki.switch_cert), "MISSING": str(tmp_path / "missing"),
             "JUNK": str(tmp_path / "junk")}  # fmt: skip
    proc = _run(["target", "--listen", f"127.0.0.1:{free_port()}",
                 *[paths.get(f, f) for f in flags]])  # fmt: skip
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and fragment in err, err


def test_target_refuses_bad_options():
    proc = _run(["target", "--ports", "campus=1,dtn=1,bottleneck=3"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "distinct" in err
    proc = _run(["target", "--source", "pcap"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--source must be sim" in err


def _dtn_config(kind, **changes):
    base = {"type": kind, "gains": {"kp": 0.0, "ki": 0.0, "kw": 0.0}, "failsafe_rate_bps": 6e8}
    return base | changes


def _controller_config(tmp_path, **runtime_changes):
    config = render(plaintext_link_spec(), collector=f"127.0.0.1:{free_port()}")
    data = config.model_dump()
    for dotted, value in runtime_changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    path = tmp_path / "controller.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        (
            {"controller.gains.kp": 150.0},
            "controller.gains.kp: Input should be less than or equal to 100",
        ),
        (
            {"controller.min_rate_bps": 9e8, "controller.max_rate_bps": 1e8},
            "controller.min_rate_bps exceeds max_rate_bps",
        ),
        (
            {"actuator.type": "tc", "actuator.tc_interface": "nonexistent0"},
            "interface nonexistent0 does not exist",
        ),
        (
            {"actuator.dtn": _dtn_config("dryRun", gains={"kp": 0, "ki": 101, "kw": 0})},
            "actuator.dtn.gains.ki: Input should be less than or equal to 100",
        ),
        ({"actuator.dtn": _dtn_config("tc")}, "needs the shaper address"),
        (
            {"actuator.dtn": _dtn_config("dryRun", failsafe_rate_bps=float("inf"))},
            "failsafe_rate_bps",
        ),
    ],
)
def test_controller_refuses_bad_input(tmp_path, changes, fragment):
    path = _controller_config(tmp_path, **changes)
    proc = _run(["controller", "--config", str(path)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, err
    assert fragment in err, err


def test_controller_refuses_a_model_without_22_inputs(tmp_path):
    from tests.unit.test_controller_loop import _onnx_model

    model = _onnx_model(tmp_path / "m.onnx", 21)
    path = _controller_config(tmp_path, **{"controller.strategy": "mlc"})
    proc = _run(["controller", "--config", str(path), "--model", str(model)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "not [N, 22]" in err, err


def test_controller_refuses_a_model_trained_on_other_features(tmp_path):
    from tests.unit.test_controller_loop import _onnx_model

    model = _onnx_model(tmp_path / "m.onnx", 22, {"scidmz.features": "a,b", "scidmz.units": "",
                                                  "scidmz.target": "binding-rate"})  # fmt: skip
    path = _controller_config(tmp_path, **{"controller.strategy": "mlc"})
    proc = _run(["controller", "--config", str(path), "--model", str(model)])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, err
    assert "scidmz.features differs from the controller's at input 0: model 'a'" in err, err


def test_sigterm_restores_the_failsafe_rate(tmp_path):
    import asyncio

    import grpc

    from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

    switch_port, http_port = free_port(), free_port()
    target = _run(["target", "--listen", f"127.0.0.1:{switch_port}"])
    path = _controller_config(
        tmp_path,
        **{"actuator.type": "sim", "actuator.sim_address": f"127.0.0.1:{switch_port}",
           "failsafe.stale_after_s": 60.0, "failsafe.rate_bps": 3e8},
    )  # fmt: skip
    controller = _run(["controller", "--config", str(path), "--http-port", str(http_port)])

    async def rate(set_to=None):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{switch_port}") as channel:
            stub = telemetry_pb2_grpc.SimActuatorStub(channel)
            if set_to is not None:
                request = telemetry_pb2.CampusRateLimit(rate_bps=set_to)
                return (await stub.SetCampusRateLimit(request, timeout=5)).rate_bps
            truth = await stub.GetGroundTruth(telemetry_pb2.GroundTruthRequest(), timeout=5)
            return truth.campus_rate_limit_bps

    try:
        wait_http_ok(f"http://127.0.0.1:{http_port}/healthz", 30, controller)
        for _ in range(100):  # the target may still be starting
            try:
                assert asyncio.run(rate(set_to=123e6)) == 123e6
                break
            except grpc.aio.AioRpcError:
                time.sleep(0.2)
        else:
            raise AssertionError("the target never answered")
        controller.send_signal(signal.SIGTERM)
        controller.wait(timeout=15)
        assert controller.returncode == 0
        time.sleep(0.1)
        assert asyncio.run(rate()) == 3e8
    finally:
        for proc in (controller, target):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=10)
