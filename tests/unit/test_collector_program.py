"""The collector's messages to and from the pipeline, and one sample time's estimate."""

import math

import pytest
from finsy.proto import p4r

from scidmz.contract import pipeline as contract
from scidmz.contract.pipeline import build_p4info
from scidmz.telemetry.classes import ClassCells
from scidmz.telemetry.estimators import FlowEvent, RttSample
from scidmz.telemetry.program import (
    DtnClass,
    Ids,
    Plan,
    desired_entries,
    fit_plan,
    parse_active_slots,
    parse_digest,
    parse_poll,
    poll_request,
)
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, Poll, covered_s, estimate

IDS = Ids.from_p4info(build_p4info())
DTN = contract.FIRST_DTN_CLASS
CAMPUS = contract.CLASS_CAMPUS
PLAN = Plan(
    (DtnClass("dtn-1", "2001:db8::10/128", DTN),),
    "198.51.100.0/24", 5, 6, 7, 10, 100_000_000, 2 * 10**9, 10**9,
)  # fmt: skip
TWO = Plan(
    (DtnClass("dtn-1", "203.0.113.10/32", DTN), DtnClass("dtn-3", "203.0.113.12/32", DTN + 2)),
    "198.51.100.0/24", 5, 6, 7, 10, 100_000_000, 2 * 10**9, 10**9,
)  # fmt: skip


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


def test_each_dtn_host_is_classified_as_its_own_class_in_both_directions():
    entries = desired_entries(IDS, TWO)
    names = {v: k.rsplit(".", 1)[-1] for k, v in IDS.tables.items()}
    classes: dict[str, dict[bytes, int]] = {}
    for entry in entries:
        table = names[entry.table_id]
        if table.startswith(("classify", "reverse")):
            class_id = int.from_bytes(entry.action.action.params[0].value, "big")
            classes.setdefault(table, {})[entry.match[0].lpm.value] = class_id
    want = {bytes([203, 0, 113, 10]): DTN, bytes([203, 0, 113, 12]): DTN + 2,
            bytes([198, 51, 100, 0]): CAMPUS}  # fmt: skip
    assert classes == {"classify_v4": want, "reverse_v4": want}


def test_a_switch_holding_fewer_classes_runs_the_hosts_that_fit_and_names_the_others():
    fitted, refused = fit_plan(TWO, declared_dtn_classes=2)  # class ids 2 and 3
    assert [d.host for d in fitted.dtn_classes] == ["dtn-1"]
    assert [d.host for d in refused] == ["dtn-3"]
    assert fit_plan(TWO, contract.DTN_CLASSES) == (TWO, ())
    small = build_p4info()
    for register in small.registers:
        if register.preamble.name.endswith(contract.PER_CLASS_REGISTERS):
            register.size = contract.FIRST_DTN_CLASS + 8
    contract.check_p4info(small)  # a program with 8 DTN classes still fits scidmz
    assert contract.declared_dtn_classes(small) == 8
    assert contract.declared_dtn_classes(build_p4info("tna")) == 64
    for register in small.registers:
        if register.preamble.name.endswith("queuing_delay_ns"):
            register.size = contract.FIRST_DTN_CLASS  # no DTN class at all
    with pytest.raises(contract.PipelineError, match=r"queuing_delay_ns: want bit<48>\[3\]"):
        contract.check_p4info(small)


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


def _cells(entities: list[p4r.Entity], plan: Plan = TWO) -> Poll:
    return parse_poll(entities, at_s=3.0, ids=IDS, plan=plan)


