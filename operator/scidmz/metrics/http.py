"""The small HTTP endpoint every scidmz process serves: /metrics, /healthz, /readyz, /state.

Probes call a :class:`Health` object that the process updates; /state serves a JSON
snapshot callback. It runs in a daemon thread so it answers even while the main loop is busy.

With TLS (every workload the operator runs) the endpoint speaks HTTPS only, and /metrics and
/state answer only clients whose certificate carries an identity the endpoint admits (the
operator, metrics readers: ``scidmz.auth.identity``); /healthz and /readyz stay open to the
kubelet's probes, which present no certificate and learn only ready or not, and why.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    generate_latest,
)

from scidmz import __version__
from scidmz.auth.identity import OBSERVER_POLICY, PeerPolicy
from scidmz.auth.mtls import ssl_peer_identities
from scidmz.metrics import names


@dataclass
class Health:
    """Liveness and readiness, with the reason readiness is false (shown on /readyz)."""

    alive: bool = True
    ready: bool = False
    reason: str = "starting"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set_ready(self, ready: bool, reason: str) -> None:
        with self._lock:
            self.ready, self.reason = ready, reason


log = logging.getLogger(__name__)

MAX_STATE_BYTES = 1 << 20
"""A /state document is a few hundred bytes; a reply larger than this is refused."""


def _http_target(url: str, scheme: str = "http") -> tuple[str, int, str] | None:
    """(host, port, path) of an ``http://`` (or ``https://``) URL; None for anything else
    (file://, another scheme than ``scheme``, no host)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != scheme or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:  # a port out of range
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, path


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def fetch_state(
    url: str,
    timeout_s: float = 2.0,
    max_bytes: int = MAX_STATE_BYTES,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> dict[str, Any] | None:
    """Another process's /state JSON, or None when it cannot be had: not running yet, the
    wrong scheme (``https://`` with ``tls``, which verifies the server against
    ``server_name`` or the URL's host and presents our certificate; ``http://`` without),
    an error status, not JSON, larger than ``max_bytes``, or slower than ``timeout_s`` in
    all — a deadline on the whole exchange, not on each read, so a server that sends a
    byte a second cannot hold the caller (a per-read timeout let one hold it for as long
    as it liked)."""
    return fetch_state_explained(url, timeout_s, max_bytes, tls, server_name)[0]


def fetch_state_explained(
    url: str,
    timeout_s: float = 2.0,
    max_bytes: int = MAX_STATE_BYTES,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """``fetch_state`` with the reason it failed ("" on success): the name that did not
    resolve, the refused connection, the certificate check, the status line."""
    target = _http_target(url, "https" if tls is not None else "http")
    if target is None:
        return None, f"not an {'https://' if tls else 'http://'} URL"
    host, port, path = target
    data = bytearray()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            deadline = threading.Timer(timeout_s, _shut, args=(raw,))
            deadline.start()
            try:
                sock: socket.socket = (
                    tls.wrap_socket(raw, server_hostname=server_name or host)
                    if tls is not None
                    else raw
                )
                request = f"GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                sock.sendall(request.encode("ascii", "replace"))
                while chunk := sock.recv(65536):
                    data += chunk
                    if len(data) > max_bytes + 16_384:  # headers' share on top
                        return None, f"more than {max_bytes} bytes, refused"
            finally:
                deadline.cancel()
    except OSError as error:
        return None, f"{host}:{port}: {error}"
    head, found, body = bytes(data).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not found or len(status) < 2:
        return None, "no HTTP reply (closed, or slower than the deadline)"
    if status[1] != b"200":
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        return None, f"answered {line[:120]}"
    if len(body) > max_bytes:
        return None, f"more than {max_bytes} bytes, refused"
    try:
        parsed = json.loads(body)
    except ValueError:
        return None, "not JSON"
    return (parsed, "") if isinstance(parsed, dict) else (None, "not a JSON object")


def register_build_info(registry: CollectorRegistry, component: str) -> None:
    """``scidmz_build_info{component, version} 1`` in ``registry``."""
    Gauge(
        names.BUILD_INFO,
        "Constant 1, labelled with the component and version.",
        ["component", "version"],
        registry=registry,
    ).labels(component, __version__).set(1)


REQUEST_TIMEOUT_S = 2.0
"""A client that has not sent its request (or read the reply) within this long is dropped."""
MAX_REQUEST_BYTES = 16 * 1024
"""Request line and headers together; the endpoints take no body."""
WORKERS = 8
"""Requests served at once; probes and scrapes need one or two."""
QUEUED = 64
"""Connections accepted beyond the workers before new ones are closed at once."""
DROP_LOG_INTERVAL_S = 60.0


class _Limited(io.RawIOBase):
    """A request's input, cut off after ``MAX_REQUEST_BYTES``."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner, self._left = inner, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            raise ConnectionAbortedError(f"request larger than {MAX_REQUEST_BYTES} bytes")
        # read1: one read of the socket at most, so a client that sent half a line meets
        # the socket's timeout instead of a buffer waiting to be filled
        data: bytes = self._inner.read1(min(len(buffer), self._left))
        memoryview(buffer)[: len(data)] = data
        self._left -= len(data)
        return len(data)


class BoundedHTTPServer(HTTPServer):
    """An HTTP server with a fixed pool of workers, a bounded queue, per-client timeouts
    and quiet handling of clients that go away.

    ``ThreadingHTTPServer`` starts a thread per connection and keeps it for as long as the
    client likes: 300 half-sent requests left 306 threads, and 100 reset /metrics requests
    wrote 400 tracebacks. Here a slow client holds one worker for ``REQUEST_TIMEOUT_S`` at
    most, connections beyond ``WORKERS + QUEUED`` are closed at once, and dropped clients
    are counted and logged once a minute."""

    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        # the pool first: a port in use makes the base class call server_close() at once
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="http")
        self.tls = tls
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(WORKERS + QUEUED)
        self._drops_lock = threading.Lock()
        self.dropped = 0
        """Clients that went away, timed out, sent too much or found no room."""
        self._unlogged = 0
        self._logged_at = -math.inf

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            self._drop("no room")
            return
        self._pool.submit(self._serve_one, request, client_address)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            if self.tls is not None:
                # the handshake in the worker, under the same deadline as the request
                request.settimeout(REQUEST_TIMEOUT_S)
                request = self.tls.wrap_socket(request, server_side=True)
            self.finish_request(request, client_address)
        except Exception:  # any failure of one client is that client's alone
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # reset, broken pipe, timeout, too large
            self._drop(type(error).__name__)
            return
        log.exception("HTTP request from %s failed", client_address)

    def _drop(self, why: str) -> None:
        with self._drops_lock:
            self.dropped += 1
            self._unlogged += 1
            now = time.monotonic()
            if now - self._logged_at < DROP_LOG_INTERVAL_S:
                return
            count, self._unlogged, self._logged_at = self._unlogged, 0, now
        log.info("HTTP: %d client connection(s) dropped in the last minute (latest: %s)",
                 count, why)  # fmt: skip

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


PROTECTED_PATHS = frozenset({"/metrics", "/state"})
"""Paths that carry the link's data: only admitted client identities read them over TLS."""


def serve_http(
    port: int,
    health: Health,
    state: Callable[[], dict[str, Any]] | None = None,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",  # noqa: S104 - scraped and probed from outside the pod
    tls: ssl.SSLContext | None = None,
    readers: PeerPolicy = OBSERVER_POLICY,
) -> BoundedHTTPServer:
    """Start the endpoint in a daemon thread; ``server.shutdown()`` stops it. Raises
    ``OSError`` when the port cannot be bound (in use, not permitted). With ``tls``
    (``scidmz.auth.mtls.http_server_context``) it speaks HTTPS only, and /metrics and
    /state answer ``readers`` alone (403 for anyone else)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(_Limited(self.rfile, MAX_REQUEST_BYTES))

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refused(self, path: str) -> bool:
            if tls is None or path not in PROTECTED_PATHS:
                return False
            presented = ssl_peer_identities(self.connection)
            if readers.admits(presented):
                return False
            who = ", ".join(presented) or "no client certificate"
            text = f"forbidden: {path} needs a client certificate of {readers.describe()} "
            text += f"({who})\n"
            self._send(403, text.encode(), "text/plain")
            return True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if self._refused(path):
                return
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok = health.alive
                self._send(200 if ok else 503, b"ok\n" if ok else b"dead\n", "text/plain")
            elif path == "/readyz":
                text = f"{'ready' if health.ready else 'not ready'}: {health.reason}\n"
                self._send(200 if health.ready else 503, text.encode(), "text/plain")
            elif path == "/state" and state is not None:
                self._send(200, json.dumps(state()).encode(), "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the logs

    server = BoundedHTTPServer((host, port), Handler, tls)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
