"""The simulator against physical laws and well-known TCP behaviour (tolerances stated inline)."""

import math

import numpy as np
import pytest

from scidmz.contract.tbf import tbf_size
from scidmz.netsim import layout
from scidmz.netsim.run import jain_index
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

SMALL_LINK = {"bottleneck": {"capacity_bps": "100Mbps"}}


def _run(sim: Simulator, seconds: int) -> list:
    return [sim.run_sample() for _ in range(seconds)]


def _per_flow_mbps(sim: Simulator, columns: slice, seconds: float) -> np.ndarray:
    return sim.flow_table().acked_bytes[columns] * 8 / seconds / 1e6


def test_physical_laws_hold_step_by_step():
    scenario = parse_scenario(
        {
            "campus": {"short_flows": {"enabled": True}},
            "dtn": {"congestion_control": "bbr", "transfer_bytes": "1GB"},
            "shaper": {"queue_bytes": "200kB"},
        }
    )
    sim = Simulator(scenario)
    capacity_step = scenario.bottleneck.capacity_bps / 8 * scenario.step_s * sim.payload_fraction
    buffer_bytes = scenario.bottleneck.buffer_size_bytes * sim.payload_fraction
    delivered = 0.0
    for rate in (1e9, 300e6, 0.0, 700e6, 1e9):
        sim.set_campus_rate_limit(rate)
        out = sim.advance(3000)
        departures = out[layout.OUT_DEP_DTN] + out[layout.OUT_DEP_CAMPUS]
        assert departures.max() <= capacity_step * (1 + 1e-9)
        assert out[layout.OUT_QUEUE].max() <= buffer_bytes * (1 + 1e-9)
        assert out[layout.OUT_SHAPER_QUEUE].max() <= 200e3 * (1 + 1e-9)
        # the shaper never releases more than its tokens allow (frames -> payload)
        tokens = (rate / 8 * 3.0 + tbf_size(rate).burst_bytes) * sim.payload_fraction
        assert out[layout.OUT_SHAPED].sum() <= tokens + 1
        delivered += float(departures.sum())
        balance = sim.conservation()
        assert abs(balance["residual_bytes"]) < 1e-6 * balance["sent_bytes"]
        assert balance["delivered_bytes"] <= balance["sent_bytes"]
    assert delivered > 0.9 * scenario.bottleneck.capacity_bps / 8 * 15


def test_same_seed_same_run_and_seed_matters():
    raw = {**SMALL_LINK, "campus": {"long_flows": 5, "short_flows": {"enabled": True}}}
    first = _run(Simulator(parse_scenario(raw)), 5)
    again = _run(Simulator(parse_scenario(raw)), 5)
    other = _run(Simulator(parse_scenario({**raw, "seed": 2})), 5)
    assert first == again
    assert first != other


@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_equal_rtt_flows_share_fairly(cc):
    # 10 flows, same 10 ms path, 100 Mb/s: Jain's index over 60 s must exceed 0.95.
    sim = Simulator(
        parse_scenario(
            {**SMALL_LINK, "campus": {"long_flows": 10, "congestion_control": cc},
             "dtn": {"streams": 0}}
        )
    )  # fmt: skip
    _run(sim, 60)
    shares = _per_flow_mbps(sim, sim.layout.long_columns, 60)
    assert jain_index(shares) > 0.95
    assert shares.sum() > 95


def test_short_rtt_cubic_beats_long_rtt_cubic_but_not_by_the_rtt_ratio():
    # 10 flows at 10 ms against 10 at 100 ms in a 100 ms buffer: the short-RTT flows get
    # more per flow (measured 1.3x), but nowhere near the RTT ratio (~2x with the queue) or
    # Cubic's fluid theory (~RTT^-3/4): ns-3 gives the classes about the same, and real Linux
    # in the lab gives its 100 ms DTN streams more per flow than 10 ms campus flows
    # (bench/results/netsim_vs_lab.md, cubic-10-steps).
    sim = Simulator(
        parse_scenario({**SMALL_LINK, "campus": {"long_flows": 10}, "dtn": {"streams": 10}})
    )
    _run(sim, 60)
    short = _per_flow_mbps(sim, sim.layout.long_columns, 60).mean()
    long = _per_flow_mbps(sim, sim.layout.dtn_columns, 60).mean()
    assert 1.1 * long < short < 2.0 * long


def test_bbr_takes_most_of_a_deep_buffer_against_cubic():
    # Paper testbed with a BBR v1 DTN and a 100 ms (one DTN BDP) drop-tail buffer.
    sim = Simulator(parse_scenario({"dtn": {"congestion_control": "bbr"}}))
    samples = _run(sim, 30)[10:]
    dtn_share = np.mean([s.dtn_rate_bps for s in samples]) / 1e9
    assert dtn_share > 0.75