def test_a_poll_reads_every_class_in_one_request_and_keeps_the_plans_classes():
    # 2 direct counter tables + 3 per-class registers + the tap clock + 3 per-class
    # counters, wildcard reads: the same 9 entities for one DTN host or 64
    request = poll_request(IDS)
    assert len(request) == 9
    assert all(not e.register_entry.HasField("index") for e in request[2:6])
    other = DTN + 5  # a class this link's plan does not hold
    poll = _cells(
        [
            _counter(DTN, 100),
            _counter(CAMPUS, 40),
            _counter(CAMPUS, 2),  # a v6 entry of the same class
            _counter(DTN + 2, 7),
            _counter(other, 999),
            _register(DTN, 1_500_000),
            _register(CAMPUS, 250_000),
            _register(other, 5),
            _register(DTN, 7_000, "queuing_delay_sum_1024ns"),
            _register(CAMPUS, 9, "queuing_delay_count"),
            _register(0, 7_123_456_789, "tap_clock_ns"),  # index 0: no class's cell
            _indirect("class_traffic", DTN, 80, 100),
            _indirect("class_retrans", CAMPUS, 3, 4_500),
            _indirect("class_egress", DTN + 2, 70, 90),
        ]
    )
    assert poll.campus == ClassCells(bytes=42, queuing_delay_ns=250_000, sojourn_count=9,
                                     retrans_packets=3)  # fmt: skip
    assert poll.dtns == {
        DTN: ClassCells(bytes=100, queuing_delay_ns=1_500_000, sojourn_sum=7_000,
                        ingress_packets=80, ingress_bytes=100),
        DTN + 2: ClassCells(bytes=7, egress_packets=70, egress_bytes=90),
    }  # fmt: skip
    assert poll.dtn_hosts == {DTN: "dtn-1", DTN + 2: "dtn-3"}
    assert (poll.sum_bits, poll.count_bits) == (48, 32)
    assert (poll.tap_clock_ns, poll.clock_bits) == (7_123_456_789, 48)
    assert _cells([]).tap_clock_ns == 0  # a switch that has tapped nothing yet
    tna = Ids.from_p4info(build_p4info("tna"))
    assert tna.register_bits[contract.qualified("queuing_delay_sum_1024ns")] == 32
    assert tna.register_bits[contract.qualified("tap_clock_ns")] == 32


def test_digests_become_rtt_samples_and_slot_keyed_flow_events_with_their_class():
    digest = p4r.DigestList(digest_id=IDS.digests["rtt_sample_t"], list_id=1)
    for values in ((0x10001, DTN + 1, 150_000_000), (7, CAMPUS, 12_000)):
        members = digest.data.add().struct.members
        for value in values:
            members.add().bitstring = value.to_bytes(4, "big")
    samples, events = parse_digest(IDS, digest, at_s=2.0)
    assert samples.flow_id.tolist() == [0x10001, 7]
    assert samples.class_id.tolist() == [DTN + 1, CAMPUS]
    assert samples.is_dtn.tolist() == [True, False]
    assert samples.rtt_s.tolist() == pytest.approx([0.15, 12e-6])
    assert samples.at_s.tolist() == [2.0, 2.0]
    assert events == []
    stop = p4r.DigestList(digest_id=IDS.digests["flow_stop_t"], list_id=2)
    members = stop.data.add().struct.members
    for value in (0x10001, DTN, contract.STOP_FIN):
        members.add().bitstring = value.to_bytes(4, "big")
    samples, events = parse_digest(IDS, stop, 2.0)
    assert len(samples) == 0 and events == [FlowEvent(1, started=False, at_s=2.0, class_id=DTN)]
    assert parse_active_slots([_register(9, 1), _register(10, 0)]) == frozenset({9})


def _poll(at_s: float, campus: int = 0, campus_qd: int = 0, **dtns: tuple[int, int]) -> Poll:
    """``dtns``: class id as ``c<id>`` -> (bytes, QD register)."""
    cells = {int(k[1:]): ClassCells(bytes=b, queuing_delay_ns=qd) for k, (b, qd) in dtns.items()}
    return Poll(at_s, ClassCells(bytes=campus, queuing_delay_ns=campus_qd), cells)


