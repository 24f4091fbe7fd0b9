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

from scidmz.api.loop_file import load_loop_file
from scidmz.api.runtime import CONFIG_KEY, dump_runtime_config
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


def _policy_config(target_bps: float = 6e8, security=None) -> str:
    """The lab's BBR link (a tc DTN cap) on this test's interface, rendered."""
    loop = load_loop_file(REPO_ROOT / "examples" / "lab" / "bbr-1G.yaml").retargeted(target_bps)
    host = loop.link.dtn_hosts[0]
    assert host.shaper is not None and host.shaper.tc is not None
    tc = host.shaper.tc.model_copy(update={"interface": "dtn0"})
    host = host.model_copy(update={"shaper": host.shaper.model_copy(update={"tc": tc})})
    failsafe = loop.link.failsafe.model_copy(update={"stale_after": "1s"})
    loop = loop.with_link(dtn_hosts=[host], failsafe=failsafe)
    return dump_runtime_config(loop.config("c:1", "s:2", security))


def test_with_the_policys_config_the_agent_follows_its_failsafe_live(netns, tmp_path):
    """As the operator runs it: the fail-safe ('target': R*, after staleAfter + 2T) comes
    from the mounted ConfigMap, and a new R* reaches the running agent (no restart)."""
    volume = tmp_path / "config"
    project_like_kubelet(volume, {CONFIG_KEY: _policy_config()})
    proc, _, _ = _shaper(netns, "--config", str(volume / CONFIG_KEY))
    try:
        assert _rate(netns) == "600Mbit"
        project_like_kubelet(volume, {CONFIG_KEY: _policy_config(5e8)})
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
    config = load_loop_file(REPO_ROOT / "examples" / "lab" / "cubic-1G.yaml").config("c:1")
    campus_only.write_text(dump_runtime_config(config))
    for extra, message in (
        (["--config", str(path), "--failsafe-rate", "1Gbps"], "drop --failsafe-rate"),
        (["--config", str(campus_only)], "--config: the config has no tc DTN cap"),
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


def _https_ready(port: int, proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
    """/readyz over TLS: open to anyone (the kubelet's probe has no certificate)."""
    import ssl
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "exited")
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", context=context, timeout=1
            ) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the shaper never became ready over HTTPS")


def test_with_certificates_only_the_links_controller_sets_the_cap_and_within_bounds(
    netns, tmp_path
):
    """An anonymous SetRate(0) once cut a DTN's tbf to 8 kbit/s. Now: no certificate, no
    handshake; another workload's certificate (the same CA), PERMISSION_DENIED; another
    link's controller, PERMISSION_DENIED; this link's controller, yes, and a rate below the
    host's floor (half of R*) is raised to it."""
    from scidmz.api.runtime import ChannelSecurity
    from scidmz.auth import identity
    from scidmz.auth.channels import ClientTls
    from scidmz.auth.mtls import load_mutual_tls
    from tests.identities import SERVER_NAME, authority, issue, link_identities, write

    ca = authority()
    dirs = link_identities(ca, "lab-1g", tmp_path / "ids")
    security = ChannelSecurity(
        identity_dir=str(dirs["dtn-shaper"]),
        collector_server_name=SERVER_NAME,
        dtn_shaper_server_name=SERVER_NAME,
    )
    volume = tmp_path / "config"
    project_like_kubelet(volume, {CONFIG_KEY: _policy_config(security=security)})
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", "shaper", "--interface", "dtn0", "--netns", netns,
         "--config", str(volume / CONFIG_KEY), "--listen", f"127.0.0.1:{grpc_port}",
         "--http-port", str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    other_link = write(
        issue(ca, identity.link_identity("other-link", "controller")), tmp_path / "other"
    )
    try:
        _https_ready(http_port, proc)
        assert _rate(netns) == "600Mbit"
        address = f"127.0.0.1:{grpc_port}"

        async def attempt(tls: ClientTls | None, rate: float) -> float | str:
            actuator = ShaperActuator(address, timeout_s=2.0, tls=tls)
            try:
                return await actuator.apply(rate)
            except ActuatorError as error:
                return str(error)
            finally:
                await actuator.close()

        def as_client(directory) -> ClientTls:
            return ClientTls(load_mutual_tls(directory), SERVER_NAME)

        anonymous = asyncio.run(attempt(None, 0.0))
        assert isinstance(anonymous, str) and "UNAVAILABLE" in anonymous
        collector = asyncio.run(attempt(as_client(dirs["collector"]), 0.0))
        assert isinstance(collector, str) and "PERMISSION_DENIED" in collector
        assert "link/lab-1g/collector" in collector
        stranger = asyncio.run(attempt(as_client(other_link), 0.0))
        assert isinstance(stranger, str) and "PERMISSION_DENIED" in stranger
        assert _rate(netns) == "600Mbit"  # none of them changed anything
        # the link's controller: taken, and clamped to the floor (half of R* = 300 Mb/s)
        assert asyncio.run(attempt(as_client(dirs["controller"]), 0.0)) == 3e8
        assert _rate(netns) == "300Mbit"
        assert asyncio.run(attempt(as_client(dirs["controller"]), 5e9)) == 1e9  # the capacity
        assert asyncio.run(attempt(as_client(dirs["controller"]), 4.5e8)) == 4.5e8
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "held within 300000000..1000000000 bit/s" in stderr


