"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, started as child processes with generated certificates.

No kubelet runs here: kwok plays the kubelet for nodes annotated ``kwok.x-k8s.io/node=fake``
so Deployment pods reach Running and Ready. Used by the test suite, the demo, the
benchmarks and ``scidmz testenv up``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scidmz.testenv.certs import PkiPaths, generate_pki

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# 198.18.0.0/15, the benchmarking range, never the private ranges (testenv.node has the map)
SERVICE_RANGE = "198.19.0.0/17"
FAKE_POD_RANGE = "198.18.128.0/17"
NODE_HOST_IP = "198.19.255.1"
REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "testenv" / "build.sh"
_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or did not come up; the message says which part."""


@dataclass(frozen=True)
class Toolchain:
    """Where the binaries and kwok stages live (a version-keyed cache directory)."""

    bin_dir: Path
    kwok_stages: Path
    monitoring_crds: Path
    """ServiceMonitor, PodMonitor and PrometheusRule CRDs of the Prometheus Operator."""
    gitops_crds: Path
    """Argo CD's Application and AppProject, Flux's GitRepository, OCIRepository and
    Kustomization CRDs (the GitOps examples are validated against them)."""
    oldest_apiserver: Path
    """kube-apiserver of the oldest Kubernetes release the chart allows."""

    def path(self, name: str) -> str:
        return str(self.bin_dir / name)

    @property
    def node_dir(self) -> Path:
        """The real node's kubelet, kube-proxy, CoreDNS and pause (``testenv.node``)."""
        return self.bin_dir.parent / "node"


def ensure_toolchain(log: Callable[[str], None] = print) -> Toolchain:
    """Return the cached toolchain, building it with ``hack/testenv/build.sh`` if missing.

    ``SCIDMZ_TESTENV_BIN`` points at a directory of prebuilt binaries instead.
    """
    override = os.environ.get("SCIDMZ_TESTENV_BIN")
    if override:
        bin_dir = Path(override)
    else:
        if not BUILD_SCRIPT.exists():
            raise ControlPlaneError(
                f"{BUILD_SCRIPT} not found; set SCIDMZ_TESTENV_BIN to prebuilt binaries"
            )
        log("testenv: checking the control-plane build cache (first build takes ~10 min)")
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
        bin_dir = Path(result.stdout.strip().splitlines()[-1])
    missing = [b for b in _BINARIES if not (bin_dir / b).exists()]
    if missing:
        raise ControlPlaneError(f"missing binaries in {bin_dir}: {', '.join(missing)}")
    return Toolchain(
        bin_dir=bin_dir,
        kwok_stages=bin_dir.parent / "kwok-stages.yaml",
        monitoring_crds=bin_dir.parent / "monitoring-crds",
        gitops_crds=bin_dir.parent / "gitops-crds",
        oldest_apiserver=bin_dir.parent / "oldest" / "kube-apiserver",
    )


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now, and never one this process handed out before: the kernel
    may give a just-released port again, and two such ports for one process (its health
    and metrics ports, say) collide when it binds them."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


