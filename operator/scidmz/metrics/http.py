"""The small HTTP endpoint every scidmz process serves: /metrics, /healthz, /readyz, /state.

Probes call a :class:`Health` object that the process updates; /state serves a JSON
snapshot callback. It runs in a daemon thread so it answers even while the main loop is busy.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    generate_latest,
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


def fetch_state(url: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """Another process's /state JSON, or None when it cannot be read (not running yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            data = json.load(response)
    except (OSError, urllib.error.URLError, ValueError) as error:
        log.debug("state %s: %s", url, error)
        return None
    return data if isinstance(data, dict) else None


def register_build_info(registry: CollectorRegistry, component: str) -> None:
    """``scidmz_build_info{component, version} 1`` in ``registry``."""
    Gauge(
        names.BUILD_INFO,
        "Constant 1, labelled with the component and version.",
        ["component", "version"],
        registry=registry,
    ).labels(component, __version__).set(1)


def serve_http(
    port: int,
    health: Health,
    state: Callable[[], dict[str, Any]] | None = None,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",  # noqa: S104 - scraped and probed from outside the pod
) -> ThreadingHTTPServer:
    """Start the endpoint in a daemon thread; ``server.shutdown()`` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
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

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