def test_estimate_chains_the_algorithms():
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0)
    first = _poll(10.0, **{f"c{DTN}": (0, 0)})
    state, y = estimate(EstimatorState(), first, [], [FlowEvent(1, True)], settings)
    assert math.isnan(y.dtn_rate_bps) and math.isnan(y.campus_rate_bps)  # no baseline yet
    assert y.active_flows == 1
    second = _poll(11.0, 0, 3_000_000, **{f"c{DTN}": (125_000, 2_000_000)})
    samples = [
        RttSample(5, CAMPUS, 0.010, 10.5),
        RttSample(6, CAMPUS, 0.030, 10.6),
        RttSample(9, DTN, 0.110, 10.7),
    ]
    state, y = estimate(state, second, samples, [FlowEvent(2, True, class_id=DTN)], settings)
    assert y.dtn_rate_bps == pytest.approx(1e6)
    assert y.campus_rate_bps == 0
    assert y.dtn_queuing_delay_s == pytest.approx(0.002)
    assert math.isnan(y.campus_queuing_delay_s)  # campus sent nothing: its register is old
    assert y.campus_rtt_s == pytest.approx(0.020)
    assert y.dtn_rtt_s == pytest.approx(0.110)
    assert y.active_flows == 2
    # one DTN class: its own figures are the aggregate's, the paper's one DTN
    (dtn,) = y.dtns
    assert (dtn.rate_bps, dtn.rtt_s, dtn.queuing_delay_s) == (
        y.dtn_rate_bps, y.dtn_rtt_s, y.dtn_queuing_delay_s)  # fmt: skip
    assert dtn.active_flows == 1  # flow 2's start digest named the class; flow 1's did not
    third = _poll(12.0, **{f"c{DTN}": (125_000, 0)})
    _, y = estimate(state, third, [RttSample(5, CAMPUS, 0.050, 11.5)], [], settings)
    # flows 5 (now 50 ms) and 6 (30 ms) -> mean 40 ms, smoothed with alpha = 0.5
    assert y.campus_rtt_s == pytest.approx(0.5 * 0.020 + 0.5 * 0.040)
    assert y.dtn_rtt_s == pytest.approx(0.110)  # no DTN sample this time: the last stands


def test_several_dtn_classes_sum_their_rates_and_weigh_rtt_and_queuing_delay_by_bytes():
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0)
    a, b = DTN, DTN + 1
    state, _ = estimate(EstimatorState(), _poll(0.0, **{f"c{a}": (0, 0), f"c{b}": (0, 0)}),
                        [], [], settings)  # fmt: skip
    now = _poll(1.0, **{f"c{a}": (300_000, 4_000_000), f"c{b}": (100_000, 8_000_000)})
    samples = [RttSample(1, a, 0.100, 0.5), RttSample(2, a, 0.120, 0.6),
               RttSample(3, b, 0.050, 0.7)]  # fmt: skip
    events = [FlowEvent(1, True, class_id=a), FlowEvent(2, True, class_id=a),
              FlowEvent(3, True, class_id=b)]  # fmt: skip
    state, y = estimate(state, now, samples, events, settings)
    assert y.dtn_rate_bps == pytest.approx(3.2e6)
    # byte-weighted 3:1 -> RTT (0.110 * 3 + 0.050) / 4, QD (4 ms * 3 + 8 ms) / 4
    assert y.dtn_rtt_s == pytest.approx(0.095)
    assert y.dtn_queuing_delay_s == pytest.approx(0.005)
    by_class = {d.class_id: d for d in y.dtns}
    assert by_class[a].rate_bps == pytest.approx(2.4e6) and by_class[b].rate_bps == pytest.approx(
        8e5
    )
    assert by_class[a].rtt_s == pytest.approx(0.110) and by_class[b].rtt_s == pytest.approx(0.050)
    assert (by_class[a].active_flows, by_class[b].active_flows) == (2, 1)
    assert y.active_flows == 3


