"""Host-network pods of different links on one node never share a port (k8s.host_ports)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scidmz.api.link import HostPortAllocation
from scidmz.k8s.host_ports import NoFreeHostPort, allocate_host_ports


def _a(workload, node, port):
    return HostPortAllocation(workload=workload, node=node, port=port)


def test_pairs_are_handed_out_per_node_and_kept():
    first = allocate_host_ports(
        [("controller", "edge-1"), ("dtn-shaper-d", "edge-1")], [], [], 9500, 10
    )
    assert [a.port for a in first] == [9500, 9502]
    # another link on the same node gets the next pairs; on another node, the first
    other = allocate_host_ports([("controller", "edge-1")], [], first, 9500, 10)
    assert [a.port for a in other] == [9504]
    elsewhere = allocate_host_ports([("controller", "edge-2")], [], first, 9500, 10)
    assert [a.port for a in elsewhere] == [9500]
    # a pass that keeps its allocations changes nothing, even once the others moved on
    assert allocate_host_ports([("controller", "edge-1")], other, [], 9500, 10) == other


def test_a_workload_that_moves_node_gets_a_pair_there_and_dropped_ones_go():
    kept = [_a("controller", "edge-1", 9502), _a("dtn-shaper-d", "dtn-1", 9500)]
    moved = allocate_host_ports(
        [("controller", "edge-2")], kept, [_a("x", "edge-2", 9500)], 9500, 10
    )
    assert moved == [_a("controller", "edge-2", 9502)]


def test_a_full_node_is_a_clear_refusal():
    taken = [_a(f"w{k}", "edge-1", 9500 + 2 * k) for k in range(3)]
    with pytest.raises(NoFreeHostPort, match=r"all 3 pairs from 9500 are taken by other links"):
        allocate_host_ports([("controller", "edge-1")], [], taken, 9500, 3)


@given(st.lists(st.lists(st.sampled_from(["edge-1", "edge-2"]), max_size=3), max_size=6))
def test_no_two_links_ever_share_a_port_on_a_node(links):
    allocated: list[HostPortAllocation] = []
    for nodes in links:
        wanted = [(f"w{j}", node) for j, node in enumerate(nodes)]
        allocated += allocate_host_ports(wanted, [], allocated, 9500, 100)
    pairs = [(a.node, a.port) for a in allocated]
    assert len(pairs) == len(set(pairs))
