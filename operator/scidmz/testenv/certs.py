"""Certificates and keys for a throwaway local control plane (pure apart from file writes)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class PkiPaths:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _certificate_authority(
    ca_name: x509.Name,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_key = _key()
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert


def generate_pki(directory: Path) -> PkiPaths:
    """A CA, an apiserver serving cert for 127.0.0.1, an admin (system:masters) client cert
    and the service-account signing key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = PkiPaths(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    ca_name = _name("scidmz-testenv-ca")
    ca_key, ca_cert = _certificate_authority(ca_name)
    _write_key(paths.ca_key, ca_key)
    _write_cert(paths.ca_cert, ca_cert)

    serving_key = _key()
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("198.19.0.1")),  # the kubernetes Service
        x509.IPAddress(ipaddress.ip_address("198.19.255.1")),  # the host, from a real node
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    serving = _issue(
        _name("kube-apiserver"),
        serving_key,
        ca_name,
        ca_key,
        [ExtendedKeyUsageOID.SERVER_AUTH],
        sans,
    )
    _write_key(paths.serving_key, serving_key)
    _write_cert(paths.serving_cert, serving)

    admin_key = _key()
    admin = _issue(
        _name("scidmz-admin", "system:masters"),
        admin_key,
        ca_name,
        ca_key,
        [ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    _write_key(paths.admin_key, admin_key)
    _write_cert(paths.admin_cert, admin)

    sa_key = _key()
    _write_key(paths.sa_key, sa_key)
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


def issue_kubelet_serving(
    pki: PkiPaths, directory: Path, node_name: str, address: str
) -> tuple[Path, Path]:
    """The kubelet's serving pair, signed by the cluster's CA for the node's name and
    address, so the API server verifies it on ``kubectl logs``/``exec`` instead of
    trusting any certificate the node shows. Returns (certificate, key)."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca_key}: not the EC key generate_pki writes")
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    cert = _issue(
        _name(f"system:node:{node_name}", "system:nodes"), key, ca_cert.subject, ca_key,
        [ExtendedKeyUsageOID.SERVER_AUTH],
        [x509.DNSName(node_name), x509.IPAddress(ipaddress.ip_address(address))],
    )  # fmt: skip
    paths = directory / "kubelet.crt", directory / "kubelet.key"
    _write_key(paths[1], key)
    _write_cert(paths[0], cert)
    return paths


@dataclass(frozen=True)
class SwitchTlsPaths:
    """TLS for a P4Runtime switch and its collector, signed by one CA."""

    collector_dir: Path
    """ca.crt, tls.crt, tls.key: what the switch TLS Secret holds (``collector --tls-dir``)."""
    ca_cert: Path
    switch_cert: Path
    switch_key: Path


def generate_switch_tls(directory: Path, switch_name: str) -> SwitchTlsPaths:
    """A CA, a serving cert for ``switch_name`` (a DNS name, not 127.0.0.1: connecting to
    the loopback then needs the server-name override), and a collector client cert."""
    collector_dir = directory / "collector"
    collector_dir.mkdir(parents=True, exist_ok=True)
    ca_name = _name("scidmz-switch-ca")
    ca_key, ca_cert = _certificate_authority(ca_name)
    paths = SwitchTlsPaths(
        collector_dir=collector_dir,
        ca_cert=collector_dir / "ca.crt",
        switch_cert=directory / "switch.crt",
        switch_key=directory / "switch.key",
    )
    _write_cert(paths.ca_cert, ca_cert)
    switch_key = _key()
    switch = _issue(
        _name(switch_name), switch_key, ca_name, ca_key, [ExtendedKeyUsageOID.SERVER_AUTH],
        [x509.DNSName(switch_name)],
    )  # fmt: skip
    _write_key(paths.switch_key, switch_key)
    _write_cert(paths.switch_cert, switch)
    client_key = _key()
    client = _issue(
        _name("scidmz-collector"), client_key, ca_name, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    _write_key(collector_dir / "tls.key", client_key)
    _write_cert(collector_dir / "tls.crt", client)
    # the controller's pair for a simulated switch's actuators, in the same Secret
    actuator_key = _key()
    actuator = _issue(
        _name("scidmz-sim-actuator"), actuator_key, ca_name, ca_key,
        [ExtendedKeyUsageOID.CLIENT_AUTH],
    )  # fmt: skip
    _write_key(collector_dir / "actuator.key", actuator_key)
    _write_cert(collector_dir / "actuator.crt", actuator)
    return paths
