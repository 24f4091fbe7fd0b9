"""Pure builders of the objects the operator owns for one BorderLink's loop.

Everything lives in the operator's own namespace, never in a tenant's: the runtime config,
each workload's certificate Secret, the collector, the controller and the DTN shaper agent,
their Services and NetworkPolicies. Every function maps (link identity, resolved config,
settings) to a plain dict that is server-side applied as is; nothing here talks to the API,
so each builder is unit-tested without a cluster, and an unchanged link always yields
identical objects — which is what keeps resourceVersions still across operator restarts.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from scidmz import __version__
from scidmz.api.link import KIND, HostPortAllocation, ShaperRestore, Toleration
from scidmz.api.runtime import (
    CONFIG_KEY,
    DtnActuatorConfig,
    RuntimeConfig,
    dump_runtime_config,
    restart_relevant,
    shaper_agent_args,
)
from scidmz.api.types import GROUP, VERSION
from scidmz.auth import identity

MANAGED_BY: Final = "scidmz-operator"
CONFIG_MOUNT: Final = "/etc/scidmz"
PIPELINE_MOUNT: Final = "/etc/scidmz-pipeline"
TLS_MOUNT: Final = "/etc/scidmz-tls"
"""The switch's TLS Secret (the administrators')."""
IDENTITY_MOUNT: Final = "/etc/scidmz-identity"
"""The workload's own certificate (the operator's CA)."""
MODEL_MOUNT: Final = "/etc/scidmz-model"
"""A custom inverse model's ConfigMap (the administrators'; ``control.settings.MODEL_DIR``)."""
CONFIG_HASH_ANNOTATION: Final = f"{GROUP}/config-hash"
"""On the pod template: the hash of what the processes are built around
(``restart_hash``); a change rolls the pods. Certificates are not in it: the processes
follow their mounted identity as the operator rotates it (``scidmz.auth.tls_source``)."""
LIVE_CONFIG_ANNOTATION: Final = f"{GROUP}/live-config-hash"
"""On a running controller (and DTN shaper) pod: the hash of the whole config
(``config_hash``) the operator last nudged it for. Writing it makes the kubelet sync the
pod, which refreshes the mounted ConfigMap at once instead of at its next periodic sync (up
to a minute)."""
COLLECTOR_LIVE_ANNOTATION: Final = f"{GROUP}/collector-live-hash"
"""On the ConfigMap: the hash of what the collector follows live (its DTN classes,
``collector_live_hash``). When it changes the operator nudges the collector pod too, so a
policy admitted on a new DTN host has its class programmed within seconds, not at the
kubelet's next sync."""
LINK_LABEL: Final = f"{GROUP}/link"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COLLECTOR: Final = "collector"
CONTROLLER: Final = "controller"
DTN_SHAPER: Final = "dtn-shaper"
PROMETHEUS_PORT_NAME: Final = "https-metrics"
_DNS_LABEL_MAX: Final = 63


@dataclass(frozen=True)
class WorkloadSettings:
    """Operator-wide knobs for the workloads it creates (from OperatorSettings)."""

    image: str
    namespace: str = "scidmz-system"
    """The operator's namespace: every object of every link goes here."""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets the pods pull the image with (a private registry)."""
    collector_grpc_port: int = 50051
    collector_http_port: int = 9460
    controller_http_port: int = 9461
    run_as_user: int = 10001
    """The image's own user (``Dockerfile``); a cluster that assigns UIDs sets another."""
    run_as_group: int = 10001
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Requests and limits per component (core/v1 ResourceRequirements)."""
    fd_limit: int | None = 65536
    """The soft limit on open files each workload raises itself to (``SCIDMZ_FD_LIMIT``;
    a pod spec has no ulimit field); None leaves the runtime's."""
    operator_pod_labels: Mapping[str, str] = field(
        default_factory=lambda: {
            "app.kubernetes.io/name": "scidmz",
            "app.kubernetes.io/component": "operator",
        }
    )
    """Labels of the operator's own pods: they read /state (the NetworkPolicies admit them)."""
    metrics_namespace_labels: Mapping[str, str] | None = None
    """Namespaces whose pods may scrape the workloads (Prometheus); None: none but the
    operator's own. The certificate check stands behind it either way."""
    metrics_pod_labels: Mapping[str, str] | None = None
    """Prometheus pods' labels within those namespaces; None: any pod there."""

    def resources_of(self, component: str) -> dict[str, Any]:
        return {k: dict(v) for k, v in (self.resources.get(component) or {}).items()}


