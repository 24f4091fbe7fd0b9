"""The P4 programs, their checked-in P4Info and the collector's pipeline contract agree."""

import re

import pytest
from finsy.proto import p4i
from google.protobuf import text_format

from scidmz.contract.pipeline import (
    ACTIONS,
    CLASS_CAMPUS,
    CLASS_SLOTS,
    COUNTERS,
    DIGESTS,
    DTN_CLASSES,
    FIRST_DTN_CLASS,
    REGISTERS,
    TABLES,
    PipelineError,
    build_p4info,
    check_p4info,
    declared_dtn_classes,
)
from scidmz.testenv.cluster import REPO_ROOT

V1MODEL = REPO_ROOT / "p4" / "v1model"
TNA = REPO_ROOT / "p4" / "tna"


def _checked_in() -> p4i.P4Info:
    return text_format.Parse((V1MODEL / "p4info.txtpb").read_text(), p4i.P4Info())


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _size(source: str, token: str) -> int:
    """An array size as the program writes it: a number or a ``const bit<32>`` name."""
    if token.isdigit():
        return int(token)
    constant = re.search(rf"const bit<32> {token} = (\d+);", source)
    assert constant, f"no constant {token}"
    return int(constant.group(1))


def test_the_checked_in_p4info_is_the_contracts():
    assert _checked_in() == build_p4info("v1model"), "run: scidmz p4info --out " + str(
        V1MODEL / "p4info.txtpb"
    )
    check_p4info(_checked_in())


def test_the_programs_hold_the_contracts_classes():
    for arch in (V1MODEL, TNA):
        source = (arch / "scidmz.p4").read_text()
        assert _size(source, "CLASS_SLOTS") == CLASS_SLOTS == FIRST_DTN_CLASS + DTN_CLASSES
    v1model = (V1MODEL / "scidmz.p4").read_text()
    assert re.search(rf"const bit<8>\s+CLASS_CAMPUS = {CLASS_CAMPUS};", v1model)
    assert re.search(rf"const bit<8>\s+FIRST_DTN_CLASS = {FIRST_DTN_CLASS};", v1model)
    assert declared_dtn_classes(build_p4info()) == DTN_CLASSES == 64  # the API's dtnHosts max


def test_the_v1model_source_declares_every_entity_with_its_width():
    source = (V1MODEL / "scidmz.p4").read_text()
    for table in TABLES:
        body = re.search(rf"table {_short(table.name)} \{{(.*?)\n    \}}", source, re.S)
        assert body, f"table {table.name}"
        for field, kind in table.match:
            assert f"{field.name}: {kind.lower()};" in body.group(1), f"{table.name} {field}"
        for action in table.actions:
            assert _short(action) in body.group(1)
        if table.direct_counter:
            assert f"counters = {_short(table.direct_counter)};" in body.group(1)
            assert f"direct_counter(CounterType.bytes) {_short(table.direct_counter)};" in source
    for action in ACTIONS[1:]:
        params = ", ".join(f"bit<{p.bitwidth}> {p.name}" for p in action.params)
        assert f"action {_short(action.name)}({params})" in source, action.name
    for register in REGISTERS:
        declared = re.search(rf"register<bit<(\d+)>>\((\w+)\) {_short(register.name)};", source)
        assert declared, register.name
        assert int(declared.group(1)) == register.bitwidth, register.name
        assert _size(source, declared.group(2)) == register.size, register.name
    for counter in COUNTERS:
        declared = re.search(
            rf"counter\((\w+), CounterType.packets_and_bytes\) {_short(counter.name)};", source
        )
        assert declared, counter.name
        assert _size(source, declared.group(1)) == counter.size, counter.name
        assert f"{_short(counter.name)}.count(" in source, counter.name
    for digest in DIGESTS:
        members = " ".join(f"bit<{m.bitwidth}> {m.name};" for m in digest.members)
        assert f"struct {digest.name} {{ {members} }}" in source, digest.name
        assert f"digest<{digest.name}>" in source, digest.name


def _without(info: p4i.P4Info, kind: str, name: str) -> p4i.P4Info:
    copy = p4i.P4Info()
    copy.CopyFrom(info)
    entries = getattr(copy, kind)
    for index, entry in enumerate(entries):
        if entry.preamble.name == name:
            del entries[index]
            return copy
    raise AssertionError(name)


