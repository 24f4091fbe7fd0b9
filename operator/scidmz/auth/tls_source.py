"""A workload's mutual-TLS material, followed as the operator rotates it.

The operator re-issues a workload's certificate well before it expires, and rolls its CA
over with an overlap (``scidmz.k8s.certificates``); the kubelet swaps the mounted Secret's
files atomically. A :class:`TlsSource` re-reads the directory at most once per
``check_every_s`` when asked, keeps the last good material when the new files do not load
(a half-written directory, a key that does not match), and counts ``generation`` so that
whoever built something from it (an SSL context, a gRPC channel) knows to build it again.
Servers take each new connection's material from it (the HTTP endpoint's SSL context, gRPC's
dynamic server credentials), clients re-open their channel on their next reconnect: no
process restarts for a new certificate or CA.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from scidmz.auth.mtls import (
    MutualTls,
    TlsConfigError,
    http_client_context,
    http_server_context,
    load_mutual_tls,
)

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0


class TlsSource:
    """The current material of one workload (thread-safe: the HTTP endpoint's thread, gRPC's
    credential fetcher and the event loop all ask)."""

    def __init__(
        self,
        load: Callable[[], MutualTls],
        initial: MutualTls | None = None,
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float = CHECK_EVERY_S,
        where: str = "",
    ) -> None:
        """``load`` reads the material (raising ``TlsConfigError``); ``initial`` is what
        was read at start (read now when None, and then an error is raised)."""
        self._load, self._clock, self._every = load, clock, check_every_s
        self._where = where
        self._material = initial if initial is not None else load()
        self._checked = clock()
        self._lock = threading.Lock()
        self.generation = 0
        self._contexts: dict[tuple[str, bool], tuple[int, ssl.SSLContext]] = {}
        self._refused: str | None = None

    @classmethod
    def from_directory(cls, directory: Path, **kwargs: object) -> TlsSource:
        """The material in ``directory`` (``load_mutual_tls``), followed."""
        return cls(lambda: load_mutual_tls(directory), where=str(directory), **kwargs)  # type: ignore[arg-type]

    @classmethod
    def fixed(cls, material: MutualTls) -> TlsSource:
        """Material that never changes (tests, and processes given PEM bytes)."""
        return cls(lambda: material, material, check_every_s=float("inf"))

    def material(self) -> MutualTls:
        """The material in force, re-read when due."""
        with self._lock:
            now = self._clock()
            if now - self._checked < self._every:
                return self._material
            self._checked = now
            try:
                found = self._load()
            except TlsConfigError as error:
                if str(error) != self._refused:
                    log.warning("TLS material %s not taken, keeping the last: %s",
                                self._where, error)  # fmt: skip
                    self._refused = str(error)
                return self._material
            self._refused = None
            if found != self._material:
                self._material = found
                self.generation += 1
                log.info("TLS material %s changed (now %s)", self._where, found.identity)
            return self._material

    def _context(
        self, kind: str, require: bool, build: Callable[[MutualTls], ssl.SSLContext]
    ) -> ssl.SSLContext:
        material = self.material()
        with self._lock:
            cached = self._contexts.get((kind, require))
            if cached is not None and cached[0] == self.generation:
                return cached[1]
            context = build(material)
            self._contexts[(kind, require)] = (self.generation, context)
            return context

    def http_server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        """The HTTP endpoint's context for the material in force; with
        ``require_client_cert`` the handshake itself refuses a client without a certificate
        from the CA (a host-network workload's public port)."""

        def build(material: MutualTls) -> ssl.SSLContext:
            context = http_server_context(material)
            if require_client_cert:
                context.verify_mode = ssl.CERT_REQUIRED
            return context

        return self._context("server", require_client_cert, build)

    def http_client_context(self) -> ssl.SSLContext:
        return self._context("client", True, http_client_context)

    def grpc_server_credentials(self) -> grpc.ServerCredentials:
        """Credentials that take each new connection's certificate and trusted CAs from
        the material in force (gRPC's dynamic server credentials), refusing clients
        without a certificate from them."""
        served = {"generation": -1}

        def configuration(material: MutualTls) -> grpc.ServerCertificateConfiguration:
            return grpc.ssl_server_certificate_configuration(
                [(material.key, material.cert)], root_certificates=material.ca
            )

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            material = self.material()
            if served["generation"] == self.generation:
                return None  # unchanged: gRPC keeps what it has
            served["generation"] = self.generation
            return configuration(material)

        initial = self.material()
        served["generation"] = self.generation
        return grpc.dynamic_ssl_server_credentials(
            configuration(initial), fetch, require_client_authentication=True
        )