@pytest.mark.parametrize("cc", ["reno", "cubic", "bbr", "bbr2"])
def test_a_saturated_link_is_more_than_95_percent_utilised(cc):
    sim = Simulator(parse_scenario({"campus": {"congestion_control": cc}}))
    samples = _run(sim, 20)[5:]
    # utilisation counts payload; a full link carries mss / (mss + headers) of it
    assert min(s.utilisation for s in samples) > 0.95 * sim.payload_fraction


@pytest.mark.parametrize("cc", ["cubic", "bbr2"])
def test_lowering_u_raises_the_dtn_rate_within_a_few_rtts(cc):
    sim = Simulator(parse_scenario({"dtn": {"congestion_control": cc}}))
    # 24 s: between two of BBR's probe-rtt episodes (every ~10.5 s), which would hide the step
    _run(sim, 24)
    before = sim.advance(1000)[layout.OUT_DEP_DTN].sum() * 8  # bit/s over the last second
    sim.set_campus_rate_limit(200e6)
    # Half a second is a few DTN RTTs (100 ms + the queue draining away). The DTN must be
    # faster already: measured x1.7 for Cubic (its RTT falls as the queue drains) and x1.5
    # for BBRv2-like, whose loss cap (inflight_hi) grows back by 1, 2, 4... segments a round.
    after = sim.advance(500)[layout.OUT_DEP_DTN].sum() * 8 / 0.5
    assert after > 1.05 * before
    shaped = sim.advance(1000)[layout.OUT_SHAPED].sum()  # what the token bucket let through
    assert shaped <= (200e6 / 8 + tbf_size(200e6).burst_bytes) * sim.payload_fraction


def test_a_finite_dtn_transfer_completes_and_stops_at_the_tap():
    sim = Simulator(
        parse_scenario(
            {**SMALL_LINK, "campus": {"long_flows": 2},
             "dtn": {"transfer_bytes": "20MB", "streams": 4, "transfer_split": "static"}}
        )
    )  # fmt: skip
    _run(sim, 15)
    events = sim.drain_events()
    done = [e for e in events if e.kind == "flow_done"]
    assert len(done) == 4
    assert all(e.fct_s > 0.1 for e in done)  # at least one 100 ms RTT
    assert math.isclose(sum(e.size_bytes for e in done), 20e6)
    assert {e.serial for e in events if e.kind == "tap_stop_fin"} == {e.serial for e in done}
    table = sim.flow_table()
    assert not table.running[sim.layout.dtn_columns].any()
    assert np.allclose(table.acked_bytes[sim.layout.dtn_columns], 5e6)


def _dtn_done(scenario: dict, seconds: int) -> tuple[Simulator, list]:
    sim = Simulator(parse_scenario(scenario))
    done = []
    for _ in range(seconds):
        sim.run_sample()
        dtn = sim.layout.dtn_columns.start
        done += [e for e in sim.drain_events() if e.kind == "flow_done" and e.column >= dtn]
    return sim, done


def test_a_pooled_transfer_ends_when_its_total_is_delivered():
    scenario = {"seed": 1, "dtn": {"transfer_bytes": "500MB"}}
    sim, pooled = _dtn_done(scenario, 60)
    assert len(pooled) == 8
    assert math.isclose(sum(e.size_bytes for e in pooled), 5e8)
    assert sim.groups[layout.G_POOL, 0] == 0.0
    # the streams took what each could carry (unequal shares) and so ended together
    sizes = [e.size_bytes for e in pooled]
    assert max(sizes) > 1.05 * min(sizes)
    ends = [e.time_s for e in pooled]
    assert max(ends) - min(ends) < 0.5
    # the static split of the same transfer waits for its slowest stream
    _, static = _dtn_done({**scenario, "dtn": {**scenario["dtn"], "transfer_split": "static"}}, 60)
    assert len(static) == 8 and all(math.isclose(e.size_bytes, 6.25e7) for e in static)
    assert max(e.time_s for e in static) > max(ends) + 1.0
    assert max(e.time_s for e in static) - min(e.time_s for e in static) > 2.0


def test_short_flows_follow_table_6_and_complete():
    sim = Simulator(parse_scenario({"campus": {"short_flows": {"enabled": True}}}))
    _run(sim, 20)
    events = sim.drain_events()
    starts = [e for e in events if e.kind == "flow_start"]
    done = [e for e in events if e.kind == "flow_done"]
    # Weibull(k=0.5, λ=20 ms) clipped to [1, 100] ms has a mean gap of ~23 ms: ~870 in 20 s.
    assert 600 < len(starts) < 1200
    sizes = np.array([e.size_bytes for e in starts])
    assert sizes.min() >= 10e3 and sizes.max() <= 10e6
    assert len(done) > 0.9 * len(starts)
    assert min(e.fct_s for e in done) >= 0.010  # never faster than the base RTT


