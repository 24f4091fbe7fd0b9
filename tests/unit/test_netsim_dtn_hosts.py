"""Several DTN hosts on one link in the twin: each its own streams, RTT, congestion control,
schedule, cap and class at the tap."""

import ipaddress
import math

import numpy as np
import pytest

from scidmz.netsim import layout
from scidmz.netsim.scenario import ScenarioError, parse_scenario
from scidmz.netsim.simulator import Simulator
from scidmz.switch.netsim_source import NetsimSource, Wiring

THREE = {
    "bottleneck": {"capacity_bps": "1Gbps"},
    "campus": {"long_flows": 20},
    "dtn": {"name": "climate", "streams": 4, "base_rtt_s": "100ms", "rate_limit_bps": "300Mbps"},
    "more_dtns": [
        {"name": "genomics", "streams": 4, "base_rtt_s": "50ms", "rate_limit_bps": "200Mbps",
         "start_s": 3, "stop_s": 6},
        {"name": "physics", "streams": 2, "base_rtt_s": "80ms", "congestion_control": "bbr",
         "rate_limit_bps": "150Mbps"},
    ],
}  # fmt: skip


def _acked(sim: Simulator, group: int) -> float:
    return float(sim.flow_table().acked_bytes[sim.layout.group_columns(group)].sum())


def test_each_host_has_its_own_streams_rtt_congestion_control_and_cap():
    sim = Simulator(parse_scenario(THREE))
    sim.set_campus_rate_limit(350e6)  # B minus the three caps: room for each
    table = sim.flow_table()
    assert [sim.layout.group_columns(g) for g in range(3)] == [
        slice(20, 24),
        slice(24, 28),
        slice(28, 30),
    ]
    assert table.base_rtt_s[20:30].tolist() == pytest.approx([0.1] * 4 + [0.05] * 4 + [0.08] * 2)
    assert sim.flow_i[layout.CC, 28:30].tolist() == [layout.BBR] * 2
    assert sim.flow_i[layout.GROUP, 20:30].tolist() == [0] * 4 + [1] * 4 + [2] * 2
    for _ in range(2):
        sim.run_sample()  # slow start over 100 ms takes most of 2 s
    before = [_acked(sim, g) for g in range(3)]
    sim.run_sample()
    after = [_acked(sim, g) for g in range(3)]
    # 2-3 s: genomics has not started; the others are held at their caps (in payload)
    assert after[1] == before[1] == 0.0
    climate, physics = ((after[g] - before[g]) * 8 for g in (0, 2))
    assert 0.95 * 300e6 < climate <= 300e6 * sim.payload_fraction * 1.01
    assert 0.95 * 150e6 < physics <= 150e6 * sim.payload_fraction * 1.01
    sim.run_sample()  # genomics starts at 3 s
    started = _acked(sim, 1)
    sim.run_sample()
    genomics = (_acked(sim, 1) - started) * 8
    assert 0.9 * 200e6 < genomics <= 200e6 * sim.payload_fraction * 1.01
    # the tap counts each host apart, and the DTN class is their sum
    tapped = sim.groups[layout.G_TAP_BYTES]
    assert tapped.sum() == pytest.approx(sim.glob_f[layout.TAP_BYTES_DTN])
    assert (tapped > 0).all()
    sim.set_dtn_rate_limit(None, group=2)
    assert sim.group_rate_limit_bps(2) is None and sim.group_rate_limit_bps(0) == 300e6


def test_a_host_whose_transfer_stops_finishes_its_streams_and_falls_silent():
    sim = Simulator(parse_scenario(THREE))
    for _ in range(8):
        sim.run_sample()
    events = sim.drain_event_array()
    columns = events[layout.EV_COLUMN].astype(int)
    genomics = (columns >= 24) & (columns < 28)
    kinds = events[layout.EV_KIND]
    done = events[layout.EV_TIME][genomics & (kinds == layout.FLOW_DONE)]
    assert len(done) == 4 and (done >= 6.0).all() and (done < 7.0).all()
    assert (genomics & (kinds == layout.TAP_STOP_FIN)).sum() == 4
    table = sim.flow_table()
    assert not table.running[24:28].any() and table.running[20:24].all()
    sent = float(sim.flow_f[layout.SENT, 24:28].sum())
    sim.run_sample()
    assert float(sim.flow_f[layout.SENT, 24:28].sum()) == sent
    balance = sim.conservation()
    assert abs(balance["residual_bytes"]) < 1e-6 * balance["sent_bytes"]


def test_one_host_is_the_paper_testbed_exactly():
    """The default scenario through the per-host code is the one-DTN simulator it was:
    the same run twice, and the host's counts are the DTN class's."""
    sim = Simulator(parse_scenario({}))
    samples = [sim.run_sample() for _ in range(3)]
    again = Simulator(parse_scenario({}))
    assert samples == [again.run_sample() for _ in range(3)]
    assert sim.groups[layout.G_TAP_BYTES, 0] == sim.glob_f[layout.TAP_BYTES_DTN]
    assert sim.groups.shape == (layout.N_GROUP_F, 1)


def test_the_source_reports_each_host_to_its_own_address():
    addresses = [ipaddress.ip_address(a) for a in ("203.0.113.10", "203.0.113.11", "203.0.113.12")]
    wiring = Wiring(1, 2, 3, addresses[0], ipaddress.ip_address("198.51.100.10"),
                    more_dtn_addresses=tuple(addresses[1:]))  # fmt: skip
    source = NetsimSource(parse_scenario(THREE), wiring)
    seen: dict[ipaddress.IPv4Address, int] = {}
    rtt_remotes, starts = set(), set()
    for _ in range(800):  # 4 s in 5 ms ticks
        observation = source.advance(0.005)
        for traffic in observation.traffic:
            seen[traffic.destination] = seen.get(traffic.destination, 0) + traffic.bytes
        rtt_remotes |= {m.remote for m in observation.rtt_matches}
        starts |= {c.destination for c in observation.flow_changes if c.started}
    groups = source.sim.groups
    for g, address in enumerate(addresses):
        assert seen[address] == pytest.approx(groups[layout.G_TAP_BYTES, g], abs=len(addresses))
    assert set(addresses) <= rtt_remotes and set(addresses) <= starts
    with pytest.raises(ValueError, match="3 DTN hosts and the wiring 1"):
        NetsimSource(parse_scenario(THREE), Wiring(1, 2, 3, addresses[0], addresses[1]))


def test_bad_host_lists_are_refused():
    with pytest.raises(ScenarioError, match="given twice"):
        parse_scenario({"more_dtns": [{"name": "dtn-1"}]})
    with pytest.raises(ScenarioError, match="stop_s must be after start_s"):
        parse_scenario({"more_dtns": [{"name": "b", "start_s": 5, "stop_s": 4}]})
    assert math.isinf(Simulator(parse_scenario({})).groups[layout.G_RATE_LIMIT, 0])
    assert np.all(Simulator(parse_scenario({})).flow_i[layout.GROUP] == 0)
