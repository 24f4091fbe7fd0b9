"""Generate the BorderLink and DTNTransferPolicy CustomResourceDefinitions from the
pydantic models.

``crds/scidmz.io_<plural>.yaml`` is the output of :func:`render_crd_yaml`; a test fails
when they drift (regenerate with ``make crds``). Pydantic's JSON Schema is turned
into a Kubernetes *structural* schema: references inlined, ``Optional`` unwrapped, titles and
``additionalProperties: false`` dropped (unknown fields are pruned by the structural schema,
and rejected outright under ``fieldValidation=Strict``, which kubectl uses by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from scidmz.api import link, policy
from scidmz.api.types import GROUP, VERSION

_KEEP = {
    "type",
    "description",
    "default",
    "pattern",
    "enum",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "required",
    "properties",
    "items",
    "format",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "additionalProperties",
}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref``/``allOf``/``anyOf[..., null]`` and keep only keys Kubernetes allows."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot express union {node['anyOf']} in a structural schema")
        merged = {**branches[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        return _structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {name: _structural(child, defs) for name, child in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):  # a map's value schema; `false` is the default
                out[key] = _structural(value, defs)
        elif key == "default":
            if value is None:
                continue
            out[key] = _without_nulls(value)
        else:
            out[key] = value
    if "properties" in out:
        out.setdefault("type", "object")
    return out


def _schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


@dataclass(frozen=True)
class Resource:
    """What a CRD is generated from."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    scope: str
    spec: type[Any]
    status: type[Any]
    description: str
    columns: tuple[tuple[str, str, str], ...]
    """Printer columns: (name, type, JSONPath)."""


_READY = '.status.conditions[?(@.type=="Ready")].status'
_ACCEPTED = '.status.conditions[?(@.type=="Accepted")].status'
_ACCEPTED_REASON = '.status.conditions[?(@.type=="Accepted")].reason'

BORDER_LINK = Resource(
    kind=link.KIND,
    plural=link.PLURAL,
    singular=link.SINGULAR,
    short_names=tuple(link.SHORT_NAMES),
    scope="Cluster",
    spec=link.BorderLinkSpec,
    status=link.BorderLinkStatus,
    description="BorderLink is a campus border link shared by Science DMZ transfers and "
    "campus traffic, owned by network administrators: its capacity, the P4 switch that taps "
    "it, the campus shaper, the DTN hosts, the control law, and which namespaces may attach "
    "DTNTransferPolicies to it. The operator runs one control loop per link.",
    columns=(
        ("Capacity", "string", ".spec.capacity"),
        ("Admitted", "integer", ".status.policies.admitted"),
        ("Target", "string", ".status.policies.admittedTarget"),
        ("DTN rate", "string", ".status.state.dtnRate"),
        ("Campus limit", "string", ".status.state.campusRateLimit"),
        ("Ready", "string", _READY),
        ("Age", "date", ".metadata.creationTimestamp"),
    ),
)

DTN_TRANSFER_POLICY = Resource(
    kind=policy.KIND,
    plural=policy.PLURAL,
    singular=policy.SINGULAR,
    short_names=tuple(policy.SHORT_NAMES),
    scope="Namespaced",
    spec=policy.DTNTransferPolicySpec,
    status=policy.DTNTransferPolicyStatus,
    description="DTNTransferPolicy asks for a Science DMZ transfer rate: a research group "
    "names a BorderLink, one of its DTN hosts and the rate to hold there. Its status says "
    "whether it was admitted (and why not) and what the link's loop measures.",
    columns=(
        ("Link", "string", ".spec.linkRef.name"),
        ("DTN host", "string", ".spec.dtnHost"),
        ("Target", "string", ".spec.targetRate"),
        ("Accepted", "string", _ACCEPTED),
        ("Reason", "string", _ACCEPTED_REASON),
        ("DTN rate", "string", ".status.state.dtnRate"),
        ("Ready", "string", _READY),
        ("Age", "date", ".metadata.creationTimestamp"),
    ),
)

RESOURCES = (BORDER_LINK, DTN_TRANSFER_POLICY)


def build_crd(resource: Resource = DTN_TRANSFER_POLICY) -> dict[str, Any]:
    """The CRD object, ready to apply."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{resource.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "scidmz"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.singular,
                "shortNames": list(resource.short_names),
                "categories": ["scidmz"],
            },
            "scope": resource.scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": name, "type": kind, "jsonPath": path}
                        for name, kind, path in resource.columns
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": resource.description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": _schema_of(resource.spec),
                                "status": _schema_of(resource.status),
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_file_name(resource: Resource) -> str:
    return f"{GROUP}_{resource.plural}.yaml"


def render_crd_yaml(resource: Resource = DTN_TRANSFER_POLICY) -> str:
    header = (
        f"# Generated by `scidmz crd` from scidmz.api.{resource.spec.__module__.rsplit('.', 1)[-1]}"
        " — do not edit by hand.\n"
        "# Regenerate with `make crds`; tests fail when this file and the models drift.\n"
    )
    return header + yaml.safe_dump(build_crd(resource), sort_keys=False, width=100)
