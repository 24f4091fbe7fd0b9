"""Loss telemetry (P4BS seed 003 §IV-B): methods 1 and 2, the mean sojourn, the long-flow
count, and their way through ``estimate`` and the sample message."""

from __future__ import annotations

import math

import pytest

from scidmz.contract.classes import FIRST_DTN_CLASS
from scidmz.contract.codec import dtns_from_message, from_message, signals_from_message, to_message
from scidmz.contract.state import DtnFigures, NetworkState, PathSignals
from scidmz.proto import telemetry_pb2
from scidmz.telemetry.classes import ClassCells, ClassDelta, combined, grown
from scidmz.telemetry.estimators import FlowEvent
from scidmz.telemetry.loss import (
    bottleneck_loss,
    long_flow_count,
    mean_queuing_delay_s,
    queue_delay_at_read,
    retransmission_ratio,
)
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, estimate

ZERO = ClassCells()
DTN = FIRST_DTN_CLASS


def _delta(before: ClassCells = ZERO, sum_bits: int = 48, **values: int) -> ClassDelta:
    return grown(before, ClassCells(**values), sum_bits, 32)


def test_method_1_is_resent_over_sent_packets_per_class():
    assert retransmission_ratio(_delta(ingress_packets=10_000, retrans_packets=50)) == 0.005
    assert retransmission_ratio(_delta(ingress_packets=2_000, retrans_packets=100)) == 0.05
    # several DTN classes as one: their packets summed, not their ratios averaged
    both = combined([_delta(ingress_packets=10_000, retrans_packets=50),
                     _delta(ingress_packets=2_000, retrans_packets=100)])  # fmt: skip
    assert retransmission_ratio(both) == pytest.approx(150 / 12_000)


def test_a_class_that_sent_nothing_has_no_ratio_and_a_reset_counter_none():
    assert math.isnan(retransmission_ratio(_delta()))
    assert retransmission_ratio(_delta(ingress_packets=10)) == 0.0
    reset = _delta(ClassCells(ingress_packets=10), ingress_packets=5, retrans_packets=1)
    assert math.isnan(retransmission_ratio(reset))
    assert math.isnan(retransmission_ratio(combined([reset, _delta(ingress_packets=10)])))
    assert math.isnan(retransmission_ratio(None))


def test_the_mean_sojourn_is_the_sum_over_the_count_and_survives_a_wrap():
    # 100 packets that waited 20 ms each: 20e6 ns >> 10 = 19,531 units per packet
    units = 20_000_000 >> 10
    assert mean_queuing_delay_s(_delta(sojourn_sum=100 * units, sojourn_count=100)) == (
        pytest.approx(0.020, rel=1e-3)
    )
    assert math.isnan(mean_queuing_delay_s(_delta()))  # nothing left BR1
    near_top = ClassCells(sojourn_sum=(1 << 32) - 5 * units, sojourn_count=7)
    wrapped = _delta(near_top, sum_bits=32, sojourn_sum=5 * units, sojourn_count=17)
    assert mean_queuing_delay_s(wrapped) == pytest.approx(0.020, rel=1e-3)


def test_method_2_counts_what_neither_left_nor_stayed_queued():
    # 1 Gb/s link; 10 MB in, 9.5 MB out: 500 kB missing; the queue went from 10 ms to 14 ms
    # of delay between the reads: 4 ms x 125 MB/s = 500 kB still queued, not lost
    later = [_delta(ingress_bytes=6_000_000, egress_bytes=5_700_000),
             _delta(ingress_bytes=4_000_000, egress_bytes=3_800_000)]  # fmt: skip
    assert bottleneck_loss(later, 1e9, 0.010, 0.014) == pytest.approx(0.0, abs=1e-9)
    # without the correction the same counts read as 5 % loss
    assert bottleneck_loss(later, math.nan, 0.010, 0.014) == pytest.approx(0.05)
    assert bottleneck_loss(later, 1e9, math.nan, 0.014) == pytest.approx(0.05)
    # the queue shrank by 2 ms (250 kB of what left was queued before): 750 kB were lost
    assert bottleneck_loss(later, 1e9, 0.016, 0.014) == pytest.approx(0.075)
    # more out than in: no negative loss
    drained = [_delta(ingress_bytes=1_000_000, egress_bytes=1_200_000)]
    assert bottleneck_loss(drained, 1e9, math.nan, math.nan) == 0.0
    assert math.isnan(bottleneck_loss([_delta()], 1e9, 0.0, 0.0))  # nothing entered


