"""The DTN actuator's tc agent (`scidmz shaper`) on a real tbf in a network namespace, as a
real process, driven by the controller's ShaperActuator over real gRPC."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from scidmz.api.policy import parse_spec
from scidmz.api.runtime import CONFIG_KEY, dump_runtime_config, resolve_runtime_config
from scidmz.control.actuators import ActuatorError, ShaperActuator
from scidmz.testenv.cluster import REPO_ROOT, free_port, wait_http_ok
from scidmz.testenv.projection import project_like_kubelet
from tests.netns import veth_netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def netns():
    with veth_netns("dtn0") as name:
        yield name


def _rate(netns: str) -> str | None:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "tc", "qdisc", "show", "dev", "dtn0"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    found = re.search(r"qdisc tbf \w+: root .*rate (\w+)", out)
    return found.group(1) if found else None


def _shaper(netns: str, *extra: str) -> tuple[subprocess.Popen[str], int, int]:
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "scidmz.cli", "shaper", "--interface", "dtn0",
            "--netns", netns, "--listen", f"127.0.0.1:{grpc_port}",
            "--http-port", str(http_port), *extra,
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 20, proc)
    return proc, grpc_port, http_port


def _wait_rate(netns: str, want: str, timeout_s: float = 10.0) -> str | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = _rate(netns)
        if got == want:
            return got
        time.sleep(0.1)
    return _rate(netns)


def test_the_controller_sets_the_dtn_cap_and_the_agent_fails_safe(netns):
    proc, grpc_port, _ = _shaper(netns, "--failsafe-rate", "600Mbps", "--stale-after", "1.5s")
    try:
        assert _rate(netns) == "600Mbit"  # a known cap from the start: the fail-safe

        async def drive() -> tuple[float | None, float, float | None]:
            actuator = ShaperActuator(f"127.0.0.1:{grpc_port}")
            try:
                # what a restarted controller reads back before it moves the cap
                return (
                    await actuator.current(),
                    await actuator.apply(450e6),
                    await actuator.current(),
                )
            finally:
                await actuator.close()

        assert asyncio.run(drive()) == (600e6, 450e6, 450e6)
        assert _rate(netns) == "450Mbit"
        # the controller goes quiet: after --stale-after the agent restores the fail-safe
        assert _wait_rate(netns, "600Mbit") == "600Mbit"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0
    assert _rate(netns) == "600Mbit"  # left in force on shutdown
    err = proc.stderr.read()
    assert "stopping: fail-safe rate 600000000 bit/s applied" in err
    assert err.count("no rate for") == 1  # the quiet controller, not the plain SIGTERM


def test_an_agent_that_cannot_apply_its_failsafe_on_the_way_out_says_so_and_exits_1(netns):
    proc, _, _ = _shaper(netns, "--failsafe-rate", "600Mbps")
    subprocess.run(["ip", "netns", "exec", netns, "ip", "link", "del", "dtn0"], check=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "stopped WITHOUT the fail-safe rate 600000000 bit/s" in err
    assert "stopping: fail-safe rate 600000000 bit/s applied" not in err


def test_bad_rates_are_refused_over_grpc_and_a_dead_agent_is_an_actuator_error(netns):
    proc, grpc_port, _ = _shaper(netns, "--failsafe-rate", "100Mbps")

    async def drive() -> str:
        actuator = ShaperActuator(f"127.0.0.1:{grpc_port}", timeout_s=1.0)
        try:
            with pytest.raises(ActuatorError, match=r"INVALID_ARGUMENT.*finite"):
                await actuator.apply(float("nan"))
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
            with pytest.raises(ActuatorError, match="UNAVAILABLE") as gone:
                await actuator.apply(200e6)
            return str(gone.value)
        finally:
            await actuator.close()

    message = asyncio.run(drive())
    assert f"127.0.0.1:{grpc_port}" in message
    assert _rate(netns) == "100Mbit"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interface", "eth9"], "--interface: interface eth9 does not exist in network"),
        (["--failsafe-rate", "fast"], "--failsafe-rate / --stale-after: invalid rate"),
        (["--stale-after", "0s"], "--stale-after must be > 0"),
    ],
)
def test_bad_input_exits_2_naming_the_option(netns, args, message):
    base = {"--interface": "dtn0", "--failsafe-rate": "600Mbps", "--stale-after": "10s"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = [item for pair in base.items() for item in pair]
    proc = subprocess.run(
        [sys.executable, "-m", "scidmz.cli", "shaper", *argv, "--netns", netns,
         "--listen", f"127.0.0.1:{free_port()}", "--http-port", str(free_port())],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert _rate(netns) is None  # nothing half-applied


def _policy_config(**spec_changes: object) -> str:
    """The lab's BBR policy (a tc DTN actuator) on this test's interface, rendered."""
    raw = yaml.safe_load((REPO_ROOT / "examples" / "lab" / "bbr-1G.yaml").read_text())["spec"]
    raw["actuator"]["dtn"]["tc"]["interface"] = "dtn0"
    raw["failsafe"] = {"staleAfter": "1s"}
    spec = parse_spec(raw | spec_changes)
    return dump_runtime_config(resolve_runtime_config("p", "ns", 1, spec, "c:1", "s:2"))


def test_with_the_policys_config_the_agent_follows_its_failsafe_live(netns, tmp_path):
    """As the operator runs it: the fail-safe ('target': R*, after staleAfter + 2T) comes
    from the mounted ConfigMap, and a new R* reaches the running agent (no restart)."""
    volume = tmp_path / "config"
    project_like_kubelet(volume, {CONFIG_KEY: _policy_config()})
    proc, _, _ = _shaper(netns, "--config", str(volume / CONFIG_KEY))
    try:
        assert _rate(netns) == "600Mbit"
        project_like_kubelet(volume, {CONFIG_KEY: _policy_config(targetRate="500Mbps")})
        assert _wait_rate(netns, "500Mbit", 5) == "500Mbit"  # the fail-safe in force moves
        # a file that does not validate changes nothing: the agent runs on
        project_like_kubelet(volume, {CONFIG_KEY: "target_rate_bps: fast\n"})
        time.sleep(2.5)
        assert proc.poll() is None and _rate(netns) == "500Mbit"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "not taken, running on as before" in stderr


def test_the_config_and_the_failsafe_options_exclude_each_other(netns, tmp_path):
    path = tmp_path / CONFIG_KEY
    path.write_text(_policy_config())
    campus_only = tmp_path / "campus-only.yaml"
    raw = yaml.safe_load((REPO_ROOT / "examples" / "lab" / "cubic-1G.yaml").read_text())["spec"]
    config = resolve_runtime_config("p", "ns", 1, parse_spec(raw), "c:1", "s:2")
    campus_only.write_text(dump_runtime_config(config))
    for extra, message in (
        (["--config", str(path), "--failsafe-rate", "1Gbps"], "drop --failsafe-rate"),
        (["--config", str(campus_only)], "--config: the policy has no tc DTN actuator"),
        (["--config", str(tmp_path / "missing.yaml")], "--config:"),
        ([], "--failsafe-rate (or --config) is required"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "scidmz.cli", "shaper", "--interface", "dtn0", *extra,
             "--netns", netns, "--listen", f"127.0.0.1:{free_port()}",
             "--http-port", str(free_port())],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, (extra, proc.stderr)
        assert message in proc.stderr, (extra, proc.stderr)
    assert _rate(netns) is None
