"""Operator process settings, from environment variables prefixed ``SCIDMZ_``."""

from __future__ import annotations

import urllib.parse

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from scidmz import __version__
from scidmz.api.holds import DEFAULT_GRACE_S
from scidmz.k8s.manifests import COLLECTOR, CONTROLLER, DTN_SHAPER, WorkloadSettings
from scidmz.k8s.tap import TAP

DAY_S = 86400.0
DEFAULT_RESOURCES: dict[str, dict[str, dict[str, str]]] = {
    COLLECTOR: {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    CONTROLLER: {"requests": {"cpu": "50m", "memory": "192Mi"}, "limits": {"memory": "768Mi"}},
    DTN_SHAPER: {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    TAP: {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
}
"""Measured: a collector at 100 flows ~90 MB RSS, a controller with the ONNX model ~150 MB,
a shaper agent ~60 MB, a software tap one core per ~150 k frames/s (bench/tap_capture.py).
No CPU limit: throttling a control loop costs more than it saves."""


class OperatorSettings(BaseSettings):
    """``SCIDMZ_IMAGE=...``, ``SCIDMZ_OPERATOR_NAMESPACE=...``, ...: every field is one
    variable, and the docs site's operator settings table is generated from these
    descriptions."""

    model_config = SettingsConfigDict(env_prefix="SCIDMZ_", extra="ignore")

    image: str = Field(
        default=f"ghcr.io/scidmz/scidmz:{__version__}",
        description="Image for the collector, controller and shaper workloads.",
    )
    image_pull_policy: str = Field(
        default="IfNotPresent", description="Pull policy of the workloads' image."
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets (in the operator's namespace) the workloads' pods pull their "
        "image with, by name (JSON list; the chart passes its imagePullSecrets): for an image "
        "in a private registry.",
    )
    operator_namespace: str = Field(
        default="scidmz-system",
        min_length=1,
        max_length=63,
        description="The operator's own namespace: every link's workloads, Services, "
        "certificates and NetworkPolicies live here, never in a tenant's namespace; the "
        "switch TLS Secrets and pipeline ConfigMaps that links name are read from here.",
    )
    peering_name: str = Field(
        default="scidmz", description="kopf peering object shared by the operator replicas."
    )
    peering_priority: int | None = Field(
        default=None,
        description="Fixed peering priority; a random one per process when unset, so that "
        "exactly one replica of several is active (equal priorities would all freeze).",
    )
    peering_lifetime_s: int = Field(
        default=6,
        ge=2,
        le=600,
        description="Seconds a replica's peering record stays valid without a refresh: a "
        "standby takes over this long after the active replica died (kopf refreshes it "
        "every max(1, lifetime − 5..10) s). Replicas' clocks must agree to well within it.",
    )
    standalone: bool = Field(
        default=False, description="Skip peering (single replica, development only)."
    )
    retry_delay_s: float = Field(
        default=15.0, gt=0, description="Back-off before re-checking an unmet dependency."
    )
    resync_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Every link is reconciled at least this often, changes or not; while its "
        "loop is not ready, every 2 s.",
    )
    health_port: int = Field(default=8080, description="Port of the operator's /healthz.")
    metrics_port: int = Field(default=8081, description="Port of the operator's /metrics.")
    state_poll_s: float = Field(
        default=10.0, gt=0, description="How often status.state is read from each controller."
    )
    controller_state_url: str = Field(
        default="https://{service}.{namespace}.svc:{port}/state",
        description="Where a link's controller serves its state; {service}, {namespace}, "
        "{link} and {port} are filled in. https only: the operator presents its certificate "
        "and checks the controller's. Tenants cannot choose it.",
    )
    operator_deployment: str | None = Field(
        default=None,
        description="The operator's own Deployment (the chart sets it): the CA and "
        "metrics-reader Secrets the operator creates are owned by it, so uninstalling the "
        "chart removes them. Unset: they stay.",
    )
    ca_secret: str = Field(
        default="scidmz-ca",
        description="Secret (in the operator's namespace) holding the operator's certificate "
        "authority; created at first start.",
    )
    ca_validity_s: float = Field(
        default=365 * DAY_S,
        gt=0,
        description="How long a CA the operator makes is valid.",
    )
    ca_renew_before_s: float = Field(
        default=60 * DAY_S,
        gt=0,
        description="The next CA is made this long before the active one expires.",
    )
    ca_overlap_s: float = Field(
        default=DAY_S,
        gt=0,
        description="How long the next CA is trusted before it signs, and the old one after "
        "(longer than the kubelet takes to refresh a mounted Secret: about a minute).",
    )
    leaf_validity_s: float = Field(
        default=7 * DAY_S,
        gt=0,
        description="How long a workload's (and the operator's, Prometheus's) certificate is "
        "valid; it is renewed with a third of its life left, without a restart.",
    )
    collector_grpc_port: int = Field(
        default=50051, description="Port of a collector's sample stream (gRPC, mutual TLS)."
    )
    collector_http_port: int = Field(
        default=9460, description="Port of a collector's /metrics, /healthz, /readyz (HTTPS)."
    )
    controller_http_port: int = Field(
        default=9461,
        description="Port of a controller's /metrics, /healthz, /readyz, /state (HTTPS), "
        "off the node's network.",
    )
    dtn_shaper_grace_s: float = Field(
        default=DEFAULT_GRACE_S,
        ge=0,
        le=86400,
        description="How long a DTN host's shaper is kept, at the host's fail-safe cap, after "
        "its last policy went (a policy that comes and goes neither creates nor deletes a "
        "privileged pod each time); 0 removes it at once.",
    )
    host_port_base: int = Field(
        default=9500,
        ge=1024,
        le=65000,
        description="First port of the range the host-network pods (a tc controller, DTN "
        "shaper agents) get pairs from, per node.",
    )
    host_port_pairs: int = Field(
        default=250,
        ge=1,
        le=5000,
        description="Pairs in that range: the most host-network workloads one node runs.",
    )
    workload_run_as_user: int = Field(
        default=10001,
        ge=1,
        le=2**31 - 1,
        description="UID the collector, controller and shaper containers run as (the "
        "image's user, 10001); never 0.",
    )
    workload_run_as_group: int = Field(
        default=10001, ge=1, le=2**31 - 1, description="GID of those containers; never 0."
    )
    workload_resources: dict[str, dict[str, dict[str, str]]] = Field(
        default_factory=lambda: dict(DEFAULT_RESOURCES),
        description="Requests and limits per workload (collector, controller, dtn-shaper, tap), "
        'as JSON: {"collector": {"requests": {"cpu": "50m"}, "limits": {...}}, ...}.',
    )
    workload_fd_limit: int | None = Field(
        default=65536,
        ge=1024,
        le=1048576,
        description="The soft limit on open files each workload raises itself to (a pod "
        "spec has no ulimit field; the container runtime's hard limit caps it).",
    )
    operator_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {
            "app.kubernetes.io/name": "scidmz",
            "app.kubernetes.io/component": "operator",
        },
        description="Labels of the operator's pods (JSON): the workloads' NetworkPolicies "
        "let them in to read /state.",
    )
    metrics_namespace_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels of the namespace Prometheus runs in (JSON): the workloads' "
        "NetworkPolicies let its pods in to scrape. Unset: no namespace but the operator's.",
    )
    metrics_pod_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels of the Prometheus pods in that namespace (JSON); unset: any pod.",
    )

    @model_validator(mode="after")
    def _certificate_lifetimes(self) -> OperatorSettings:
        from scidmz.k8s.certificates import validity_from

        problems = validity_from(self).problems()
        if problems:
            raise ValueError("certificate lifetimes: " + "; ".join(problems))
        return self

    @field_validator("controller_state_url")
    @classmethod
    def _https(cls, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.netloc:
            raise ValueError("must be an https:// URL template (the state is read over TLS)")
        return url

    def workload(self) -> WorkloadSettings:
        return WorkloadSettings(
            image=self.image,
            namespace=self.operator_namespace,
            image_pull_policy=self.image_pull_policy,
            image_pull_secrets=tuple(self.image_pull_secrets),
            collector_grpc_port=self.collector_grpc_port,
            collector_http_port=self.collector_http_port,
            controller_http_port=self.controller_http_port,
            run_as_user=self.workload_run_as_user,
            run_as_group=self.workload_run_as_group,
            resources=self.workload_resources,
            fd_limit=self.workload_fd_limit,
            operator_pod_labels=self.operator_pod_labels,
            metrics_namespace_labels=self.metrics_namespace_labels,
            metrics_pod_labels=self.metrics_pod_labels,
        )

    def state_url(self, link: str, service: str, port: int) -> str:
        return self.controller_state_url.format(
            service=service, namespace=self.operator_namespace, link=link, port=port
        )