@dataclass(frozen=True)
class LinkRef:
    """Identity of the owning BorderLink (cluster-scoped), enough for owner references."""

    name: str
    uid: str


def child_name(link: str, suffix: str) -> str:
    """``<link>-<suffix>``, shortened with a stable hash when over 63 characters.

    Services must be DNS-1035 labels (63 characters); link names may be longer.
    """
    full = f"{link}-{suffix}"
    if len(full) <= _DNS_LABEL_MAX:
        return full
    digest = hashlib.sha256(link.encode()).hexdigest()[:8]
    keep = _DNS_LABEL_MAX - len(suffix) - len(digest) - 2
    return f"{link[:keep].rstrip('-.')}-{digest}-{suffix}"


def instance_label(link: str) -> str:
    """A label-safe (<= 63 characters) form of the link name."""
    if len(link) <= _DNS_LABEL_MAX:
        return link
    digest = hashlib.sha256(link.encode()).hexdigest()[:8]
    return f"{link[: _DNS_LABEL_MAX - 9].rstrip('-.')}-{digest}"


def service_host(link: str, component: str, settings: WorkloadSettings) -> str:
    """The in-cluster DNS name of one of the link's Services."""
    return f"{child_name(link, component)}.{settings.namespace}.svc"


def collector_address(link: str, settings: WorkloadSettings) -> str:
    """In-cluster address of the collector's sample stream."""
    return f"{service_host(link, COLLECTOR, settings)}:{settings.collector_grpc_port}"


def dtn_shaper_address(link: str, settings: WorkloadSettings, grpc_port: int, host: str) -> str:
    """In-cluster address of the `scidmz shaper` that caps DTN host ``host`` (tc)."""
    return f"{service_host(link, dtn_shaper_workload(host), settings)}:{grpc_port}"


def server_names(link: str, component: str, settings: WorkloadSettings) -> list[str]:
    """The DNS names a workload's certificate is issued for: its Service, short and long,
    and the one name Prometheus checks on every workload."""
    service = child_name(link, component)
    return [
        service,
        f"{service}.{settings.namespace}.svc",
        f"{service}.{settings.namespace}.svc.cluster.local",
        identity.WORKLOAD_SERVER_NAME,
    ]


def selector_labels(link: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "scidmz",
        "app.kubernetes.io/instance": instance_label(link),
        COMPONENT_LABEL: component,
    }


def common_labels(link: str, component: str) -> dict[str, str]:
    return {
        **selector_labels(link, component),
        "app.kubernetes.io/part-of": "scidmz",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": __version__,
        LINK_LABEL: instance_label(link),
    }


def owner_reference(ref: LinkRef) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(
    ref: LinkRef, name: str, component: str, settings: WorkloadSettings
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": common_labels(ref.name, component),
        "ownerReferences": [owner_reference(ref)],
    }


def config_hash(config: RuntimeConfig) -> str:
    """The hash of the ConfigMap's config file."""
    return hashlib.sha256(dump_runtime_config(config).encode()).hexdigest()[:16]


def collector_live_hash(config: RuntimeConfig) -> str:
    """The hash of the parts of the config the collector follows live (its DTN classes)."""
    classes = [c.model_dump(mode="json") for c in config.dtn_classes]
    return hashlib.sha256(json.dumps(classes, sort_keys=True).encode()).hexdigest()[:16]


