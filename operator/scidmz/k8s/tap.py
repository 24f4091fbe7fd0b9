"""The software tap a link's ``spec.switch.tap`` asks for: pure builders and readers.

`scidmz target --source packets` on the node that receives the border router's mirror
sessions, on that node's network (its mirror interfaces are the node's), with
``CAP_NET_RAW`` and nothing else (packet sockets; every other capability dropped). It
serves P4Runtime over mutual TLS with a certificate from the operator's CA, on a host port
of the link's own pair, and answers only this link's collector (its workload identity).
The operator reads the tap's pods to say why a tap does not run: a missing interface or
capability is the capture program's last words, kept as the container's termination
message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from scidmz.api.link import BorderLinkSpec, SoftwareTapSpec
from scidmz.auth import identity
from scidmz.k8s.manifests import (
    IDENTITY_MOUNT,
    PROMETHEUS_PORT_NAME,
    LinkRef,
    LinkWorkloads,
    WorkloadSettings,
    _metadata,
    _metrics_port,
    _on_host_network_of,
    _probe,
    _pull_secrets,
    child_name,
    common_labels,
    host_port,
    identity_secret_name,
    root_with_only,
    selector_labels,
    service_host,
)
from scidmz.k8s.status import WorkloadState

TAP: Final = "tap"
CAPTURE_STATS: Final = "/tmp/capture.json"  # noqa: S108 - an emptyDir, not host /tmp


def tap_address(link: str, settings: WorkloadSettings, http_port: int) -> str:
    """Where the collector dials the tap: its Service, on the gRPC port of its pair."""
    return f"{service_host(link, TAP, settings)}:{http_port + 1}"


def remote_prefixes(spec: BorderLinkSpec) -> list[str]:
    """The border link's remote side, which tells a border mirror port's directions
    apart: the campus's remote prefix and every DTN host's receiver prefix (IPv4)."""
    prefixes = [spec.campus.remote_prefix, *(h.receiver_prefix for h in spec.dtn_hosts)]
    return sorted({p for p in prefixes if ":" not in p})


def tap_args(
    spec: BorderLinkSpec, tap: SoftwareTapSpec, http_port: int, collector: str
) -> list[str]:
    """``scidmz target`` as the tap runs it; ``collector``: the one identity it answers."""
    sides = tap.interfaces
    taps = [f"campus={sides.campus}", *(f"dtn={i}" for i in sides.dtn)]
    if sides.border is not None:
        taps.append(f"border={sides.border}")
    else:
        taps += [f"bottleneck={sides.bottleneck}", f"acks={sides.acks}"]
    ports = spec.switch.ports
    args = [
        "target", "--source", "packets", "--taps", ",".join(taps), "--mirror-ports",
        "--ports", f"campus={ports.campus},dtn={ports.dtn},bottleneck={ports.bottleneck}",
        "--device-id", str(spec.switch.device_id),
        "--listen", f"0.0.0.0:{http_port + 1}",
        "--http-port", str(http_port),
        "--identity-dir", IDENTITY_MOUNT,
        "--p4runtime-client", collector,
        "--capture-stats", CAPTURE_STATS,
    ]  # fmt: skip
    if sides.border is not None:
        args += ["--remote-prefix", ",".join(remote_prefixes(spec))]
    return args


def build_tap_deployment(
    ref: LinkRef,
    spec: BorderLinkSpec,
    settings: WorkloadSettings,
    work: LinkWorkloads,
) -> dict[str, Any]:
    """The tap's Deployment, pinned to ``spec.switch.tap.nodeName``, answering only the
    link's collector. Raises ValueError without a host port for it."""
    tap = spec.switch.tap
    http = host_port(work, TAP)
    if tap is None or http is None:
        raise ValueError("build_tap_deployment: a link with switch.tap and its host port")
    grpc_port = http + 1
    container = {
        "name": TAP,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": tap_args(spec, tap, http, collector_identity(ref)),
        "ports": [
            {"name": "p4runtime", "containerPort": grpc_port, "protocol": "TCP"},
            {"name": PROMETHEUS_PORT_NAME, "containerPort": http, "protocol": "TCP"},
        ],
        "resources": settings.resources_of(TAP),
        # ready once the capture runs (it serves only after every interface opened)
        "readinessProbe": _probe("/readyz", PROMETHEUS_PORT_NAME, 5, 2, loopback=True),
        "livenessProbe": _probe("/healthz", PROMETHEUS_PORT_NAME, 10, 3, loopback=True),
        # the capture program's refusal (no such interface, no CAP_NET_RAW) becomes the
        # termination message the operator reports
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": root_with_only("NET_RAW"),  # packet sockets on the node's ports
        "volumeMounts": [
            {"name": "identity", "mountPath": IDENTITY_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir
        ],
    }
    pod = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        **_pull_secrets(settings),
        "containers": [container],
        "volumes": [
            {"name": "identity", "secret": {"secretName": identity_secret_name(ref.name, TAP)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
        **_on_host_network_of(tap.node_name, tap.tolerations),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(ref, child_name(ref.name, TAP), TAP, settings),
        "spec": {
            "replicas": 0 if work.paused else 1,
            # one capture per mirror interface: never two at once
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref.name, TAP)},
            "template": {"metadata": {"labels": common_labels(ref.name, TAP)}, "spec": pod},
        },
    }


def build_tap_service(ref: LinkRef, settings: WorkloadSettings, http_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ref, child_name(ref.name, TAP), TAP, settings),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ref.name, TAP),
            "ports": [
                {
                    "name": "p4runtime",
                    "port": http_port + 1,
                    "targetPort": "p4runtime",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                _metrics_port(http_port),
            ],
        },
    }


def collector_identity(ref: LinkRef) -> str:
    """The one client a link's tap answers: this incarnation of the link's collector."""
    return identity.link_identity(ref.name, identity.COLLECTOR, uid=ref.uid)


_STUCK: Final = ("ErrImagePull", "ImagePullBackOff", "CreateContainerError")


def _last_words(status: Mapping[str, Any]) -> str | None:
    """The container's termination message, current or of its last run."""
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        terminated = state.get("terminated") or {}
        message = str(terminated.get("message") or "").strip()
        if message:
            return message.splitlines()[-1][:512]
        if terminated:
            return f"exited {terminated.get('exitCode')} ({terminated.get('reason', '')})"
    return None


def tap_pod_problem(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """Why the tap's pod does not run, as (reason, message), from its status: not
    scheduled (e.g. a taint it does not tolerate), refused by admission, or its capture
    program's refusal (a missing interface, no CAP_NET_RAW). None: nothing to say."""
    for pod in pods:
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return "TapUnschedulable", str(condition.get("message", ""))[:512]
        for container in status.get("containerStatuses") or []:
            if container.get("ready"):
                continue
            words = _last_words(container)
            if words is not None:
                return "TapFailed", f"the tap's capture stopped: {words}"
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _STUCK:
                return "TapFailed", f"{waiting['reason']}: {waiting.get('message', '')}"[:512]
    return None


def with_tap(collector: WorkloadState, tap: WorkloadState | None) -> WorkloadState:
    """The collector's readiness including its tap: no telemetry without it."""
    if tap is None or tap.ready:
        return collector
    return WorkloadState(False, tap.reason, f"tap: {tap.message}")
