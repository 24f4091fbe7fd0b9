"""Every manifest a user is shown is one the API server takes as shown: each YAML block of
the README, the docs site and the chart's README that holds Kubernetes objects, and each
file of ``examples/`` that does, is applied to the test cluster with the CRDs and the
chart's ValidatingAdmissionPolicy, as a user would paste it: namespaces first, then links,
then the policies that name them (the admission policy reads the link), after
``examples/tenants.yaml`` as the install page has it.

A block whose fence follows ``<!-- docs-test: refused -->`` must be refused; one after
``<!-- docs-test: fragment -->`` is part of a manifest and is not applied (the names of its
fields are still checked, by tests/docs/test_snippets.py). Blocks without ``apiVersion`` and
``kind`` are fragments as they stand."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.conftest import REPO, wait_for

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
         REPO / "charts" / "scidmz" / "README.md"]  # fmt: skip
EXAMPLES = sorted(p for p in (REPO / "examples").rglob("*.yaml") if "gitops" not in p.parts)
"""The examples (Argo CD's and Flux's objects need their CRDs: tests/k8s/test_gitops.py)."""
TENANTS = REPO / "examples" / "tenants.yaml"
BLOCK = re.compile(r"(?:<!-- docs-test: (\w+) -->\n)?```ya?ml\n(.*?)```", re.DOTALL)
MARKS = {"refused", "fragment"}
ORDER = {"Namespace": 0, "BorderLink": 2, "DTNTransferPolicy": 3}
"""Kinds applied in this order (everything else, RBAC and quotas, at 1)."""


@dataclass(frozen=True)
class Manifest:
    where: str
    objects: list[dict[str, Any]]
    refused: bool = False


def _objects(text: str) -> list[dict[str, Any]]:
    return [
        d for d in yaml.safe_load_all(text)
        if isinstance(d, dict) and "apiVersion" in d and "kind" in d
    ]  # fmt: skip


def manifests() -> list[Manifest]:
    """What the pages and examples show, marked fragments left out."""
    found = []
    for page in PAGES:
        for k, (mark, text) in enumerate(BLOCK.findall(page.read_text())):
            assert not mark or mark in MARKS, f"{page}: unknown docs-test mark {mark!r}"
            objects = _objects(text)
            if objects and mark != "fragment":
                where = f"{page.relative_to(REPO)} block {k + 1}"
                found.append(Manifest(where, objects, refused=mark == "refused"))
    for example in EXAMPLES:
        if objects := _objects(example.read_text()):
            found.append(Manifest(str(example.relative_to(REPO)), objects))
    return found


MANIFESTS = manifests()
LINKS = {
    o["metadata"]["name"]: o for m in MANIFESTS if not m.refused
    for o in m.objects if o["kind"] == "BorderLink"
}  # fmt: skip
"""Every link shown anywhere, by name: a page's policy may name a link another page shows."""


def _apply(plane, objects: list[dict[str, Any]]):
    return plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects), check=False)


def _admission_knows(plane, link: str, namespace: str) -> None:
    """Until the admission policy has the link among its params (an informer: a link
    created a moment ago may not be there yet, and a policy for a link it does not know is
    let through); probed with a dry run that only the admission policy refuses."""
    probe = {
        "apiVersion": "scidmz.io/v1alpha1", "kind": "DTNTransferPolicy",
        "metadata": {"name": "docs-test-probe", "namespace": namespace},
        "spec": {"linkRef": {"name": link}, "dtnHost": "docs-test-no-such-host",
                 "targetRate": "1Mbps", "congestionControl": "cubic"},
    }  # fmt: skip
    wait_for(
        lambda: "ValidatingAdmissionPolicy" in plane.kubectl(
            "apply", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(probe),
            check=False,
        ).stderr,
        20, f"the admission policy to know BorderLink {link}",
    )  # fmt: skip


def _delete(plane, objects: list[dict[str, Any]]) -> None:
    """Policies first; links without waiting (where an operator runs, it takes a link's
    loop down first, tens of seconds with DTN shapers): ``_gone`` waits for a link only
    when a later manifest shows one of the same name."""
    for obj in sorted(objects, key=lambda o: -ORDER.get(o["kind"], 1)):
        if obj["kind"] == "Namespace":
            continue  # tenants' namespaces stay for the other manifests
        namespace = obj["metadata"].get("namespace")
        where = ["-n", namespace] if namespace else []
        wait = "--wait=false" if obj["kind"] == "BorderLink" else "--timeout=60s"
        plane.kubectl(
            "delete", obj["kind"].lower(), obj["metadata"]["name"], *where,
            "--ignore-not-found", wait, check=False,
        )  # fmt: skip


