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

from scidmz.control.actuators import ActuatorError, ShaperActuator
from scidmz.testenv.cluster import free_port, wait_http_ok
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