def _root_qdisc(netns: str) -> str:
    out = subprocess.run(
        ["tc", "-n", netns, "qdisc", "show", "dev", "dtn0", "root"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.strip()


def _restore(netns: str, state_dir) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scidmz.cli", "shaper", "--interface", "dtn0", "--netns", netns,
         "--state-dir", str(state_dir), "--restore"],
        check=False, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


@pytest.mark.parametrize("original", ["the kernel's", "the host's own tbf"])
def test_a_shaper_removed_for_good_gives_the_interface_its_original_qdisc(
    netns, tmp_path, original
):
    """The agent records the root qdisc before it first replaces it (once: a restarted
    agent keeps the record, not its own tbf), and the operator's clean-up on the node
    (``scidmz shaper --restore``) puts it back."""
    if original == "the host's own tbf":
        subprocess.run(["tc", "-n", netns, "qdisc", "add", "dev", "dtn0", "root", "handle",
                        "5:", "tbf", "rate", "500mbit", "burst", "64kb", "limit", "1mb"],
                       check=True)  # fmt: skip
    before = _root_qdisc(netns)
    state = tmp_path / "state"
    for _ in range(2):  # the second start is a restart: the record is kept
        proc, _, _ = _shaper(netns, "--failsafe-rate", "100Mbps", "--state-dir", str(state))
        assert _wait_rate(netns, "100Mbit") == "100Mbit"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert "tbf" in _root_qdisc(netns) and _root_qdisc(netns) != before
    done = _restore(netns, state)
    assert done.returncode == 0, done.stderr
    after = _root_qdisc(netns)
    if original == "the kernel's":
        assert after == before and "tbf" not in after, (before, after)
    else:
        assert "qdisc tbf 5: root" in after and "rate 500Mbit" in after, after
        burst = re.search(r"burst (\d+)b", after) or re.search(r"burst (\d+)Kb", after)
        assert burst is not None, after
        size = int(burst.group(1)) * (1024 if burst.group(0).endswith("Kb") else 1)
        assert abs(size - 64 * 1024) <= 0.01 * 64 * 1024, after  # the kernel keeps it in ticks
        assert "original tbf at 500000000 bit/s back" in done.stdout
    assert not list(state.iterdir())  # the record is forgotten
    # again, with nothing recorded: a no-op that says so
    again = _restore(netns, state)
    assert again.returncode == 0 and "no record" in again.stdout
    assert _root_qdisc(netns) == after
