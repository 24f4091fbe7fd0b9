"""What runs on a node for a border link: pure, from the link's spec and the node's name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scidmz.api.link import BorderLinkSpec, parse_link_spec

RoleKind = Literal["campus-shaper", "dtn-shaper", "buffer", "tap"]


@dataclass(frozen=True)
class Role:
    """One part of the link on this node and the interface it works on."""

    kind: RoleKind
    interface: str
    what: str
    """How the finding names it (``campus shaper``, ``DTN host dtn-1's cap``, ...)."""


def link_spec(document: Mapping[str, Any]) -> tuple[str, BorderLinkSpec]:
    """A BorderLink manifest (or its bare spec) as its name and validated spec; ValueError
    (pydantic's, naming the field) when it is not one."""
    if "kind" in document:
        if document.get("kind") != "BorderLink":
            raise ValueError(f"a BorderLink is wanted, got kind {document.get('kind')!r}")
        name = str((document.get("metadata") or {}).get("name", "the link"))
        return name, parse_link_spec(dict(document.get("spec") or {}))
    return "the link", parse_link_spec(dict(document))


def one_link(documents: Sequence[Any]) -> Mapping[str, Any]:
    """The one BorderLink of a YAML stream (a file may hold its policies and namespaces
    too), or a bare spec; ValueError when there is none or more than one."""
    mappings = [d for d in documents if isinstance(d, Mapping)]
    links = [d for d in mappings if d.get("kind") == "BorderLink"]
    if len(links) == 1:
        return links[0]
    if links:
        names = ", ".join(str((d.get("metadata") or {}).get("name")) for d in links)
        raise ValueError(f"it holds {len(links)} BorderLinks ({names}): give a file with one")
    if len(mappings) == 1 and "kind" not in mappings[0]:
        return mappings[0]
    raise ValueError("it holds no BorderLink")


def _node_parts(spec: BorderLinkSpec) -> list[tuple[str, Role]]:
    """Every part of the link that works on a node's interfaces: the campus shaper (where
    the controller runs), each DTN host's tc cap, BR1's buffer actuator, and a software
    tap's mirror interfaces, with its node."""
    parts: list[tuple[str, Role]] = []
    tap = spec.switch.tap
    if tap is not None:
        sides = tap.interfaces
        named: dict[str, list[str | None]] = {
            "campus": [sides.campus], "dtn": list(sides.dtn), "bottleneck": [sides.bottleneck],
            "acks": [sides.acks], "border": [sides.border],
        }  # fmt: skip
        given = {role: [i for i in found if i] for role, found in named.items()}
        parts += [(tap.node_name, role) for role in tap_roles(given)]
    campus = spec.actuator.tc if spec.actuator.type == "tc" else None
    if campus is not None:
        parts.append(
            (campus.node_name, Role("campus-shaper", campus.interface, "the campus shaper"))
        )
    for host in spec.dtn_hosts:
        cap = host.shaper.tc if host.shaper is not None and host.shaper.type == "tc" else None
        if cap is not None:
            parts.append((cap.node_name, Role("dtn-shaper", cap.interface,
                                              f"DTN host {host.name}'s cap")))  # fmt: skip
    buffer = spec.buffer.actuator if spec.buffer is not None else None
    buffer_tc = buffer.tc if buffer is not None and buffer.type == "tc" else None
    if buffer_tc is not None:
        parts.append((buffer_tc.node_name, Role("buffer", buffer_tc.interface, "BR1's buffer")))
    return parts


def link_roles(spec: BorderLinkSpec, node: str) -> list[Role]:
    """The link's parts that run on ``node`` (``_node_parts``)."""
    return [role for where, role in _node_parts(spec) if where == node]


def link_nodes(spec: BorderLinkSpec) -> list[str]:
    """Every node a part of the link runs on, for a node that holds none of it."""
    return sorted({where for where, _ in _node_parts(spec)})


def tap_roles(taps: Mapping[str, Sequence[str]]) -> list[Role]:
    """A software tap's interfaces (``scidmz target --taps``' roles: campus, dtn,
    bottleneck, acks; one border interface stands for the last two, checked once)."""
    roles: dict[str, Role] = {}
    for role, interfaces in taps.items():
        for interface in interfaces:
            roles.setdefault(interface, Role("tap", interface, f"the tap's {role} side"))
    return list(roles.values())
