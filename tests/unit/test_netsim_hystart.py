"""Cubic's HyStart, the bookkeeping it relies on (tcp_cubic's last_max_cwnd, reset at an
RTO) and classes that start after a connection set-up."""

import numpy as np
import pytest

from scidmz.netsim import layout
from scidmz.netsim.congestion import (
    HYSTART_OFF,
    grow_windows,
    hystart_update,
    on_loss,
    on_timeout,
)
from scidmz.netsim.scenario import ScenarioError, parse_scenario
from scidmz.netsim.simulator import Simulator

MSS = 1448.0


def _one_flow(cwnd: float, min_rtt: float) -> tuple[np.ndarray, np.ndarray]:
    flow_f = np.zeros((layout.N_FLOW_F, 1))
    flow_i = np.zeros((layout.N_FLOW_I, 1), dtype=np.int64)
    flow_i[layout.CC] = layout.CUBIC
    flow_f[layout.CWND] = cwnd
    flow_f[layout.SSTHRESH] = np.inf
    flow_f[layout.MIN_RTT] = min_rtt
    flow_f[layout.HS_CURR_RTT] = np.inf
    flow_f[layout.HS_END] = -1.0
    return flow_f, flow_i


def _acks(flow_f, flow_i, start: float, steps: int, rtt: float, segs: float = 4.0) -> float:
    """ACKs of ``segs`` segments every 1 ms step from ``start``; returns the time reached."""
    now = start
    for _ in range(steps):
        flow_f[layout.ACKED, 0] += segs * MSS
        hystart_update(flow_f, flow_i, 0, now, segs * MSS, rtt, MSS)
        if flow_i[layout.HS_FOUND, 0] == 1:
            break
        now += 0.001
    return now


def test_an_ack_train_half_the_min_rtt_long_ends_slow_start_without_a_loss():
    flow_f, flow_i = _one_flow(cwnd=100.0, min_rtt=0.100)
    flow_f[layout.SENT, 0] = 1e9  # the round lasts past the train
    end = _acks(flow_f, flow_i, 1.0, 200, rtt=0.100)
    assert flow_i[layout.HS_FOUND, 0] == 1
    assert flow_f[layout.SSTHRESH, 0] == 100.0  # ssthresh = cwnd: slow start is over
    # the train had to pass (min RTT + 1 ms) / 2 = 50.5 ms
    assert end - 1.0 == pytest.approx(0.051, abs=0.0015)


def test_a_gap_over_2_ms_breaks_the_train():
    flow_f, flow_i = _one_flow(cwnd=100.0, min_rtt=0.100)
    flow_f[layout.SENT, 0] = 1e9
    now = _acks(flow_f, flow_i, 1.0, 30, rtt=0.100)
    _acks(flow_f, flow_i, now + 0.003, 60, rtt=0.100)  # 3 ms of silence, then 60 ms of ACKs
    assert flow_i[layout.HS_FOUND, 0] == 0
    assert flow_f[layout.SSTHRESH, 0] == np.inf


def test_a_round_whose_rtt_rises_by_the_margin_ends_slow_start():
    # 100 ms minimum: margin min(max(12.5 ms, 4 ms), 16 ms) = 12.5 ms
    for rtt, found in ((0.112, 0), (0.113, 1)):
        flow_f, flow_i = _one_flow(cwnd=40.0, min_rtt=0.100)
        flow_f[layout.SENT, 0] = 1e9
        # ACKs 3 ms apart: no train, only the delay test; 2 ACKs (4 segments) a step
        now = 1.0
        for _ in range(10):
            flow_f[layout.ACKED, 0] += 4 * MSS
            hystart_update(flow_f, flow_i, 0, now, 4 * MSS, rtt, MSS)
            now += 0.003
        assert flow_i[layout.HS_FOUND, 0] == found, rtt


def test_hystart_waits_for_16_segments_and_for_slow_start():
    flow_f, flow_i = _one_flow(cwnd=15.0, min_rtt=0.100)
    flow_f[layout.SENT, 0] = 1e9
    _acks(flow_f, flow_i, 1.0, 200, rtt=0.150)
    assert flow_i[layout.HS_FOUND, 0] == 0
    assert flow_f[layout.SSTHRESH, 0] == np.inf
    flow_f, flow_i = _one_flow(cwnd=100.0, min_rtt=0.100)
    flow_f[layout.SSTHRESH, 0] = 50.0  # congestion avoidance already
    _acks(flow_f, flow_i, 1.0, 200, rtt=0.150)
    assert flow_i[layout.HS_FOUND, 0] == 0
    assert flow_f[layout.SSTHRESH, 0] == 50.0


def _cubic_in_avoidance(last_max: float) -> tuple[np.ndarray, np.ndarray]:
    flow_f, flow_i = _one_flow(cwnd=100.0, min_rtt=0.1)
    flow_i[layout.HS_FOUND] = 1
    flow_f[layout.SSTHRESH] = 100.0
    flow_f[layout.W_MAX] = 100.0
    flow_f[layout.LAST_MAX] = last_max
    flow_f[layout.W_EST] = 100.0
    flow_f[layout.EPOCH_T] = 1.0
    flow_f[layout.BASE_RTT] = 0.1
    flow_f[layout.RECOVERY_UNTIL] = -1.0
    flow_f[layout.CWND_LIMITED] = 1.0
    return flow_f, flow_i


