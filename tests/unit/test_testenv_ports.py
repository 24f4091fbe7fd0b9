"""free_port never hands one process the same port twice (the CI failure of a collision
between the operator's health and metrics ports)."""

from scidmz.testenv.cluster import free_port


def test_free_ports_are_distinct_within_a_process():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
