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


def load_yaml_model(path: Path, model: type[M], what: str, error: type[E]) -> M:
    """Read ``path`` as YAML and validate it into ``model``; every failure (unreadable,
    not YAML, not a mapping, invalid fields) raises ``error`` with a message naming it."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as problem:
        raise error(f"cannot read {what} {path}: {problem.strerror}") from None
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
