"""The operator's certificate authorities and the certificates it keeps issued.

Chosen over cert-manager: nothing to install first, and the CA's key never leaves the
operator's namespace. The CA Secret (created by the first replica to start; the others read
it) holds the active CA and, around a rollover, the next and the previous one
(:mod:`scidmz.auth.rollover`): :class:`AuthorityKeeper` moves it along as the clock passes
each step. Every workload of every link gets a certificate naming its identity
(``scidmz.auth.identity``) and the bundle of every CA to trust; it is reissued once a
third of its life is left, when another CA than the active one signed it, or when its
identity or host names change. The processes follow their mounted Secret
(``scidmz.auth.tls_source``): no pod restarts for any of it. Prometheus's client
certificate is a Secret the chart's ServiceMonitor mounts, renewed as the others; the
operator's own certificate (it reads /state) lives in memory and is renewed the same way.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scidmz.auth import identity
from scidmz.auth.mtls import MutualTls, http_client_context
from scidmz.auth.pki import (
    KeyPair,
    PkiError,
    Validity,
    issue_certificate,
    load_certificate_authority,
    new_certificate_authority,
    renewal_due,
)
from scidmz.auth.rollover import Authorities, plan_rollover
from scidmz.k8s.client import KubeApiError, KubeClient

log = logging.getLogger(__name__)

CA_NAME = "scidmz operator CA"
DEFAULT_VALIDITY = Validity()


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


def authorities_data(authorities: Authorities) -> dict[str, bytes]:
    """The CA Secret's keys: ``tls.crt``/``tls.key`` the active CA (what an installation
    before rollovers holds), ``next.*`` and ``previous.crt`` around a rollover."""
    data = {"tls.crt": authorities.active.cert_pem, "tls.key": authorities.active.key_pem}
    if authorities.next is not None:
        data |= {"next.crt": authorities.next.cert_pem, "next.key": authorities.next.key_pem}
    if authorities.previous is not None:
        data["previous.crt"] = authorities.previous
    return data


def authorities_of(secret: dict[str, Any]) -> Authorities:
    """The CAs a Secret holds; ``PkiError`` naming what is wrong."""
    active = KeyPair(_decoded(secret, "tls.crt"), _decoded(secret, "tls.key"))
    load_certificate_authority(active)
    data = secret.get("data") or {}
    nxt = None
    if "next.crt" in data:
        nxt = KeyPair(_decoded(secret, "next.crt"), _decoded(secret, "next.key"))
        load_certificate_authority(nxt)
    previous = _decoded(secret, "previous.crt") if "previous.crt" in data else None
    return Authorities(active, nxt, previous)


class AuthorityKeeper:
    """The installation's CAs, read once, moved along the rollover as time passes, and
    written back with the Secret's resourceVersion (two writers never both win). Shared by
    the reconcile passes (threads)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        validity: Validity = DEFAULT_VALIDITY,
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.validity, self.clock = validity, clock
        self._lock = threading.Lock()
        self._authorities: Authorities | None = None
        self._version = ""
        self.changes = 0
        """Rollover steps this process made."""

    def _new_ca(self, now: dt.datetime) -> KeyPair:
        return new_certificate_authority(CA_NAME, now, valid_for=self.validity.ca)

    def ensure(self) -> Authorities:
        """Read the CA Secret, or create it when there is none yet. A Secret that holds no
        usable CA is an error for a person to look at, never overwritten (every issued
        certificate hangs off it)."""
        with self._lock:
            return self._load()

    def _load(self) -> Authorities:
        secret = self.client.get("v1", "Secret", self.namespace, self.name)
        if secret is None:
            created = Authorities(self._new_ca(self.clock()))
            obj = _secret(self.name, self.namespace, authorities_data(created), _LABELS,
                          "kubernetes.io/tls")  # fmt: skip
            path = f"/api/v1/namespaces/{self.namespace}/secrets"
            if self.client.create_if_absent(path, obj):
                log.info("created the certificate authority %s/%s", self.namespace, self.name)
            secret = self.client.get("v1", "Secret", self.namespace, self.name)
            if secret is None:
                raise PkiError(f"Secret {self.namespace}/{self.name} vanished as it was made")
        self._authorities = authorities_of(secret)
        self._version = str(secret["metadata"].get("resourceVersion", ""))
        return self._authorities

    def current(self) -> Authorities:
        """The CAs now, after any rollover step that is due (written before it is used)."""
        with self._lock:
            authorities = self._authorities or self._load()
            planned, changes = plan_rollover(authorities, self.clock(), self.validity, self._new_ca)
            if not changes:
                return authorities
            data: dict[str, str | None] = {k: _b64(v) for k, v in authorities_data(planned).items()}
            if planned.next is None:
                data |= {"next.crt": None, "next.key": None}  # a merge patch's null removes
            if planned.previous is None:
                data["previous.crt"] = None
            body = {"metadata": {"resourceVersion": self._version}, "data": data}
            try:
                written = self.client.merge_patch("v1", "Secret", self.namespace, self.name, body)
            except KubeApiError as error:
                if error.is_conflict:  # another replica moved it: take theirs, next pass
                    self._authorities = None
                raise
            self._authorities = planned
            self._version = str(written["metadata"].get("resourceVersion", ""))
            self.changes += len(changes)
            for change in changes:
                log.warning("certificate authority %s/%s: %s", self.namespace, self.name, change)
            return planned


