"""Loss telemetry (P4BS seed 003 §IV-B): methods 1 and 2, the mean sojourn, the long-flow
count, and their way through ``estimate`` and the sample message."""

from __future__ import annotations

import math

import pytest

from scidmz.contract.codec import from_message, signals_from_message, to_message
from scidmz.contract.state import NetworkState, PathSignals
from scidmz.proto import telemetry_pb2
from scidmz.telemetry.estimators import CounterReading, FlowEvent
from scidmz.telemetry.loss import (
    LossReading,
    bottleneck_loss,
    long_flow_count,
    mean_queuing_delays,
    path_signals,
    queue_delay_at_read,
)
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, estimate

ZERO = LossReading((0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0))


def _reading(**values: tuple[int, int]) -> LossReading:
    fields = {name: getattr(ZERO, name) for name in ZERO.__dataclass_fields__}
    return LossReading(**{**fields, **values})


def test_method_1_is_resent_over_sent_packets_per_class():
    later = _reading(ingress_packets=(10_000, 2_000), retrans_packets=(50, 100))
    signals = path_signals(ZERO, later, 1e9, (math.nan, math.nan), long_flows=3)
    assert signals.dtn_retransmission_ratio == pytest.approx(0.005)
    assert signals.campus_retransmission_ratio == pytest.approx(0.05)
    assert signals.long_flows == 3


def test_a_class_that_sent_nothing_has_no_ratio_and_a_reset_counter_none():
    later = _reading(ingress_packets=(0, 10))
    signals = path_signals(ZERO, later, 1e9, (math.nan, math.nan), 0)
    assert math.isnan(signals.dtn_retransmission_ratio)
    assert signals.campus_retransmission_ratio == 0.0
    reset = _reading(ingress_packets=(5, 5), retrans_packets=(1, 1))
    again = path_signals(
        later, reset, 1e9, (math.nan, math.nan), 0
    )  # campus counter went backwards
    assert math.isnan(again.campus_retransmission_ratio)


def test_the_mean_sojourn_is_the_sum_over_the_count_and_survives_a_wrap():
    # 100 packets that waited 20 ms each: 20e6 ns >> 10 = 19,531 units per packet
    units = 20_000_000 >> 10
    later = _reading(sojourn_sum=(100 * units, 0), sojourn_count=(100, 0))
    dtn, campus = mean_queuing_delays(ZERO, later)
    assert dtn == pytest.approx(0.020, rel=1e-3)
    assert math.isnan(campus)  # nothing left BR1
    near_top = _reading(sojourn_sum=((1 << 32) - 5 * units, 0), sojourn_count=(7, 0))
    wrapped = _reading(sojourn_sum=(5 * units, 0), sojourn_count=(17, 0))
    narrow = LossReading(**{**wrapped.__dict__, "sum_bits": 32})
    assert mean_queuing_delays(LossReading(**{**near_top.__dict__, "sum_bits": 32}), narrow)[
        0
    ] == pytest.approx(0.020, rel=1e-3)


def test_method_2_counts_what_neither_left_nor_stayed_queued():
    # 1 Gb/s link; 10 MB in, 9.5 MB out: 500 kB missing; the queue went from 10 ms to 14 ms
    # of delay between the reads: 4 ms x 125 MB/s = 500 kB still queued, not lost
    later = _reading(ingress_bytes=(6_000_000, 4_000_000), egress_bytes=(5_700_000, 3_800_000))
    assert bottleneck_loss(ZERO, later, 1e9, 0.010, 0.014) == pytest.approx(0.0, abs=1e-9)
    # without the correction the same counts read as 5 % loss
    assert bottleneck_loss(ZERO, later, math.nan, 0.010, 0.014) == pytest.approx(0.05)
    assert bottleneck_loss(ZERO, later, 1e9, math.nan, 0.014) == pytest.approx(0.05)
    # the queue shrank by 2 ms (250 kB of what left was queued before): 750 kB were lost
    assert bottleneck_loss(ZERO, later, 1e9, 0.016, 0.014) == pytest.approx(0.075)
    # more out than in: no negative loss
    drained = _reading(ingress_bytes=(1_000_000, 0), egress_bytes=(1_200_000, 0))
    assert bottleneck_loss(ZERO, drained, 1e9, math.nan, math.nan) == 0.0
    assert math.isnan(bottleneck_loss(ZERO, ZERO, 1e9, 0.0, 0.0))  # nothing entered


def test_the_queue_at_a_read_is_the_last_departures_sojourn():
    assert queue_delay_at_read(90_000_000, 94_000_000) == pytest.approx(0.092)
    assert queue_delay_at_read(0, 94_000_000) == pytest.approx(0.094)  # DTN never left
    assert math.isnan(queue_delay_at_read(0, 0))


def test_long_flows_are_those_active_for_the_long_flow_age():
    assert long_flow_count({1: 0.0, 2: 9.0, 3: 7.9}, now_s=10.0, long_flow_s=2.0) == 2


def test_estimate_carries_loss_and_n_beside_the_seven_variables():
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0, capacity_bps=1e9)
    first = Poll(CounterReading(0, 0, 10.0), 0, 0, loss=ZERO)
    state, y = estimate(
        EstimatorState(), first, [], [FlowEvent(1, True, 9.5), FlowEvent(2, True, 10.0)], settings
    )
    assert math.isnan(y.signals.dtn_retransmission_ratio)  # no interval yet
    assert y.signals.long_flows == 0
    loss = _reading(ingress_packets=(1000, 100), retrans_packets=(10, 0))
    second = Poll(CounterReading(125_000, 0, 11.6), 0, 0, loss=loss)
    state, y = estimate(state, second, [], [], settings)
    assert y.signals.dtn_retransmission_ratio == pytest.approx(0.01)
    assert y.signals.campus_retransmission_ratio == 0.0
    assert y.signals.long_flows == 1  # flow 1 started 2.1 s ago, flow 2 1.6 s ago
    assert len(y.vector()) == 7  # the model's inputs are unchanged
    third = Poll(CounterReading(125_000, 0, 12.6), 0, 0, loss=loss)
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
    old = telemetry_pb2.StateSample(dtn_rate_bps=1.0)  # a collector without loss telemetry
    assert all(math.isnan(v) for v in signals_from_message(old).__dict__.values())