@dataclass
class ControlPlane:
    """A running control plane. Stop it with :meth:`stop` (or use :func:`control_plane`)."""

    workdir: Path
    kubeconfig: Path
    server: str
    pki: PkiPaths
    toolchain: Toolchain
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    owns_workdir: bool = False

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the matching kubectl against this control plane.

        With ``check``, a failure raises :class:`ControlPlaneError` carrying kubectl's stderr.
        """
        result = subprocess.run(
            [self.toolchain.path("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def stop(self) -> None:
        # Reverse start order: the apiserver must go before etcd or it logs errors for a while.
        for name in reversed(list(self.processes)):
            _terminate(self.processes[name])
        self.processes.clear()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / "logs" / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def wait_http_ok(url: str, timeout_s: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll ``url`` (plain http on loopback) until it answers 200; fail early if ``proc``
    exits. Raises :class:`ControlPlaneError`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ControlPlaneError(f"process exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise ControlPlaneError(f"{url} did not answer 200 within {timeout_s:.0f}s")


def _write_kubeconfig(path: Path, server: str, pki: PkiPaths) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "scidmz-testenv",
                "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki.admin_cert),
                    "client-key": str(pki.admin_key),
                },
            }
        ],
        "contexts": [
            {"name": "scidmz-testenv", "context": {"cluster": "scidmz-testenv", "user": "admin"}}
        ],
        "current-context": "scidmz-testenv",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _wait_ready(server: str, pki: PkiPaths, proc: subprocess.Popen[bytes], deadline: float) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    last_error = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ControlPlaneError(f"kube-apiserver exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(  # noqa: S310 - always https://127.0.0.1
                f"{server}/readyz", context=context, timeout=2
            ) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last_error = str(error)
        time.sleep(0.1)
    raise ControlPlaneError(f"kube-apiserver not ready in time: {last_error}")


def _fake_node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
    }


def start_control_plane(
    workdir: Path | None = None,
    nodes: tuple[str, ...] = ("kwok-node-0",),
    log: Callable[[str], None] = print,
    toolchain: Toolchain | None = None,
    timeout_s: float = 60.0,
    crds: tuple[Path, ...] = (),
    node_reachable: bool = False,
    apiserver_binary: Path | None = None,
    controllers: bool = True,
) -> ControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

    ``apiserver_binary``: another kube-apiserver binary than the toolchain's (the oldest release
    the chart allows); ``controllers`` False starts only etcd and the API server (what
    validation and admission need), without the controllers, the fake nodes and kwok.

    ``node_reachable``: the API server also answers a real node's network
    (``testenv.node``: it listens on every address and advertises the host's end of the
    node's link, which the ``kubernetes`` Service then points at).

    ``crds`` (files or directories) are installed and established before the controllers
    start, so the garbage collector knows their kinds from its first discovery (it
    rediscovers only every 30 s). Returns once the apiserver is ready and the fake nodes
    exist. Raises
    :class:`ControlPlaneError` (with the failing component's log tail) otherwise.
    """
    tools = toolchain or ensure_toolchain(log)
    owns = workdir is None
    root = Path(tempfile.mkdtemp(prefix="scidmz-testenv-")) if workdir is None else workdir
    root.mkdir(parents=True, exist_ok=True)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    pki = generate_pki(root / "pki")
    etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = root / "kubeconfig"
    _write_kubeconfig(kubeconfig, server, pki)
    plane = ControlPlane(
        workdir=root,
        kubeconfig=kubeconfig,
        server=server,
        pki=pki,
        toolchain=tools,
        owns_workdir=owns,
    )
    # etcd reads any ETCD_* variable as a setting; a stray one must not reconfigure it.
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}

    def spawn(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = (logs / f"{name}.log").open("wb")
        own = apiserver_binary if name == "kube-apiserver" else None
        binary = str(own) if own is not None else tools.path(name)
        proc = subprocess.Popen(
            [binary, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env,
            start_new_session=True,
        )
        plane.processes[name] = proc
        return proc

    started = time.monotonic()
    try:
        spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={root / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        apiserver = spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--bind-address={'0.0.0.0' if node_reachable else '127.0.0.1'}",  # noqa: S104
                f"--secure-port={api_port}",
                f"--advertise-address={NODE_HOST_IP if node_reachable else '127.0.0.1'}",
                f"--cert-dir={root / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--authorization-mode=RBAC",
                f"--endpoint-reconciler-type={'lease' if node_reachable else 'none'}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                # kubectl logs/exec on a real node: the admin identity, by its InternalIP,
                # the kubelet's serving certificate checked against the cluster's CA
                f"--kubelet-client-certificate={pki.admin_cert}",
                f"--kubelet-client-key={pki.admin_key}",
                "--kubelet-preferred-address-types=InternalIP",
                *([f"--kubelet-certificate-authority={pki.ca_cert}"] if node_reachable else []),
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                "--profiling=false",
            ],
        )
        _wait_ready(server, pki, apiserver, started + timeout_s)
        log(f"testenv: kube-apiserver ready at {server} after {time.monotonic() - started:.1f}s")
        if crds:
            plane.kubectl("apply", *[a for c in crds for a in ("-f", str(c))])
            plane.kubectl("wait", "--for", "condition=established", "--timeout=30s", "crd", "--all")
        if not controllers:
            log(f"testenv: API server only, up in {time.monotonic() - started:.1f}s")
            return plane
        kube_flags = [
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
        ]
        spawn(
            "kube-controller-manager",
            [
                *kube_flags,
                "--secure-port=0",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-account-private-key-file={pki.sa_key}",
                "--controllers=*,-nodeipam",
                # kwok posts node status but renews no leases: without this, the node
                # lifecycle controller marks every pod NotReady after ~50 s
                "--node-monitor-grace-period=8760h",
                "--concurrent-deployment-syncs=20",
                "--concurrent-replicaset-syncs=20",
                "--concurrent-gc-syncs=40",
                "--concurrent-service-endpoint-syncs=20",
            ],
        )
        spawn("kube-scheduler", [*kube_flags, "--secure-port=0"])
        for node in nodes:
            plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(_fake_node(node)))
        spawn(
            "kwok",
            [
                f"--kubeconfig={kubeconfig}",
                f"--config={tools.kwok_stages}",
                f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
                f"--cidr={FAKE_POD_RANGE}",
                "--node-ip=127.0.0.1",
            ],
        )
        for name, proc in plane.processes.items():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {proc.returncode}:\n{plane.log_tail(name)}"
                )
    except BaseException:
        plane.stop()
        raise
    log(f"testenv: control plane up in {time.monotonic() - started:.1f}s (KUBECONFIG={kubeconfig})")
    return plane


@contextlib.contextmanager
def control_plane(**kwargs: object) -> Iterator[ControlPlane]:
    """``with control_plane() as plane:`` — started on entry, stopped on exit."""
    plane = start_control_plane(**kwargs)  # type: ignore[arg-type]
    try:
        yield plane
    finally:
        plane.stop()