def test_before_any_loss_cubic_grows_at_least_5_percent_a_round():
    # just after the epoch began at W_max, W_cubic's plateau adds almost nothing
    plateau, _ = _cubic_in_avoidance(last_max=100.0)
    grow_windows(plateau, _, np.array([100 * MSS]), 1.0, 1 / MSS, 1, np.zeros(1))
    assert plateau[layout.CWND, 0] < 100.6
    first, flow_i = _cubic_in_avoidance(last_max=0.0)
    grow_windows(first, flow_i, np.array([100 * MSS]), 1.0, 1 / MSS, 1, np.zeros(1))
    assert first[layout.CWND, 0] == pytest.approx(105.0)


def test_a_loss_remembers_last_max_and_a_timeout_resets_it_and_hystart():
    flow_f, flow_i = _cubic_in_avoidance(last_max=0.0)
    flow_f[layout.CWND] = 200.0
    on_loss(flow_f, flow_i, 0, 2.0)
    assert flow_f[layout.LAST_MAX, 0] == 200.0
    assert flow_f[layout.SSTHRESH, 0] == 140.0
    # fast convergence: a loss below the last one remembers less than the window
    flow_f[layout.CWND] = 150.0
    flow_f[layout.RECOVERY_UNTIL] = -1.0
    on_loss(flow_f, flow_i, 0, 3.0)
    assert flow_f[layout.LAST_MAX, 0] == pytest.approx(150.0 * 1.7 / 2)
    on_timeout(flow_f, flow_i, 0, 4.0)
    assert flow_f[layout.CWND, 0] == 1.0
    assert flow_f[layout.LAST_MAX, 0] == 0.0 and flow_f[layout.W_MAX, 0] == 0.0
    assert flow_i[layout.HS_FOUND, 0] == 0  # HyStart judges the next slow start again


def test_without_hystart_a_timeout_keeps_w_max_as_before():
    flow_f, flow_i = _cubic_in_avoidance(last_max=0.0)
    flow_i[layout.HS_FOUND] = HYSTART_OFF
    flow_f[layout.CWND] = 200.0
    on_timeout(flow_f, flow_i, 0, 4.0)
    assert flow_f[layout.W_MAX, 0] == 200.0
    assert flow_i[layout.HS_FOUND, 0] == HYSTART_OFF


def _lone_cubic(hystart: bool) -> Simulator:
    return Simulator(
        parse_scenario(
            {
                "bottleneck": {"capacity_bps": "100Mbps", "buffer_bytes": "2MB"},
                "campus": {"long_flows": 0},
                # a NIC faster than the bottleneck: the twin counts a slow-starting flow
                # held back by its NIC as not window-limited, and would not grow it
                "dtn": {"streams": 1, "line_rate_bps": "1Gbps"},
                "cubic_hystart": hystart,
            }
        )
    )


def _until(sim: Simulator, done, limit_steps: int = 5000) -> None:
    for _ in range(limit_steps // 10):
        if done():
            return
        sim.advance(10)
    raise AssertionError("the condition never came")


def test_a_lone_flow_leaves_slow_start_without_a_loss_only_with_hystart():
    with_hystart = _lone_cubic(True)
    column = with_hystart.layout.dtn_columns.start
    f, i = with_hystart.flow_f, with_hystart.flow_i
    _until(with_hystart, lambda: i[layout.HS_FOUND, column] == 1)
    assert f[layout.DROPPED, column] == 0.0
    bdp_segments = 100e6 / 8 * 0.1 / MSS  # ~863
    # the ACK train passed half the RTT: the window was about half a BDP or more
    assert 0.4 * bdp_segments < f[layout.SSTHRESH, column] < 1.5 * bdp_segments
    without = _lone_cubic(False)
    f, i = without.flow_f, without.flow_i
    assert i[layout.HS_FOUND, column] == HYSTART_OFF
    _until(without, lambda: f[layout.DROPPED, column] > 0.0)
    assert f[layout.SSTHRESH, column] == np.inf  # still in slow start when the buffer overflowed


def test_a_class_in_connection_set_up_sends_nothing_until_its_start():
    sim = Simulator(
        parse_scenario(
            {
                "campus": {"long_flows": 4, "start_s": "0.25s"},
                "dtn": {"streams": 2, "start_s": "0.5s"},
            }
        )
    )
    sim.set_campus_demand(50e6)  # an experiment's call must not start the campus early
    campus = slice(0, 4)
    dtn = slice(sim.layout.dtn_columns.start, sim.layout.n_flows)
    sim.advance(250)
    assert sim.flow_f[layout.SENT, campus].sum() == 0.0
    sim.advance(1)
    assert (sim.flow_f[layout.SENT, campus] > 0).all()
    assert sim.flow_f[layout.SENT, dtn].sum() == 0.0
    sim.advance(249)
    assert sim.flow_f[layout.SENT, dtn].sum() == 0.0
    sim.advance(1)
    assert (sim.flow_f[layout.SENT, dtn] > 0).all()
    # the demand set during set-up holds once the campus sends: 50 Mb/s over 4 flows
    line = sim.flow_f[layout.LINE_BYTES, 0]
    assert line == pytest.approx(50e6 / 8 / 4 * sim.dt)


def test_start_times_are_checked():
    with pytest.raises(ScenarioError, match="start_s"):
        parse_scenario({"dtn": {"start_s": "-1s"}})
