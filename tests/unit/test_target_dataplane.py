"""The target's data half applies the installed tables to observations like the P4 program."""

from dataclasses import replace
from ipaddress import ip_address

import pytest
from finsy.proto import p4r

from scidmz.contract import pipeline as contract
from scidmz.contract.p4runtime import EntryKey, entry_key
from scidmz.contract.pipeline import FIRST_DTN_CLASS, build_p4info
from scidmz.switch.dataplane import Dataplane
from scidmz.switch.digests import DigestConfig
from scidmz.switch.entries import Change
from scidmz.switch.observation import FlowChange, Observation, RttMatch, Traffic
from scidmz.telemetry.program import DtnClass, Ids, Plan, desired_entries

PLAN = Plan(
    dtn_classes=(DtnClass("dtn-1", "203.0.113.10/32", FIRST_DTN_CLASS),),
    campus_prefix="203.0.113.0/24",  # the DTN-r host inside the remote network
    campus_port=1,
    dtn_port=2,
    bottleneck_port=3,
    active_flow_packets=7,
    active_flow_window_ns=50_000_000,
    idle_timeout_ns=1_000_000_000,
    rtt_horizon_ns=300_000_000,
)
DTN = ip_address("203.0.113.10")
DTN_CLASS = contract.FIRST_DTN_CLASS
CAMPUS = ip_address("203.0.113.77")
ELSEWHERE = ip_address("192.0.2.1")


def _sync(dataplane, entries, installed=None):
    """Bring ``dataplane`` from the ``installed`` entries to ``entries``, one change each, as
    the target commits a batch of writes."""
    installed = installed or {}
    for key, old in installed.items():
        if key not in entries:
            dataplane.apply(Change(old.table_id, key, old, None))
    for key, entry in entries.items():
        if installed.get(key) != entry:
            dataplane.apply(Change(entry.table_id, key, installed.get(key), entry))
    dataplane.entries_settled()
    return entries


def _installed(plan=PLAN, skip=()):
    info = build_p4info()
    rules = []
    dataplane = Dataplane(info, on_settings=rules.append)
    entries: dict[EntryKey, p4r.TableEntry] = {}
    for entry in desired_entries(Ids.from_p4info(info), plan):
        name = dataplane.tables[entry.table_id].rsplit(".", 1)[-1]
        if name not in skip:
            entries[entry_key(entry)] = entry
    _sync(dataplane, entries)
    for queue in dataplane.digests.values():
        queue.configure(DigestConfig(0, 0, 0))
    dataplane.installed = entries
    return dataplane, rules


def _by_class(dataplane):
    totals = {}
    for route in dataplane.routes:
        totals[route.class_id] = dataplane.direct_counter(route.key)
    return totals


def _digests(dataplane, name):
    queue = dataplane.digests[dataplane.digest_ids[name]]
    ready = queue.poll(10**15)
    return [] if ready is None else list(ready.records)


def test_longest_prefix_classifies_and_counts_per_class():
    dataplane, _ = _installed()
    dataplane.observe(
        Observation(
            bottleneck_port=3,
            traffic=(
                Traffic(2, DTN, 9000, 6, 1_000_000),
                Traffic(1, CAMPUS, 3000, 2, 2_000_000),
                Traffic(1, ELSEWHERE, 5000, 4, 3_000_000),  # no entry: not measured
            ),
        ),
        now_ns=1,
    )
    assert _by_class(dataplane) == {
        DTN_CLASS: (9000, 6),
        contract.CLASS_CAMPUS: (3000, 2),
    }
    indirect = dataplane.counters[dataplane.counter_ids["ScidmzIngress.class_traffic"]]
    assert indirect[DTN_CLASS].tolist() == [9000, 6]
    qd = dataplane.registers[dataplane.register_ids["ScidmzIngress.queuing_delay_ns"]]
    assert qd[DTN_CLASS] == 1_000_000 and qd[contract.CLASS_CAMPUS] == 2_000_000