def test_check_names_every_missing_or_wrong_entity():
    info = build_p4info()
    broken = _without(info, "registers", "ScidmzIngress.seq_ts")
    broken = _without(broken, "digests", "flow_stop_t")
    broken.registers[0].type_spec.bitstring.bit.bitwidth = 32
    broken.tables[0].match_fields[0].bitwidth = 24
    broken.type_info.structs["rtt_sample_t"].members[2].type_spec.bitstring.bit.bitwidth = 16
    broken.counters[0].spec.unit = p4i.CounterSpec.Unit.BYTES
    with pytest.raises(PipelineError) as error:
        check_p4info(broken)
    message = str(error.value)
    for fragment in (
        "register ScidmzIngress.seq_ts is missing",
        "digest flow_stop_t is missing",
        "register ScidmzIngress.queuing_delay_ns: want bit<48>[3], found bit<32>[66]",
        "table ScidmzIngress.classify_v4 key hdr.ipv4.dst_addr: want LPM bit<32>, found bit<24>",
        "digest rtt_sample_t member rtt_ns: want bit<32>, found bit<16>",
        "counter ScidmzIngress.class_traffic: want packets and bytes [3..], found BYTES[66]",
    ):
        assert fragment in message


def test_check_refuses_an_empty_pipeline():
    with pytest.raises(PipelineError, match=r"table ScidmzIngress\.classify_v4 is missing"):
        check_p4info(p4i.P4Info())


def test_ids_carry_the_p4runtime_prefixes():
    info = build_p4info()
    assert all(t.preamble.id >> 24 == p4i.P4Ids.TABLE for t in info.tables)
    assert all(r.preamble.id >> 24 == p4i.P4Ids.REGISTER for r in info.registers)
    assert all(d.preamble.id >> 24 == p4i.P4Ids.DIGEST for d in info.digests)
    assert all(c.preamble.id >> 24 == p4i.P4Ids.DIRECT_COUNTER for c in info.direct_counters)
    assert all(c.preamble.id >> 24 == p4i.P4Ids.COUNTER for c in info.counters)
    kinds = ("tables", "actions", "registers", "digests", "counters", "direct_counters")
    ids = [e.preamble.id for kind in kinds
           for e in getattr(info, kind)]  # fmt: skip
    assert len(ids) == len(set(ids))


def test_the_checked_in_tna_p4info_is_the_contracts():
    info = text_format.Parse((TNA / "p4info.txtpb").read_text(), p4i.P4Info())
    assert info == build_p4info("tna"), "run: scidmz p4info --arch tna --out " + str(
        TNA / "p4info.txtpb"
    )
    check_p4info(info)  # bf-p4c's pipe-prefixed names and 32-bit registers fit the contract
    assert info.tables[0].preamble.name.startswith("pipe.ScidmzIngress.")
    assert info.digests[0].preamble.name == "pipe.ScidmzIngressDeparser.rtt_sample_digest"


def test_the_tna_source_declares_every_entity_with_its_width():
    source = (TNA / "scidmz.p4").read_text()
    for table in TABLES:
        body = re.search(rf"table {_short(table.name)} \{{(.*?)\n    \}}", source, re.S)
        assert body, f"table {table.name}"
        for field, kind in table.match:
            name = field.name.replace("std.ingress_port", "ig_intr_md.ingress_port")
            assert f"{name}: {kind.lower()};" in body.group(1), f"{table.name} {field}"
        if table.direct_counter:
            assert f"counters = {_short(table.direct_counter)};" in body.group(1)
            assert (
                f"DirectCounter<bit<64>>(CounterType_t.BYTES) {_short(table.direct_counter)};"
                in source
            )
    for action in ACTIONS[1:]:
        params = ", ".join(f"bit<{p.bitwidth}> {p.name}" for p in action.params)
        assert f"action {_short(action.name)}({params})" in source, action.name
    for register in REGISTERS:
        declared = re.search(
            rf"Register<bit<(\d+)>, bit<32>>\((\w+)\) {_short(register.name)};", source
        )
        assert declared, register.name
        assert int(declared.group(1)) == register.width("tna"), register.name
        assert _size(source, declared.group(2)) == register.size, register.name
        assert f"({_short(register.name)})" in source, f"{register.name} is never used"
    for counter in COUNTERS:
        declared = re.search(
            rf"Counter<bit<64>, bit<32>>\((\w+), CounterType_t.PACKETS_AND_BYTES\) "
            rf"{_short(counter.name)};",
            source,
        )
        assert declared, counter.name
        assert _size(source, declared.group(1)) == counter.size, counter.name
    for digest in DIGESTS:
        members = " ".join(f"bit<{m.bitwidth}> {m.name};" for m in digest.members)
        assert f"struct {digest.name} {{ {members} }}" in source, digest.name
        instance = digest.name.removesuffix("_t") + "_digest"
        assert f"Digest<{digest.name}>() {instance};" in source
        assert f"{instance}.pack(" in source


def test_wrong_tna_register_widths_are_named():
    info = build_p4info("tna")
    info.registers[0].type_spec.bitstring.bit.bitwidth = 48
    with pytest.raises(
        PipelineError, match=r"queuing_delay_ns: want bit<32>\[3\], found bit<48>\[66\]"
    ):
        check_p4info(info)
