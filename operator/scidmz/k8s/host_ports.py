"""Ports on a node's own network for the links' host-network pods, so two never collide.

A tc controller (the campus shaper) and a DTN shaper agent run on their node's network,
where a port is the node's, not the pod's: two links shaping on one node once crash-looped
on the same fixed ports. Each such workload gets a pair (HTTP, gRPC = HTTP + 1) from a
range the operator owns, and keeps it for the link's life: it is recorded in the link's
status, and a new allocation avoids every pair any other link records on that node. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scidmz.api.link import HostPortAllocation

PORTS_PER_WORKLOAD = 2


class NoFreeHostPort(Exception):
    """Every pair of the range is taken on that node."""


def allocate_host_ports(
    wanted: Sequence[tuple[str, str]],
    kept: Iterable[HostPortAllocation],
    taken: Iterable[HostPortAllocation],
    base: int,
    pairs: int,
) -> list[HostPortAllocation]:
    """A pair for each ``(workload, node)`` in ``wanted``: the one ``kept`` from before
    when it is on the same node, else the lowest pair free on that node of ``pairs``
    starting at ``base`` (``taken`` lists the other links' pairs). Allocations of
    workloads no longer wanted are dropped."""
    mine = {(a.workload, a.node): a for a in kept}
    used: dict[str, set[int]] = {}
    for allocation in taken:
        used.setdefault(allocation.node, set()).add(allocation.port)
    out: list[HostPortAllocation] = []
    for workload, node in wanted:
        before = mine.get((workload, node))
        on_node = used.setdefault(node, set())
        if before is not None and before.port not in on_node:
            out.append(before)
            on_node.add(before.port)
            continue
        for k in range(pairs):
            port = base + PORTS_PER_WORKLOAD * k
            if port not in on_node:
                on_node.add(port)
                out.append(HostPortAllocation(workload=workload, node=node, port=port))
                break
        else:
            raise NoFreeHostPort(
                f"no free host port pair for {workload} on node {node}: all {pairs} pairs "
                f"from {base} are taken by other links"
            )
    return out
