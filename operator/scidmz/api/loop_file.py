"""A link and its policies in one YAML file: what ``scidmz lab run``, the demo and the
tests run a loop from, exactly as the operator would render it.

The file holds one ``BorderLink``, the ``DTNTransferPolicy`` documents that name it, and
optionally the ``Namespace`` documents they live in (``---`` between documents, as
``kubectl apply -f`` takes them). Policies are admitted as the operator admits them (first
come, first served in file order; a namespace carries its labels from the file and the
``kubernetes.io/metadata.name`` label the API server sets); a file with a refused policy is
an error that says why, never a loop that silently holds less.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scidmz.api import link as link_api
from scidmz.api import policy as policy_api
from scidmz.api.admission import PolicyView, admit, admitted
from scidmz.api.errors import describe_validation_error
from scidmz.api.link import BorderLinkSpec, parse_link_spec
from scidmz.api.policy import DTNTransferPolicySpec, parse_spec
from scidmz.api.runtime import Admitted, ChannelSecurity, RuntimeConfig, resolve_runtime_config

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class LoopFileError(ValueError):
    """A loop file that cannot run; the message names the document and the problem."""


@dataclass(frozen=True)
class LoopFile:
    """A parsed link and its admitted policies."""

    link_name: str
    link: BorderLinkSpec
    policies: tuple[Admitted, ...]

    @property
    def policy(self) -> Admitted:
        """The one admitted policy (a link holds one at a time; see api.admission)."""
        if not self.policies:
            raise LoopFileError(f"BorderLink {self.link_name}: no policy is admitted")
        return self.policies[0]

    def config(
        self,
        collector_address: str,
        dtn_shaper_address: str | None = None,
        security: ChannelSecurity | None = None,
        generation: int = 1,
    ) -> RuntimeConfig:
        return resolve_runtime_config(
            self.link_name, generation, self.link, self.policies, collector_address,
            dtn_shaper_address, security,
        )  # fmt: skip

    def with_link(self, **changes: Any) -> LoopFile:
        """The file with link spec fields replaced (snake_case names, parsed values)."""
        return replace(self, link=self.link.model_copy(update=changes))

    def with_strategy(self, strategy: str) -> LoopFile:
        controller = self.link.controller.model_copy(update={"strategy": strategy})
        return self.with_link(controller=controller)

    def with_policies_on(self, hosts: Collection[str]) -> LoopFile:
        """The file with only the policies on ``hosts`` admitted (the others removed, as
        their tenants would delete them)."""
        return replace(self, policies=tuple(p for p in self.policies if p.spec.dtn_host in hosts))

    def retargeted(self, target_bps: float) -> LoopFile:
        """The admitted policy with spec.targetRate = ``target_bps``, as a tenant edits it."""
        first = self.policy
        spec = first.spec.model_copy(update={"target_rate": f"{target_bps:.0f}bps"})
        return replace(self, policies=(replace(first, spec=spec), *self.policies[1:]))


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        loaded = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as error:
        raise LoopFileError(f"{path}: {error}") from None
    documents = [d for d in loaded if d is not None]
    for k, document in enumerate(documents):
        if not isinstance(document, dict):
            raise LoopFileError(f"{path}: document {k + 1} is not a mapping")
    return documents


def parse_loop_documents(documents: list[dict[str, Any]], source: str) -> LoopFile:
    links = [d for d in documents if d.get("kind") == link_api.KIND]
    known = (link_api.KIND, policy_api.KIND, "Namespace")
    others = [d.get("kind") for d in documents if d.get("kind") not in known]
    if others:
        raise LoopFileError(f"{source}: unexpected kind(s) {', '.join(map(str, others))}")
    if len(links) != 1:
        raise LoopFileError(f"{source}: needs exactly one BorderLink, found {len(links)}")
    link_doc = links[0]
    link_name = str((link_doc.get("metadata") or {}).get("name", ""))
    if not link_name:
        raise LoopFileError(f"{source}: the BorderLink has no metadata.name")
    try:
        link = parse_link_spec(dict(link_doc.get("spec") or {}))
    except ValidationError as error:
        raise LoopFileError(
            f"{source}: BorderLink {link_name}: {describe_validation_error(error, 'spec.')}"
        ) from None
    views: list[PolicyView] = []
    specs: dict[tuple[str, str], DTNTransferPolicySpec] = {}
    for order, document in enumerate(d for d in documents if d.get("kind") == policy_api.KIND):
        meta = document.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", "default"))
        try:
            spec = parse_spec(dict(document.get("spec") or {}))
        except ValidationError as error:
            raise LoopFileError(
                f"{source}: DTNTransferPolicy {namespace}/{name}: "
                f"{describe_validation_error(error, 'spec.')}"
            ) from None
        if spec.link_ref.name != link_name:
            raise LoopFileError(
                f"{source}: DTNTransferPolicy {namespace}/{name} names BorderLink "
                f"{spec.link_ref.name}, not {link_name}"
            )
        views.append(PolicyView(namespace, name, f"{order:08d}", spec))
        specs[(namespace, name)] = spec
    declared = {
        str((d.get("metadata") or {}).get("name", "")): dict(
            (d.get("metadata") or {}).get("labels") or {}
        )
        for d in documents
        if d.get("kind") == "Namespace"
    }
    labels = {
        v.namespace: {**declared.get(v.namespace, {}), NAMESPACE_NAME_LABEL: v.namespace}
        for v in views
    }
    decisions = admit(link_name, link, views, labels)
    refused = [
        f"{k[0]}/{k[1]}: {d.reason}: {d.message}" for k, d in decisions.items() if not d.accepted
    ]
    if refused:
        raise LoopFileError(f"{source}: refused: " + "; ".join(refused))
    chosen = tuple(Admitted(v.namespace, v.name, specs[v.key]) for v in admitted(views, decisions))
    return LoopFile(link_name, link, chosen)


def load_loop_file(path: Path) -> LoopFile:
    """Read a link and its policies; ``LoopFileError`` naming what is wrong."""
    return parse_loop_documents(_documents(path), str(path))
