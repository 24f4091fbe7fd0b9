"""Certificates between a local control plane and processes run beside it.

The demo and the tests run a link's workloads as local processes (kwok runs no
containers): each needs the certificate the operator issued it, as a pod would have it
mounted, and the switch's TLS Secret must exist for the operator to accept the link.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from scidmz.testenv.certs import SwitchTlsPaths, generate_switch_tls
from scidmz.testenv.cluster import ControlPlane, ControlPlaneError

OPERATOR_NAMESPACE = "scidmz-system"


def ensure_namespace(plane: ControlPlane, name: str) -> None:
    if plane.kubectl("get", "namespace", name, check=False).returncode != 0:
        plane.kubectl("create", "namespace", name)


def secret_to_directory(plane: ControlPlane, namespace: str, name: str, directory: Path) -> Path:
    """A Secret's keys as files (mode 0600), as the kubelet mounts them."""
    found = plane.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        raise ControlPlaneError(f"Secret {namespace}/{name}: {found.stderr.strip()}")
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in (json.loads(found.stdout).get("data") or {}).items():
        path = directory / key
        path.touch(mode=0o600)
        path.write_bytes(base64.b64decode(value))
    return directory


def create_switch_secret(
    plane: ControlPlane, namespace: str, name: str, directory: Path, switch_name: str
) -> SwitchTlsPaths:
    """A switch's TLS (its CA, its serving pair, the collector's client pair) and the
    Secret an administrator would create for it in the operator's namespace."""
    paths = generate_switch_tls(directory, switch_name)
    ensure_namespace(plane, namespace)
    keys = ("ca.crt", "tls.crt", "tls.key", "actuator.crt", "actuator.key")
    files = [f"--from-file={key}={paths.collector_dir / key}" for key in keys]
    plane.kubectl("create", "secret", "generic", name, "-n", namespace, *files)
    return paths