def restart_hash(config: RuntimeConfig, component: str, dtn_host: str | None = None) -> str:
    """The hash of what ``component``'s process is built around (``restart_relevant``:
    not what a running controller takes live, the targets, the DTN's congestion control,
    capacity, gains, limits, fail-safe settings, desired RTTs; for the collector and a
    DTN shaper only what they read): a new target rate reaches the running controller
    through its mounted ConfigMap and keeps the filter's state, its history and learned
    base RTTs; anything else rolls the pods of the components that read it."""
    text = yaml.safe_dump(restart_relevant(config, component, dtn_host), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_secret_name(link: str, component: str) -> str:
    return child_name(link, f"{component}-tls")


def build_identity_secret(
    ref: LinkRef,
    component: str,
    settings: WorkloadSettings,
    ca_pem: bytes,
    cert_pem: bytes,
    key_pem: bytes,
) -> dict[str, Any]:
    """A workload's certificate, signed by the operator's CA (``kubernetes.io/tls`` plus
    ``ca.crt``: the one directory ``scidmz.auth.mtls.load_mutual_tls`` reads)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": _metadata(ref, identity_secret_name(ref.name, component), component, settings),
        "data": {"ca.crt": b64(ca_pem), "tls.crt": b64(cert_pem), "tls.key": b64(key_pem)},
    }


def build_config_map(
    ref: LinkRef, config: RuntimeConfig, settings: WorkloadSettings
) -> dict[str, Any]:
    metadata = _metadata(ref, child_name(ref.name, "config"), "config", settings)
    metadata["annotations"] = {
        LIVE_CONFIG_ANNOTATION: config_hash(config),
        COLLECTOR_LIVE_ANNOTATION: collector_live_hash(config),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {CONFIG_KEY: dump_runtime_config(config)},
    }


def _pull_secrets(settings: WorkloadSettings) -> dict[str, Any]:
    """A pod spec's imagePullSecrets, when the image comes from a private registry."""
    if not settings.image_pull_secrets:
        return {}
    return {"imagePullSecrets": [{"name": name} for name in settings.image_pull_secrets]}


def build_service_account(ref: LinkRef, settings: WorkloadSettings) -> dict[str, Any]:
    # The workloads never call the Kubernetes API: no token is mounted and no RBAC is bound.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(ref, child_name(ref.name, "scidmz"), "workload", settings),
        "automountServiceAccountToken": False,
    }


