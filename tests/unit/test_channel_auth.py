"""Every port a link's workloads open is authenticated: tried as an attacker on the pod
network would, against the real processes (``scidmz collector``, ``scidmz controller``,
``scidmz target``), not a mock. The DTN shaper's own test is in test_dtn_shaper.py.

- the sample stream: no certificate, no handshake; a certificate of the operator's CA for
  another workload or another link, PERMISSION_DENIED; the link's controller, samples;
- /metrics and /state: 403 without a certificate or with a workload's, 200 for the
  operator and Prometheus's reader; /healthz and /readyz stay open to the kubelet;
- P4Runtime on a switch that requires mutual TLS: an anonymous client (a higher election
  id included) gets no handshake, nor does one with a certificate of another CA.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from scidmz.api.runtime import ChannelSecurity, dump_runtime_config
from scidmz.auth import identity
from scidmz.auth.channels import ClientTls, open_channel
from scidmz.auth.mtls import MutualTls, http_client_context, load_mutual_tls
from scidmz.auth.pki import (
    PkiError,
    issue_certificate,
    load_certificate_authority,
    renewal_due,
    uri_identities,
)
from scidmz.metrics.http import fetch_state, fetch_state_explained
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc
from scidmz.testenv.cluster import free_port
from tests.identities import NOW, SERVER_NAME, authority, issue, link_identities, write
from tests.loops import plaintext_link_spec, render

LINK = "campus-border"

# ---- the certificate authority ---------------------------------------------------------


def test_certificates_carry_one_identity_and_are_reissued_for_the_right_reasons():
    ca = authority()
    who = identity.link_identity(LINK, "collector")
    pair = issue_certificate(ca, who, NOW, ["a.svc"], server=True)
    assert uri_identities(pair.cert_pem) == (who,)
    assert renewal_due(pair.cert_pem, ca.cert_pem, who, ["a.svc"], NOW) is None
    assert renewal_due(pair.cert_pem, ca.cert_pem, who, ["b.svc"], NOW) == (
        "issued for other host names"
    )
    other = identity.link_identity(LINK, "controller")
    assert renewal_due(pair.cert_pem, ca.cert_pem, other, ["a.svc"], NOW) == (
        "issued for another identity"
    )
    assert renewal_due(pair.cert_pem, authority("another CA").cert_pem, who, ["a.svc"], NOW) == (
        "issued by another CA"
    )
    # renewed with a third of its life left (a week's leaf: after about 4.7 days)
    for days, due in ((4.5, False), (4.8, True), (340, True)):
        later = NOW + dt.timedelta(days=days)
        found = renewal_due(pair.cert_pem, ca.cert_pem, who, ["a.svc"], later)
        assert (found or "").startswith("expires") is due, days
    assert renewal_due(b"junk", ca.cert_pem, who, [], NOW) is not None


def test_a_ca_secret_that_is_not_a_usable_ca_is_an_error():
    ca = authority()
    leaf = issue_certificate(ca, identity.OPERATOR, NOW)
    with pytest.raises(PkiError, match="not a CA"):
        load_certificate_authority(leaf)
    mixed = type(ca)(ca.cert_pem, authority().key_pem)
    with pytest.raises(PkiError, match="does not match"):
        load_certificate_authority(mixed)


def test_the_peer_policies_are_the_table_in_the_docs():
    stream = identity.controller_only(LINK)
    assert stream.admits([identity.link_identity(LINK, "controller")])
    assert not stream.admits([identity.link_identity("other", "controller")])
    assert not stream.admits([identity.link_identity(LINK, "collector")])
    assert not stream.admits([])  # anonymous
    assert not stream.admits([identity.link_identity(LINK, "controller")] * 2)
    # a link deleted and created again under the same name: the old incarnation's keys
    # are refused by the new one's servers
    new = identity.controller_only(LINK, "uid-2")
    assert new.admits([identity.link_identity(LINK, "controller", uid="uid-2")])
    assert not new.admits([identity.link_identity(LINK, "controller", uid="uid-1")])
    assert not new.admits([identity.link_identity(LINK, "controller")])
    assert identity.OBSERVER_POLICY.admits([identity.METRICS_READER])
    assert not identity.OBSERVER_POLICY.admits([identity.link_identity(LINK, "controller")])


# ---- real processes --------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("ids")
    ca = authority()
    dirs = link_identities(ca, LINK, root)
    dirs["other-link"] = write(
        issue(ca, identity.link_identity("other-link", "controller")), root / "other-link"
    )
    dirs["stranger"] = write(issue(authority("a stranger's CA"), identity.OPERATOR), root / "s")
    return dirs


def _config(tmp_path: Path, component: str, dirs, grpc_port: int) -> Path:
    security = ChannelSecurity(
        identity_dir=str(dirs[component]),
        collector_server_name=SERVER_NAME,
        dtn_shaper_server_name=SERVER_NAME,
    )
    spec = plaintext_link_spec(actuator={"type": "dryRun"})
    spec["switch"]["address"] = f"127.0.0.1:{free_port()}"  # no switch: the ports still open
    config = render(spec, collector=f"127.0.0.1:{grpc_port}", security=security)
    path = tmp_path / f"{component}.yaml"
    path.write_text(dump_runtime_config(config))
    return path


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def _get(port: int, path: str, client: MutualTls | None = None) -> tuple[int, bytes]:
    context = http_client_context(client) if client is not None else _unverified()
    if client is not None:
        context.check_hostname = False  # the server's name is checked by fetch_state's test
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", context=context, timeout=3
        ) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait_https(port: int, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "exited")
        try:
            _get(port, "/healthz")
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("no HTTPS endpoint")


def _wait_listening(port: int, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    """Until the process accepts TCP on ``port`` (a fixed sleep lost the race on a loaded
    machine: the target takes ~0.9 s to listen)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.communicate(timeout=15)


