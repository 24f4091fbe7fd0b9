"""The collector's messages to and from the pipeline, and one sample time's estimate."""

import math

import pytest
from finsy.proto import p4r

from scidmz.contract import pipeline as contract
from scidmz.contract.pipeline import build_p4info
from scidmz.telemetry.estimators import CounterReading, FlowEvent, RttSample
from scidmz.telemetry.program import (
    Ids,
    Plan,
    desired_entries,
    parse_active_slots,
    parse_digest,
    parse_poll,
    poll_request,
)
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, estimate

IDS = Ids.from_p4info(build_p4info())
PLAN = Plan(("2001:db8::10/128",), "198.51.100.0/24", 5, 6, 7, 10, 100_000_000, 2 * 10**9, 10**9)


def test_entries_cover_both_families_both_directions_ports_and_settings():
    entries = desired_entries(IDS, PLAN)
    names = {v: k.rsplit(".", 1)[-1] for k, v in IDS.tables.items()}
    by_table: dict[str, list[p4r.TableEntry]] = {}
    for entry in entries:
        by_table.setdefault(names[entry.table_id], []).append(entry)
    assert by_table["classify_v6"][0].match[0].lpm.prefix_len == 128
    assert by_table["reverse_v6"][0].match[0].lpm.value[-1] == 0x10
    assert by_table["classify_v4"][0].match[0].lpm.value == bytes([198, 51, 100, 0])
    ports = sorted(int.from_bytes(e.match[0].exact.value, "big") for e in by_table["tap_ports"])
    assert ports == [5, 6, 7]
    (settings,) = by_table["settings"]
    assert settings.is_default_action
    values = [int.from_bytes(p.value, "big") for p in settings.action.action.params]
    assert values == [10, 100_000_000, 2 * 10**9, 10**9]


def _counter(class_id: int, byte_count: int) -> p4r.Entity:
    entity = p4r.Entity()
    entry = entity.direct_counter_entry
    entry.table_entry.action.action.params.add(param_id=1, value=bytes([class_id]))
    entry.data.byte_count = byte_count
    return entity


def _register(index: int, value: int, name: str = "queuing_delay_ns") -> p4r.Entity:
    entity = p4r.Entity()
    entity.register_entry.register_id = IDS.registers[contract.qualified(name)]
    entity.register_entry.index.index = index
    entity.register_entry.data.bitstring = value.to_bytes(6, "big")
    return entity


def _indirect(name: str, index: int, packets: int, byte_count: int) -> p4r.Entity:
    entity = p4r.Entity()
    entity.counter_entry.counter_id = IDS.counters[contract.qualified(name)]
    entity.counter_entry.index.index = index
    entity.counter_entry.data.packet_count = packets
    entity.counter_entry.data.byte_count = byte_count
    return entity


def test_a_poll_sums_counters_per_class_and_reads_the_qd_registers():
    # 2 direct counters + (QD, sojourn sum, count) x 2 classes + 3 loss counters x 2 classes
    assert len(poll_request(IDS)) == 14
    dtn, campus = contract.CLASS_DTN, contract.CLASS_CAMPUS
    poll = parse_poll(
        [
            _counter(dtn, 100),
            _counter(campus, 40),
            _counter(campus, 2),  # a v6 entry of the same class
            _register(dtn, 1_500_000),
            _register(campus, 250_000),
            _register(dtn, 7_000, "queuing_delay_sum_1024ns"),
            _register(campus, 9, "queuing_delay_count"),
            _indirect("class_traffic", dtn, 80, 100),
            _indirect("class_retrans", campus, 3, 4_500),
            _indirect("class_egress", dtn, 70, 90),
        ],
        at_s=3.0,
        ids=IDS,
    )
    assert poll.counters == CounterReading(100, 42, 3.0)
    assert (poll.dtn_queuing_delay_ns, poll.campus_queuing_delay_ns) == (1_500_000, 250_000)
    assert poll.loss is not None
    assert poll.loss.ingress_packets == (80, 0) and poll.loss.ingress_bytes == (100, 0)
    assert poll.loss.retrans_packets == (0, 3)
    assert poll.loss.egress_packets == (70, 0) and poll.loss.egress_bytes == (90, 0)
    assert poll.loss.sojourn_sum == (7_000, 0) and poll.loss.sojourn_count == (0, 9)
    assert (poll.loss.sum_bits, poll.loss.count_bits) == (48, 32)
    tna = Ids.from_p4info(build_p4info("tna"))
    assert tna.register_bits[contract.qualified("queuing_delay_sum_1024ns")] == 32


def test_digests_become_rtt_samples_and_slot_keyed_flow_events():
    digest = p4r.DigestList(digest_id=IDS.digests["rtt_sample_t"], list_id=1)
    for values in ((0x10001, contract.CLASS_DTN, 150_000_000), (7, contract.CLASS_CAMPUS, 12_000)):
        members = digest.data.add().struct.members
        for value in values:
            members.add().bitstring = value.to_bytes(4, "big")
    samples, events = parse_digest(IDS, digest, at_s=2.0)
    assert samples.flow_id.tolist() == [0x10001, 7]
    assert samples.is_dtn.tolist() == [True, False]
    assert samples.rtt_s.tolist() == pytest.approx([0.15, 12e-6])
    assert samples.at_s.tolist() == [2.0, 2.0]
    assert events == []
    stop = p4r.DigestList(digest_id=IDS.digests["flow_stop_t"], list_id=2)
    members = stop.data.add().struct.members
    for value in (0x10001, contract.CLASS_DTN, contract.STOP_FIN):
        members.add().bitstring = value.to_bytes(4, "big")
    samples, events = parse_digest(IDS, stop, 2.0)
    assert len(samples) == 0 and events == [FlowEvent(1, started=False, at_s=2.0)]
    assert parse_active_slots([_register(9, 1), _register(10, 0)]) == frozenset({9})


