"""Loss recovery with proportional rate reduction (scenario ``proportional_rate_reduction``,
Linux ``tcp_cwnd_reduction``, RFC 6937)."""

import numpy as np
import pytest

from scidmz.netsim import layout
from scidmz.netsim.congestion import on_loss, on_timeout, prr_window
from scidmz.netsim.kernel import _reduce_in_recovery
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator

MSS = 1448.0


def _in_recovery(prior: float, ssthresh: float, inflight_segs: float) -> np.ndarray:
    flow_f = np.zeros((layout.N_FLOW_F, 1))
    flow_f[layout.PRR_PRIOR] = prior
    flow_f[layout.SSTHRESH] = ssthresh
    flow_f[layout.CWND] = ssthresh
    flow_f[layout.INFLIGHT] = inflight_segs * MSS
    flow_f[layout.RECOVERY_UNTIL] = 10.0
    return flow_f


def test_above_ssthresh_a_sender_sends_ssthresh_over_prior_window_per_byte_acked():
    flow_f = _in_recovery(prior=100.0, ssthresh=70.0, inflight_segs=90.0)
    assert prr_window(flow_f, 0, 10 * MSS, MSS) == pytest.approx(7 * MSS)
    flow_f[layout.PRR_OUT] += 7 * MSS  # what the send pass did with it
    # 20 segments delivered since recovery began, 7 sent: 14 - 7
    assert prr_window(flow_f, 0, 10 * MSS, MSS) == pytest.approx(7 * MSS)
    assert flow_f[layout.PRR_DELIVERED, 0] == pytest.approx(20 * MSS)


def test_at_or_below_ssthresh_it_sends_what_was_acked_plus_one_segment_up_to_ssthresh():
    flow_f = _in_recovery(prior=100.0, ssthresh=70.0, inflight_segs=40.0)
    flow_f[layout.PRR_DELIVERED] = 15 * MSS
    flow_f[layout.PRR_OUT] = 14 * MSS
    # delivered 20, sent 14: max(6, this step's 5) + 1 segment
    assert prr_window(flow_f, 0, 5 * MSS, MSS) == pytest.approx(7 * MSS)
    # a window as far as ssthresh, no further (slow start back, not a burst)
    flow_f = _in_recovery(prior=100.0, ssthresh=70.0, inflight_segs=68.0)
    flow_f[layout.PRR_DELIVERED] = 15 * MSS
    flow_f[layout.PRR_OUT] = 14 * MSS
    assert prr_window(flow_f, 0, 5 * MSS, MSS) == pytest.approx(2 * MSS)


def test_the_first_step_of_recovery_sends_the_fast_retransmit():
    flow_f = _in_recovery(prior=100.0, ssthresh=70.0, inflight_segs=95.0)
    assert prr_window(flow_f, 0, 0.0, MSS) == pytest.approx(MSS)
    flow_f[layout.PRR_OUT] = MSS
    assert prr_window(flow_f, 0, 0.0, MSS) == 0.0


def test_in_recovery_the_window_is_inflight_plus_the_allowance_and_ssthresh_after():
    flow_f = _in_recovery(prior=100.0, ssthresh=70.0, inflight_segs=90.0)
    pacing = np.full(1, np.inf)
    acked = np.full(1, 10 * MSS)
    _reduce_in_recovery(flow_f, pacing, 1, 1.0, acked, MSS)
    assert flow_f[layout.CWND, 0] == pytest.approx(97.0)
    assert pacing[0] > 1e200  # sends at once: no TSO deferral in recovery
    pacing[0] = np.inf
    _reduce_in_recovery(flow_f, pacing, 1, 10.0, acked, MSS)  # recovery is over
    assert flow_f[layout.CWND, 0] == 70.0
    assert flow_f[layout.PRR_PRIOR, 0] == 0.0
    assert pacing[0] == np.inf


def test_a_loss_starts_prr_from_the_window_before_the_cut_and_a_timeout_ends_it():
    flow_f = np.zeros((layout.N_FLOW_F, 1))
    flow_i = np.zeros((layout.N_FLOW_I, 1), dtype=np.int64)
    flow_i[layout.CC] = layout.CUBIC
    flow_i[layout.HS_FOUND] = 2
    flow_f[layout.CWND] = 100.0
    flow_f[layout.SSTHRESH] = np.inf
    flow_f[layout.PRR_DELIVERED] = 5.0
    flow_f[layout.PRR_OUT] = 3.0
    on_loss(flow_f, flow_i, 0, 1.0)
    assert flow_f[layout.PRR_PRIOR, 0] == 100.0
    assert flow_f[layout.CWND, 0] == 70.0
    assert flow_f[layout.PRR_DELIVERED, 0] == 0.0
    assert flow_f[layout.PRR_OUT, 0] == 0.0
    on_timeout(flow_f, flow_i, 0, 2.0)
    assert flow_f[layout.PRR_PRIOR, 0] == 0.0  # the Loss state: slow start from one segment
    assert flow_f[layout.CWND, 0] == 1.0


def test_bbr_keeps_its_own_recovery():
    flow_f = np.zeros((layout.N_FLOW_F, 1))
    flow_i = np.zeros((layout.N_FLOW_I, 1), dtype=np.int64)
    flow_i[layout.CC] = layout.BBR
    flow_f[layout.CWND] = 100.0
    on_loss(flow_f, flow_i, 0, 1.0)
    assert flow_f[layout.PRR_PRIOR, 0] == 0.0


def _most_sent_beyond_acked_in_recovery(prr: bool) -> float:
    """Five Cubic flows (10 ms) slow-starting into a 100 Mb/s, 1.25 MB drop-tail queue (the
    ns-3 dumbbell's campus half), 0.75 s: the most any flow sent in one step of its loss
    recovery beyond what that step acknowledged, in segments."""
    scenario = parse_scenario(
        {
            "bottleneck": {"capacity_bps": 100e6, "buffer_bytes": 1.25e6},
            "campus": {"long_flows": 5, "base_rtt_s": 0.01},
            "dtn": {"streams": 0},
            "shaper": {"initial_rate_bps": "10Gbps", "burst_bytes": "10MB"},
            "min_tso_segments": 16,
            "proportional_rate_reduction": prr,
        }
    )
    sim = Simulator(scenario)
    sent = sim.flow_f[layout.SENT, :5].copy()
    acked = sim.flow_f[layout.ACKED, :5].copy()
    most = 0.0
    for step in range(1, 751):
        sim.advance(1)
        beyond = (sim.flow_f[layout.SENT, :5] - sent) - (sim.flow_f[layout.ACKED, :5] - acked)
        sent = sim.flow_f[layout.SENT, :5].copy()
        acked = sim.flow_f[layout.ACKED, :5].copy()
        in_recovery = sim.flow_f[layout.RECOVERY_UNTIL, :5] > step * scenario.step_s
        if in_recovery.any():
            most = max(most, float(beyond[in_recovery].max()) / MSS)
    return most


def test_with_prr_a_sender_in_recovery_grows_with_its_acks_instead_of_bursting():
    # Without PRR a sender whose window was cut refills it at once with retransmissions,
    # into the queue that just dropped it; with PRR (as Linux) it sends no more than it got
    # acknowledged + 1 segment a step.
    assert _most_sent_beyond_acked_in_recovery(prr=True) <= 1.0 + 1e-9
    assert _most_sent_beyond_acked_in_recovery(prr=False) > 4.0
