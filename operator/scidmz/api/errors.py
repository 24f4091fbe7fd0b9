"""Readable validation errors (``spec.controller.limits.min: <message>``) and the one
loader of YAML files into models, shared by runtime configs and scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
E = TypeVar("E", bound=Exception)


def describe_validation_error(error: ValidationError, prefix: str = "") -> str:
    """Every problem as ``<dotted field>: <message>``, joined with ``; ``."""
    parts = []
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"])
        field = f"{prefix}{path}" if path else (prefix.rstrip(".") or "<root>")
        parts.append(f"{field}: {item['msg']}")
    return "; ".join(parts)


MAX_FILE_BYTES = 1 << 20
"""A config or scenario file above this is refused before parsing (they are a few kB)."""


MAX_NESTING = 32
"""The deepest a config or scenario nests (they use four or five levels); deeper is refused
while composing, before Python's recursion limit turns it into a traceback."""


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML without aliases (an alias bomb expands exponentially when validated),
    without duplicate keys (YAML would silently keep the last one), and not nested deeper
    than ``MAX_NESTING`` (a 4 kB file of 2,000 nested lists otherwise exhausts the stack)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (*name) are not allowed here", event.start_mark
            )
        if self._depth >= MAX_NESTING:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_NESTING} levels", event.start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_model(path: Path, model: type[M], what: str, error: type[E]) -> M:
    """Read ``path`` as YAML and validate it into ``model``; every failure (unreadable, too
    large, not YAML, aliases or duplicate keys, not a mapping, invalid fields) raises
    ``error`` with a message naming it."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise error(f"{what} {path} is {size} bytes: more than {MAX_FILE_BYTES} is refused")
        raw = yaml.load(path.read_text(), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except OSError as problem:
        raise error(f"cannot read {what} {path}: {problem.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{what} {path} is not UTF-8 text") from None
    except yaml.YAMLError as problem:
        raise error(f"{what} {path} is not valid YAML: {problem}") from None
    return validate_mapping(raw, model, f"{what} {path}", error)


def validate_mapping(raw: object, model: type[M], source: str, error: type[E]) -> M:
    """Validate parsed YAML/JSON (``None`` counts as empty) into ``model``; ``source`` names
    it in the message of the ``error`` raised for a non-mapping or invalid fields."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise error(f"{source} must be a mapping, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as problem:
        raise error(f"{source} is invalid: {describe_validation_error(problem)}") from None