def test_the_tap_view_matches_the_traffic():
    sim = Simulator(parse_scenario({}))
    first = sim.tap_view()
    sample = sim.run_sample()
    view = sim.tap_view()
    assert view.dtn_bytes - first.dtn_bytes == pytest.approx(sample.dtn_tap_rate_bps / 8)
    assert view.campus_bytes - first.campus_bytes == pytest.approx(sample.campus_tap_rate_bps / 8)
    assert 0 <= view.dtn_queuing_delay_s <= 0.1 + 1e-9
    assert view.active.all()  # every long flow and stream passed C_TH packets in T_TH
    assert np.all(view.rtt_s[view.traffic_class == layout.DTN] >= 0.1)
    started = [e for e in sim.drain_events() if e.kind == "tap_start"]
    assert len(started) == 108

    # u = 0 silences the campus at the tap: the activity rule times its flows out.
    sim.set_campus_rate_limit(0.0)
    for _ in range(4):
        sim.run_sample()
    stopped = {e.serial for e in sim.drain_events() if e.kind == "tap_stop_idle"}
    assert stopped == set(range(100))
    assert sim.tap_view().active.sum() == 8


def test_the_rate_limit_rejects_nonsense():
    sim = Simulator(parse_scenario({**SMALL_LINK, "campus": {"long_flows": 1}}))
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="campus rate limit"):
            sim.set_campus_rate_limit(bad)


def test_paused_campus_flows_fall_silent_leave_the_tap_and_restart_their_window():
    sim = Simulator(parse_scenario({"campus": {"long_flows": 20}}))
    _run(sim, 5)
    table = sim.flow_table()
    window_before = sim.flow_f[layout.CWND, 15]
    assert window_before > 2 * 10  # grown well past the initial window
    sim.set_campus_long_flows(10)
    assert sim.campus_long_flows == 10
    sent = sim.flow_table().acked_bytes.copy()
    _run(sim, 4)
    acked = sim.flow_table().acked_bytes - sent
    # the paused ten send nothing once what was in flight is acknowledged (< 1 s of it);
    # the others and the DTN carry on
    assert acked[10:20].sum() < 0.02 * acked[:10].sum()
    assert (acked[:10] > 0).all() and (acked[sim.layout.dtn_columns] > 0).all()
    stopped = {e.serial for e in sim.drain_events() if e.kind == "tap_stop_idle"}
    assert stopped == set(range(10, 20))  # the activity rule timed them out (2 s idle)
    assert table.running[10:20].all()  # paused, not finished: no FIN
    # back after 4 s idle (many RTOs): Linux's restart window, the initial window
    sim.set_campus_long_flows(20)
    assert sim.flow_f[layout.CWND, 15] == 10
    assert sim.flow_f[layout.SSTHRESH, 15] >= 0.75 * window_before
    _run(sim, 2)
    assert {e.serial for e in sim.drain_events() if e.kind == "tap_start"} == set(range(10, 20))


def test_campus_demand_is_shared_by_the_sending_flows_only():
    # no DTN: nothing else on the link, so the application limit is all that binds
    sim = Simulator(parse_scenario({"campus": {"long_flows": 20}, "dtn": {"streams": 0}}))
    sim.set_campus_long_flows(5)
    sim.set_campus_demand(100e6)
    _run(sim, 6)
    sent = sim.flow_table().acked_bytes.copy()
    _run(sim, 4)
    acked = sim.flow_table().acked_bytes - sent
    # 100 Mb/s between the five sending flows (payload; the limit counts payload bytes)
    assert acked[:5].sum() * 8 / 4 == pytest.approx(100e6, rel=0.03)
    assert acked[5:].sum() == 0
    for bad in (-1, 21):
        with pytest.raises(ValueError, match="campus long flows"):
            sim.set_campus_long_flows(bad)


def test_a_capped_10gb_transfer_completes_despite_float_residue():
    # Regression: the float sums of a 1.25 GB stream's ACKs ended ~1e-3 bytes short of
    # its size, above the old 1e-3-byte completion tolerance; half the capped transfers of
    # the benchmark never finished (no FIN, FCT missing, the link idle for 12 minutes).
    sim = Simulator(parse_scenario({"seed": 2, "dtn": {"transfer_bytes": "10GB"}}))
    sim.run_sample()
    done = []
    for _ in range(160):
        # as the fixed baseline with the DTN actuator sets them, every sample time
        sim.set_campus_rate_limit(400e6)
        sim.set_dtn_rate_limit(600e6)
        sim.run_sample()
        done += [e for e in sim.drain_events() if e.kind == "flow_done"]
        if len(done) == 8:
            break
    assert len(done) == 8
    assert not sim.flow_table().running[sim.layout.dtn_columns].any()
