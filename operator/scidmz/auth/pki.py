"""The operator's own certificate authority and the certificates it issues.

One CA per installation (a Secret in the operator's namespace; its key never leaves it)
signs a certificate per workload. Each certificate names its holder twice: a URI SAN, the
workload identity that servers authorise (:mod:`scidmz.auth.identity`), and, for servers,
DNS SANs that clients verify the host against. Everything here is a function of its
arguments (the key to sign with, the clock); only :func:`new_key` draws randomness.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=365)
LEAF_VALIDITY = dt.timedelta(days=7)
RENEW_FRACTION = 2 / 3
"""A leaf certificate is reissued once this share of its life has passed (a third left:
cert-manager's default), whatever its length: a leaf cut short by its CA's end is renewed
within its own shorter life, once, not on every pass."""
_BACKDATE = dt.timedelta(minutes=5)
"""Certificates start slightly in the past: nodes' clocks disagree by seconds (a tenth of
a short certificate's life at most)."""


def backdate(valid_for: dt.timedelta) -> dt.timedelta:
    """How far before its issue a certificate valid for ``valid_for`` starts."""
    return min(_BACKDATE, valid_for / 10)


def issued_at(cert: x509.Certificate) -> dt.datetime:
    """When a certificate made here was issued (its start undone of :func:`backdate`)."""
    total = cert.not_valid_after_utc - cert.not_valid_before_utc
    # total = valid_for + backdate(valid_for): the backdate is 5 min, or total / 11
    shift = _BACKDATE if total >= 11 * _BACKDATE else total / 11
    return cert.not_valid_before_utc + shift


@dataclass(frozen=True)
class Validity:
    """How long the operator's certificates live and when they are renewed (the
    operator's settings; the defaults in the constants above)."""

    ca: dt.timedelta = CA_VALIDITY
    ca_renew_before: dt.timedelta = dt.timedelta(days=60)
    """The next CA is made this long before the active one expires ..."""
    ca_overlap: dt.timedelta = dt.timedelta(days=1)
    """... trusted beside it this long before it signs, and the old one trusted this long
    after: every workload has the new CA before any certificate it signed is presented."""
    leaf: dt.timedelta = LEAF_VALIDITY
    renew_fraction: float = RENEW_FRACTION

    def problems(self) -> list[str]:
        """What makes these settings unusable (empty: none)."""
        found = []
        if not self.ca_overlap > dt.timedelta(0):
            found.append("the CA overlap must be positive")
        if self.ca_renew_before < 2 * self.ca_overlap:
            found.append(
                "the CA's renewal window must hold two overlaps (the new CA trusted before "
                "it signs, the old trusted after)"
            )
        if self.ca <= self.ca_renew_before:
            found.append("the CA must live longer than its renewal window")
        if not self.leaf > dt.timedelta(0):
            found.append("leaf certificates must live a positive time")
        if not 0 < self.renew_fraction < 1:
            found.append("the renewal fraction must be within (0, 1)")
        return found


class PkiError(ValueError):
    """PEM material that cannot be used (unparseable, not a CA, a key that does not match)."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "scidmz"),
            # informational only (a CN holds 64 characters); the URI SAN is what counts
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[-64:]),
        ]
    )


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """ECDSA signatures only; a CA also signs certificates and CRLs."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def new_certificate_authority(
    common_name: str,
    now: dt.datetime,
    key: ec.EllipticCurvePrivateKey | None = None,
    valid_for: dt.timedelta = CA_VALIDITY,
) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = key or new_key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate(valid_for))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def load_certificate_authority(ca: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA's certificate and key; ``PkiError`` if they are not a usable pair."""
    try:
        cert = x509.load_pem_x509_certificate(ca.cert_pem)
        key = serialization.load_pem_private_key(ca.key_pem, password=None)
    except ValueError as error:
        raise PkiError(f"the CA is not PEM: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError("the CA key is not an EC key")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise PkiError("the CA key does not match its certificate")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        raise PkiError("the CA certificate has no basic constraints") from None
    if not constraints.ca:
        raise PkiError("the CA certificate is not a CA")
    return cert, key


def issue_certificate(
    ca: KeyPair,
    identity: str,
    now: dt.datetime,
    dns_names: Sequence[str] = (),
    server: bool = False,
    client: bool = True,
    key: ec.EllipticCurvePrivateKey | None = None,
    valid_for: dt.timedelta = LEAF_VALIDITY,
) -> KeyPair:
    """A leaf certificate for ``identity`` (a URI SAN), signed by ``ca``; ``dns_names`` are
    the host names a server answers to. Never valid beyond the CA."""
    ca_cert, ca_key = load_certificate_authority(ca)
    key = key or new_key()
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity)]
    sans += [x509.DNSName(name) for name in dns_names]
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    if not usages:
        raise PkiError("a certificate must be for a server, a client or both")
    not_after = min(now + valid_for, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(identity))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate(not_after - now))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _certificate(cert_pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(cert_pem)
    except ValueError as error:
        raise PkiError(f"not a PEM certificate: {error}") from None


def uri_identities(cert_pem: bytes) -> tuple[str, ...]:
    """The URI SANs of a certificate (its workload identities); () when it has none."""
    try:
        sans = _certificate(cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
    except x509.ExtensionNotFound:
        return ()
    return tuple(sans.value.get_values_for_type(x509.UniformResourceIdentifier))


def renewal_due(
    cert_pem: bytes,
    ca_cert_pem: bytes,
    identity: str,
    dns_names: Sequence[str],
    now: dt.datetime,
    renew_fraction: float = RENEW_FRACTION,
) -> str | None:
    """Why a stored certificate must be reissued (None: it is still good): unparseable,
    signed by another CA than ``ca_cert_pem`` (the one signing now), for another identity
    or other host names, or past ``renew_fraction`` of its life."""
    try:
        cert = _certificate(cert_pem)
        ca_cert = _certificate(ca_cert_pem)
    except PkiError as error:
        return str(error)
    if cert.issuer != ca_cert.subject:
        return "issued by another CA"
    try:
        ca_cert.public_key().verify(  # type: ignore[call-arg, union-attr]
            cert.signature,
            cert.tbs_certificate_bytes,
            ec.ECDSA(cert.signature_hash_algorithm),  # type: ignore[arg-type]
        )
    except Exception:  # InvalidSignature, or a key type this CA never uses
        return "not signed by this CA"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subject alternative names"
    if sans.get_values_for_type(x509.UniformResourceIdentifier) != [identity]:
        return "issued for another identity"
    if sorted(sans.get_values_for_type(x509.DNSName)) != sorted(dns_names):
        return "issued for other host names"
    start = issued_at(cert)
    if start + renew_fraction * (cert.not_valid_after_utc - start) <= now:
        return f"expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S}"
    return None


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether ``key_pem`` is the private key of ``cert_pem``; ``PkiError`` for a
    certificate or key that does not parse."""
    cert = _certificate(cert_pem)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as error:
        raise PkiError(f"not a PEM private key: {error}") from None
    return bool(key.public_key().public_numbers() == cert.public_key().public_numbers())  # type: ignore[union-attr]
