"""The API reference of the docs site, rendered from CustomResourceDefinitions.

The page is built from the same CRD objects the API server validates against (``scidmz crd``,
``crds/``), so every field, default and rule it shows is one the server enforces: nothing
here is written by hand, and the page cannot drift from the schema. The renderer is pure:
CRD mappings in, Markdown out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

Schema = Mapping[str, Any]

_CONSTRAINTS = (
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("pattern", "matches {}"),
    ("format", "format {}"),
)


@dataclass(frozen=True)
class ObjectSection:
    """One object of a schema: its dotted path and its own schema."""

    path: str
    schema: Schema


def anchor(path: str) -> str:
    """The HTML id a section of ``path`` gets (stable: other pages link to it)."""
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _cell(text: str) -> str:
    """Text that is safe inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


_HTML_ESCAPES = {
    "&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;", "[": "&#91;", "]": "&#93;",
    "*": "&#42;", "_": "&#95;", "`": "&#96;", "\\": "&#92;",
}  # fmt: skip


def _code(text: str) -> str:
    """Inline code that survives a table cell: HTML, with every character Markdown would
    read (a pipe splits the cell, brackets make links, stars emphasis) as an entity."""
    return "<code>" + "".join(_HTML_ESCAPES.get(c, c) for c in " ".join(text.split())) + "</code>"


def _is_object(schema: Schema) -> bool:
    return schema.get("type") == "object" and bool(schema.get("properties"))


def _item_schema(schema: Schema) -> Schema | None:
    items = schema.get("items")
    return items if schema.get("type") == "array" and isinstance(items, Mapping) else None


def objects(schema: Schema, path: str) -> Iterator[ObjectSection]:
    """Every object in ``schema`` (itself first), depth first in field order; the items of
    an array of objects are the object ``path[]``."""
    if _is_object(schema):
        yield ObjectSection(path, schema)
        for name, child in schema["properties"].items():
            yield from objects(child, f"{path}.{name}")
    items = _item_schema(schema)
    if items is not None:
        yield from objects(items, f"{path}[]")


def _type(schema: Schema, path: str, kind: str) -> str:
    items = _item_schema(schema)
    if items is not None:
        inner = (
            f"[object](#{anchor(f'{kind}.{path}[]')})"
            if _is_object(items)
            else _type(items, path, kind)
        )
        return f"array of {inner}"
    if _is_object(schema):
        return f"[object](#{anchor(f'{kind}.{path}')})"
    return str(schema.get("type", "any"))


def _details(schema: Schema) -> list[str]:
    """What a value must satisfy, each a phrase: enum, bounds, pattern, CEL rules."""
    found: list[str] = []
    if "enum" in schema:
        found.append("one of " + ", ".join(_code(str(v)) for v in schema["enum"]))
    for key, phrase in _CONSTRAINTS:
        if key in schema:
            value = schema[key]
            found.append(
                phrase.format(_code(str(value)) if key in ("pattern", "format") else value)
            )
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = ", ".join(schema.get("x-kubernetes-list-map-keys", []))
        found.append(f"a list keyed by {keys}")
    found += [_cell(rule["message"]) for rule in schema.get("x-kubernetes-validations", [])]
    return found


def _row(name: str, schema: Schema, path: str, kind: str, required: bool) -> str:
    default = schema.get("default")
    shown_default = _code(json.dumps(default)) if default is not None else ""
    description = _cell(schema.get("description", ""))
    rules = _details(schema)
    if rules:
        description += ("<br>" if description else "") + "<br>".join(
            f"*Rule:* {rule}" for rule in rules
        )
    return (
        f"| `{name}` | {_type(schema, path, kind)} | {'yes' if required else ''} | "
        f"{shown_default} | {description} |"
    )


def _section(section: ObjectSection, kind: str, level: int) -> list[str]:
    schema = section.schema
    required = set(schema.get("required", []))
    lines = [f"{'#' * level} `{section.path}` {{#{anchor(f'{kind}.{section.path}')}}}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    lines += [
        "| Field | Type | Required | Default | Description |",
        "|---|---|---|---|---|",
    ]
    for name, child in schema["properties"].items():
        lines.append(_row(name, child, f"{section.path}.{name}", kind, name in required))
    cross = schema.get("x-kubernetes-validations", [])
    if cross:
        lines += ["", "Rules across these fields, checked by the API server:", ""]
        lines += [f"- {_cell(r['message'])}" for r in cross]
    return [*lines, *_cel(section), ""]


def _cel(section: ObjectSection) -> list[str]:
    """Every CEL rule of the object and its own fields, folded away: the messages above are
    what a reader needs; the expressions are what the API server runs."""
    schema = section.schema
    rules = [("(object)", r) for r in schema.get("x-kubernetes-validations", [])]
    rules += [
        (name, r)
        for name, child in schema["properties"].items()
        for r in child.get("x-kubernetes-validations", [])
    ]
    if not rules:
        return []
    lines = ["", f'??? info "The CEL rules of `{section.path}`"', ""]
    for field, rule in rules:
        lines += [f"    - `{field}`: {_cell(rule['message'])}", ""]
        lines += ["        ```", f"        {' '.join(rule['rule'].split())}", "        ```", ""]
    return lines


def _printer_columns(version: Schema) -> list[str]:
    columns = version.get("additionalPrinterColumns", [])
    if not columns:
        return []
    lines = ["`kubectl get` shows:", "", "| Column | From |", "|---|---|"]
    lines += [f"| {c['name']} | `{c['jsonPath']}` |" for c in columns]
    return [*lines, ""]


def crd_reference(crd: Schema) -> str:
    """One CRD as Markdown: its names, then every object of spec and status as a table of
    fields (type, required, default, description and each rule the API server checks)."""
    spec = crd["spec"]
    names = spec["names"]
    lines: list[str] = []
    for version in spec["versions"]:
        root = version["schema"]["openAPIV3Schema"]
        short = ", ".join(f"`{n}`" for n in names.get("shortNames", []))
        lines += [
            f"## {names['kind']} {{#{anchor(names['kind'])}}}",
            "",
            " ".join(root.get("description", "").split()),
            "",
            f"- API: `{spec['group']}/{version['name']}`, kind `{names['kind']}`, "
            f"{spec['scope'].lower()}" + (f", short names {short}" if short else ""),
            f"- `kubectl explain {names['plural']}.spec` shows the same descriptions.",
            "",
            *_printer_columns(version),
        ]
        for top in ("spec", "status"):
            if top in root.get("properties", {}):
                for section in objects(root["properties"][top], top):
                    lines += _section(section, names["kind"], 3)
    return "\n".join(lines)


def api_reference(crds: Sequence[Schema], intro: str) -> str:
    """The API reference page: ``intro`` then each CRD."""
    body = "\n".join(crd_reference(crd) for crd in crds)
    return f"{intro.rstrip()}\n\n{body}"


def settings_reference(model: type[BaseModel], env_prefix: str) -> str:
    """A settings model as a table of environment variables: name, default, meaning."""
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "unset" if default is None else _code(str(default))
        rows.append(
            f"| `{env_prefix}{name.upper()}` | {shown} | {_cell(field.description or '')} |"
        )
    return "\n".join(rows)
