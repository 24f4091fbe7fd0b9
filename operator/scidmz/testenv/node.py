"""A real node for the local control plane: containerd, runc and a kubelet running pods.

Everything runs inside what this module creates and removes again, so the host keeps its
settings: a network namespace (the node's network: its CNI bridge, its iptables rules, its
``ip_forward``) joined to the host by a veth pair, and one private mount namespace shared by
containerd and the kubelet (their mounts must see each other's), in which files holding the
values the kubelet checks are bind-mounted over the host-wide sysctls it would otherwise
write (``protectKernelDefaults``). Addresses come from 198.18.0.0/15, the benchmarking range:

| what | range |
|---|---|
| pods on the node's bridge | 198.18.0.0/24 (gateway 198.18.0.1) |
| kwok's fake pods | 198.18.128.0/17 |
| Services | 198.19.0.0/17 (the API server: 198.19.0.1) |
| host ↔ node link | 198.19.255.0/30 (host .1, node .2) |

Nothing can be pulled here: the sandbox ("pause") image is built from ``hack/testenv/pause``
and imported, as are any images a test asks for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scidmz.testenv import image
from scidmz.testenv.certs import issue_kubelet_serving
from scidmz.testenv.cluster import NODE_HOST_IP, ControlPlane

NODE_NETNS = "scidmz-node"
HOST_VETH, NODE_VETH = "scidmz-node0", "eth0"
HOST_IP, NODE_IP = NODE_HOST_IP, "198.19.255.2"
LINK_PREFIX = 30
POD_SUBNET = "198.18.0.0/24"
POD_GATEWAY = "198.18.0.1"
PAUSE_IMAGE = "scidmz.local/pause:3.10"
CLUSTER_DOMAIN = "cluster.local"
# what the kubelet checks with protectKernelDefaults (its defaults), bind-mounted over the
# host's values inside the node's mount namespace only
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
CNI_BIN_DIR = Path("/usr/lib/cni")
# stopped last, in this order (the kubelet would restart what containerd stops), after
# anything else started on the node
_BASE = ("coredns", "kube-proxy", "kubelet", "containerd")
NEEDED = ("containerd", "ctr", "runc", "ip", "unshare", "nsenter", "iptables")


class NodeError(RuntimeError):
    """The node could not start; the message says which part and shows its log."""


CGROUP_CONTROLLERS = ("cpu", "memory", "pids")
"""What the kubelet's QoS cgroups and its eviction need."""


def missing_features(filesystems: str, cgroup_root: Path, euid: int) -> list[str]:
    """What the machine lacks for a node, from ``/proc/filesystems``' text, the cgroup
    mount point and the effective UID: root, overlayfs (the snapshotter), the cgroup
    controllers (v1 hierarchies or v2's ``cgroup.controllers``)."""
    gone = []
    if euid != 0:
        gone.append("root (containerd and the kubelet run as root)")
    if "overlay" not in filesystems.split():
        gone.append("overlayfs (modprobe overlay)")
    unified = cgroup_root / "cgroup.controllers"
    if unified.exists():
        have = set(unified.read_text().split())
    else:
        have = {c for c in CGROUP_CONTROLLERS if (cgroup_root / c).is_dir()}
    lacking = [c for c in CGROUP_CONTROLLERS if c not in have]
    if lacking:
        gone.append(f"cgroup controllers {', '.join(lacking)} under {cgroup_root}")
    return gone


def missing_tools() -> list[str]:
    """What the real node needs and this machine lacks: the tools ``hack/system-deps.sh``
    installs, and the kernel features it cannot."""
    gone = [tool for tool in NEEDED if shutil.which(tool) is None]
    if not (CNI_BIN_DIR / "bridge").exists():
        gone.append(f"{CNI_BIN_DIR}/bridge (containernetworking-plugins)")
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    return gone + missing_features(filesystems, Path("/sys/fs/cgroup"), os.geteuid())


def _run(argv: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"{what}: {' '.join(argv)}: {result.stderr.strip()}")
    return result


