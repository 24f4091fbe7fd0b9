"""Which namespaces may attach a policy to a link (or ask for one of its DTN hosts).

Modelled on the Gateway API's ``allowedRoutes.namespaces``: ``from`` is ``All``,
``Selector`` (a Kubernetes label selector over the namespace's labels) or ``None``. The
same rule is written twice, as everywhere in this API: :func:`namespace_allowed` is what
the operator decides in status, and :func:`cel_namespace_allowed` is the CEL the chart's
ValidatingAdmissionPolicy evaluates, so the API server refuses the policy before it is
stored. ``kubernetes.io/metadata.name`` (set on every namespace by the API server) selects
namespaces by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from scidmz.api.rules import Rule
from scidmz.api.types import ApiModel

LabelKey = str
SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class LabelSelectorRequirement(ApiModel):
    """One requirement of a label selector (metav1.LabelSelectorRequirement)."""

    key: LabelKey = Field(min_length=1, max_length=317, description="The label key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Values for In and NotIn (non-empty); empty for Exists and DoesNotExist.",
    )

    RULES = (
        Rule(
            cel="(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
            check=lambda r: (r.operator in ("In", "NotIn")) == bool(r.values),
            message="values must be non-empty for In and NotIn, and empty for Exists and "
            "DoesNotExist",
            violation={"key": "team", "operator": "In", "values": []},
            field_path=".values",
        ),
    )


class LabelSelector(ApiModel):
    """A label selector (metav1.LabelSelector); every given term must match, and an empty
    selector matches every namespace."""

    match_labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="Labels the namespace must carry with exactly these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=16, description="Requirements, all of which must hold."
    )


NamespacesFrom = Literal["All", "Selector", "None"]


class NamespaceSelection(ApiModel):
    """Which namespaces may do something: all of them, those a selector matches, or none."""

    from_: NamespacesFrom = Field(
        default="None",
        alias="from",
        description="All: every namespace; Selector: the namespaces `selector` matches; "
        "None: no namespace (the default, so a new link admits nothing until its "
        "administrators say who may use it).",
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="Namespace label selector; required when from is Selector. Select by "
        "name with the label kubernetes.io/metadata.name.",
    )

    RULES = (
        Rule(
            cel="!has(self.from) || self.from != 'Selector' || has(self.selector)",
            check=lambda s: s.from_ != "Selector" or s.selector is not None,
            message="selector is required when from is Selector",
            violation={"from": "Selector", "selector": None},
            field_path=".selector",
            reason="FieldValueRequired",
        ),
    )


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics over ``labels``."""
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        if requirement.operator == "In":
            ok = present and labels[requirement.key] in requirement.values
        elif requirement.operator == "NotIn":
            ok = not present or labels[requirement.key] not in requirement.values
        elif requirement.operator == "Exists":
            ok = present
        else:
            ok = not present
        if not ok:
            return False
    return True


def namespace_allowed(selection: NamespaceSelection, labels: Mapping[str, str]) -> bool:
    if selection.from_ == "All":
        return True
    if selection.from_ == "Selector" and selection.selector is not None:
        return selector_matches(selection.selector, labels)
    return False


def cel_namespace_allowed(selection: str, labels: str) -> str:
    """CEL: the ``NamespaceSelection`` at ``selection`` admits a namespace with ``labels``
    (a map(string, string) expression). Mirrors :func:`namespace_allowed`."""
    selector = f"{selection}.selector"
    match_labels = (
        f"(!has({selector}.matchLabels) || {selector}.matchLabels.all(k, k in {labels} && "
        f"{labels}[k] == {selector}.matchLabels[k]))"
    )
    requirement = (
        f"e.operator == 'In' ? (e.key in {labels} && {labels}[e.key] in e.values) : "
        f"e.operator == 'NotIn' ? (!(e.key in {labels}) || !({labels}[e.key] in e.values)) : "
        f"e.operator == 'Exists' ? (e.key in {labels}) : !(e.key in {labels})"
    )
    match_expressions = (
        f"(!has({selector}.matchExpressions) || {selector}.matchExpressions.all(e, {requirement}))"
    )
    return (
        f"(has({selection}.from) && {selection}.from == 'All') || "
        f"(has({selection}.from) && {selection}.from == 'Selector' && has({selector}) && "
        f"{match_labels} && {match_expressions})"
    )
