"""Every BorderLink and DTNTransferPolicy snippet in the README and the docs names only
fields the CRDs have: a pasted snippet is never refused for a field the docs invented or
misspelt (``stopEI`` for ``stopEi`` was). Snippets may be partial; what they name must exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.DOTALL)


def _schemas() -> dict[str, dict[str, Any]]:
    schemas = {}
    for path in (REPO / "crds").glob("scidmz.io_*.yaml"):
        crd = yaml.safe_load(path.read_text())
        version = crd["spec"]["versions"][0]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return schemas


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """The paths in ``value`` that ``schema`` does not have."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return [
                    p for k, v in value.items() for p in unknown_fields(v, extra, f"{path}.{k}")
                ]
            return []
        found = []
        for key, item in value.items():
            if key not in properties:
                found.append(f"{path}.{key}".lstrip("."))
            else:
                found += unknown_fields(item, properties[key], f"{path}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [
            p
            for k, v in enumerate(value)
            for p in unknown_fields(v, schema["items"], f"{path}[{k}]")
        ]
    return []


def _snippets() -> list[tuple[str, dict[str, Any]]]:
    kinds = set(_schemas())
    found = []
    for page in PAGES:
        for block in BLOCK.findall(page.read_text()):
            try:
                documents = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue  # a block with placeholders is not a manifest
            for document in documents:
                if isinstance(document, dict) and document.get("kind") in kinds:
                    found.append((str(page.relative_to(REPO)), document))
    return found


SNIPPETS = _snippets()


def test_the_docs_hold_snippets_of_both_kinds():
    assert {d["kind"] for _, d in SNIPPETS} == {"BorderLink", "DTNTransferPolicy"}


@pytest.mark.parametrize(
    ("page", "document"), SNIPPETS, ids=[f"{p}:{d['kind']}" for p, d in SNIPPETS]
)
def test_every_snippet_names_only_fields_of_its_crd(page, document):
    schema = _schemas()[document["kind"]]
    assert unknown_fields(document, schema) == [], f"{page}: fields the CRD does not have"


def test_a_misspelt_field_is_found():
    schema = _schemas()["BorderLink"]
    snippet = {"kind": "BorderLink", "spec": {"buffer": {"stopEI": 0.001, "stopEi": 0.001}}}
    assert unknown_fields(snippet, schema) == ["spec.buffer.stopEI"]
