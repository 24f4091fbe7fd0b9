"""The collector over TLS and mutual TLS to a switch that requires it (real gRPC, real
certificates): it verifies the switch, presents its client certificate, and stays out of
service, saying why, when either side's check fails."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from scidmz.auth.mtls import TlsConfigError as ConfigError
from scidmz.auth.switch_tls import load_channel_tls
from scidmz.switch.server import server_credentials
from scidmz.telemetry.collector import Collector
from scidmz.testenv.certs import SwitchTlsPaths, generate_switch_tls
from tests.telemetry.harness import running_collector, running_target, settings, wait_for

SWITCH_NAME = "tofino-1.campus.example"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> SwitchTlsPaths:
    return generate_switch_tls(tmp_path_factory.mktemp("switch-tls"), SWITCH_NAME)


def _fresh(collector: Collector) -> bool:
    snap = collector.snapshot
    return snap is not None and snap.sequence >= 2 and not snap.stale


def _server(pki: SwitchTlsPaths, mutual: bool):
    return server_credentials(
        pki.switch_cert.read_bytes(),
        pki.switch_key.read_bytes(),
        pki.ca_cert.read_bytes() if mutual else None,
    )


def _ca_only(pki: SwitchTlsPaths, tmp_path: Path) -> Path:
    directory = tmp_path / "ca-only"
    directory.mkdir()
    shutil.copy(pki.ca_cert, directory / "ca.crt")
    return directory


def test_mutual_tls_serves_samples(pki):
    tls = load_channel_tls(pki.collector_dir, server_name=SWITCH_NAME)
    assert tls.mutual

    async def main():
        async with (
            running_target(credentials=_server(pki, mutual=True)) as (_, address),
            running_collector(settings(address, sample_time_s=0.2, tls=tls)) as c,
        ):
            await wait_for(lambda: _fresh(c), 10, "fresh samples over mutual TLS")
            assert c.health.ready
            assert c.snapshot.state.active_flows > 0

    asyncio.run(main())


def test_server_only_tls_needs_no_client_certificate(pki, tmp_path):
    tls = load_channel_tls(_ca_only(pki, tmp_path), server_name=SWITCH_NAME)
    assert not tls.mutual

    async def main():
        async with (
            running_target(credentials=_server(pki, mutual=False)) as (_, address),
            running_collector(settings(address, sample_time_s=0.2, tls=tls)) as c,
        ):
            await wait_for(lambda: _fresh(c), 10, "fresh samples over TLS")

    asyncio.run(main())


@pytest.mark.parametrize("case", ["no client certificate", "wrong CA", "wrong name", "plaintext"])
def test_a_failed_handshake_keeps_the_collector_out_of_service(pki, tmp_path, case):
    other = generate_switch_tls(tmp_path / "other", SWITCH_NAME)
    tls = {
        "no client certificate": load_channel_tls(_ca_only(pki, tmp_path), SWITCH_NAME),
        "wrong CA": load_channel_tls(other.collector_dir, SWITCH_NAME),
        "wrong name": load_channel_tls(pki.collector_dir, "another-switch.campus.example"),
        "plaintext": None,
    }[case]
    # what gRPC tells the client; a refused client certificate is only a closed socket
    explained = {
        "no client certificate": "UNAVAILABLE",
        "wrong CA": "handshake failed",
        "wrong name": "Hostname Verification",
        "plaintext": "UNAVAILABLE",
    }

    async def main():
        async with (
            running_target(credentials=_server(pki, mutual=True)) as (_, address),
            running_collector(settings(address, sample_time_s=0.2, tls=tls)) as c,
        ):
            errors = c.metrics.p4runtime_errors
            await wait_for(
                lambda: sum(s.value for m in errors.collect() for s in m.samples
                            if s.name.endswith("_total")) >= 2,
                10, "retried connection failures",
            )  # fmt: skip
            assert not c.health.ready
            assert c.health.reason.startswith(f"switch {address}:"), c.health.reason
            assert explained[case] in c.health.reason
            assert c.snapshot is None or c.snapshot.stale

    asyncio.run(main())


def test_unusable_tls_files_are_named(pki, tmp_path):
    with pytest.raises(ConfigError, match=r"ca\.crt: missing"):
        load_channel_tls(tmp_path)
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(pki.ca_cert, half / "ca.crt")
    shutil.copy(pki.collector_dir / "tls.crt", half / "tls.crt")
    with pytest.raises(ConfigError, match=r"tls\.crt without tls\.key"):
        load_channel_tls(half)
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "ca.crt").write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"ca\.crt: not PEM"):
        load_channel_tls(garbage)


def test_renewed_files_are_used_at_the_next_reconnect(pki, tmp_path):
    """kubelet swaps a mounted Secret's files in place; the collector reads them again
    before each connection attempt, so fixing or renewing the Secret needs no restart."""
    other = generate_switch_tls(tmp_path / "other", SWITCH_NAME)
    mounted = tmp_path / "mounted"
    shutil.copytree(other.collector_dir, mounted)
    tls = load_channel_tls(mounted, SWITCH_NAME)

    async def main():
        async with (
            running_target(credentials=_server(pki, mutual=True)) as (_, address),
            running_collector(settings(address, sample_time_s=0.2, tls=tls, tls_dir=mounted)) as c,
        ):
            await wait_for(lambda: "handshake failed" in c.health.reason, 10, "a refused CA")
            for name in ("ca.crt", "tls.crt", "tls.key"):
                shutil.copy(pki.collector_dir / name, mounted / name)
            await wait_for(lambda: _fresh(c), 10, "fresh samples after the renewal")
            assert c.health.ready

    asyncio.run(main())