@pytest.fixture(scope="module")
def collector(pki, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("collector")
    grpc_port, http_port = free_port(), free_port()
    config = _config(tmp, "collector", pki, grpc_port)
    proc = _start(["collector", "--config", str(config), "--http-port", str(http_port),
                   "--listen", f"127.0.0.1:{grpc_port}"])  # fmt: skip
    _wait_https(http_port, proc)
    yield grpc_port, http_port
    _stop(proc)


async def _latest(address: str, tls: ClientTls | None) -> str:
    channel = open_channel(address, tls)
    try:
        stub = telemetry_pb2_grpc.TelemetryStub(channel)
        await stub.Latest(telemetry_pb2.LatestRequest(), timeout=3)
        return "OK"
    except grpc.aio.AioRpcError as error:
        return error.code().name
    finally:
        await channel.close(None)


def test_the_sample_stream_answers_its_links_controller_alone(pki, collector):
    grpc_port, _ = collector
    address = f"127.0.0.1:{grpc_port}"

    def as_(name: str) -> ClientTls:
        return ClientTls(load_mutual_tls(pki[name]), SERVER_NAME)

    assert asyncio.run(_latest(address, None)) == "UNAVAILABLE"  # plaintext: no handshake
    assert asyncio.run(_latest(address, as_("stranger"))) == "UNAVAILABLE"  # another CA
    assert asyncio.run(_latest(address, as_("collector"))) == "PERMISSION_DENIED"
    assert asyncio.run(_latest(address, as_("other-link"))) == "PERMISSION_DENIED"
    assert asyncio.run(_latest(address, as_("reader"))) == "PERMISSION_DENIED"
    # the link's controller gets through (no sample yet: the switch is not there)
    assert asyncio.run(_latest(address, as_("controller"))) == "NOT_FOUND"


def test_metrics_and_state_answer_observers_only_probes_anyone(pki, collector):
    _, http_port = collector
    assert _get(http_port, "/healthz")[0] == 200
    assert _get(http_port, "/readyz")[0] in (200, 503)  # not ready: no switch; but answered
    status, body = _get(http_port, "/metrics")
    assert status == 403 and b"no client certificate" in body
    assert _get(http_port, "/state")[0] == 403
    controller = load_mutual_tls(pki["controller"])
    status, body = _get(http_port, "/metrics", controller)
    assert status == 403 and b"link/campus-border/controller" in body
    status, body = _get(http_port, "/metrics", load_mutual_tls(pki["reader"]))
    assert status == 200 and b"scidmz_build_info" in body
    status, body = _get(http_port, "/state", load_mutual_tls(pki["operator"]))
    assert status == 200 and json.loads(body)["link"] == LINK
    with pytest.raises(OSError):  # plaintext HTTP to a TLS port: dropped, not answered
        urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=3).read()