def test_estimate_chains_the_algorithms():
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0)
    first = Poll(CounterReading(0, 0, 10.0), 0, 0)
    state, y = estimate(EstimatorState(), first, [], [FlowEvent(1, True)], settings)
    assert math.isnan(y.dtn_rate_bps) and math.isnan(y.campus_rate_bps)  # no baseline yet
    assert y.active_flows == 1
    second = Poll(CounterReading(125_000, 0, 11.0), 2_000_000, 3_000_000)
    samples = [
        RttSample(5, False, 0.010, 10.5),
        RttSample(6, False, 0.030, 10.6),
        RttSample(9, True, 0.110, 10.7),
    ]
    state, y = estimate(state, second, samples, [FlowEvent(2, True)], settings)
    assert y.dtn_rate_bps == pytest.approx(1e6)
    assert y.campus_rate_bps == 0
    assert y.dtn_queuing_delay_s == pytest.approx(0.002)
    assert math.isnan(y.campus_queuing_delay_s)  # campus sent nothing: its register is old
    assert y.campus_rtt_s == pytest.approx(0.020)
    assert y.dtn_rtt_s == pytest.approx(0.110)
    assert y.active_flows == 2
    third = Poll(CounterReading(125_000, 0, 12.0), 0, 0)
    _, y = estimate(state, third, [RttSample(5, False, 0.050, 11.5)], [], settings)
    # flows 5 (now 50 ms) and 6 (30 ms) -> mean 40 ms, smoothed with alpha = 0.5
    assert y.campus_rtt_s == pytest.approx(0.5 * 0.020 + 0.5 * 0.040)


def _random_digest(rng, rows: int, width: int) -> p4r.DigestList:
    digest = p4r.DigestList(digest_id=1, list_id=int(rng.integers(1, 2**40)), timestamp=12345)
    for _ in range(rows):
        members = digest.data.add().struct.members
        for _ in range(width):
            value = int(rng.integers(0, 2**32))
            members.add().bitstring = value.to_bytes(max(1, (value.bit_length() + 7) // 8))
    return digest


def test_the_wire_decoder_agrees_with_protobuf():
    import numpy as np

    from scidmz.telemetry.wire import decode_structs, struct_members

    rng = np.random.default_rng(4)
    for rows, width in ((0, 3), (1, 2), (1500, 3)):
        digest = _random_digest(rng, rows, width)
        expected = [[int.from_bytes(m.bitstring) for m in d.struct.members] for d in digest.data]
        assert struct_members(digest, width).tolist() == expected
    # anything unexpected: the decoder says so, and the general path still reads it
    odd = _random_digest(rng, 3, 3)
    odd.data.add().bool = True  # not a struct: left out by the general path
    buf = np.frombuffer(odd.SerializeToString(), dtype=np.uint8)
    assert decode_structs(buf, np.zeros((4, 3), dtype=np.int64)) == -1
    assert struct_members(odd, 3).shape == (3, 3)
    truncated = np.frombuffer(_random_digest(rng, 5, 3).SerializeToString()[:-2], dtype=np.uint8)
    assert decode_structs(truncated, np.zeros((5, 3), dtype=np.int64)) == -1


def test_a_late_answer_moves_a_samples_boundary_by_half_the_call_at_most():
    """The switch reads its counters somewhere inside the Read call; the collector stamps
    them at the call's midpoint, so a slow call (a loaded host) shifts the interval by half
    its duration, not all of it, and the rate of 100 MB in 1 s is not read as ~10 % off."""
    import asyncio

    from scidmz.telemetry.collector import Collector
    from tests.telemetry.harness import settings

    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    class SlowSwitch:
        """Counters taken at the middle of every Read; the answer takes ``call_s``."""

        def __init__(self, clock: Clock) -> None:
            self.clock, self.dtn_bytes, self.call_s = clock, 0, 0.0

        async def read(self, request: object, timeout: float) -> list[p4r.Entity]:
            self.clock.now += self.call_s / 2
            # 100 MB/s on the DTN class: the counter as it stands at this moment
            counted = int((self.clock.now - 100.0) * 100e6)
            self.clock.now += self.call_s / 2
            return [_counter(contract.CLASS_DTN, counted), _counter(contract.CLASS_CAMPUS, 0)]

    async def rates() -> list[float]:
        clock = Clock()
        switch = SlowSwitch(clock)
        collector = Collector(settings("unused:1"), clock=clock)
        collector._ready, collector._ids = switch, IDS  # type: ignore[assignment]
        seen = []
        for call_s in (0.0, 0.0, 0.2, 0.0):  # one read answered 200 ms late
            switch.call_s = call_s
            await collector.sample_once()
            if collector.snapshot is not None:
                seen.append(collector.snapshot.state.dtn_rate_bps)
            clock.now += 1.0 - call_s
        return seen

    measured = asyncio.run(rates())
    assert [round(r / 8e8, 3) for r in measured[1:]] == [1.0, 1.0, 1.0]
