"""The processes' HTTP endpoint (scidmz.metrics.endpoint) and the operator's /state fetch
hold up against slow, vanishing, crowding and oversized peers, and against hostile JSON."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry

from scidmz.metrics.endpoint import Endpoint, EndpointLimits, serve_http
from scidmz.metrics.http import Health, fetch_state, nesting_depth

LIMITS = EndpointLimits(deadline_s=1.0, per_source=4, connections=64)


@pytest.fixture
def endpoint() -> Iterator[tuple[int, Endpoint]]:
    health = Health()
    health.set_ready(True, "test")
    server = serve_http(
        0, health, lambda: {"ok": True}, CollectorRegistry(), "0.0.0.0", limits=LIMITS
    )
    yield server.port, server
    server.shutdown()


def _get(port: int, path: str = "/healthz", host: str = "127.0.0.1") -> int:
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as reply:
        return int(reply.status)


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Until ``condition`` holds: the endpoint's thread may be starved for a while on a
    loaded host, so what it does is awaited, never assumed done after a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the endpoint did not get there"
        time.sleep(0.02)


def _from(source: str, port: int) -> socket.socket:
    """A connection from ``source`` (any 127.0.0.0/8 address is this host's)."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def test_a_client_that_sends_a_byte_at_a_time_is_cut_at_the_deadline(endpoint):
    """One deadline for the whole exchange: a byte every 0.3 s never finishes a request,
    and is cut after deadline_s however many reads it made."""
    port, server = endpoint
    s = _from("127.0.0.2", port)
    started = time.monotonic()
    cut = None
    try:
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
            s.sendall(bytes([byte]))
            time.sleep(0.3)
    except OSError:
        cut = time.monotonic() - started
    s.close()
    assert cut is not None and cut < LIMITS.deadline_s + 1.0
    assert server.dropped >= 1


def test_one_source_cannot_take_the_others_room(endpoint):
    port, server = endpoint
    held = [_from("127.0.0.3", port) for _ in range(3 * LIMITS.per_source)]
    for s in held:
        s.sendall(b"GET /metr")  # half a request, then nothing
    # the excess is closed at accept; another source is served at once
    _wait_until(lambda: server.refused >= 2 * LIMITS.per_source)
    started = time.monotonic()
    assert _get(port) == 200
    assert time.monotonic() - started < 0.5
    for s in held:
        s.close()


def test_half_sent_requests_from_many_sources_are_bounded_and_timed_out(endpoint):
    port, server = endpoint
    before = threading.active_count()
    sockets = []
    for k in range(300):  # more than the endpoint's connections, from 150 sources
        try:
            s = _from(f"127.0.1.{k // 2 + 1}", port)
            s.sendall(b"GET /metr")
            sockets.append(s)
        except OSError:
            pass
    # each is refused at accept or cut at its deadline, none served; never more than the
    # endpoint's connections held at once, however late its thread gets to them
    _wait_until(lambda: server.dropped >= len(sockets), timeout_s=10 + LIMITS.deadline_s)
    assert len(sockets) > LIMITS.connections and server.served == 0
    # the endpoint was full (two a source: every refusal is for want of room)
    assert server.most_open <= LIMITS.connections and server.refused >= 1
    assert threading.active_count() - before <= 1  # no thread per client
    assert _get(port) == 200
    for s in sockets:
        s.close()


def test_clients_that_reset_are_counted_and_logged_once_not_per_request(endpoint, caplog):
    port, server = endpoint
    dropped_before = server.dropped
    caplog.set_level(logging.INFO, logger="scidmz.metrics.endpoint")
    for k in range(100):
        s = _from(f"127.0.2.{k % 50 + 1}", port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()  # an RST before the reply is read
    time.sleep(1.0)
    assert _get(port, "/metrics") == 200
    lines = [r for r in caplog.records if r.name == "scidmz.metrics.endpoint"]
    assert len(lines) <= 1
    assert not any(r.exc_info for r in lines)
    assert server.dropped > dropped_before  # counted, not printed


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\n" + b"X-Padding: " + b"a" * (64 * 1024) + b"\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
    ids=["too large", "a body", "not HTTP"],
)
def test_a_request_the_endpoint_does_not_serve_is_dropped(endpoint, request_bytes):
    port, server = endpoint
    before = server.dropped
    with _from("127.0.0.4", port) as s:
        s.sendall(request_bytes)
        s.settimeout(5)
        try:
            reply = s.recv(1024)
        except ConnectionResetError:
            reply = b""
    assert not reply.startswith(b"HTTP/1.1 200")
    assert server.dropped == before + 1
    assert _get(port) == 200


def test_readyz_says_ready_and_nothing_more_to_anonymous_clients(endpoint):
    port, _ = endpoint
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
        assert reply.read() == b"ready: test\n"  # plaintext (development): no readers to tell
    # over TLS an anonymous client learns only ready or not: tests/unit/test_channel_auth.py


@contextmanager
def _server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Dripping(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        for byte in b'{"a": 1}':
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(1.0)

    def log_message(self, *_: object) -> None:
        return


class _Huge(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        chunk = b" " * (1 << 20)
        for _ in range(50):
            self.wfile.write(chunk)

    def log_message(self, *_: object) -> None:
        return


def test_the_state_fetch_has_a_total_deadline():
    with _server(_Dripping) as port:
        started = time.monotonic()
        assert fetch_state(f"http://127.0.0.1:{port}/state", timeout_s=2.0) is None
        assert time.monotonic() - started < 3.0


def test_the_state_fetch_refuses_a_reply_larger_than_its_cap():
    with _server(_Huge) as port:
        started = time.monotonic()
        assert fetch_state(f"http://127.0.0.1:{port}/state") is None
        assert time.monotonic() - started < 2.0


def test_the_state_fetch_only_speaks_plain_http(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"token": "x"}))
    assert fetch_state(f"file://{secret}") is None
    assert fetch_state("ftp://127.0.0.1/state") is None
    assert fetch_state("http://127.0.0.1:99999/state") is None


def test_the_state_fetch_reads_a_real_endpoint(endpoint):
    port, _ = endpoint
    assert fetch_state(f"http://127.0.0.1:{port}/state") == {"ok": True}


class _Nested(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"[" * 5000 + b"]" * 5000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


def test_deeply_nested_json_is_refused_not_raised():
    with _server(_Nested) as port:
        assert fetch_state(f"http://127.0.0.1:{port}/state") is None
    assert nesting_depth(b'{"a": [1, {"b": "]]]][[[["}]}') == 3
    assert nesting_depth(b'"\\\\"[[[') == 3  # an escaped backslash, then the string ends
    assert nesting_depth(b'"\\"[[["') == 0  # an escaped quote: the brackets are in the string
