"""Rate and duration strings of the public API, and their SI values.

The API speaks in human units (``600Mbps``, ``100ms``); everything inside scidmz is SI
(bit/s, seconds). The regular expressions here are the single source for both the CRD's
OpenAPI ``pattern`` and the CEL rules that compare two rates on the API server, so the
server and the operator can never disagree on what a string means.
"""

from __future__ import annotations

import math
import re
from typing import Final

RATE_UNITS: Final[dict[str, float]] = {
    "bps": 1.0,
    "kbps": 1e3,
    "Mbps": 1e6,
    "Gbps": 1e9,
    "Tbps": 1e12,
}
DURATION_UNITS: Final[dict[str, float]] = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}

# "[.]" instead of a backslash escape, so the same text is valid inside a CEL string literal.
_NUMBER = "[0-9]+([.][0-9]+)?"
RATE_PATTERN: Final[str] = rf"^{_NUMBER}(bps|kbps|Mbps|Gbps|Tbps)$"
DURATION_PATTERN: Final[str] = rf"^{_NUMBER}(us|ms|s|m)$"
RATE_MAX_LENGTH: Final[int] = 24

_RATE_RE = re.compile(RATE_PATTERN)
_DURATION_RE = re.compile(DURATION_PATTERN)


class UnitError(ValueError):
    """A rate or duration string that does not follow the API grammar."""


def parse_rate(text: str) -> float:
    """``"600Mbps"`` -> ``6e8`` (bit/s). Units are case-sensitive: ``MBps`` would be bytes."""
    match = _RATE_RE.match(text)
    if match is None:
        raise UnitError(
            f"invalid rate {text!r}: expected a number followed by one of "
            f"{', '.join(RATE_UNITS)} (e.g. 600Mbps, 1.5Gbps)"
        )
    unit = match.group(2)
    return float(text[: -len(unit)]) * RATE_UNITS[unit]


def parse_duration(text: str) -> float:
    """``"100ms"`` -> ``0.1`` (seconds)."""
    match = _DURATION_RE.match(text)
    if match is None:
        raise UnitError(
            f"invalid duration {text!r}: expected a number followed by one of "
            f"{', '.join(DURATION_UNITS)} (e.g. 1s, 100ms)"
        )
    unit = match.group(2)
    return float(text[: -len(unit)]) * DURATION_UNITS[unit]


def _trim(value: float) -> str:
    """Up to four significant decimals, no trailing zeros: 598.2, 1, 0.25."""
    text = f"{value:.4g}" if value < 1e4 else f"{value:.0f}"
    if "e" in text:
        text = f"{value:.0f}"
    return text


def format_rate(bps: float) -> str:
    """``5.982e8`` -> ``"598.2Mbps"``; the inverse of :func:`parse_rate` up to 4 digits."""
    if not math.isfinite(bps) or bps < 0:
        raise UnitError(f"cannot format rate {bps!r}: must be finite and >= 0")
    for unit in ("Tbps", "Gbps", "Mbps", "kbps"):
        scale = RATE_UNITS[unit]
        if bps >= scale:
            return f"{_trim(bps / scale)}{unit}"
    return f"{_trim(bps)}bps"


def format_duration(seconds: float) -> str:
    """``0.1012`` -> ``"101.2ms"``."""
    if not math.isfinite(seconds) or seconds < 0:
        raise UnitError(f"cannot format duration {seconds!r}: must be finite and >= 0")
    if seconds >= 1.0:
        return f"{_trim(seconds)}s"
    if seconds >= 1e-3 or seconds == 0:
        return f"{_trim(seconds * 1e3)}ms"
    return f"{_trim(seconds * 1e6)}us"


def cel_rate_bps(expr: str) -> str:
    """A CEL expression evaluating the rate string ``expr`` to bit/s (a double).

    Kubernetes CEL has no unit library for bit rates, so the number is taken with the
    regex ``find`` extension and scaled by the suffix. ``expr`` must already satisfy
    :data:`RATE_PATTERN` (the schema checks that before CEL runs).
    """
    scale = "1.0"
    for unit in ("bps", "kbps", "Mbps", "Gbps", "Tbps"):
        if unit == "bps":
            continue
        scale = f"({expr}.endsWith('{unit}') ? {RATE_UNITS[unit]:.1e} : {scale})"
    return f"(double({expr}.find('^{_NUMBER}')) * {scale})"
