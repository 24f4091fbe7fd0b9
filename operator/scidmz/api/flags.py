"""Numeric command-line flags that refuse what no config would accept.

Click turns ``--speedup nan`` or ``--duration inf`` into floats without a word; every float
flag of ``scidmz`` takes ``callback=within(low, high)`` so such a value, a negative one or
an absurd one stops the command with exit 2 naming the flag, before anything starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import typer


def within(
    low: float, high: float, low_open: bool = True
) -> Callable[[float | None], float | None]:
    """A typer callback accepting finite values in (low, high] (or [low, high])."""

    def check(value: float | None) -> float | None:
        if value is None:
            return value
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            bracket = "(" if low_open else "["
            raise typer.BadParameter(
                f"must be a finite number in {bracket}{low:g}, {high:g}], got {value!r}"
            )
        return value

    return check


def host_port(value: str | None) -> str | None:
    """A typer callback for ``host:port`` flags (``--listen``): the API's own rule, so a
    port of 99999 or 0 stops the command naming the flag instead of binding elsewhere."""
    if value is None or value == "":
        return value
    from pydantic import TypeAdapter, ValidationError

    from scidmz.api.types import HostPort

    try:
        TypeAdapter(HostPort).validate_python(value)
    except ValidationError as error:
        reasons = "; ".join(item["msg"] for item in error.errors())
        raise typer.BadParameter(f"{value!r} is not host:port ({reasons})") from None
    return value