def test_readyz_tells_anonymous_clients_ready_or_not_and_nothing_more(pki, collector):
    """The reason names the switch's address, election ids and rates: readers only."""
    _, http_port = collector
    status, body = _get(http_port, "/readyz")
    assert (status, body) in ((200, b"ready\n"), (503, b"not ready\n")), body
    _, body = _get(http_port, "/readyz", load_mutual_tls(pki["reader"]))
    assert body.startswith((b"ready: ", b"not ready: ")) and len(body) > len(b"not ready: ")


def _get_from(address: str, port: int, path: str, client: MutualTls | None = None):
    """``_get`` to another of this host's addresses (127.0.0.2 is not the loopback
    listener's 127.0.0.1)."""
    context = http_client_context(client) if client is not None else _unverified()
    context.check_hostname = False
    with (
        socket.create_connection((address, port), timeout=3) as raw,
        context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    if not data:  # TLS 1.3: a refused client certificate shows after the client's handshake
        raise ConnectionError("closed without a reply")
    return int(data.split()[1]), data.partition(b"\r\n\r\n")[2]


def test_on_the_nodes_network_probes_are_on_loopback_and_the_port_is_mutual_tls_only(pki, tmp_path):
    """A tc controller or a DTN shaper (host network): the kubelet probes 127.0.0.1 in
    plain HTTP; anyone else meets a handshake that wants a certificate of the CA."""
    grpc_port, http_port = free_port(), free_port()
    config = _config(tmp_path, "controller", pki, grpc_port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", "controller", "--config", str(config),
         "--http-port", str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SCIDMZ_PROBES_ON_LOOPBACK": "true"},
    )  # fmt: skip
    try:
        _wait_listening(http_port, proc)
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=3) as reply:
                    assert reply.status == 200 and reply.read() == b"ok\n"
                    break
            except OSError:
                assert time.monotonic() < deadline, "no probe listener"
                time.sleep(0.2)
        try:
            urllib.request.urlopen(f"{url}/readyz", timeout=3)
        except urllib.error.HTTPError as error:  # not ready: no collector; but terse
            assert error.read() == b"not ready\n"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/metrics", timeout=3)
        assert refused.value.code == 404  # the probe listener serves the probes only
        # the public port: no handshake without a certificate of the CA
        with pytest.raises((ssl.SSLError, OSError)):
            _get_from("127.0.0.2", http_port, "/healthz")
        with pytest.raises((ssl.SSLError, OSError)):
            _get_from("127.0.0.2", http_port, "/healthz", load_mutual_tls(pki["stranger"]))
        status, body = _get_from("127.0.0.2", http_port, "/metrics", load_mutual_tls(pki["reader"]))
        assert status == 200 and b"scidmz_build_info" in body
    finally:
        _stop(proc)


def test_a_rotated_certificate_and_ca_are_served_without_a_restart(tmp_path):
    """The collector's mounted identity is rewritten (a new CA beside the old in ca.crt,
    its leaf from the new CA), as the kubelet does when the operator rolls its CA over:
    the same process serves the new certificate to new connections, HTTP and gRPC, and a
    controller of the new CA gets its samples."""
    old_ca, new_ca = authority("old CA"), authority("new CA")
    root = tmp_path / "ids"
    dirs = link_identities(old_ca, LINK, root)
    grpc_port, http_port = free_port(), free_port()
    config = _config(tmp_path, "collector", dirs, grpc_port)
    proc = _start(["collector", "--config", str(config), "--http-port", str(http_port),
                   "--listen", f"127.0.0.1:{grpc_port}"])  # fmt: skip
    try:
        _wait_https(http_port, proc)

        def served_serial() -> int:
            context = _unverified()
            with (
                socket.create_connection(("127.0.0.1", http_port), timeout=3) as raw,
                context.wrap_socket(raw) as tls,
            ):
                der = tls.getpeercert(binary_form=True)
            from cryptography import x509

            assert der is not None
            return x509.load_der_x509_certificate(der).serial_number

        before = served_serial()
        renewed = issue(new_ca, identity.link_identity(LINK, "collector"))
        bundle = MutualTls(old_ca.cert_pem + new_ca.cert_pem, renewed.cert, renewed.key)
        write(bundle, dirs["collector"])
        new_controller = issue(new_ca, identity.link_identity(LINK, "controller"))
        address = f"127.0.0.1:{grpc_port}"
        client = ClientTls(
            MutualTls(old_ca.cert_pem + new_ca.cert_pem, new_controller.cert, new_controller.key),
            SERVER_NAME,
        )
        deadline = time.monotonic() + 10
        while served_serial() == before or asyncio.run(_latest(address, client)) != "NOT_FOUND":
            assert time.monotonic() < deadline, "the new material was not taken"
            time.sleep(0.3)
        assert proc.poll() is None  # the same process
        # a controller whose leaf is still the old CA's (it trusts both already) gets in:
        # both CAs are trusted through the overlap
        old_leaf = load_mutual_tls(dirs["controller"])
        old_client = ClientTls(
            MutualTls(old_ca.cert_pem + new_ca.cert_pem, old_leaf.cert, old_leaf.key),
            SERVER_NAME,
        )
        assert asyncio.run(_latest(address, old_client)) == "NOT_FOUND"
    finally:
        _stop(proc)


