"""The example link and policy as tests use them: spec dicts to change, and the runtime
config the operator renders from them (``scidmz.api.loop_file``, as ``scidmz lab run``)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from scidmz.api.loop_file import LoopFile, parse_loop_documents
from scidmz.api.runtime import ChannelSecurity, RuntimeConfig
from tests.conftest import REPO

LINK_NAME = "campus-border"
TENANT = "physics"
_LINK = yaml.safe_load((REPO / "examples" / "borderlink.yaml").read_text())
_POLICY = yaml.safe_load((REPO / "examples" / "dtntransferpolicy.yaml").read_text())
_TENANTS = [
    d for d in yaml.safe_load_all((REPO / "examples" / "tenants.yaml").read_text())
    if d["kind"] == "Namespace"
]  # fmt: skip


def link_spec(**changes: Any) -> dict[str, Any]:
    """examples/borderlink.yaml's spec, top-level keys replaced by ``changes``."""
    return copy.deepcopy(_LINK["spec"]) | copy.deepcopy(changes)


def policy_spec(**changes: Any) -> dict[str, Any]:
    """examples/dtntransferpolicy.yaml's spec, top-level keys replaced by ``changes``."""
    return copy.deepcopy(_POLICY["spec"]) | copy.deepcopy(changes)


def link_object(name: str = LINK_NAME, **changes: Any) -> dict[str, Any]:
    return {
        "apiVersion": _LINK["apiVersion"],
        "kind": "BorderLink",
        "metadata": {"name": name},
        "spec": link_spec(**changes),
    }


def policy_object(
    name: str = "paper-testbed", namespace: str = TENANT, **changes: Any
) -> dict[str, Any]:
    return {
        "apiVersion": _POLICY["apiVersion"],
        "kind": "DTNTransferPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": policy_spec(**changes),
    }


def loop(link: dict[str, Any] | None = None, policy: dict[str, Any] | None = None) -> LoopFile:
    """The example link (or ``link``, a spec) with the example policy (or ``policy``)."""
    spec = policy if policy is not None else policy_spec()
    return _loop_file(link if link is not None else link_spec(), [policy_object() | {"spec": spec}])


def render_policies(link: dict[str, Any], policies: list[dict[str, Any]]) -> RuntimeConfig:
    """The runtime config for ``link`` (a spec) with several policies admitted, in order
    (each its own name in the example's namespace)."""
    objects = [policy_object(f"policy-{k}") | {"spec": spec} for k, spec in enumerate(policies)]
    return _loop_file(link, objects).config("collector:1")


def _loop_file(link: dict[str, Any], policies: list[dict[str, Any]]) -> LoopFile:
    documents = [*copy.deepcopy(_TENANTS), {**link_object(), "spec": link}, *policies]
    return parse_loop_documents(documents, "tests")


def render(
    link: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
    generation: int = 1,
    collector: str = "collector:1",
    shaper: str | None = None,
    security: ChannelSecurity | None = None,
) -> RuntimeConfig:
    """The runtime config the operator renders for the example (changed) link and policy."""
    return loop(link, policy).config(collector, shaper, security, generation)


def plaintext_link_spec(**changes: Any) -> dict[str, Any]:
    """The example link talking to its switch without TLS (processes on one host)."""
    switch = {**_LINK["spec"]["switch"], "plaintext": True}
    switch.pop("tls", None)
    return link_spec(switch=switch) | copy.deepcopy(changes)
