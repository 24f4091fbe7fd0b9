"""Every validation rule of the API (``scidmz.api.rules.walk_rules``), each applied as a
violation to a policy that uses every optional block, for the unit tests (pydantic) and the
control-plane tests (the real API server)."""

from __future__ import annotations

import copy
from typing import Any

from scidmz.api.policy import DTNTransferPolicySpec
from scidmz.api.rules import PlacedRule, walk_rules

PLACED = list(walk_rules(DTNTransferPolicySpec))
IDS = [f"{p.path or 'spec'}:{p.rule.message[:48]}" for p in PLACED]


def full_spec(example: dict[str, Any]) -> dict[str, Any]:
    """The example policy's spec with every optional block present, so each rule's path
    exists and no other rule breaks."""
    spec = copy.deepcopy(example["spec"])
    spec["controller"]["desiredState"] = {"dtnRtt": "100ms", "campusRtt": "10ms"}
    spec["actuator"] = {
        "type": "sim",
        "sim": {"address": "scidmz-target.default.svc:9560"},
        "dtn": {
            "type": "sim",
            "sim": {"address": "[2001:db8::1]:9560"},
            "failsafeRate": "600Mbps",
        },
    }
    spec["failsafe"] = {"staleAfter": "3s", "rate": "400Mbps"}
    spec["telemetry"] = {
        "flowTimeout": "2s",
        "activeFlowWindow": "100ms",
        "idleTimeout": "2s",
        "rttHorizon": "1s",
        "digestHold": "10ms",
    }
    return spec


def set_dotted(node: dict[str, Any], dotted: str, value: Any) -> None:
    """``node[a][b][c] = value`` for ``"a.b.c"`` (parents made as needed); None removes."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value


def violating(spec: dict[str, Any], placed: PlacedRule) -> dict[str, Any]:
    """``spec`` with ``placed``'s rule broken (and, as far as the example goes, only it)."""
    out = copy.deepcopy(spec)
    if placed.on_field:
        set_dotted(out, placed.path, placed.rule.violation)
    else:
        for dotted, value in placed.rule.violation.items():
            set_dotted(out, f"{placed.path}.{dotted}".lstrip("."), value)
    return out