def _probe(
    path: str, port: str, period_s: int, failures: int, loopback: bool = False
) -> dict[str, Any]:
    """HTTPS on the pod's network (the kubelet does not check the certificate, and
    /healthz and /readyz need none); on the node's network, plain HTTP to the workload's
    loopback listener on the same port (its public one requires a client certificate)."""
    get: dict[str, Any] = {"path": path, "port": port, "scheme": "HTTPS"}
    if loopback:
        get = {"host": "127.0.0.1", "path": path, "port": port, "scheme": "HTTP"}
    return {
        "httpGet": get,
        "periodSeconds": period_s,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _restricted_security_context(settings: WorkloadSettings) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def root_with_only(capability: str) -> dict[str, Any]:
    """A host-network container's security context: root with one capability, every other
    dropped. Changing a host qdisc needs CAP_NET_ADMIN, a packet socket CAP_NET_RAW, in the
    host network namespace; Kubernetes grants an added capability only to UID 0 (no ambient
    capabilities for other users)."""
    return {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": [capability]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _deployment(
    ref: LinkRef,
    component: str,
    config: RuntimeConfig,
    settings: WorkloadSettings,
    container: dict[str, Any],
    pod_extra: dict[str, Any],
    work: LinkWorkloads,
    dtn_host: str | None = None,
) -> dict[str, Any]:
    """``dtn_host``: the DTN host a shaper agent's Deployment is for."""
    config_map = child_name(ref.name, "config")
    pod_spec: dict[str, Any] = {
        "serviceAccountName": child_name(ref.name, "scidmz"),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        **_pull_secrets(settings),
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map}},
            {
                "name": "identity",
                "secret": {"secretName": identity_secret_name(ref.name, component)},
            },
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
        **pod_extra,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(ref, child_name(ref.name, component), component, settings),
        "spec": {
            "replicas": 0 if work.paused else 1,
            # One collector per switch election id, one controller per shaper: never two
            # at once, so no rolling overlap.
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref.name, component)},
            "template": {
                "metadata": {
                    "labels": common_labels(ref.name, component),
                    "annotations": {
                        CONFIG_HASH_ANNOTATION: restart_hash(
                            config, DTN_SHAPER if dtn_host else component, dtn_host
                        )
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def _container(
    component: str,
    settings: WorkloadSettings,
    http_port: int,
    extra_ports: list[dict[str, Any]],
    security_context: dict[str, Any],
    host_network: bool = False,
) -> dict[str, Any]:
    env = [{"name": "SCIDMZ_HTTP_PORT", "value": str(http_port)}]
    if settings.fd_limit is not None:
        env.append({"name": "SCIDMZ_FD_LIMIT", "value": str(settings.fd_limit)})
    if host_network:
        env.append({"name": "SCIDMZ_PROBES_ON_LOOPBACK", "value": "true"})
    return {
        "name": component,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": [component, "--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"],
        "ports": [
            *extra_ports,
            {"name": PROMETHEUS_PORT_NAME, "containerPort": http_port, "protocol": "TCP"},
        ],
        "env": env,
        "resources": settings.resources_of(component),
        "livenessProbe": _probe("/healthz", PROMETHEUS_PORT_NAME, 10, 3, host_network),
        "readinessProbe": _probe("/readyz", PROMETHEUS_PORT_NAME, 5, 2, host_network),
        "securityContext": security_context,
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
            {"name": "identity", "mountPath": IDENTITY_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir, not host /tmp
        ],
    }


def _mount(deployment: dict[str, Any], volume: dict[str, Any], path: str) -> None:
    """Add ``volume`` to the pod and mount it read-only into its one container."""
    pod = deployment["spec"]["template"]["spec"]
    pod["volumes"].append(volume)
    pod["containers"][0]["volumeMounts"].append(
        {"name": volume["name"], "mountPath": path, "readOnly": True}
    )


def _mount_switch_tls(deployment: dict[str, Any], config: RuntimeConfig) -> None:
    if config.switch.tls_secret:
        _mount(
            deployment,
            {"name": "switch-tls", "secret": {"secretName": config.switch.tls_secret}},
            TLS_MOUNT,
        )


@dataclass(frozen=True)
class LinkWorkloads:
    """What the builders need beyond the config: placement and host ports."""

    paused: bool = False
    tolerations: tuple[Toleration, ...] = ()
    """Campus shaper node's taints the controller tolerates (tc actuator)."""
    dtn_tolerations: tuple[tuple[str, tuple[Toleration, ...]], ...] = ()
    """Per DTN host, its node's taints its shaper agent tolerates."""
    host_ports: tuple[HostPortAllocation, ...] = ()

    def tolerations_of(self, host: str) -> tuple[Toleration, ...]:
        return next((t for h, t in self.dtn_tolerations if h == host), ())


def build_collector_deployment(
    ref: LinkRef, config: RuntimeConfig, settings: WorkloadSettings, work: LinkWorkloads
) -> dict[str, Any]:
    grpc = {
        "name": "grpc-samples",
        "containerPort": settings.collector_grpc_port,
        "protocol": "TCP",
    }
    container = _container(
        COLLECTOR,
        settings,
        settings.collector_http_port,
        [grpc],
        _restricted_security_context(settings),
    )
    deployment = _deployment(ref, COLLECTOR, config, settings, container, {}, work)
    if config.switch.pipeline_config_map:
        # The pipeline to push (P4Info + device config) rides in the administrators'
        # ConfigMap; the collector reads it from files named by the keys in its config.
        _mount(
            deployment,
            {"name": "pipeline", "configMap": {"name": config.switch.pipeline_config_map}},
            PIPELINE_MOUNT,
        )
    _mount_switch_tls(deployment, config)
    return deployment


def host_port(work: LinkWorkloads, workload: str) -> int | None:
    return next((a.port for a in work.host_ports if a.workload == workload), None)


SHAPER_HOST_KEPT: Final = 20
"""Of a DTN host's name, what a shaper's component keeps beside a hash when it is long."""


def dtn_shaper_workload(host: str) -> str:
    """The component of DTN host ``host``'s shaper agent: ``dtn-shaper-<host>``, its name
    shortened with a stable hash past 40 characters (it is a label value, and a part of
    Service names, which must stay within 63 with the link's name)."""
    full = f"{DTN_SHAPER}-{host}"
    if len(full) <= 40:
        return full
    digest = hashlib.sha256(host.encode()).hexdigest()[:8]
    return f"{DTN_SHAPER}-{host[:SHAPER_HOST_KEPT].rstrip('-.')}-{digest}"


def is_dtn_shaper(component: str) -> bool:
    """Whether ``component`` names a DTN host's shaper agent (or, for a Job, its
    interface's restore)."""
    return component.startswith(f"{DTN_SHAPER}-")


def build_controller_deployment(
    ref: LinkRef, config: RuntimeConfig, settings: WorkloadSettings, work: LinkWorkloads
) -> dict[str, Any]:
    uses_tc = config.actuator.type == "tc"
    security = root_with_only("NET_ADMIN") if uses_tc else _restricted_security_context(settings)
    # on the node's network the port is the link's own, so two links on one node never
    # collide; off it every pod has its own network
    port = (host_port(work, CONTROLLER) if uses_tc else None) or settings.controller_http_port
    container = _container(CONTROLLER, settings, port, [], security, host_network=uses_tc)
    pod_extra = (
        _on_host_network_of(config.actuator.tc_node_name, work.tolerations) if uses_tc else {}
    )
    deployment = _deployment(ref, CONTROLLER, config, settings, container, pod_extra, work)
    if config.controller.inverse_model_config_map:
        _mount(
            deployment,
            {"name": "model", "configMap": {"name": config.controller.inverse_model_config_map}},
            MODEL_MOUNT,
        )
    if (
        config.actuator.type == "sim"
        or any(cap.type == "sim" for cap in config.actuator.dtns)
        or (config.buffer is not None and config.buffer.actuator_type == "sim")
    ):
        _mount_switch_tls(deployment, config)  # the simulator answers on the switch's port
    return deployment


def _tolerations(tolerations: Sequence[Toleration]) -> list[dict[str, Any]]:
    return [t.model_dump(by_alias=True, exclude_none=True) for t in tolerations]


def _on_host_network_of(node_name: str | None, tolerations: Sequence[Toleration]) -> dict[str, Any]:
    """Pod settings to change a qdisc of ``node_name``: its network namespace, pinned
    there, tolerating exactly the taints the link lists (none by default)."""
    extra: dict[str, Any] = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        # matchFields on metadata.name pins to the node by name, whatever its labels.
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    if tolerations:
        extra["tolerations"] = _tolerations(tolerations)
    return extra


def tc_caps(config: RuntimeConfig) -> list[DtnActuatorConfig]:
    """The DTN caps that run a `scidmz shaper` agent on their host (type tc)."""
    return [cap for cap in config.actuator.dtns if cap.type == "tc"]


def build_dtn_shaper_deployment(
    ref: LinkRef,
    config: RuntimeConfig,
    settings: WorkloadSettings,
    work: LinkWorkloads,
    dtn: DtnActuatorConfig,
) -> dict[str, Any]:
    """`scidmz shaper` on DTN host ``dtn.host`` for its tc cap. It holds the fail-safe cap
    itself when the controller has been quiet for staleAfter + 2T, both read from the
    mounted ConfigMap (its host's entry) and followed live (no roll for a new R*)."""
    component = dtn_shaper_workload(dtn.host)
    http = host_port(work, component)
    if http is None:
        raise ValueError(f"no host port allocated for the DTN shaper of {dtn.host}")
    grpc = {"name": "grpc-shaper", "containerPort": http + 1, "protocol": "TCP"}
    container = _container(
        DTN_SHAPER, settings, http, [grpc], root_with_only("NET_ADMIN"), host_network=True
    )
    container["args"] = [
        *shaper_agent_args(
            config, f"0.0.0.0:{http + 1}", f"{CONFIG_MOUNT}/{CONFIG_KEY}", dtn.host
        ),
        "--state-dir", SHAPER_STATE_MOUNT,
    ]  # fmt: skip
    extra = _on_host_network_of(dtn.tc_node_name, work.tolerations_of(dtn.host))
    deployment = _deployment(ref, component, config, settings, container, extra, work, dtn.host)
    _mount_shaper_state(deployment["spec"]["template"]["spec"])
    return deployment


SHAPER_STATE_DIR: Final = "/var/lib/scidmz/shapers"
"""On the DTN host's node: where its shaper agent records the interface's original root
qdisc (``control.interface_state``), outliving the pod, for the restore."""
SHAPER_STATE_MOUNT: Final = "/var/lib/scidmz-shapers"


def _mount_shaper_state(pod: dict[str, Any]) -> None:
    host_path = {"path": SHAPER_STATE_DIR, "type": "DirectoryOrCreate"}
    pod["volumes"].append({"name": "shaper-state", "hostPath": host_path})
    pod["containers"][0]["volumeMounts"].append(
        {"name": "shaper-state", "mountPath": SHAPER_STATE_MOUNT}
    )


RESTORE: Final = f"{DTN_SHAPER}-restore"


def restore_component(host: str) -> str:
    """The restore Job's component for DTN host ``host`` (no host: a link's only
    shaper, as an older operator recorded it)."""
    return f"{dtn_shaper_workload(host)}-restore" if host else RESTORE


def restore_job_name(link: str, host: str = "") -> str:
    return child_name(link, restore_component(host))


def build_shaper_restore_job(
    ref: LinkRef, restore: ShaperRestore, settings: WorkloadSettings
) -> dict[str, Any]:
    # (the pod is labelled apart from the shaper's: the operator waits for the shaper's
    # pods to be gone before it starts this one)
    """A Job on the DTN host's node that runs ``scidmz shaper --restore`` once the shaper is
    gone for good (its pod stopped: it leaves its fail-safe cap on the way out)."""
    container = {
        "name": "restore",
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": ["shaper", "--interface", restore.interface, "--state-dir",
                 SHAPER_STATE_MOUNT, "--restore"],
        "securityContext": root_with_only("NET_ADMIN"),
        "volumeMounts": [],
        "resources": settings.resources_of(DTN_SHAPER),
    }  # fmt: skip
    pod: dict[str, Any] = {
        "serviceAccountName": child_name(ref.name, "scidmz"),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        **_pull_secrets(settings),
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": [],
        **_on_host_network_of(restore.node, restore.tolerations),
    }
    _mount_shaper_state(pod)
    component = restore_component(restore.host)
    metadata = _metadata(ref, restore_job_name(ref.name, restore.host), component, settings)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 4,
            "activeDeadlineSeconds": 300,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": common_labels(ref.name, component)}, "spec": pod},
        },
    }


