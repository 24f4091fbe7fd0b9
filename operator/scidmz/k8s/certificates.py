"""The operator's certificate authority and the certificates it keeps issued.

Chosen over cert-manager: nothing to install first, and the CA's key never leaves the
operator's namespace. The CA is a Secret the operator creates once (the first replica to
start wins; the others read it); every workload of every link gets a certificate naming its
identity (``scidmz.auth.identity``), reissued a month before it expires or when its
identity or host names change; Prometheus's client certificate is a Secret the chart's
ServiceMonitor mounts. The operator's own certificate (it reads /state) is issued in memory
at start and never stored.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scidmz.auth import identity
from scidmz.auth.mtls import MutualTls
from scidmz.auth.pki import (
    KeyPair,
    PkiError,
    issue_certificate,
    load_certificate_authority,
    new_certificate_authority,
    renewal_due,
)
from scidmz.k8s.client import KubeClient

log = logging.getLogger(__name__)

OPERATOR_VALIDITY = dt.timedelta(days=30)
"""The in-memory certificate the operator reads /state with (a restart issues a new one)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decoded(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode((secret.get("data") or {}).get(key, ""))


def _secret(
    name: str, namespace: str, data: dict[str, bytes], labels: dict[str, str], type_: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type_,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {key: _b64(value) for key, value in data.items()},
    }


_LABELS = {"app.kubernetes.io/part-of": "scidmz", "app.kubernetes.io/managed-by": "scidmz-operator"}


def ensure_certificate_authority(
    client: KubeClient, namespace: str, name: str, now: Callable[[], dt.datetime] = _now
) -> KeyPair:
    """The installation's CA: read it, or create it when there is none yet. A Secret
    that holds no usable CA is an error for a person to look at, never overwritten (every
    issued certificate hangs off it)."""
    secret = client.get("v1", "Secret", namespace, name)
    if secret is None:
        ca = new_certificate_authority("scidmz operator CA", now())
        obj = _secret(
            name, namespace, {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem}, _LABELS,
            "kubernetes.io/tls",
        )  # fmt: skip
        if client.create_if_absent(f"/api/v1/namespaces/{namespace}/secrets", obj):
            log.info("created the certificate authority %s/%s", namespace, name)
            return ca
        secret = client.get("v1", "Secret", namespace, name)  # another replica won
        if secret is None:
            raise PkiError(f"Secret {namespace}/{name} vanished while it was being created")
    ca = KeyPair(_decoded(secret, "tls.crt"), _decoded(secret, "tls.key"))
    load_certificate_authority(ca)  # raises PkiError naming what is wrong
    return ca


def operator_identity(ca: KeyPair, now: dt.datetime) -> MutualTls:
    """The operator's client certificate for workloads' /state (in memory only)."""
    issued = issue_certificate(ca, identity.OPERATOR, now, valid_for=OPERATOR_VALIDITY)
    return MutualTls(ca.cert_pem, issued.cert_pem, issued.key_pem)


@dataclass(frozen=True)
class Wanted:
    """A certificate that must exist: where, for whom, for which host names."""

    secret: str
    identity: str
    dns_names: tuple[str, ...] = ()
    server: bool = True
    client: bool = True


def current_or_new(
    stored: dict[str, Any] | None, ca: KeyPair, wanted: Wanted, now: dt.datetime
) -> tuple[KeyPair, str | None]:
    """The stored certificate when it is still good, else a new one and why (pure but
    for the new key's randomness)."""
    if stored is not None:
        cert, key = _decoded(stored, "tls.crt"), _decoded(stored, "tls.key")
        why = renewal_due(cert, ca.cert_pem, wanted.identity, wanted.dns_names, now)
        if why is None and key:
            return KeyPair(cert, key), None
    else:
        why = "none yet"
    issued = issue_certificate(
        ca, wanted.identity, now, wanted.dns_names, server=wanted.server, client=wanted.client
    )
    return issued, why or "no key"


class CertificateCache:
    """What was last read or issued, per Secret, so a reconcile that changes nothing reads
    no Secret (a thousand policies' passes would otherwise read them all each time)."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, str], KeyPair] = {}

    def certificates(
        self,
        client: KubeClient,
        namespace: str,
        ca: KeyPair,
        wanted: Sequence[Wanted],
        now: dt.datetime,
    ) -> tuple[dict[str, KeyPair], list[str]]:
        """Each wanted Secret's pair (issued when missing or due), and a line per reissue.
        The caller applies the Secrets (``secret_object``) with its other objects."""
        out: dict[str, KeyPair] = {}
        reissued: list[str] = []
        for want in wanted:
            key = (namespace, want.secret)
            cached = self._pairs.get(key)
            if cached is not None and (
                renewal_due(cached.cert_pem, ca.cert_pem, want.identity, want.dns_names, now)
                is None
            ):
                out[want.secret] = cached
                continue
            stored = client.get("v1", "Secret", namespace, want.secret)
            pair, why = current_or_new(stored, ca, want, now)
            if why is not None:
                reissued.append(f"{want.secret}: {why}")
            self._pairs[key] = out[want.secret] = pair
        return out, reissued

    def forget(self, namespace: str, secret: str) -> None:
        self._pairs.pop((namespace, secret), None)


METRICS_READER_SECRET = "scidmz-metrics-reader"  # noqa: S105 - a Secret's name


def metrics_reader_wanted() -> Wanted:
    return Wanted(METRICS_READER_SECRET, identity.METRICS_READER, server=False)


def secret_object(
    name: str, namespace: str, ca: KeyPair, pair: KeyPair, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret with ``ca.crt`` (what ``load_mutual_tls`` reads)."""
    return _secret(
        name, namespace, {"ca.crt": ca.cert_pem, "tls.crt": pair.cert_pem, "tls.key": pair.key_pem},
        labels or _LABELS, "kubernetes.io/tls",
    )  # fmt: skip