def test_each_dtn_host_counts_in_its_own_class_and_a_removed_one_in_none():
    other = ip_address("203.0.113.12")
    two = replace(
        PLAN,
        dtn_classes=(*PLAN.dtn_classes, DtnClass("dtn-3", "203.0.113.12/32", DTN_CLASS + 2)),
    )
    dataplane, _ = _installed(two)
    flows = (FlowChange(31, 2, DTN, True), FlowChange(32, 2, other, True))
    dataplane.observe(
        Observation(
            bottleneck_port=3,
            traffic=(Traffic(2, DTN, 9000, 6, 1_000_000), Traffic(2, other, 4000, 3, 5_000_000)),
            rtt_matches=(RttMatch(31, DTN, 100_000_000), RttMatch(32, other, 60_000_000)),
            flow_changes=flows,
        ),
        now_ns=1,
    )
    assert _by_class(dataplane) == {
        DTN_CLASS: (9000, 6), DTN_CLASS + 2: (4000, 3), contract.CLASS_CAMPUS: (0, 0)
    }  # fmt: skip
    qd = dataplane.registers[dataplane.register_ids["ScidmzIngress.queuing_delay_ns"]]
    assert (qd[DTN_CLASS], qd[DTN_CLASS + 2]) == (1_000_000, 5_000_000)
    assert [r[1] for r in _digests(dataplane, "rtt_sample_t")] == [DTN_CLASS, DTN_CLASS + 2]
    assert _digests(dataplane, "flow_start_t") == [(31, DTN_CLASS), (32, DTN_CLASS + 2)]
    # dtn-3's policy left: the collector deletes its entries; its traffic counts nowhere
    entries = {entry_key(e): e for e in desired_entries(Ids.from_p4info(build_p4info()), PLAN)}
    _sync(dataplane, entries, dataplane.installed)
    dataplane.observe(
        Observation(bottleneck_port=3, traffic=(Traffic(2, other, 4000, 3, 5_000_000),)), 2
    )
    traffic = dataplane.counters[dataplane.counter_ids["ScidmzIngress.class_traffic"]]
    assert traffic[DTN_CLASS + 2].tolist() == [4000, 3]  # as it was


def test_untapped_ports_measure_nothing_and_qd_needs_the_bottleneck_side():
    dataplane, _ = _installed(skip=("tap_ports",))
    dataplane.observe(
        Observation(bottleneck_port=3, traffic=(Traffic(2, DTN, 9000, 6, 1_000_000),)), 1
    )
    assert _by_class(dataplane)[DTN_CLASS] == (0, 0)
    # only the ingress sides tapped: bytes count, but no sojourn can be measured
    dataplane, _ = _installed()
    tap_ports = dataplane.table_ids["ScidmzIngress.tap_ports"]
    entries = {}
    for entry in desired_entries(Ids.from_p4info(build_p4info()), PLAN):
        if entry.table_id == tap_ports and entry.match[0].exact.value == (3).to_bytes(2, "big"):
            continue
        entries[entry_key(entry)] = entry
    _sync(dataplane, entries, dataplane.installed)
    dataplane.observe(
        Observation(bottleneck_port=3, traffic=(Traffic(2, DTN, 9000, 6, 1_000_000),)), 1
    )
    assert _by_class(dataplane)[DTN_CLASS] == (9000, 6)
    qd = dataplane.registers[dataplane.register_ids["ScidmzIngress.queuing_delay_ns"]]
    assert qd[DTN_CLASS] == 0


def test_rtt_matches_are_classified_by_source_and_bounded_by_the_horizon():
    dataplane, _ = _installed()
    dataplane.observe(
        Observation(
            bottleneck_port=3,
            rtt_matches=(
                RttMatch(11, DTN, 150_000_000),
                RttMatch(12, CAMPUS, 12_000_000),
                RttMatch(13, CAMPUS, 400_000_000),  # beyond rtt_horizon: the slot expired
                RttMatch(14, ELSEWHERE, 5_000_000),
            ),
        ),
        1,
    )
    assert _digests(dataplane, "rtt_sample_t") == [
        (11, DTN_CLASS, 150_000_000),
        (12, contract.CLASS_CAMPUS, 12_000_000),
    ]


def test_settings_reach_the_source_once_per_change():
    _, rules = _installed()
    assert len(rules) == 1
    assert rules[0].packets_threshold == 7
    assert rules[0].window_s == pytest.approx(0.05)
    assert rules[0].idle_timeout_s == pytest.approx(1.0)


