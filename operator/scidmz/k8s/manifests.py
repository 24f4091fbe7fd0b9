"""Pure builders of the objects the operator owns for one DTNTransferPolicy.

Every function here maps (policy identity, resolved config, settings) to a plain dict that is
server-side applied as is. Nothing here talks to the API, so each builder is unit-tested
without a cluster, and an unchanged policy always yields identical objects — which is what
keeps resourceVersions still across operator restarts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import yaml

from scidmz import __version__
from scidmz.api.policy import GROUP, KIND, VERSION
from scidmz.api.runtime import (
    CONFIG_KEY,
    RuntimeConfig,
    dump_runtime_config,
    restart_relevant,
    shaper_agent_args,
)

MANAGED_BY: Final = "scidmz-operator"
CONFIG_MOUNT: Final = "/etc/scidmz"
PIPELINE_MOUNT: Final = "/etc/scidmz-pipeline"
TLS_MOUNT: Final = "/etc/scidmz-tls"
CONFIG_HASH_ANNOTATION: Final = f"{GROUP}/config-hash"
"""On the pod template: the hash of what the processes are built around
(``restart_hash``); a change rolls the pods."""
LIVE_CONFIG_ANNOTATION: Final = f"{GROUP}/live-config-hash"
"""On a running controller (and DTN shaper) pod: the hash of the whole config
(``config_hash``) the operator last nudged it for. Writing it makes the kubelet sync the
pod, which refreshes the mounted ConfigMap at once instead of at its next periodic sync (up
to a minute)."""
POLICY_LABEL: Final = f"{GROUP}/policy"
COLLECTOR: Final = "collector"
CONTROLLER: Final = "controller"
DTN_SHAPER: Final = "dtn-shaper"
_DNS_LABEL_MAX: Final = 63


@dataclass(frozen=True)
class WorkloadSettings:
    """Operator-wide knobs for the workloads it creates (from OperatorSettings)."""

    image: str
    image_pull_policy: str = "IfNotPresent"
    collector_grpc_port: int = 50051
    collector_http_port: int = 9460
    controller_http_port: int = 9461
    shaper_grpc_port: int = 9470
    shaper_http_port: int = 9471
    run_as_user: int = 65532


@dataclass(frozen=True)
class PolicyRef:
    """Identity of the owning policy, enough to build owner references and names."""

    name: str
    namespace: str
    uid: str


def child_name(policy: str, suffix: str) -> str:
    """``<policy>-<suffix>``, shortened with a stable hash when over 63 characters.

    Services must be DNS-1035 labels (63 characters); policy names may be longer.
    """
    full = f"{policy}-{suffix}"
    if len(full) <= _DNS_LABEL_MAX:
        return full
    digest = hashlib.sha256(policy.encode()).hexdigest()[:8]
    keep = _DNS_LABEL_MAX - len(suffix) - len(digest) - 2
    return f"{policy[:keep].rstrip('-.')}-{digest}-{suffix}"


def instance_label(policy: str) -> str:
    """A label-safe (<= 63 characters) form of the policy name."""
    if len(policy) <= _DNS_LABEL_MAX:
        return policy
    digest = hashlib.sha256(policy.encode()).hexdigest()[:8]
    return f"{policy[: _DNS_LABEL_MAX - 9].rstrip('-.')}-{digest}"


def collector_address(ref: PolicyRef, settings: WorkloadSettings) -> str:
    """In-cluster address of the collector's sample stream."""
    service = child_name(ref.name, COLLECTOR)
    return f"{service}.{ref.namespace}.svc:{settings.collector_grpc_port}"


def dtn_shaper_address(ref: PolicyRef, settings: WorkloadSettings) -> str:
    """In-cluster address of the `scidmz shaper` that caps the DTN (a tc DTN actuator)."""
    service = child_name(ref.name, DTN_SHAPER)
    return f"{service}.{ref.namespace}.svc:{settings.shaper_grpc_port}"


def selector_labels(ref: PolicyRef, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "scidmz",
        "app.kubernetes.io/instance": instance_label(ref.name),
        "app.kubernetes.io/component": component,
    }


