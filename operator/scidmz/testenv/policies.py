"""Many links and policies shaped like the examples, for the scale and fail-over benchmarks."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from scidmz.testenv.cluster import REPO_ROOT

LINK_EXAMPLE = REPO_ROOT / "examples" / "borderlink.yaml"
POLICY_EXAMPLE = REPO_ROOT / "examples" / "dtntransferpolicy.yaml"
TENANT_NAMESPACE = "research"
TENANT_LABEL = {"scidmz.io/tenant": "true"}
SWITCH_SECRET = "campus-switch-tls"  # noqa: S105 - a Secret's name
MAX_DTN_HOSTS = 64
"""A link's most DTN hosts (the CRD's maxItems; testenv stays below the API layer)."""
HOSTS_PER_LINK = 30
"""The DTN hosts of a scale link: each admits one policy, so 30 admitted per link."""
PLANNED_MBPS = 750
"""What a scale link's targets add up to on average (of the 900 Mb/s tenants' share)."""


def link_name(k: int) -> str:
    return f"link-{k:02d}"


def policy_name(k: int) -> str:
    return f"policy-{k:04d}"


def tenant_namespace(name: str = TENANT_NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(TENANT_LABEL)},
    }


def switch_secret(namespace: str) -> dict[str, Any]:
    """A placeholder switch TLS Secret (nothing connects to a switch under kwok)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SWITCH_SECRET, "namespace": namespace},
        "stringData": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
    }


def example_links(links: int, hosts: int) -> list[dict[str, Any]]:
    """``links`` copies of the example link, each with ``hosts`` DTN hosts ``dtn-<j>``."""
    base = yaml.safe_load(LINK_EXAMPLE.read_text())
    out = []
    for k in range(links):
        obj = copy.deepcopy(base)
        obj["metadata"] = {"name": link_name(k)}
        obj["spec"]["dtnHosts"] = [
            {"name": f"dtn-{j}", "receiverPrefix": f"203.0.113.{j + 1}/32"} for j in range(hosts)
        ]
        obj["spec"]["campus"]["remotePrefix"] = "198.51.100.0/24"
        out.append(obj)
    return out


def example_policies(
    policies: int, links: int, hosts: int, namespace: str = TENANT_NAMESPACE
) -> list[dict[str, Any]]:
    """``policies`` copies of the example policy spread round-robin over ``links`` links
    and, within a link, round-robin over its ``hosts`` DTN hosts (each on its own host while
    there are enough), target rates around ``PLANNED_MBPS / hosts`` (±5 Mb/s), so that one
    policy per host fits in the tenants' share."""
    base = yaml.safe_load(POLICY_EXAMPLE.read_text())
    out = []
    for k in range(policies):
        obj = copy.deepcopy(base)
        obj["metadata"] = {"name": policy_name(k), "namespace": namespace}
        obj["spec"]["linkRef"] = {"name": link_name(k % links)}
        obj["spec"]["dtnHost"] = f"dtn-{(k // links) % hosts}"
        share = PLANNED_MBPS // hosts
        obj["spec"]["targetRate"] = f"{max(1, share - 5 + (k // links) % 11)}Mbps"
        out.append(obj)
    return out


def scale_manifest(links: int, policies: int, operator_namespace: str) -> str:
    """Everything a scale run applies, as one YAML stream in apply order."""
    hosts = min(HOSTS_PER_LINK, MAX_DTN_HOSTS, max(1, -(-policies // links)))
    documents = [
        tenant_namespace(),
        switch_secret(operator_namespace),
        *example_links(links, hosts),
        *example_policies(policies, links, hosts),
    ]
    return yaml.safe_dump_all(documents)
