"""Operator process settings, from environment variables prefixed ``SCIDMZ_``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from scidmz import __version__
from scidmz.k8s.manifests import WorkloadSettings


class OperatorSettings(BaseSettings):
    """``SCIDMZ_IMAGE=...``, ``SCIDMZ_NAMESPACE=...``, ...: every field is one variable, and the
    docs site's operator settings table is generated from these descriptions."""

    model_config = SettingsConfigDict(env_prefix="SCIDMZ_", extra="ignore")

    image: str = Field(
        default=f"ghcr.io/scidmz/scidmz:{__version__}",
        description="Image for the collector and controller workloads.",
    )
    image_pull_policy: str = Field(
        default="IfNotPresent", description="Pull policy of the workloads' image."
    )
    namespace: str | None = Field(
        default=None, description="Watch only this namespace; all namespaces when unset."
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
    health_port: int = Field(default=8080, description="Port of the operator's /healthz.")
    metrics_port: int = Field(default=8081, description="Port of the operator's /metrics.")
    state_poll_s: float = Field(
        default=10.0, gt=0, description="How often status.state is read from each controller."
    )
    controller_state_url: str = Field(
        default="http://{service}.{namespace}.svc:{port}/state",
        description="Where a policy's controller serves its state; {service}, {namespace}, "
        "{name} and {port} are filled in.",
    )
    collector_grpc_port: int = Field(
        default=50051, description="Port of a collector's sample stream (gRPC)."
    )
    collector_http_port: int = Field(
        default=9460, description="Port of a collector's /metrics, /healthz, /readyz, /state."
    )
    controller_http_port: int = Field(
        default=9461, description="Port of a controller's /metrics, /healthz, /readyz, /state."
    )
    shaper_grpc_port: int = Field(
        default=9470, description="Port of a DTN shaper agent's scidmz.v1.Shaper (gRPC)."
    )
    shaper_http_port: int = Field(
        default=9471, description="Port of a DTN shaper agent's /metrics, /healthz, /readyz."
    )

    def workload(self) -> WorkloadSettings:
        return WorkloadSettings(
            image=self.image,
            image_pull_policy=self.image_pull_policy,
            collector_grpc_port=self.collector_grpc_port,
            collector_http_port=self.collector_http_port,
            controller_http_port=self.controller_http_port,
            shaper_grpc_port=self.shaper_grpc_port,
            shaper_http_port=self.shaper_http_port,
        )
