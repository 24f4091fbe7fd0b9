"""Fixtures on a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok) built by hack/testenv/build.sh and started once per session."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scidmz.k8s.status import find_condition
from scidmz.testenv.cluster import ControlPlane, free_port, start_control_plane
from scidmz.testenv.identities import OPERATOR_NAMESPACE, create_switch_secret, ensure_namespace
from scidmz.testenv.operator_process import OperatorProcess, start_operator

REPO = Path(__file__).resolve().parents[2]
SWITCH_NAME = "scidmz-target"
"""The example link's switch TLS server name (examples/borderlink.yaml)."""


def secret_data(plane, name: str, namespace: str = OPERATOR_NAMESPACE) -> dict[str, bytes]:
    """A Secret's data, decoded ({} when there is none)."""
    found = plane.kubectl("get", "secret", name, "-n", namespace, "-o", "yaml", check=False)
    if found.returncode != 0:
        return {}
    data = yaml.safe_load(found.stdout).get("data") or {}
    return {key: base64.b64decode(value) for key, value in data.items()}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Operator:
    """`scidmz operator` as a real child process (scidmz.testenv.operator_process)."""

    def __init__(self, plane: ControlPlane, log_path: Path, priority: int) -> None:
        self.plane, self.log_path, self.priority = plane, log_path, priority
        self.process: OperatorProcess | None = None
        # Pods do not run under kwok: tests that run a real controller process serve its
        # /state here, and the operator reads every link's state from this address.
        self.state_port = free_port()
        self.namespace = OPERATOR_NAMESPACE

    @property
    def health_port(self) -> int:
        assert self.process is not None
        return self.process.health_port

    def start(self, **env: str) -> None:
        """Start it, with ``env`` beside the tests' settings (e.g. short certificate
        lifetimes)."""
        self._started_at = len(self.log())
        self.process = start_operator(
            self.plane,
            self.log_path,
            extra_args=("--verbose",),
            extra_env={
                **env,
                "SCIDMZ_PEERING_PRIORITY": str(self.priority),
                "SCIDMZ_RETRY_DELAY_S": "2",
                "SCIDMZ_STATE_POLL_S": "1",
                "SCIDMZ_RESYNC_S": "5",
                "SCIDMZ_DTN_SHAPER_GRACE_S": "8",
                "SCIDMZ_CONTROLLER_STATE_URL": f"https://127.0.0.1:{self.state_port}/state",
            },
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout_s=20)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_since_start(self) -> str:
        return self.log()[self._started_at :]

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


@pytest.fixture(scope="session")
def plane(tmp_path_factory) -> Iterator[ControlPlane]:
    cp = start_control_plane(
        workdir=tmp_path_factory.mktemp("testenv"),
        nodes=("kwok-node-0", "edge-1", "dtn-1"),
        crds=(REPO / "crds",),
    )
    try:
        # what an administrator does before the example link can run: the operator's
        # namespace, and the switch's TLS Secret in it
        ensure_namespace(cp, OPERATOR_NAMESPACE)
        create_switch_secret(
            cp, OPERATOR_NAMESPACE, "campus-switch-tls", cp.workdir / "switch-tls", SWITCH_NAME
        )
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def admission_policy(plane):
    """The chart's ValidatingAdmissionPolicy and binding, as `helm install` applies them."""
    helm = Path(plane.toolchain.path("helm"))
    rendered = subprocess.run(
        [str(helm), "template", "tenancy", str(REPO / "charts" / "scidmz"), "--show-only",
         "templates/admission-policy.yaml", "--kube-version", "1.37.1"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    plane.kubectl("apply", "-f", "-", input_text=rendered)
    yield
    plane.kubectl("delete", "-f", "-", input_text=rendered, check=False)


@pytest.fixture(scope="session")
def operator(plane, tmp_path_factory) -> Iterator[Operator]:
    op = Operator(plane, tmp_path_factory.mktemp("operator") / "operator.log", priority=100)
    op.start()
    yield op
    op.stop()


@pytest.fixture
def namespace(plane) -> Iterator[str]:
    """A tenant's namespace, labelled as the example links' tenants.namespaces selects."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, "scidmz.io/tenant=true")
    yield name
    plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


class Kube:
    """Small kubectl-based helpers bound to one namespace."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace

    def apply(self, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.namespace}}
        return self.plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(obj), check=check)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        r = self.plane.kubectl("get", kind, name, "-n", self.namespace, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def names(self, kind: str, selector: str) -> list[str]:
        r = self.plane.kubectl(
            "get",
            kind,
            "-n",
            self.namespace,
            "-l",
            selector,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        )
        return sorted(r.stdout.split())

    def condition(self, policy: str, type_: str) -> dict[str, Any] | None:
        return find_condition(self.get("dtp", policy) or {}, type_)

    def delete(self, kind: str, name: str) -> None:
        self.plane.kubectl("delete", kind, name, "-n", self.namespace, "--wait=false")


@pytest.fixture
def kube(plane, namespace) -> Kube:
    return Kube(plane, namespace)


class Links:
    """BorderLinks (cluster-scoped) made by one test, with unique names, deleted after it;
    and the objects of their loops in the operator's namespace."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.made: list[str] = []
        self.prefix = f"l{uuid.uuid4().hex[:6]}"

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def apply(self, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        name = obj["metadata"]["name"]
        if name not in self.made:
            self.made.append(name)
        return self.plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(obj), check=check)

    def get(self, name: str) -> dict[str, Any] | None:
        r = self.plane.kubectl("get", "borderlink", name, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return find_condition(self.get(name) or {}, type_)

    def ready(self, name: str) -> bool:
        return (self.condition(name, "Ready") or {}).get("status") == "True"

    def child(self, kind: str, name: str) -> dict[str, Any] | None:
        r = self.plane.kubectl(
            "get", kind, name, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False
        )
        return json.loads(r.stdout) if r.returncode == 0 else None

    def children(self, link: str) -> dict[str, list[str]]:
        """The link's objects in the operator's namespace, by kind."""
        out = {}
        for kind in ("deployment", "service", "configmap", "serviceaccount", "secret",
                     "networkpolicy"):  # fmt: skip
            r = self.plane.kubectl(
                "get", kind, "-n", OPERATOR_NAMESPACE, "-l", f"scidmz.io/link={link}",
                "-o", "jsonpath={.items[*].metadata.name}",
            )  # fmt: skip
            out[kind] = sorted(r.stdout.split())
        return out

    def delete(self, name: str, wait: bool = False) -> None:
        self.plane.kubectl("delete", "borderlink", name, f"--wait={str(wait).lower()}",
                           "--timeout=60s", check=False)  # fmt: skip


@pytest.fixture
def links(plane) -> Iterator[Links]:
    made = Links(plane)
    yield made
    for name in made.made:
        made.delete(name)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/k8s" in str(item.fspath):
            item.add_marker(pytest.mark.k8s)