@dataclass(frozen=True)
class Wanted:
    """A certificate that must exist: where, for whom, for which host names."""

    secret: str
    identity: str
    dns_names: tuple[str, ...] = ()
    server: bool = True
    client: bool = True


def current_or_new(
    stored: dict[str, Any] | None,
    authorities: Authorities,
    wanted: Wanted,
    now: dt.datetime,
    validity: Validity = DEFAULT_VALIDITY,
) -> tuple[KeyPair, str | None]:
    """The stored certificate when it is still good, else a new one from the active CA
    and why (pure but for the new key's randomness)."""
    if stored is not None:
        cert, key = _decoded(stored, "tls.crt"), _decoded(stored, "tls.key")
        why = renewal_due(
            cert, authorities.active.cert_pem, wanted.identity, wanted.dns_names, now,
            validity.renew_fraction,
        )  # fmt: skip
        if why is None and key:
            return KeyPair(cert, key), None
    else:
        why = "none yet"
    issued = issue_certificate(
        authorities.active, wanted.identity, now, wanted.dns_names, server=wanted.server,
        client=wanted.client, valid_for=validity.leaf,
    )  # fmt: skip
    return issued, why or "no key"


class CertificateCache:
    """What was last read or issued, per Secret, so a reconcile that changes nothing reads
    no Secret (a thousand policies' passes would otherwise read them all each time)."""

    def __init__(self, validity: Validity = DEFAULT_VALIDITY) -> None:
        self.validity = validity
        self._pairs: dict[tuple[str, str], KeyPair] = {}
        self.issued = 0

    def certificates(
        self,
        client: KubeClient,
        namespace: str,
        authorities: Authorities,
        wanted: Sequence[Wanted],
        now: dt.datetime,
    ) -> tuple[dict[str, KeyPair], list[str]]:
        """Each wanted Secret's pair (issued when missing or due), and a line per reissue.
        The caller applies the Secrets (``secret_object``) with its other objects."""
        out: dict[str, KeyPair] = {}
        reissued: list[str] = []
        active = authorities.active.cert_pem
        for want in wanted:
            key = (namespace, want.secret)
            cached = self._pairs.get(key)
            fraction = self.validity.renew_fraction
            if cached is not None and (
                renewal_due(cached.cert_pem, active, want.identity, want.dns_names, now, fraction)
                is None
            ):
                out[want.secret] = cached
                continue
            stored = client.get("v1", "Secret", namespace, want.secret)
            pair, why = current_or_new(stored, authorities, want, now, self.validity)
            if why is not None:
                reissued.append(f"{want.secret}: {why}")
                self.issued += 1
            self._pairs[key] = out[want.secret] = pair
        return out, reissued

    def forget(self, namespace: str, secret: str) -> None:
        self._pairs.pop((namespace, secret), None)


METRICS_READER_SECRET = "scidmz-metrics-reader"  # noqa: S105 - a Secret's name


def metrics_reader_wanted() -> Wanted:
    return Wanted(METRICS_READER_SECRET, identity.METRICS_READER, server=False)


def secret_object(
    name: str,
    namespace: str,
    authorities: Authorities,
    pair: KeyPair,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret with ``ca.crt``, the bundle of every CA to trust
    (what ``load_mutual_tls`` reads)."""
    data = {"ca.crt": authorities.bundle(), "tls.crt": pair.cert_pem, "tls.key": pair.key_pem}
    return _secret(name, namespace, data, labels or _LABELS, "kubernetes.io/tls")


class OperatorIdentity:
    """The operator's client certificate for the workloads' /state, in memory only,
    renewed as the workloads' are and trusting every CA of the bundle."""

    def __init__(self, keeper: AuthorityKeeper) -> None:
        self._keeper = keeper
        self._lock = threading.Lock()
        self._built: tuple[bytes, bytes, ssl.SSLContext] | None = None
        """(bundle, certificate, context) last built."""
        self.issued = 0

    def context(self) -> ssl.SSLContext:
        """The SSL context to read /state with now."""
        authorities = self._keeper.current()
        now = self._keeper.clock()
        with self._lock:
            bundle = authorities.bundle()
            if self._built is not None:
                built_bundle, cert, context = self._built
                due = renewal_due(
                    cert, authorities.active.cert_pem, identity.OPERATOR, (), now,
                    self._keeper.validity.renew_fraction,
                )  # fmt: skip
                if due is None and built_bundle == bundle:
                    return context
            issued = issue_certificate(
                authorities.active, identity.OPERATOR, now, valid_for=self._keeper.validity.leaf
            )
            context = http_client_context(MutualTls(bundle, issued.cert_pem, issued.key_pem))
            self._built = (bundle, issued.cert_pem, context)
            self.issued += 1
            return context


def validity_from(settings: Any) -> Validity:
    """The operator settings' certificate lifetimes (``OperatorSettings``)."""
    return Validity(
        ca=dt.timedelta(seconds=settings.ca_validity_s),
        ca_renew_before=dt.timedelta(seconds=settings.ca_renew_before_s),
        ca_overlap=dt.timedelta(seconds=settings.ca_overlap_s),
        leaf=dt.timedelta(seconds=settings.leaf_validity_s),
    )