def shaper_restore_of(deployment: dict[str, Any]) -> ShaperRestore | None:
    """What a DTN shaper Deployment the operator made shapes: its node, interface and
    tolerations (None: not one of ours, e.g. made by hand)."""
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    try:
        args = pod["containers"][0]["args"]
        interface = args[args.index("--interface") + 1]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        node = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    tolerations = [Toleration.model_validate(t) for t in pod.get("tolerations") or []]
    host = args[args.index("--dtn-host") + 1] if "--dtn-host" in args else ""
    return ShaperRestore(
        node=str(node), interface=str(interface), tolerations=tolerations, host=str(host)
    )


def _service(
    ref: LinkRef, component: str, ports: list[dict[str, Any]], settings: WorkloadSettings
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ref, child_name(ref.name, component), component, settings),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ref.name, component),
            "ports": ports,
        },
    }


def _metrics_port(port: int) -> dict[str, Any]:
    return {
        "name": PROMETHEUS_PORT_NAME,
        "port": port,
        "targetPort": PROMETHEUS_PORT_NAME,
        "protocol": "TCP",
        "appProtocol": "https",
    }


def build_collector_service(ref: LinkRef, settings: WorkloadSettings) -> dict[str, Any]:
    return _service(
        ref,
        COLLECTOR,
        [
            {
                "name": "grpc-samples",
                "port": settings.collector_grpc_port,
                "targetPort": "grpc-samples",
                "protocol": "TCP",
                "appProtocol": "grpc",
            },
            _metrics_port(settings.collector_http_port),
        ],
        settings,
    )


