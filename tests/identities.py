"""Certificates for processes under test, issued as the operator issues them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from scidmz.auth import identity
from scidmz.auth.mtls import MutualTls
from scidmz.auth.pki import KeyPair, issue_certificate, new_certificate_authority

NOW = dt.datetime.now(dt.UTC)
SERVER_NAME = "loop.test.svc"
"""What the test servers' certificates are issued for (and clients check)."""


def authority(name: str = "scidmz operator CA") -> KeyPair:
    return new_certificate_authority(name, NOW)


def issue(ca: KeyPair, who: str, server: bool = True) -> MutualTls:
    pair = issue_certificate(
        ca, who, NOW, [SERVER_NAME, identity.WORKLOAD_SERVER_NAME] if server else [], server=server
    )
    return MutualTls(ca.cert_pem, pair.cert_pem, pair.key_pem)


def write(tls: MutualTls, directory: Path) -> Path:
    """As a mounted Secret: ca.crt, tls.crt, tls.key."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(tls.ca)
    (directory / "tls.crt").write_bytes(tls.cert)
    key = directory / "tls.key"
    key.touch(mode=0o600)
    key.write_bytes(tls.key)
    return directory


def link_identities(ca: KeyPair, link: str, root: Path) -> dict[str, Path]:
    """A directory per workload of ``link`` and per observer."""
    return {
        "collector": write(
            issue(ca, identity.link_identity(link, "collector")), root / "collector"
        ),
        "controller": write(
            issue(ca, identity.link_identity(link, "controller")), root / "controller"
        ),
        "dtn-shaper": write(
            issue(ca, identity.link_identity(link, "dtn-shaper", "dtn")), root / "dtn-shaper"
        ),
        "operator": write(issue(ca, identity.OPERATOR, server=False), root / "operator"),
        "reader": write(issue(ca, identity.METRICS_READER, server=False), root / "reader"),
    }
