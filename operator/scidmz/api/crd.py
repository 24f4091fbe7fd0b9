"""Generate the DTNTransferPolicy CustomResourceDefinition from the pydantic models.

``crds/scidmz.io_dtntransferpolicies.yaml`` is the output of :func:`render_crd_yaml`; a test
fails when the two drift (regenerate with ``make crds``). Pydantic's JSON Schema is turned
into a Kubernetes *structural* schema: references inlined, ``Optional`` unwrapped, titles and
``additionalProperties: false`` dropped (unknown fields are pruned by the structural schema,
and rejected outright under ``fieldValidation=Strict``, which kubectl uses by default).
"""

from __future__ import annotations

from typing import Any

import yaml

from scidmz.api.policy import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    DTNTransferPolicySpec,
    DTNTransferPolicyStatus,
)

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
    "required",
    "properties",
    "items",
    "format",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
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


def build_crd() -> dict[str, Any]:
    """The CRD object, ready to apply."""
    spec_schema = _schema_of(DTNTransferPolicySpec)
    status_schema = _schema_of(DTNTransferPolicyStatus)
    ready = '.status.conditions[?(@.type=="Ready")].status'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "scidmz"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["scidmz"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Target", "type": "string", "jsonPath": ".spec.targetRate"},
                        {
                            "name": "Capacity",
                            "type": "string",
                            "jsonPath": ".spec.bottleneckCapacity",
                        },
                        {"name": "DTN rate", "type": "string", "jsonPath": ".status.state.dtnRate"},
                        {
                            "name": "Campus limit",
                            "type": "string",
                            "jsonPath": ".status.state.campusRateLimit",
                        },
                        {"name": "Ready", "type": "string", "jsonPath": ready},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "DTNTransferPolicy keeps a Science DMZ transfer "
                            "(DTN) at a target rate on a bottleneck it shares with campus "
                            "traffic, by shaping the campus aggregate with a machine-learning "
                            "controller fed by P4 telemetry.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    header = (
        "# Generated by `scidmz crd` from scidmz.api.policy — do not edit by hand.\n"
        "# Regenerate with `make crds`; tests fail when this file and the models drift.\n"
    )
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)