def common_labels(ref: PolicyRef, component: str) -> dict[str, str]:
    return {
        **selector_labels(ref, component),
        "app.kubernetes.io/part-of": "scidmz",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": __version__,
        POLICY_LABEL: instance_label(ref.name),
    }


def owner_reference(ref: PolicyRef) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(ref: PolicyRef, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": common_labels(ref, component),
        "ownerReferences": [owner_reference(ref)],
    }


def config_hash(config: RuntimeConfig) -> str:
    """The hash of the ConfigMap's config file."""
    return hashlib.sha256(dump_runtime_config(config).encode()).hexdigest()[:16]


def restart_hash(config: RuntimeConfig) -> str:
    """The hash of the config without what a running controller takes live (the target
    rate, capacity, gains, limits, fail-safe settings, desired RTTs): a new target rate
    reaches the running controller through its mounted ConfigMap and keeps the filter's
    state, its history and learned base RTTs; anything else rolls the pods."""
    text = yaml.safe_dump(restart_relevant(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_config_map(ref: PolicyRef, config: RuntimeConfig) -> dict[str, Any]:
    metadata = _metadata(ref, child_name(ref.name, "config"), "config")
    metadata["annotations"] = {LIVE_CONFIG_ANNOTATION: config_hash(config)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {CONFIG_KEY: dump_runtime_config(config)},
    }


def build_service_account(ref: PolicyRef) -> dict[str, Any]:
    # The workloads never call the Kubernetes API: no token is mounted and no RBAC is bound.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(ref, child_name(ref.name, "scidmz"), "workload"),
        "automountServiceAccountToken": False,
    }


def _probe(path: str, port: str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period_s,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _restricted_security_context(settings: WorkloadSettings) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_user,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _tc_security_context() -> dict[str, Any]:
    # Changing a host qdisc needs CAP_NET_ADMIN in the host network namespace. Kubernetes
    # grants added capabilities only to UID 0 (no ambient capabilities for other users), so
    # this one container runs as root with every other capability dropped.
    return {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _deployment(
    ref: PolicyRef,
    component: str,
    config: RuntimeConfig,
    paused: bool,
    settings: WorkloadSettings,
    container: dict[str, Any],
    pod_extra: dict[str, Any],
) -> dict[str, Any]:
    config_map = child_name(ref.name, "config")
    pod_spec: dict[str, Any] = {
        "serviceAccountName": child_name(ref.name, "scidmz"),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
        **pod_extra,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(ref, child_name(ref.name, component), component),
        "spec": {
            "replicas": 0 if paused else 1,
            # One collector per switch election id, one controller per shaper: never two
            # at once, so no rolling overlap.
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref, component)},
            "template": {
                "metadata": {
                    "labels": common_labels(ref, component),
                    "annotations": {CONFIG_HASH_ANNOTATION: restart_hash(config)},
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
) -> dict[str, Any]:
    return {
        "name": component,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": [component, "--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"],
        "ports": [
            *extra_ports,
            {"name": "http-metrics", "containerPort": http_port, "protocol": "TCP"},
        ],
        "env": [{"name": "SCIDMZ_HTTP_PORT", "value": str(http_port)}],
        "livenessProbe": _probe("/healthz", "http-metrics", 10, 3),
        "readinessProbe": _probe("/readyz", "http-metrics", 5, 2),
        "securityContext": security_context,
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
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


def build_collector_deployment(
    ref: PolicyRef, config: RuntimeConfig, paused: bool, settings: WorkloadSettings
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
    deployment = _deployment(ref, COLLECTOR, config, paused, settings, container, {})
    if config.switch.pipeline_config_map:
        # The pipeline to push (P4Info + device config) rides in the user's ConfigMap; the
        # collector reads it from files named by the keys in its runtime config.
        _mount(
            deployment,
            {"name": "pipeline", "configMap": {"name": config.switch.pipeline_config_map}},
            PIPELINE_MOUNT,
        )
    if config.switch.tls_secret:
        # Only the collector talks to the switch, so only it sees the key.
        _mount(
            deployment,
            {"name": "switch-tls", "secret": {"secretName": config.switch.tls_secret}},
            TLS_MOUNT,
        )
    return deployment


def build_controller_deployment(
    ref: PolicyRef, config: RuntimeConfig, paused: bool, settings: WorkloadSettings
) -> dict[str, Any]:
    uses_tc = config.actuator.type == "tc"
    security = _tc_security_context() if uses_tc else _restricted_security_context(settings)
    container = _container(CONTROLLER, settings, settings.controller_http_port, [], security)
    pod_extra = _on_host_network_of(config.actuator.tc_node_name) if uses_tc else {}
    return _deployment(ref, CONTROLLER, config, paused, settings, container, pod_extra)


def _on_host_network_of(node_name: str | None) -> dict[str, Any]:
    """Pod settings to change a qdisc of ``node_name``: its network namespace, pinned there."""
    return {
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
        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
    }


def build_dtn_shaper_deployment(
    ref: PolicyRef, config: RuntimeConfig, paused: bool, settings: WorkloadSettings
) -> dict[str, Any] | None:
    """`scidmz shaper` on the DTN host for a tc DTN actuator (None for other types). It
    holds the fail-safe cap itself when the controller has been quiet for staleAfter + 2T,
    both read from the mounted ConfigMap and followed live (no roll for a new R*)."""
    dtn = config.actuator.dtn
    if dtn is None or dtn.type != "tc":
        return None
    grpc = {"name": "grpc-shaper", "containerPort": settings.shaper_grpc_port, "protocol": "TCP"}
    container = _container(
        DTN_SHAPER, settings, settings.shaper_http_port, [grpc], _tc_security_context()
    )
    container["args"] = shaper_agent_args(
        config, f"0.0.0.0:{settings.shaper_grpc_port}", f"{CONFIG_MOUNT}/{CONFIG_KEY}"
    )
    extra = _on_host_network_of(dtn.tc_node_name)
    return _deployment(ref, DTN_SHAPER, config, paused, settings, container, extra)


def _service(ref: PolicyRef, component: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ref, child_name(ref.name, component), component),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ref, component),
            "ports": ports,
        },
    }


def build_collector_service(ref: PolicyRef, settings: WorkloadSettings) -> dict[str, Any]:
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
            {
                "name": "http-metrics",
                "port": settings.collector_http_port,
                "targetPort": "http-metrics",
                "protocol": "TCP",
            },
        ],
    )


def build_controller_service(ref: PolicyRef, settings: WorkloadSettings) -> dict[str, Any]:
    return _service(
        ref,
        CONTROLLER,
        [
            {
                "name": "http-metrics",
                "port": settings.controller_http_port,
                "targetPort": "http-metrics",
                "protocol": "TCP",
            },
        ],
    )


def build_dtn_shaper_service(ref: PolicyRef, settings: WorkloadSettings) -> dict[str, Any]:
    return _service(
        ref,
        DTN_SHAPER,
        [
            {
                "name": "grpc-shaper",
                "port": settings.shaper_grpc_port,
                "targetPort": "grpc-shaper",
                "protocol": "TCP",
                "appProtocol": "grpc",
            },
            {
                "name": "http-metrics",
                "port": settings.shaper_http_port,
                "targetPort": "http-metrics",
                "protocol": "TCP",
            },
        ],
    )


def build_children(
    ref: PolicyRef, config: RuntimeConfig, paused: bool, settings: WorkloadSettings
) -> list[dict[str, Any]]:
    """Every object of one policy, in apply order (config and identity before workloads)."""
    shaper = build_dtn_shaper_deployment(ref, config, paused, settings)
    return [
        build_service_account(ref),
        build_config_map(ref, config),
        build_collector_service(ref, settings),
        build_controller_service(ref, settings),
        *([build_dtn_shaper_service(ref, settings)] if shaper else []),
        build_collector_deployment(ref, config, paused, settings),
        *([shaper] if shaper else []),
        build_controller_deployment(ref, config, paused, settings),
    ]
