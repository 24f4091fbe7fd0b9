"""What the HTTP endpoints share: the :class:`Health` a process updates for its probes,
``scidmz_build_info``, and the client side, :func:`fetch_state` (another process's /state,
with a deadline on the whole exchange and a size cap). The server is
:mod:`scidmz.metrics.endpoint`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Gauge,
)

from scidmz import __version__
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
    if nesting_depth(body) > MAX_STATE_DEPTH:
        return None, f"JSON nested deeper than {MAX_STATE_DEPTH} levels, refused"
    try:
        parsed = json.loads(body)
    except ValueError:
        return None, "not JSON"
    return (parsed, "") if isinstance(parsed, dict) else (None, "not a JSON object")


MAX_STATE_DEPTH = 32
"""A /state document nests four levels; deeper is refused before it is parsed (Python's
parser recurses, and a few thousand brackets made it raise RecursionError)."""


def nesting_depth(document: bytes) -> int:
    """The deepest nesting of JSON arrays and objects in ``document``, counted without
    parsing it (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in document:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def register_build_info(registry: CollectorRegistry, component: str) -> None:
    """``scidmz_build_info{component, version} 1`` in ``registry``."""
    Gauge(
        names.BUILD_INFO,
        "Constant 1, labelled with the component and version.",
        ["component", "version"],
        registry=registry,
    ).labels(component, __version__).set(1)
