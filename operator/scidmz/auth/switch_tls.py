"""TLS for the P4Runtime channel: the files the collector reads from the switch's mounted
Secret (the administrators', named by the BorderLink), and the gRPC channel they make.

The Secret follows the ``kubernetes.io/tls`` layout plus the CA: ``ca.crt`` verifies the
switch; ``tls.crt`` and ``tls.key``, together, are the collector's client certificate for
mutual TLS. Start-up reads them first (a bad Secret stops it with every problem named); the
collector reads them again before every reconnect, so a renewed Secret (kubelet updates the
mount in place) takes effect without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from scidmz.auth.mtls import CA_FILE, CERT_FILE, KEY_FILE, TlsConfigError
from scidmz.contract.channels import RECONNECT_OPTIONS

_PEM_MARKER = b"-----BEGIN "


@dataclass(frozen=True)
class ChannelTls:
    """PEM material for a client channel (``client_cert``/``client_key`` both or neither)."""

    ca: bytes
    client_cert: bytes | None = None
    client_key: bytes | None = None
    server_name: str | None = None
    """Overrides the name the switch's certificate is checked against (SNI too)."""

    @property
    def mutual(self) -> bool:
        return self.client_cert is not None


def looks_like_pem(data: bytes) -> bool:
    return _PEM_MARKER in data


def _read_pem(path: Path, problems: list[str]) -> bytes | None:
    """The file's bytes; None when it is absent. Unreadable or non-PEM files are problems."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        problems.append(f"{path}: {error.strerror}")
        return b""
    if not looks_like_pem(data):
        problems.append(f"{path}: not PEM")
    return data


ACTUATOR_CERT_FILE = "actuator.crt"
ACTUATOR_KEY_FILE = "actuator.key"
"""An optional second client pair in the same Secret: the controller's, for a simulated
switch's actuators (the simulated switch answers each pair only its part)."""


def load_channel_tls(
    directory: Path, server_name: str | None = None, actuator: bool = False
) -> ChannelTls:
    """Read ``ca.crt`` and the optional client pair from ``directory`` (the mounted Secret);
    with ``actuator``, the controller's pair (``actuator.crt``/``actuator.key``) when the
    Secret has one, else the collector's.

    Raises ``TlsConfigError`` naming every missing or unreadable file.
    """
    problems: list[str] = []
    ca = _read_pem(directory / CA_FILE, problems)
    pair = (CERT_FILE, KEY_FILE)
    if actuator and (directory / ACTUATOR_CERT_FILE).exists():
        pair = (ACTUATOR_CERT_FILE, ACTUATOR_KEY_FILE)
    cert = _read_pem(directory / pair[0], problems)
    key = _read_pem(directory / pair[1], problems)
    if ca is None:
        problems.append(f"{directory / CA_FILE}: missing (the CA that signed the switch's cert)")
    if (cert is None) != (key is None):
        have, lacking = pair if key is None else (pair[1], pair[0])
        problems.append(f"{directory}: {have} without {lacking} (mutual TLS needs both)")
    if problems or ca is None:
        raise TlsConfigError("switch TLS: " + "; ".join(problems))
    return ChannelTls(ca=ca, client_cert=cert, client_key=key, server_name=server_name)


def open_channel(address: str, tls: ChannelTls | None) -> grpc.aio.Channel:
    """A plaintext channel, or a TLS one verifying the switch against ``tls.ca``; both
    with ``RECONNECT_OPTIONS``."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=RECONNECT_OPTIONS)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca,
        private_key=tls.client_key,
        certificate_chain=tls.client_cert,
    )
    options: list[tuple[str, int | str]] = list(RECONNECT_OPTIONS)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.aio.secure_channel(address, credentials, options=options)
