"""The lab's scenario: a simulator scenario file with the command line's overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scidmz.netsim.scenario import Scenario, load_scenario, parse_scenario

DEFAULT_BOTTLENECK = "300Mbps"
"""The lab's bottleneck when nothing else is given: 1 Gb/s needs a quiet machine."""


def lab_scenario(path: Path | None, overrides: dict[str, Any]) -> Scenario:
    """The scenario file (or the paper's testbed at 300 Mb/s), with the command line's
    overrides applied as dotted fields (``bottleneck.capacity_bps``; None: not given);
    invalid input raises ``ScenarioError``."""
    raw: dict[str, Any] = (
        load_scenario(path).model_dump(exclude_unset=True) if path is not None else {}
    )
    raw.setdefault("bottleneck", {}).setdefault("capacity_bps", DEFAULT_BOTTLENECK)
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, field = dotted.split(".")
        raw.setdefault(section, {})[field] = value
    return parse_scenario(raw, str(path) if path else "lab scenario")