def test_a_class_admitted_or_gone_between_reads_never_jumps_the_aggregate():
    """An entry re-used for a new DTN host may find its class's cells holding another
    host's old counts: the aggregate takes a class from its second read on."""
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0)
    a, b = DTN, DTN + 1
    state, _ = estimate(EstimatorState(), _poll(0.0, **{f"c{a}": (1_000, 0)}), [], [], settings)
    joined = _poll(1.0, **{f"c{a}": (126_000, 0), f"c{b}": (9_000_000_000, 0)})  # old counts
    state, y = estimate(state, joined, [], [], settings)
    assert y.dtn_rate_bps == pytest.approx(1e6)  # b not in it yet
    assert math.isnan({d.class_id: d for d in y.dtns}[b].rate_bps)
    both = _poll(2.0, **{f"c{a}": (251_000, 0), f"c{b}": (9_000_125_000, 0)})
    state, y = estimate(state, both, [], [], settings)
    assert y.dtn_rate_bps == pytest.approx(2e6)
    gone = _poll(3.0, **{f"c{b}": (9_000_250_000, 0)})  # a's policy left
    state, y = estimate(state, gone, [], [], settings)
    assert y.dtn_rate_bps == pytest.approx(1e6) and [d.class_id for d in y.dtns] == [b]
    reset = _poll(4.0, **{f"c{b}": (5, 0)})  # its counter went backwards: unknown
    _, y = estimate(state, reset, [], [], settings)
    assert math.isnan(y.dtn_rate_bps)


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
            return [_counter(DTN, counted), _counter(CAMPUS, 0)]

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


def _clocked(at_s: float, dtn_bytes: int, clock_ns: int, bits: int = 48) -> Poll:
    return Poll(at_s, ClassCells(), {DTN: ClassCells(bytes=dtn_bytes)}, tap_clock_ns=clock_ns,
                clock_bits=bits)  # fmt: skip


def test_rates_cover_the_switchs_tap_clock_not_the_collectors_reads():
    """A busy tap counts in batches and a reply comes late: the reads 1.3 s apart saw the
    bytes of the tap's 1.0 s (10 Mb/s), not 7.7 Mb/s."""
    settings = EstimatorSettings(rtt_smoothing=0.5, flow_timeout_s=2.0)
    state, _ = estimate(EstimatorState(), _clocked(10.0, 0, 5_000_000_000), [], [], settings)
    state, y = estimate(state, _clocked(11.3, 1_250_000, 6_000_000_000), [], [], settings)
    assert y.dtn_rate_bps == pytest.approx(10e6)
    assert (y.interval_s, y.tap_clock_ns) == (pytest.approx(1.0), 6_000_000_000)
    # nothing tapped since: the clock stands, nothing was counted, the reads' Δt is the rate's
    state, y = estimate(state, _clocked(12.3, 1_250_000, 6_000_000_000), [], [], settings)
    assert (y.dtn_rate_bps, y.interval_s) == (0.0, pytest.approx(1.0))


def test_the_tap_clock_is_taken_modulo_its_width_with_whole_wraps_from_the_reads():
    wrap = 2**32  # a Tofino cell: 4.29 s
    before = _clocked(0.0, 0, wrap - 500_000_000, bits=32)
    assert covered_s(before, _clocked(1.0, 0, 480_000_000, bits=32)) == pytest.approx(0.98)
    # reads 5.3 s apart: one whole wrap beyond what the low 32 bits show
    late = _clocked(5.3, 0, (wrap - 500_000_000 + 5_250_000_000) % wrap, bits=32)
    assert covered_s(before, late) == pytest.approx(5.25)
    # no clock on either read (a program without the register's writes yet): the reads' Δt
    assert covered_s(_clocked(0.0, 0, 0), _clocked(1.2, 0, 9)) == pytest.approx(1.2)
    assert covered_s(_clocked(0.0, 0, 9), _clocked(1.2, 0, 0)) == pytest.approx(1.2)