def test_the_operator_reads_a_controllers_state_and_checks_whose_server_it_is(pki, tmp_path):
    grpc_port, http_port = free_port(), free_port()
    config = _config(tmp_path, "controller", pki, grpc_port)
    proc = _start(["controller", "--config", str(config), "--http-port", str(http_port)])
    try:
        _wait_https(http_port, proc)
        url = f"https://127.0.0.1:{http_port}/state"
        operator = http_client_context(load_mutual_tls(pki["operator"]))
        state = fetch_state(url, tls=operator, server_name=SERVER_NAME)
        assert state is not None and state["link"] == LINK
        # the name the certificate carries is checked: a server pretending to be another
        assert fetch_state(url, tls=operator, server_name="elsewhere.svc") is None
        # and the operator's log can say why
        _, why = fetch_state_explained(url, tls=operator, server_name="elsewhere.svc")
        assert "certificate" in why.lower() and "elsewhere.svc" in why, why
        _, why = fetch_state_explained(f"https://127.0.0.1:{free_port()}/state", tls=operator)
        assert "refused" in why.lower(), why
        reader = http_client_context(load_mutual_tls(pki["reader"]))
        _, why = fetch_state_explained(url.replace("/state", "/nope"), tls=reader,
                                       server_name=SERVER_NAME)  # fmt: skip
        assert why.startswith("answered HTTP/1.") and "404" in why, why
        # a client of another CA is refused at the handshake
        stranger = http_client_context(load_mutual_tls(pki["stranger"]))
        assert fetch_state(url, tls=stranger, server_name=SERVER_NAME) is None
        # and plain http:// to it is no /state either
        assert fetch_state(f"http://127.0.0.1:{http_port}/state") is None
    finally:
        _stop(proc)


def test_p4runtime_on_a_mutual_tls_switch_refuses_anonymous_and_foreign_clients(tmp_path):
    """A tenant once named another tenant's switch with a higher election id and took
    mastership; the switch's address is now the administrators', and a switch that requires
    client certificates lets nobody else in, whatever election id they claim."""
    from finsy.proto import p4r, p4r_grpc

    from scidmz.testenv.certs import generate_switch_tls

    pki = generate_switch_tls(tmp_path / "switch", "tofino-1.campus.example")
    port = free_port()
    target = _start([
        "target", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(pki.switch_cert),
        "--tls-key", str(pki.switch_key), "--tls-client-ca", str(pki.ca_cert),
    ])  # fmt: skip
    options = [("grpc.ssl_target_name_override", "tofino-1.campus.example")]

    async def arbitrate(credentials: grpc.ChannelCredentials | None) -> str:
        channel = (
            grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options)
            if credentials is not None
            else grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        )
        try:
            stub = p4r_grpc.P4RuntimeStub(channel)
            request = p4r.StreamMessageRequest()
            request.arbitration.device_id = 1
            request.arbitration.election_id.low = 1_000_000  # above any collector's
            call = stub.StreamChannel(iter([request]), timeout=3)
            async for answer in call:
                return "MASTER" if answer.arbitration.status.code == 0 else "BACKUP"
            return "CLOSED"
        except grpc.aio.AioRpcError as error:
            return error.code().name
        finally:
            await channel.close(None)

    try:
        _wait_listening(port, target)
        ca = pki.ca_cert.read_bytes()
        foreign = generate_switch_tls(tmp_path / "foreign", "tofino-1.campus.example")
        foreign_client = grpc.ssl_channel_credentials(
            ca,
            (foreign.collector_dir / "tls.key").read_bytes(),
            (foreign.collector_dir / "tls.crt").read_bytes(),
        )
        assert asyncio.run(arbitrate(None)) == "UNAVAILABLE"
        assert asyncio.run(arbitrate(grpc.ssl_channel_credentials(ca))) == "UNAVAILABLE"
        assert asyncio.run(arbitrate(foreign_client)) == "UNAVAILABLE"
        # the administrators' collector certificate is let in (and becomes primary)
        own = grpc.ssl_channel_credentials(
            ca,
            (pki.collector_dir / "tls.key").read_bytes(),
            (pki.collector_dir / "tls.crt").read_bytes(),
        )
        assert asyncio.run(arbitrate(own)) == "MASTER"
    finally:
        _stop(target)


