"""Mutual TLS for scidmz's own channels, from a mounted certificate directory.

A workload's directory (a ``kubernetes.io/tls`` Secret plus ``ca.crt``) holds its
certificate and key and the operator's CA. Servers require a client certificate from that
CA and then check the identity in it (:class:`scidmz.auth.identity.PeerPolicy`); clients
verify the server's host name against the DNS name they were told to expect.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from scidmz.auth.identity import PeerPolicy
from scidmz.auth.pki import PkiError, key_matches, uri_identities

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
_PEM_MARKER = b"-----BEGIN "


class TlsConfigError(ValueError):
    """A certificate directory that cannot be used; the message names every problem."""


@dataclass(frozen=True)
class MutualTls:
    """PEM material of one workload: the CA to trust, its own certificate and key."""

    ca: bytes
    cert: bytes
    key: bytes

    @property
    def identity(self) -> str:
        found = uri_identities(self.cert)
        return found[0] if found else ""


def load_mutual_tls(directory: Path) -> MutualTls:
    """``ca.crt``, ``tls.crt`` and ``tls.key`` from ``directory``; ``TlsConfigError``
    naming every file missing, unreadable or not PEM."""
    problems: list[str] = []
    found: dict[str, bytes] = {}
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        path = directory / name
        try:
            data = path.read_bytes()
        except OSError as error:
            problems.append(f"{path}: {error.strerror or error}")
            continue
        if _PEM_MARKER not in data:
            problems.append(f"{path}: not PEM")
        found[name] = data
    if problems:
        raise TlsConfigError("; ".join(problems))
    material = MutualTls(found[CA_FILE], found[CERT_FILE], found[KEY_FILE])
    try:
        if not uri_identities(material.cert):
            raise TlsConfigError(f"{directory / CERT_FILE}: names no workload identity")
        if not key_matches(material.cert, material.key):
            # a renewal caught half-way (the new certificate, the old key): read it again
            raise TlsConfigError(f"{directory / KEY_FILE}: not the key of {CERT_FILE}")
    except PkiError as error:
        raise TlsConfigError(f"{directory / CERT_FILE}: {error}") from None
    return material


def grpc_server_credentials(tls: MutualTls) -> grpc.ServerCredentials:
    """Server credentials that refuse any client without a certificate from the CA."""
    return grpc.ssl_server_credentials(
        [(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True
    )


def grpc_channel_options(server_name: str) -> list[tuple[str, str]]:
    """Check the server's certificate against ``server_name`` whatever address is dialled
    (a Service's cluster IP, or 127.0.0.1 in a test)."""
    return [("grpc.ssl_target_name_override", server_name)]


def grpc_channel_credentials(tls: MutualTls) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert
    )


def grpc_peer_identities(context: Any) -> tuple[str, ...]:
    """The workload identities of an RPC's peer (() without a client certificate)."""
    certificates = context.auth_context().get("x509_pem_cert") or []
    if not certificates:
        return ()
    try:
        return uri_identities(certificates[0])
    except PkiError:
        return ()


async def refuse_unless_admitted(context: Any, policy: PeerPolicy | None, what: str) -> None:
    """Abort the RPC with PERMISSION_DENIED unless ``policy`` admits the peer (None: a
    plaintext endpoint for local development, which checks nothing)."""
    if policy is None:
        return
    presented = grpc_peer_identities(context)
    if not policy.admits(presented):
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{what} accepts {policy.describe()}; the peer is "
            f"{', '.join(presented) or 'anonymous'}",
        )


def _load_chain(context: ssl.SSLContext, tls: MutualTls) -> None:
    # ssl reads key material from files only: a private temporary directory, gone at once
    with tempfile.TemporaryDirectory(prefix="scidmz-tls-") as directory:
        cert, key = Path(directory) / CERT_FILE, Path(directory) / KEY_FILE
        cert.write_bytes(tls.cert)
        key.touch(mode=0o600)
        key.write_bytes(tls.key)
        context.load_cert_chain(cert, key)


def http_server_context(tls: MutualTls) -> ssl.SSLContext:
    """TLS for a workload's HTTP endpoint. Client certificates are optional at the
    handshake (the kubelet's probes have none) and required per path by the handler."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, tls)
    context.load_verify_locations(cadata=tls.ca.decode("ascii", "replace"))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def http_client_context(tls: MutualTls) -> ssl.SSLContext:
    """TLS for fetching a workload's /state: verify it against the CA, present our own."""
    context = ssl.create_default_context(cadata=tls.ca.decode("ascii", "replace"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, tls)
    return context


def ssl_peer_identities(sock: ssl.SSLSocket) -> tuple[str, ...]:
    """The identities of a TLS socket's verified peer (() without a certificate)."""
    der = sock.getpeercert(binary_form=True)
    if not der:
        return ()
    try:
        return uri_identities(ssl.DER_cert_to_PEM_cert(der).encode("ascii"))
    except PkiError:
        return ()