def cni_config() -> dict[str, object]:
    """The pod network: a bridge with host-local addresses, masqueraded when leaving the
    node (so the host answers them without a route back to the pods), and port maps."""
    return {
        "cniVersion": "1.0.0",
        "name": "scidmz",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def containerd_config(root: Path) -> str:
    """containerd 1.6 for the kubelet: its state under ``root``, cgroupfs (PID 1 is not
    systemd here), the local pause image, and ``restrict_oom_score_adj`` (the sandbox
    lacks CAP_SYS_RESOURCE; without it every pod fails in runc)."""
    return f"""version = 2
root = "{root / "containerd-root"}"
state = "{root / "containerd-state"}"
[grpc]
  address = "{root / "containerd.sock"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{root / "cni"}"
"""


def kubelet_config(
    root: Path, ca_cert: Path, cluster_dns: str, serving: tuple[Path, Path] | None = None
) -> dict[str, object]:
    """The kubelet's configuration: cgroupfs on this cgroup v1 host, nothing written to the
    host's kernel settings or iptables, client certificates from the control plane's CA,
    and its serving pair (``serving``: certificate, key; None: a self-signed one)."""
    tls = {"tlsCertFile": str(serving[0]), "tlsPrivateKeyFile": str(serving[1])} if serving else {}
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{root / 'containerd.sock'}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "protectKernelDefaults": True,
        "makeIPTablesUtilChains": False,
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [cluster_dns],
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "staticPodPath": "",
        "failSwapOn": False,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "resolvConf": str(root / "resolv.conf"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "localStorageCapacityIsolation": False,
        **tls,
    }


@dataclass
class Node:
    """A running real node; :meth:`stop` removes everything it made."""

    name: str
    root: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    holder: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    def in_node(self, *argv: str) -> list[str]:
        """``argv`` run in the node's network and mount namespaces."""
        if self.holder is None:
            raise NodeError("the node is not running")
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--", *argv]

    def import_image(self, archive: Path, timeout_s: float = 300) -> None:
        """Import a docker-archive (``buildah push … docker-archive:``) into the node."""
        argv = self.in_node(
            "ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import",
            str(archive),
        )  # fmt: skip
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if result.returncode != 0:
            raise NodeError(f"ctr images import {archive}: {result.stderr.strip()}")

    def spawn(self, component: str, argv: list[str]) -> None:
        """Start ``argv`` on the node (its network and mounts), logging to <component>.log."""
        out = (self.root / f"{component}.log").open("ab")
        self.processes[component] = subprocess.Popen(
            self.in_node(*argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        # what else runs on the node, then _BASE in its order; then the shims containerd
        # leaves behind and every container left, by cgroup
        for name in [*(n for n in self.processes if n not in _BASE), *_BASE]:
            proc = self.processes.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        _kill_shims(self.socket)
        _kill_pod_cgroups()
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()
        self.holder = None
        _run(["ip", "netns", "delete", NODE_NETNS], "ip netns delete", check=False)
        _run(["ip", "link", "delete", HOST_VETH], "ip link delete", check=False)


def _kill_shims(socket: Path) -> None:
    """containerd's shims outlive it by design; this node's are the ones naming its socket."""
    needle = str(socket).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and needle in cmdline:
            subprocess.run(["kill", "-9", proc.name], capture_output=True, check=False)


def _kill_pod_cgroups(timeout_s: float = 10.0) -> None:
    """SIGKILL what is left in the kubelet's cgroups and remove them (cgroup v1). A cgroup
    whose last process was just killed stays busy until the process is reaped: retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [h / "kubepods" for h in Path("/sys/fs/cgroup").iterdir()
                if (h / "kubepods").is_dir()]  # fmt: skip
        if not left or time.monotonic() > deadline:
            return
        for kubepods in left:
            for procs in kubepods.rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
            # deepest first: a cgroup directory goes only once its children have
            for directory in sorted(
                (p for p in kubepods.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                kubepods.rmdir()
        time.sleep(0.2)


def _network() -> None:
    """The node's network namespace, joined to the host by a veth pair."""
    _run(["ip", "netns", "delete", NODE_NETNS], "cleanup", check=False)
    _run(["ip", "link", "delete", HOST_VETH], "cleanup", check=False)
    _run(["ip", "netns", "add", NODE_NETNS], "ip netns add")
    _run(["ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", NODE_VETH,
          "netns", NODE_NETNS], "ip link add")  # fmt: skip
    _run(["ip", "addr", "add", f"{HOST_IP}/{LINK_PREFIX}", "dev", HOST_VETH], "ip addr")
    _run(["ip", "link", "set", HOST_VETH, "up"], "ip link set")
    inside = ["ip", "netns", "exec", NODE_NETNS]
    _run([*inside, "ip", "addr", "add", f"{NODE_IP}/{LINK_PREFIX}", "dev", NODE_VETH], "ip addr")
    _run([*inside, "ip", "link", "set", NODE_VETH, "up"], "ip link set")
    _run([*inside, "ip", "link", "set", "lo", "up"], "ip link set lo")
    _run([*inside, "ip", "route", "add", "default", "via", HOST_IP], "ip route")
    # the host reaches pods as a cluster's nodes do (the demo reads the controller's /state);
    # the route goes with the veth
    _run(["ip", "route", "add", POD_SUBNET, "via", NODE_IP, "dev", HOST_VETH], "ip route")


def _holder(root: Path) -> subprocess.Popen[bytes]:
    """A process holding the node's mount namespace (private to it, shared within it) with
    the kernel defaults the kubelet checks bind-mounted over the host's."""
    binds = []
    for key, value in KERNEL_DEFAULTS.items():
        source = root / "sysctl" / key.replace("/", "_")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(value + "\n")
        binds.append(f"mount --bind {source} /proc/sys/{key}")
    # processes on the node resolve names through the cluster's DNS, as a node's would
    resolver = root / "node-resolv.conf"
    resolver.write_text(f"nameserver {NODE_IP}\nsearch default.svc.{CLUSTER_DOMAIN} "
                        f"svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n")  # fmt: skip
    binds.append(f"mount --bind {resolver} /etc/resolv.conf")
    script = " && ".join(["mount --make-rshared /", *binds, "exec sleep infinity"])
    holder = subprocess.Popen(
        # nsenter, not `ip netns exec`: that remounts /sys, which hides the cgroup mounts
        ["nsenter", f"--net=/var/run/netns/{NODE_NETNS}", "unshare", "--mount",
         "--propagation", "private", "sh", "-c", script],
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{holder.pid}/cmdline")
        if holder.poll() is not None:
            raise NodeError(f"the node's namespace holder exited ({holder.returncode})")
        if cmdline.exists() and cmdline.read_bytes().startswith(b"sleep"):
            return holder
        time.sleep(0.02)
    holder.kill()
    raise NodeError("the node's namespace holder did not start")


def node_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server,
                                                    "certificate-authority": str(ca)}}],
        "users": [{"name": "node", "user": {"client-certificate": str(cert),
                                             "client-key": str(key)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "node"}}],
        "current-context": "local",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def start_node(
    name: str,
    root: Path,
    server: str,
    ca_cert: Path,
    client_cert: Path,
    client_key: Path,
    kubelet: str,
    pause_archive: Path,
    cluster_dns: str = NODE_IP,
    log: Callable[[str], None] = print,
    timeout_s: float = 60.0,
    serving: tuple[Path, Path] | None = None,
) -> Node:
    """Start a real node registering as ``name`` with the API server at ``server`` (an
    address the node's network reaches). Returns once containerd answers and the pause
    image is imported; the caller waits for the Node object to be Ready."""
    gone = missing_tools()
    if gone:
        raise NodeError(f"the real node needs {', '.join(gone)} (hack/system-deps.sh)")
    root.mkdir(parents=True, exist_ok=True)
    (root / "cni").mkdir(exist_ok=True)
    (root / "cni" / "10-scidmz.conflist").write_text(json.dumps(cni_config(), indent=2))
    (root / "containerd.toml").write_text(containerd_config(root))
    # the upstream of pods with dnsPolicy Default: the host's resolver
    (root / "resolv.conf").write_text(Path("/etc/resolv.conf").read_text())
    (root / "kubelet.yaml").write_text(
        yaml.safe_dump(kubelet_config(root, ca_cert, cluster_dns, serving), sort_keys=False)
    )
    node_kubeconfig(root / "kubeconfig", server, ca_cert, client_cert, client_key)
    node = Node(name=name, root=root)
    try:
        _network()
        node.holder = _holder(root)
        node.spawn("containerd", ["containerd", "--config", str(root / "containerd.toml")])
        deadline = time.monotonic() + timeout_s
        while not node.socket.exists():
            if node.processes["containerd"].poll() is not None or time.monotonic() > deadline:
                raise NodeError(f"containerd did not start:\n{node.log_tail('containerd')}")
            time.sleep(0.05)
        node.import_image(pause_archive)
        log(f"testenv: node {name}: containerd up, {PAUSE_IMAGE} imported")
        node.spawn(
            "kubelet",
            [
                kubelet,
                f"--config={root / 'kubelet.yaml'}",
                f"--kubeconfig={root / 'kubeconfig'}",
                f"--hostname-override={name}",
                f"--node-ip={NODE_IP}",
                f"--root-dir={root / 'kubelet'}",
                f"--cert-dir={root / 'kubelet-pki'}",
                "--v=1",
            ],
        )
    except BaseException:
        node.stop()
        raise
    return node


def corefile(kubeconfig: Path) -> str:
    """Cluster DNS on the node's address: Services and pods of ``cluster.local`` from the
    API server, nothing forwarded (nothing outside can be reached here)."""
    return f""".:53 {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""


def kube_proxy_config(name: str, kubeconfig: Path) -> dict[str, object]:
    """kube-proxy in iptables mode inside the node's network namespace. It masquerades all
    Service traffic: pods on one bridge answer each other over the bridge, which no
    iptables sees without br_netfilter (a host-wide module this run does not load). It
    leaves the conntrack sysctls alone (the table size is host-wide)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": name,
        "bindAddress": NODE_IP,
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "iptables": {"masqueradeAll": True},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def start_services(node: Node, kube_proxy: str, coredns: str) -> None:
    """Service routing (kube-proxy) and cluster DNS (CoreDNS) on the node."""
    kubeconfig = node.root / "kubeconfig"
    (node.root / "kube-proxy.yaml").write_text(
        yaml.safe_dump(kube_proxy_config(node.name, kubeconfig), sort_keys=False)
    )
    (node.root / "Corefile").write_text(corefile(kubeconfig))
    node.spawn("kube-proxy", [kube_proxy, f"--config={node.root / 'kube-proxy.yaml'}"])
    node.spawn("coredns", [coredns, "-conf", str(node.root / "Corefile")])


def pod_ip_in_range(ip: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(POD_SUBNET)


def pause_image_archive(pause_binary: Path) -> Path:
    """The sandbox image (``pause_binary`` on scratch, user 65535) as a docker-archive
    beside the binary, built with buildah once and reused."""
    archive = pause_binary.with_name("pause-image.tar")
    if archive.exists():
        return archive
    image.binary_image(PAUSE_IMAGE, pause_binary, "/pause", "65535:65535")
    partial = image.archive(PAUSE_IMAGE, archive.with_suffix(".partial"))
    partial.rename(archive)  # only a whole archive is ever found
    return archive


def start_real_node(
    plane: ControlPlane, name: str = "node-0", log: Callable[[str], None] = print
) -> Node:
    """A real node joined to ``plane`` (started with ``node_reachable=True``), Ready on
    return. Raises :class:`NodeError` with the kubelet's log tail otherwise."""
    node_dir = plane.toolchain.node_dir
    port = plane.server.rsplit(":", 1)[1]
    started = time.monotonic()
    root = plane.workdir / name
    serving = issue_kubelet_serving(plane.pki, root / "pki", name, NODE_IP)
    node = start_node(
        name, root, f"https://{HOST_IP}:{port}", plane.pki.ca_cert,
        plane.pki.admin_cert, plane.pki.admin_key, str(node_dir / "kubelet"),
        pause_image_archive(node_dir / "pause"), log=log, serving=serving,
    )  # fmt: skip
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    while time.monotonic() - started < 60:
        ready = plane.kubectl("get", "node", name, "-o", jsonpath, check=False).stdout
        if ready == "True":
            log(f"testenv: node {name} Ready after {time.monotonic() - started:.1f}s")
            start_services(node, str(node_dir / "kube-proxy"), str(node_dir / "coredns"))
            return node
        if node.processes["kubelet"].poll() is not None:
            break
        time.sleep(0.2)
    tail = node.log_tail("kubelet")
    node.stop()
    raise NodeError(f"node {name} did not become Ready:\n{tail}")


def leftovers(marker: str) -> list[str]:
    """What a stopped node would have left: its network namespace, its veth, kubepods
    cgroups, and processes whose command line holds ``marker`` (its root directory). Empty
    when it was torn down completely."""
    left = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if NODE_NETNS in netns.stdout:
        left.append("network namespace")
    link = subprocess.run(["ip", "link", "show", HOST_VETH], capture_output=True, check=False)
    if link.returncode == 0:
        left.append("veth")
    left += [str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")]
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if marker.encode() in cmdline:
            left.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return left