def build_controller_service(
    ref: LinkRef, config: RuntimeConfig, settings: WorkloadSettings, work: LinkWorkloads
) -> dict[str, Any]:
    uses_tc = config.actuator.type == "tc"
    port = (host_port(work, CONTROLLER) if uses_tc else None) or settings.controller_http_port
    service = _service(ref, CONTROLLER, [_metrics_port(port)], settings)
    # The controller is not ready while it holds its fail-safe rate; its /state is what says
    # so (the link's Degraded=FailSafe), so the Service reaches it ready or not.
    service["spec"]["publishNotReadyAddresses"] = True
    return service


def build_dtn_shaper_service(
    ref: LinkRef, settings: WorkloadSettings, http_port: int, host: str
) -> dict[str, Any]:
    return _service(
        ref,
        dtn_shaper_workload(host),
        [
            {
                "name": "grpc-shaper",
                "port": http_port + 1,
                "targetPort": "grpc-shaper",
                "protocol": "TCP",
                "appProtocol": "grpc",
            },
            _metrics_port(http_port),
        ],
        settings,
    )


def _peer(pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None) -> Any:
    selector: dict[str, Any] = {"podSelector": {"matchLabels": dict(pod_labels)}}
    if namespace_labels is not None:
        selector["namespaceSelector"] = {"matchLabels": dict(namespace_labels)}
    return selector


