"""The ValidatingAdmissionPolicy that refuses, before anything is stored, a policy its link
would refuse on its own: from a namespace the link does not allow, for a DTN host the link
does not have or does not allow that namespace, or with a target at or above the link's
capacity.

It runs in the API server (CEL; no webhook to keep up), once per BorderLink
(``paramRef.selector`` matches them all; each link checks only the policies that name it),
and is the CEL twin of :func:`scidmz.api.admission._static_check`, which the operator
applies to what is already stored. A policy naming a link that does not exist yet is let
through (``parameterNotFoundAction: Allow``, and no link says no): GitOps applies in any
order, and the operator answers ``LinkNotFound`` in status. The chart ships it, generated
from here (``make crds``); a test keeps the two equal and another runs both sides against
the same cases on a real API server.
"""

from __future__ import annotations

from typing import Any

from scidmz.api import link, policy
from scidmz.api.selection import cel_namespace_allowed
from scidmz.api.types import GROUP, VERSION
from scidmz.api.units import cel_rate_bps

_MINE = "variables.mine"
_LABELS = "variables.labels"
_TENANTS = "params.spec.tenants.namespaces"
_HOST = "variables.host"


def _guarded(expression: str) -> str:
    """Only the link a policy names judges it."""
    return f"!{_MINE} || ({expression})"


VALIDATIONS: tuple[dict[str, str], ...] = (
    {
        "expression": _guarded(
            f"has(params.spec.tenants) && has({_TENANTS}) && "
            f"({cel_namespace_allowed(_TENANTS, _LABELS)})"
        ),
        "messageExpression": "'spec.linkRef.name: BorderLink ' + params.metadata.name + "
        "' does not allow policies from namespace ' + namespaceObject.metadata.name + "
        "' (its spec.tenants.namespaces)'",
        "reason": "Forbidden",
    },
    {
        "expression": _guarded(f"size({_HOST}) > 0"),
        "messageExpression": "'spec.dtnHost: BorderLink ' + params.metadata.name + "
        "' has no DTN host ' + object.spec.dtnHost",
        "reason": "Invalid",
    },
    {
        "expression": _guarded(
            f"{_HOST}.all(h, !has(h.allowedNamespaces) || "
            f"({cel_namespace_allowed('h.allowedNamespaces', _LABELS)}))"
        ),
        "messageExpression": "'spec.dtnHost: namespace ' + namespaceObject.metadata.name + "
        "' may not ask for DTN host ' + object.spec.dtnHost + ' of BorderLink ' + "
        "params.metadata.name + ' (its dtnHosts[].allowedNamespaces)'",
        "reason": "Forbidden",
    },
    {
        "expression": _guarded(
            f"{cel_rate_bps('object.spec.targetRate')} < {cel_rate_bps('params.spec.capacity')}"
        ),
        "messageExpression": "'spec.targetRate: ' + object.spec.targetRate + "
        "' is not below the capacity of BorderLink ' + params.metadata.name + ' (' + "
        "params.spec.capacity + ')'",
        "reason": "Invalid",
    },
)


def build_policy(name: str) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy object."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": f"{GROUP}/{VERSION}", "kind": link.KIND},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [policy.PLURAL],
                    }
                ]
            },
            "variables": [
                {"name": "mine", "expression": "params.metadata.name == object.spec.linkRef.name"},
                {
                    "name": "labels",
                    "expression": "has(namespaceObject.metadata.labels) ? "
                    "namespaceObject.metadata.labels : {}",
                },
                {
                    "name": "host",
                    "expression": "params.spec.dtnHosts.filter(h, h.name == object.spec.dtnHost)",
                },
            ],
            "validations": [dict(v) for v in VALIDATIONS],
        },
    }


def build_binding(name: str, policy_name: str) -> dict[str, Any]:
    """Its binding: every BorderLink is a parameter, and refusals are denials."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
        },
    }


_NAME = '{{ include "scidmz.fullname" . }}-tenants'
_LABELS_MARK = "LABELS_GO_HERE"


def render_chart_template() -> str:
    """``charts/scidmz/templates/admission-policy.yaml``: the two objects with the release's
    names and labels filled in by Helm."""
    import yaml

    documents = []
    for obj in (build_policy(_NAME), build_binding(_NAME, _NAME)):
        obj["metadata"]["labels"] = _LABELS_MARK
        text = yaml.safe_dump(obj, sort_keys=False, width=100)
        documents.append(
            text.replace(
                f"  labels: {_LABELS_MARK}\n",
                '  labels:\n    {{- include "scidmz.labels" . | nindent 4 }}\n',
            )
        )
    return (
        "{{- if .Values.admissionPolicy.enabled }}\n"
        "# Generated by `scidmz crd` from scidmz.api.admission_policy — do not edit by hand.\n"
        "# Refuses a DTNTransferPolicy its BorderLink does not allow, before it is stored.\n"
        + "---\n".join(documents)
        + "{{- end }}\n"
    )