def test_the_queue_at_a_read_is_the_last_departures_sojourn():
    assert queue_delay_at_read([90_000_000, 94_000_000]) == pytest.approx(0.092)
    assert queue_delay_at_read([0, 94_000_000]) == pytest.approx(0.094)  # DTN never left
    assert math.isnan(queue_delay_at_read([0, 0]))


def test_long_flows_are_those_active_for_the_long_flow_age():
    assert long_flow_count({1: 0.0, 2: 9.0, 3: 7.9}, now_s=10.0, long_flow_s=2.0) == 2


def test_estimate_carries_loss_and_n_beside_the_seven_variables():
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0, capacity_bps=1e9)
    first = Poll(10.0, ZERO, {DTN: ZERO})
    state, y = estimate(
        EstimatorState(), first, [], [FlowEvent(1, True, 9.5), FlowEvent(2, True, 10.0)], settings
    )
    assert math.isnan(y.signals.dtn_retransmission_ratio)  # no interval yet
    assert y.signals.long_flows == 0
    campus = ClassCells(ingress_packets=100)
    dtn = ClassCells(bytes=125_000, ingress_packets=1000, retrans_packets=10)
    second = Poll(11.6, campus, {DTN: dtn})
    state, y = estimate(state, second, [], [], settings)
    assert y.signals.dtn_retransmission_ratio == pytest.approx(0.01)
    assert y.signals.campus_retransmission_ratio == 0.0
    assert y.signals.long_flows == 1  # flow 1 started 2.1 s ago, flow 2 1.6 s ago
    assert len(y.vector()) == 7  # the model's inputs are unchanged
    third = Poll(12.6, campus, {DTN: dtn})
    _, y = estimate(state, third, [], [FlowEvent(1, False, 12.0)], settings)
    assert y.signals.long_flows == 1  # flow 1 ended; flow 2 is now 2.6 s old


def test_the_sample_message_carries_the_signals_and_an_old_sender_none():
    signals = PathSignals(0.01, 0.02, 0.003, 0.05, 0.06, 42.0)
    state = NetworkState(1e8, 2e8, 0.1, 0.01, 0.05, 0.06, 10.0, 0.0, signals)
    message = to_message(state, 1, 0.0, 1.0, stale=False, link="l")
    decoded = signals_from_message(
        telemetry_pb2.StateSample.FromString(message.SerializeToString())
    )
    assert decoded == signals
    assert tuple(from_message(message)) == tuple(state.vector())
    assert dtns_from_message(message) == ()
    hosts = (DtnFigures("dtn-1", DTN, 6e7, 0.1, 0.002, 0.003, 0.001, 8.0),
             DtnFigures("dtn-2", DTN + 1, 4e7, 0.05, math.nan))  # fmt: skip
    with_hosts = to_message(
        NetworkState(1e8, 2e8, 0.1, 0.01, 0.05, 0.06, 10.0, 0.0, signals, hosts), 2, 0.0, 1.0,
        stale=False, link="l",
    )  # fmt: skip
    decoded_hosts = dtns_from_message(
        telemetry_pb2.StateSample.FromString(with_hosts.SerializeToString())
    )
    assert decoded_hosts[0] == hosts[0]
    assert decoded_hosts[1].rate_bps == 4e7 and math.isnan(decoded_hosts[1].queuing_delay_s)
    stale = to_message(NetworkState(*state.vector(), 0.0, signals, hosts), 3, 0.0, 1.0,
                       stale=True, link="l")  # fmt: skip
    assert dtns_from_message(stale) == ()  # a stale sample's figures are not fresh
    old = telemetry_pb2.StateSample(dtn_rate_bps=1.0)  # a collector without loss telemetry
    assert all(math.isnan(v) for v in signals_from_message(old).__dict__.values())
