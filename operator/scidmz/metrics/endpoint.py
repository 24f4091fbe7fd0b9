"""The HTTP(S) endpoint every scidmz process serves: /metrics, /healthz, /readyz, /state.

An asyncio server in a thread of its own (it answers while the process's main loop is
busy), with h11 parsing the one request a connection may carry. What a slow or hostile
client can hold is bounded, whatever it does:

- one deadline for the whole exchange, TLS handshake included (``EndpointLimits.deadline_s``):
  a client that sends a byte a second is cut off at the deadline, not at each read's;
- connections per source address (``per_source``) and in all (``connections``), counted
  from the moment of accept, before the handshake: one source cannot take the others' room;
- the request's size (``max_request_bytes``); no body is read.

With TLS (every workload the operator runs) the port speaks HTTPS only, its material taken
per connection from a :class:`~scidmz.auth.tls_source.TlsSource` (a rotated certificate or
CA is served without a restart). /metrics and /state answer only client certificates whose
identity the endpoint admits (the operator, metrics readers); /healthz and /readyz answer
anyone, and say ready or not and nothing more, unless the client is an admitted reader.
A workload on the node's network (a tc controller, a DTN shaper) serves its probes on a
second, plain listener on 127.0.0.1 at the same port (the probe's ``host: 127.0.0.1``;
``SO_REUSEPORT`` on both sockets, and the kernel gives a loopback connection to the socket
bound to loopback) and requires a client certificate at the handshake on its public port, so
that neither a per-source limit nor an anonymous client ever stands between the kubelet and
its probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from scidmz.auth.identity import OBSERVER_POLICY, PeerPolicy
from scidmz.auth.mtls import ssl_peer_identities
from scidmz.auth.tls_source import TlsSource
from scidmz.metrics.http import Health

log = logging.getLogger(__name__)

PROTECTED_PATHS = frozenset({"/metrics", "/state"})
"""Paths that carry the link's data: only admitted client identities read them over TLS."""
DROP_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True)
class EndpointLimits:
    deadline_s: float = 5.0
    """The whole exchange of one connection: handshake, request, reply."""
    per_source: int = 8
    """Connections one source address may hold at once (probes and scrapes need one)."""
    connections: int = 512
    """Connections in all; beyond, new ones are closed at accept."""
    max_request_bytes: int = 16 * 1024
    """Request line and headers together."""


class _Refused(Exception):
    """A request this endpoint does not serve (too large, malformed, a body)."""


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