def _observers(settings: WorkloadSettings) -> list[dict[str, Any]]:
    """Who may reach a workload's metrics port: the operator's pods (/state) and, when the
    chart names them, Prometheus's."""
    peers = [_peer(settings.operator_pod_labels, None)]
    if settings.metrics_namespace_labels is not None:
        peer: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": dict(settings.metrics_namespace_labels)}
        }
        if settings.metrics_pod_labels is not None:
            peer["podSelector"] = {"matchLabels": dict(settings.metrics_pod_labels)}
        peers.append(peer)
    return peers


def build_network_policy(
    ref: LinkRef,
    component: str,
    settings: WorkloadSettings,
    ingress: list[dict[str, Any]],
) -> dict[str, Any]:
    """Only what must talk to the workload gets in; everything else is dropped (by a CNI
    that enforces NetworkPolicy). Egress is left open: the switch's address is the
    administrators' and may be anywhere."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(ref, child_name(ref.name, component), component, settings),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ref.name, component)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def build_network_policies(ref: LinkRef, settings: WorkloadSettings) -> list[dict[str, Any]]:
    """The collector takes the sample stream from its link's controller only, and both
    take metrics and /state reads from the observers only. (The host-network pods, a tc
    controller and the DTN shaper, are outside NetworkPolicy's reach: their certificates
    are their only door.)"""
    controller_pods = selector_labels(ref.name, CONTROLLER)
    metrics = {"port": PROMETHEUS_PORT_NAME, "protocol": "TCP"}
    return [
        build_network_policy(
            ref,
            COLLECTOR,
            settings,
            [
                {
                    "from": [_peer(controller_pods, None)],
                    "ports": [{"port": "grpc-samples", "protocol": "TCP"}],
                },
                {"from": _observers(settings), "ports": [metrics]},
            ],
        ),
        build_network_policy(
            ref, CONTROLLER, settings, [{"from": _observers(settings), "ports": [metrics]}]
        ),
    ]


def build_children(
    ref: LinkRef, config: RuntimeConfig, settings: WorkloadSettings, work: LinkWorkloads
) -> list[dict[str, Any]]:
    """Every object of one link's loop but its certificate Secrets, in apply order (config
    and identity before workloads)."""
    shapers = [build_dtn_shaper_deployment(ref, config, settings, work, c) for c in tc_caps(config)]
    shaper_services = []
    for cap in tc_caps(config):
        port = host_port(work, dtn_shaper_workload(cap.host))
        assert port is not None  # the deployment above refuses a cap without one
        shaper_services.append(build_dtn_shaper_service(ref, settings, port, cap.host))
    return [
        build_service_account(ref, settings),
        build_config_map(ref, config, settings),
        build_collector_service(ref, settings),
        build_controller_service(ref, config, settings, work),
        *shaper_services,
        *build_network_policies(ref, settings),
        build_collector_deployment(ref, config, settings, work),
        *shapers,
        build_controller_deployment(ref, config, settings, work),
    ]
