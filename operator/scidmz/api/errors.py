"""One readable form for validation errors: ``spec.controller.limits.min: <message>``."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(error: ValidationError, prefix: str = "") -> str:
    """Every problem as ``<dotted field>: <message>``, joined with ``; ``."""
    parts = []
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"])
        field = f"{prefix}{path}" if path else (prefix.rstrip(".") or "<root>")
        parts.append(f"{field}: {item['msg']}")
    return "; ".join(parts)
