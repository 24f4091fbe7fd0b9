"""The processes' HTTP endpoint and the operator's /state fetch hold up against slow,
vanishing and oversized peers."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry

from scidmz.metrics import http
from scidmz.metrics.http import Health, fetch_state, serve_http


@pytest.fixture
def endpoint() -> Iterator[tuple[int, http.BoundedHTTPServer]]:
    health = Health()
    health.set_ready(True, "test")
    server = serve_http(0, health, lambda: {"ok": True}, CollectorRegistry(), "127.0.0.1")
    yield server.server_address[1], server
    server.shutdown()
    server.server_close()


def _get(port: int, path: str = "/healthz") -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
        return int(reply.status)


def test_half_sent_requests_hold_a_bounded_number_of_threads_for_a_bounded_time(endpoint):
    port, _ = endpoint
    before = threading.active_count()
    sockets = []
    for _ in range(300):  # each sends half a request line and then nothing
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /metr")
        sockets.append(s)
    time.sleep(0.5)
    assert threading.active_count() - before <= http.WORKERS + 2
    # every one of them is dropped within the timeouts, and the endpoint answers again
    deadline = time.monotonic() + 3 * http.REQUEST_TIMEOUT_S * (300 / http.WORKERS)
    while time.monotonic() < deadline:
        try:
            if _get(port) == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        pytest.fail("the endpoint never answered again")
    for s in sockets:
        s.close()


def test_clients_that_reset_are_counted_and_logged_once_not_per_request(endpoint, caplog):
    port, server = endpoint
    dropped_before = server.dropped
    caplog.set_level(logging.INFO, logger="scidmz.metrics.http")
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()  # an RST before the reply is read
    time.sleep(1.0)
    assert _get(port, "/metrics") == 200
    lines = [r for r in caplog.records if r.name == "scidmz.metrics.http"]
    assert len(lines) <= 1
    assert not any(r.exc_info for r in lines)
    assert server.dropped > dropped_before  # counted, not printed


def test_a_request_larger_than_the_cap_is_dropped(endpoint):
    port, _ = endpoint
    with socket.create_connection(("127.0.0.1", port)) as s:
        padding = b"X-Padding: " + b"a" * (64 * 1024) + b"\r\n"
        s.sendall(b"GET /healthz HTTP/1.1\r\n" + padding + b"\r\n")
        s.settimeout(5)
        reply = s.recv(1024)
    assert not reply.startswith(b"HTTP/1.0 200")
    assert _get(port) == 200


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
