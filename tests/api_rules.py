"""Every validation rule of the API (``scidmz.api.rules.walk_rules``), each applied as a
violation to a spec that uses every optional block, for the unit tests (pydantic) and the
control-plane tests (the real API server): the BorderLink's and the policy's."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from scidmz.api.link import BorderLinkSpec
from scidmz.api.policy import DTNTransferPolicySpec
from scidmz.api.rules import PlacedRule, walk_rules
from tests.loops import link_spec, policy_spec


@dataclass(frozen=True)
class KindRule:
    kind: str
    """BorderLink or DTNTransferPolicy."""
    placed: PlacedRule


PLACED = [KindRule("BorderLink", p) for p in walk_rules(BorderLinkSpec)] + [
    KindRule("DTNTransferPolicy", p) for p in walk_rules(DTNTransferPolicySpec)
]
IDS = [f"{k.kind}:{k.placed.path or 'spec'}:{k.placed.rule.message[:40]}" for k in PLACED]


def full_link_spec() -> dict[str, Any]:
    """The example link's spec with every optional block present, so each rule's path
    exists and no other rule breaks."""
    spec = link_spec()
    spec["controller"]["desiredState"] = {"dtnRtt": "100ms", "campusRtt": "10ms"}
    spec["actuator"] = {
        "type": "tc",
        "tc": {
            "nodeName": "edge-1",
            "interface": "eth1",
            "tolerations": [{"key": "scidmz.io/border", "operator": "Exists"}],
        },
        "sim": {"address": "scidmz-target.default.svc:9560"},
    }
    spec["dtnHosts"] = [
        {
            "name": "dtn-1",
            "receiverPrefix": "203.0.113.10/32",
            "allowedNamespaces": {
                "from": "Selector",
                "selector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            },
            "shaper": {
                "type": "tc",
                "tc": {
                    "nodeName": "dtn-1",
                    "interface": "ens1f0",
                    "tolerations": [{"key": "dtn", "operator": "Exists"}],
                },
                "sim": {"address": "[2001:db8::1]:9560"},
                "failsafeRate": "600Mbps",
            },
        }
    ]
    spec["failsafe"] = {"staleAfter": "3s", "rate": "400Mbps"}
    spec["controller"]["strategy"] = "pi"  # buffer sizing needs it
    spec["buffer"] = {
        "actuator": {
            "type": "tc",
            "tc": {"nodeName": "edge-1", "interface": "eth2"},
            "sim": {"address": "scidmz-target.default.svc:9560"},
        },
        "min": "10ms",
        "max": "200ms",
        "default": "100ms",
        "weights": {"loss": 0.5, "delay": 0.5},
        "changeDetector": {"lag": 50, "threshold": 10, "influence": 0.1},
    }
    spec["telemetry"] = {
        "flowTimeout": "2s",
        "activeFlowWindow": "100ms",
        "idleTimeout": "2s",
        "rttHorizon": "1s",
        "digestHold": "10ms",
    }
    spec["tenants"] = {
        "namespaces": {
            "from": "Selector",
            "selector": {"matchExpressions": [{"key": "scidmz.io/tenant", "operator": "Exists"}]},
        }
    }
    return spec


def full_spec(kind: str) -> dict[str, Any]:
    return full_link_spec() if kind == "BorderLink" else policy_spec()


def set_dotted(node: Any, dotted: str, value: Any) -> None:
    """``node[a][b][c] = value`` for ``"a.b.c"`` (parents made as needed; ``a[]`` is the
    first item of list ``a``); None removes."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        if key.endswith("[]"):
            items = node.setdefault(key[:-2], [{}])
            node = items[0]
        else:
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
        return out
    target: Any = out
    for key in filter(None, placed.path.split(".")):
        target = target[key[:-2]][0] if key.endswith("[]") else target.setdefault(key, {})
    for dotted, value in placed.rule.violation.items():
        set_dotted(target, dotted, value)
    return out