def test_the_simulated_switch_gives_each_client_identity_only_its_part(tmp_path):
    """The administrators' Secret of the simulated switch holds two client pairs: the
    collector's may speak P4Runtime and not move the simulator's actuators, the
    controller's the reverse (it once could set rates without being anyone's primary)."""
    from finsy.proto import p4r, p4r_grpc

    from scidmz.testenv.certs import generate_switch_tls

    pki = generate_switch_tls(tmp_path / "switch", "tofino-1.campus.example")
    port = free_port()
    target = _start([
        "target", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(pki.switch_cert),
        "--tls-key", str(pki.switch_key), "--tls-client-ca", str(pki.ca_cert),
        "--p4runtime-client", "scidmz-collector", "--actuator-client", "scidmz-sim-actuator",
    ])  # fmt: skip
    options = [("grpc.ssl_target_name_override", "tofino-1.campus.example")]
    ca = pki.ca_cert.read_bytes()

    def credentials(pair: str) -> grpc.ChannelCredentials:
        directory = pki.collector_dir
        return grpc.ssl_channel_credentials(
            ca, (directory / f"{pair}.key").read_bytes(), (directory / f"{pair}.crt").read_bytes()
        )

    async def p4runtime(pair: str) -> str:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials(pair),
                                           options=options) as channel:  # fmt: skip
            request = p4r.StreamMessageRequest()
            request.arbitration.device_id = 1
            request.arbitration.election_id.low = 10
            try:
                async for answer in p4r_grpc.P4RuntimeStub(channel).StreamChannel(
                    iter([request]), timeout=3
                ):
                    return "OK" if answer.HasField("arbitration") else "?"
                return "CLOSED"
            except grpc.aio.AioRpcError as error:
                return error.code().name

    async def capabilities(pair: str) -> str:
        """A unary P4Runtime call (a stream refused before its first message can reach a
        client still writing its request as gRPC core's INTERNAL)."""
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials(pair),
                                           options=options) as channel:  # fmt: skip
            try:
                await p4r_grpc.P4RuntimeStub(channel).Capabilities(
                    p4r.CapabilitiesRequest(), timeout=3
                )
                return "OK"
            except grpc.aio.AioRpcError as error:
                return error.code().name

    async def actuate(pair: str) -> str:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials(pair),
                                           options=options) as channel:  # fmt: skip
            stub = telemetry_pb2_grpc.SimActuatorStub(channel)
            try:
                await stub.SetCampusRateLimit(telemetry_pb2.CampusRateLimit(rate_bps=1e8),
                                              timeout=3)  # fmt: skip
                return "OK"
            except grpc.aio.AioRpcError as error:
                return error.code().name

    try:
        _wait_listening(port, target)
        assert asyncio.run(actuate("tls")) == "PERMISSION_DENIED"  # the collector's pair
        assert asyncio.run(capabilities("actuator")) == "PERMISSION_DENIED"
        assert asyncio.run(p4runtime("actuator")) in ("PERMISSION_DENIED", "INTERNAL")
        assert asyncio.run(actuate("actuator")) == "OK"
        assert asyncio.run(p4runtime("tls")) == "OK"
        assert asyncio.run(capabilities("tls")) == "OK"
    finally:
        _stop(target)
