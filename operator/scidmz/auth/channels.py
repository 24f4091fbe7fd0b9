"""scidmz's own gRPC channels: how a client dials a scidmz server, how a server binds and
what it grants one client. Both take their material from a fixed ``MutualTls`` or a
:class:`~scidmz.auth.tls_source.TlsSource` that follows the operator's rotations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from scidmz.auth.mtls import (
    MutualTls,
    grpc_channel_credentials,
    grpc_channel_options,
    grpc_server_credentials,
)
from scidmz.auth.tls_source import TlsSource


@dataclass(frozen=True)
class ClientTls:
    """How a client dials one of scidmz's servers: its own material (fixed, or followed as
    the operator rotates it), and the name the server's certificate must carry."""

    material: MutualTls | TlsSource
    server_name: str

    def current(self) -> MutualTls:
        """The material to dial with now."""
        if isinstance(self.material, MutualTls):
            return self.material
        return self.material.material()

    @property
    def generation(self) -> int:
        """Changes when the material does: a channel opened before should be re-opened."""
        if isinstance(self.material, MutualTls):
            return 0
        self.material.material()
        return self.material.generation


def open_channel(
    address: str, tls: ClientTls | None, options: list[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """A mutual-TLS channel to ``address`` with the material in force (plaintext without
    ``tls``: development only)."""
    options = list(options or [])
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(
        address,
        grpc_channel_credentials(tls.current()),
        options=[*options, *grpc_channel_options(tls.server_name)],
    )


SERVER_HANDSHAKE_TIMEOUT_MS = 5_000
MAX_CONNECTIONS = 256


def server_options(
    max_connections: int = MAX_CONNECTIONS, keepalive: bool = True
) -> list[tuple[str, int]]:
    """What a scidmz gRPC server grants one client: a TLS handshake within 5 s (gRPC's
    default is 120 s: 1,024 idle TCP connections took a shaper's file descriptors) and at
    most ``max_connections`` connections in all; with ``keepalive`` (scidmz's own
    services, whose clients are scidmz's) 16 streams per connection and keepalive on its
    terms: a ping at most every 10 s without data, a connection that pings more often
    closed, an idle one closed after 5 minutes. The software switch leaves keepalive to
    its P4Runtime clients, as a switch would."""
    limits = [
        ("grpc.server_handshake_timeout_ms", SERVER_HANDSHAKE_TIMEOUT_MS),
        ("grpc.max_allowed_incoming_connections", max_connections),
    ]
    if not keepalive:
        return limits
    return [
        *limits,
        ("grpc.max_concurrent_streams", 16),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_connection_idle_ms", 300_000),
    ]


def add_port(server: grpc.aio.Server, listen: str, tls: MutualTls | TlsSource | None) -> int:
    """Bind ``listen`` with mutual TLS (plaintext without ``tls``; with a ``TlsSource``,
    each new connection gets the material in force); 0 when it cannot be bound (grpcio
    raises on a port in use where it once returned 0)."""
    try:
        if tls is None:
            return int(server.add_insecure_port(listen))
        credentials = (
            grpc_server_credentials(tls)
            if isinstance(tls, MutualTls)
            else tls.grpc_server_credentials()
        )
        return int(server.add_secure_port(listen, credentials))
    except RuntimeError:
        return 0
