#!/usr/bin/env python3
"""Regenerate the values table of charts/scidmz/README.md from values.yaml (`make chart-docs`).

Each key's description is the `# --` comment block above it in values.yaml (helm-docs'
convention); its default is the parsed value. The table sits between the README's
`<!-- values:start -->` and `<!-- values:end -->` markers. `--check` exits 1 (naming what
changed) when the README is not what values.yaml generates, as the tests do.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "scidmz"
START, END = "<!-- values:start -->", "<!-- values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")


def descriptions(text: str) -> dict[str, str]:
    """Dotted key -> its `# --` comment (joined), from the raw values.yaml."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if match is None:
            comment = None if not stripped else comment
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if comment is not None:
            found[".".join(k for _, k in stack)] = " ".join(comment)
        comment = None
    return found


def _rows(node: Any, described: dict[str, str], key: str = "") -> list[tuple[str, Any]]:
    """Keys to document: the leaves, and a documented map as one row (a securityContext)."""
    if isinstance(node, dict) and node and (not key or key not in described):
        return [
            row for k, v in node.items() for row in _rows(v, described, f"{key}.{k}".lstrip("."))
        ]
    return [(key, node)]


def undocumented(values_text: str) -> list[str]:
    described = descriptions(values_text)
    return [k for k, _ in _rows(yaml.safe_load(values_text), described) if k not in described]


def _type(value: Any) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"),
                       (list, "list"), (dict, "object")):  # fmt: skip
        if isinstance(value, kind):
            return name
    return "null"


def table(values_text: str) -> str:
    described = descriptions(values_text)
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, value in _rows(yaml.safe_load(values_text), described):
        default = json.dumps(value)
        rows.append(f"| `{key}` | {_type(value)} | `{default}` | {described.get(key, '')} |")
    return "\n".join(rows)


def render(readme: str, values_text: str) -> str:
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(values_text)}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the README is stale")
    args = parser.parse_args()
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    values_text = (CHART / "values.yaml").read_text()
    generated = render(readme, values_text)
    missing = undocumented(values_text)
    if missing:
        print(f"values.yaml: no `# --` description for {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.check:
        if generated != readme:
            print(f"{readme_path} is stale: run `make chart-docs`", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(generated)
    print(f"wrote {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