def _gone(plane, links: list[dict[str, Any]]) -> None:
    """Until no link of these names is left from an earlier manifest (still being deleted)."""
    for link in links:
        name = link["metadata"]["name"]
        wait_for(
            lambda name=name: plane.kubectl("get", "borderlink", name, check=False).returncode,
            180, f"BorderLink {name} of an earlier manifest to be deleted",
        )  # fmt: skip


@pytest.fixture(scope="module")
def tenants(plane):
    """``examples/tenants.yaml``, applied as the install page says before any link."""
    objects = _objects(TENANTS.read_text())
    _apply(plane, objects)
    yield
    _delete(plane, objects)


def apply_as_shown(plane, manifest: Manifest) -> str | None:
    """Apply a manifest as a user following the pages would; what went otherwise than the
    page says (None: as it says), everything applied removed again."""
    objects = sorted(manifest.objects, key=lambda o: ORDER.get(o["kind"], 1))
    policies = [o for o in objects if o["kind"] == "DTNTransferPolicy"]
    shown = {o["metadata"]["name"] for o in objects if o["kind"] == "BorderLink"}
    named = {p["spec"]["linkRef"]["name"] for p in policies}
    if missing := named - shown - set(LINKS):
        return f"{manifest.where}: its policies name links nothing shows: {missing}"
    # a policy's link shown elsewhere goes in first, as a user following the pages has it
    applied = [LINKS[name] for name in sorted(named - shown)] + objects
    _gone(plane, [o for o in applied if o["kind"] == "BorderLink"])
    try:
        result = _apply(plane, [o for o in applied if o["kind"] != "DTNTransferPolicy"])
        if policies and result.returncode == 0:
            for policy in policies:
                namespace = policy["metadata"].get("namespace", "default")
                _admission_knows(plane, policy["spec"]["linkRef"]["name"], namespace)
            result = _apply(plane, policies)
        if (result.returncode != 0) != manifest.refused:
            return (
                f"{manifest.where}: {result.stderr.strip() or 'taken, where it is shown refused'}"
            )
        return None
    finally:
        _delete(plane, applied)


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.where for m in MANIFESTS])
def test_each_manifest_shown_is_taken_as_shown(plane, admission_policy, tenants, manifest):
    assert apply_as_shown(plane, manifest) is None


def test_a_stale_manifest_is_caught(plane, admission_policy, tenants):
    link = LINKS["campus-border"]
    policy = {
        "apiVersion": "scidmz.io/v1alpha1", "kind": "DTNTransferPolicy",
        "metadata": {"name": "stale", "namespace": "physics"},
        "spec": {"linkRef": {"name": "campus-border"}, "dtnHost": "no-such-host",
                 "targetRate": "100Mbps", "congestionControl": "cubic"},
    }  # fmt: skip
    # a host the link does not have: the admission policy refuses it, so does this test
    error = apply_as_shown(plane, Manifest("page", [link, policy]))
    assert error is not None and "has no DTN host no-such-host" in error
    # a field the CRD does not have
    wrong = {**link, "spec": {**link["spec"], "capacityy": "1Gbps"}}
    error = apply_as_shown(plane, Manifest("page", [wrong]))
    assert error is not None and "capacityy" in error
    # a block shown as refused that the API server takes
    assert "shown refused" in (apply_as_shown(plane, Manifest("page", [link], True)) or "")
    # a policy naming a link nothing shows
    elsewhere = {**policy, "spec": {**policy["spec"], "linkRef": {"name": "nowhere"}}}
    assert "nothing shows" in (apply_as_shown(plane, Manifest("page", [elsewhere])) or "")
    _gone(plane, [link])
    assert _apply(plane, [link]).returncode == 0  # nothing was left behind to clash with
    _delete(plane, [link])


def test_every_source_is_read():
    """The pages' manifests and the examples are all found (a changed fence or a moved
    folder must not empty this test)."""
    wheres = [m.where for m in MANIFESTS]
    assert "examples/tenants.yaml" in wheres and "examples/three-dtns.yaml" in wheres
    assert any(w.startswith("README.md block") for w in wheres)
    assert sum(w.startswith("docs/") for w in wheres) >= 4
    assert {"campus-border", "edge-10g", "science-dmz"} <= set(LINKS)


def test_a_mark_before_a_fence_is_read(tmp_path: Path):
    text = (
        "<!-- docs-test: fragment -->\n```yaml\napiVersion: v1\nkind: Namespace\n```\n"
        "<!-- docs-test: refused -->\n```yaml\napiVersion: v1\nkind: Namespace\n```\n"
        "```yaml\nspec: {capacity: 1Gbps}\n```\n"
    )
    marks = [mark for mark, _ in BLOCK.findall(text)]
    assert marks == ["fragment", "refused", ""]