def test_flow_digests_follow_the_activity_rule_and_late_classification():
    info = build_p4info()
    dataplane = Dataplane(info)
    for queue in dataplane.digests.values():
        queue.configure(DigestConfig(0, 0, 0))
    early = FlowChange(21, 1, CAMPUS, started=True)
    dataplane.observe(Observation(bottleneck_port=3, flow_changes=(early,)), 1)
    assert _digests(dataplane, "flow_start_t") == []  # nothing classified yet
    entries = {entry_key(e): e for e in desired_entries(Ids.from_p4info(info), PLAN)}
    _sync(dataplane, entries)  # the flow is still active: reported now
    assert _digests(dataplane, "flow_start_t") == [(21, contract.CLASS_CAMPUS)]
    active = dataplane.registers[dataplane.register_ids["ScidmzIngress.flow_active"]]
    assert active[21] == 1
    stop = FlowChange(21, 1, CAMPUS, started=False, reason=contract.STOP_FIN)
    never_started = FlowChange(22, 1, CAMPUS, started=False, reason=contract.STOP_IDLE)
    dataplane.observe(Observation(bottleneck_port=3, flow_changes=(stop, never_started)), 2)
    assert _digests(dataplane, "flow_stop_t") == [(21, contract.CLASS_CAMPUS, contract.STOP_FIN)]
    assert active[21] == 0


def test_loss_counters_and_sojourn_sums_as_the_program_keeps_them():
    dataplane, _ = _installed()

    def cells(name, kind="counters"):
        ids = dataplane.counter_ids if kind == "counters" else dataplane.register_ids
        return getattr(dataplane, kind)[ids[f"ScidmzIngress.{name}"]]

    sum_1024ns = cells("queuing_delay_sum_1024ns", "registers")
    sum_1024ns[DTN_CLASS] = (1 << 48) - 10  # about to wrap, as a 48-bit cell does
    dataplane.observe(
        Observation(
            bottleneck_port=3,
            traffic=(
                Traffic(2, DTN, 9000, 6, 1_000_000, retrans_bytes=1500, retrans_packets=1,
                        egress_bytes=6000, egress_packets=4, queuing_delay_sum_ns=40 << 20),
                Traffic(1, ELSEWHERE, 5000, 4, 0, retrans_bytes=5000, retrans_packets=4),
            ),
        ),
        now_ns=1,
    )  # fmt: skip
    assert cells("class_retrans")[DTN_CLASS].tolist() == [1500, 1]
    assert cells("class_egress")[DTN_CLASS].tolist() == [6000, 4]
    assert cells("class_retrans")[contract.CLASS_CAMPUS].tolist() == [0, 0]  # unclassified
    assert cells("queuing_delay_count", "registers")[DTN_CLASS] == 4
    assert sum_1024ns[DTN_CLASS] == (40 << 10) - 10  # wrapped at 2^48
    # with the bottleneck side untapped, nothing is seen leaving
    untapped, _ = _installed(skip=("tap_ports",))
    untapped.observe(
        Observation(bottleneck_port=3, traffic=(Traffic(2, DTN, 9000, 6, 0, egress_bytes=6000,
                                                        egress_packets=4),)), 1
    )  # fmt: skip
    egress = untapped.counters[untapped.counter_ids["ScidmzIngress.class_egress"]]
    assert egress[DTN_CLASS].tolist() == [0, 0]


def test_the_tap_clock_register_holds_the_sources_clock_once_a_port_is_tapped():
    def clock(dataplane: Dataplane) -> int:
        return int(dataplane.registers[dataplane.register_ids["ScidmzIngress.tap_clock_ns"]][0])

    untapped, _ = _installed(skip=("tap_ports",))
    untapped.observe(Observation(bottleneck_port=3, clock_ns=7_000_000_000), 1)
    assert clock(untapped) == 0  # no port has a tap role: the program saw no packet
    dataplane, _ = _installed()
    dataplane.observe(Observation(bottleneck_port=3, clock_ns=2**48 + 5), 1)
    assert clock(dataplane) == 5  # modulo its 48 bits
    dataplane.observe(Observation(bottleneck_port=3), 2)
    assert clock(dataplane) == 5  # a source that has counted nothing leaves it
    tna = Dataplane(build_p4info("tna"))
    tna.roles = {1: contract.ROLE_CAMPUS_SIDE}
    tna.observe(Observation(bottleneck_port=3, clock_ns=2**32 + 9), 1)
    assert int(tna.registers[tna.register_ids["ScidmzIngress.tap_clock_ns"]][0]) == 9