class Endpoint:
    """One process's endpoint. ``start()`` binds (``OSError`` when it cannot) and serves
    in a daemon thread; ``shutdown()`` stops it."""

    def __init__(
        self,
        port: int,
        health: Health,
        state: Callable[[], dict[str, Any]] | None = None,
        registry: CollectorRegistry = REGISTRY,
        host: str = "0.0.0.0",  # noqa: S104 - scraped and probed from outside the pod
        tls: TlsSource | None = None,
        readers: PeerPolicy = OBSERVER_POLICY,
        probes_on_loopback: bool = False,
        limits: EndpointLimits = EndpointLimits(),
    ) -> None:
        """``probes_on_loopback``: also serve /healthz and /readyz, plain, on 127.0.0.1 at
        the same port, and require a client certificate at the handshake on the public
        listener (a workload on the node's network; needs ``tls``)."""
        if probes_on_loopback and tls is None:
            raise ValueError("probes on loopback go with mutual TLS on the public port")
        self.port, self.host = port, host
        self.health, self.state, self.registry = health, state, registry
        self.tls, self.readers, self.limits = tls, readers, limits
        self.probes_on_loopback = probes_on_loopback
        self.dropped = 0
        """Connections refused at accept, timed out, reset or malformed."""
        self.refused = 0
        """Of those, the ones refused at accept (no room, or too many from one source)."""
        self.served = 0
        self.most_open = 0
        """The most connections held open at once (never above ``limits.connections``)."""
        self._open = 0
        self._per_source: Counter[str] = Counter()
        self._unlogged = 0
        self._logged_at = -math.inf
        self._last_drop = ""
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> Endpoint:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._bind(), self._loop).result(timeout=10)
        except BaseException:
            self.shutdown()
            raise
        return self

    async def _bind(self) -> None:
        secure, shared = self.tls is not None, self.probes_on_loopback
        public = await asyncio.start_server(
            lambda r, w: self._connection(r, w, secure), self.host, self.port,
            reuse_address=True, reuse_port=shared, backlog=256,
        )  # fmt: skip
        self._servers.append(public)
        self.port = public.sockets[0].getsockname()[1]
        if shared:
            probes = await asyncio.start_server(
                lambda r, w: self._connection(r, w, False, probes_only=True), "127.0.0.1",
                self.port, reuse_address=True, reuse_port=True,
            )  # fmt: skip
            self._servers.append(probes)

    def shutdown(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    # ---- one connection --------------------------------------------------------------
    async def _connection(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        secure: bool,
        probes_only: bool = False,
    ) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        source = str(peer[0])
        limits = self.limits
        if self._open >= limits.connections or self._per_source[source] >= limits.per_source:
            self._drop("no room" if self._open >= limits.connections else f"{source}: too many")
            self.refused += 1
            writer.transport.abort()
            return
        self._open += 1
        self.most_open = max(self.most_open, self._open)
        self._per_source[source] += 1
        try:
            async with asyncio.timeout(limits.deadline_s):
                if secure:
                    assert self.tls is not None
                    context = self.tls.http_server_context(self.probes_on_loopback)
                    await writer.start_tls(context)
                connection, target = await self._read_request(reader)
                identities = self._identities(writer) if secure else ()
                reply = self._route(target, identities, secure, probes_only)
                await self._write(writer, connection, reply)
                self.served += 1
        except (TimeoutError, OSError, ssl.SSLError, h11.ProtocolError, _Refused) as error:
            self._drop(type(error).__name__)
            writer.transport.abort()
        except Exception:  # one client's failure is that client's alone
            log.exception("HTTP request from %s failed", source)
            writer.transport.abort()
        else:
            writer.close()
        finally:
            self._open -= 1
            self._per_source[source] -= 1
            if self._per_source[source] <= 0:
                del self._per_source[source]

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[h11.Connection, str]:
        """The request's target (path and query) once the request has ended, and the
        connection to answer it on."""
        connection = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.limits.max_request_bytes
        )
        target = None
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(4096)
                connection.receive_data(data)
                if not data and target is None:
                    raise _Refused("closed before a request")
                continue
            if isinstance(event, h11.Request):
                if event.method != b"GET":
                    raise _Refused(f"method {event.method!r}")
                target = event.target.decode("ascii", "replace")
            elif isinstance(event, h11.Data):
                raise _Refused("a request body")  # the endpoints take none
            elif isinstance(event, h11.EndOfMessage) and target is not None:
                return connection, target
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                raise _Refused("no complete request")

    @staticmethod
    def _identities(writer: asyncio.StreamWriter) -> tuple[str, ...]:
        ssl_object = writer.get_extra_info("ssl_object")
        return ssl_peer_identities(ssl_object) if ssl_object is not None else ()

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, connection: h11.Connection, reply: _Reply
    ) -> None:
        headers = [
            ("content-type", reply.content_type),
            ("content-length", str(len(reply.body))),
            ("connection", "close"),
        ]
        writer.write(
            connection.send(h11.Response(status_code=reply.status, headers=headers)) or b""
        )
        writer.write(connection.send(h11.Data(data=reply.body)) or b"")
        writer.write(connection.send(h11.EndOfMessage()) or b"")
        await writer.drain()

    # ---- what each path answers ------------------------------------------------------
    def _route(
        self, target: str, identities: tuple[str, ...], secure: bool, probes_only: bool
    ) -> _Reply:
        path = target.split("?", 1)[0]
        reader = not secure or self.readers.admits(identities)
        if probes_only and path not in ("/healthz", "/readyz"):
            return _Reply(404, b"not found\n")
        if path == "/healthz":
            ok = self.health.alive
            return _Reply(200 if ok else 503, b"ok\n" if ok else b"dead\n")
        if path == "/readyz":
            # the reason names addresses, rates and ids: for admitted readers only
            said = "ready" if self.health.ready else "not ready"
            text = f"{said}: {self.health.reason}\n" if reader and not probes_only else f"{said}\n"
            return _Reply(200 if self.health.ready else 503, text.encode())
        if secure and path in PROTECTED_PATHS and not reader:
            who = ", ".join(identities) or "no client certificate"
            text = f"forbidden: {path} needs a client certificate of {self.readers.describe()} "
            return _Reply(403, f"{text}({who})\n".encode())
        if path == "/metrics":
            return _Reply(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/state" and self.state is not None:
            return _Reply(200, json.dumps(self.state()).encode(), "application/json")
        return _Reply(404, b"not found\n")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        self._unlogged += 1
        self._last_drop = why
        now = time.monotonic()
        if now - self._logged_at < DROP_LOG_INTERVAL_S:
            return
        count, self._unlogged, self._logged_at = self._unlogged, 0, now
        log.info("HTTP: %d client connection(s) dropped in the last minute (latest: %s)",
                 count, why)  # fmt: skip


def serve_http(
    port: int,
    health: Health,
    state: Callable[[], dict[str, Any]] | None = None,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",  # noqa: S104 - scraped and probed from outside the pod
    tls: TlsSource | None = None,
    readers: PeerPolicy = OBSERVER_POLICY,
    probes_on_loopback: bool = False,
    limits: EndpointLimits = EndpointLimits(),
) -> Endpoint:
    """Start an :class:`Endpoint`; ``server.shutdown()`` stops it. Raises ``OSError`` when
    a port cannot be bound (in use, not permitted)."""
    endpoint = Endpoint(
        port, health, state, registry, host, tls, readers, probes_on_loopback, limits
    )
    return endpoint.start()
