"""The contract between the P4 programs (``p4/``), the collector and the software target.

Every table, action, counter, register and digest the collector touches is declared
here once, with its widths. From it come:

* ``build_p4info`` — the P4Info the programs compile to. No p4c runs here, so the checked-in
  ``p4/*/p4info.txtpb`` files are rendered from this contract (``scidmz p4info``) and tests
  check that the P4 sources declare every entity;
* ``check_p4info`` — the collector's start-up check of whatever P4Info the switch (or a
  pushed pipeline) holds: a missing entity or a wrong width is a clear error, not a
  surprise at the first read.

Names follow p4c's P4Info convention (``<control>.<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from finsy.proto import p4i, p4t

from scidmz.contract.classes import (
    CLASS_CAMPUS,
    CLASS_NONE,
    CLASS_SLOTS,
    DTN_CLASSES,
    FIRST_DTN_CLASS,
    dtn_class,
)

CONTROL = "ScidmzIngress"
__all__ = [
    "CLASS_CAMPUS", "CLASS_NONE", "CLASS_SLOTS", "DTN_CLASSES", "FIRST_DTN_CLASS", "dtn_class",
]  # fmt: skip
ROLE_CAMPUS_SIDE = 1
ROLE_DTN_SIDE = 2
ROLE_BOTTLENECK_SIDE = 3
STOP_FIN = 1
STOP_IDLE = 2
FLOW_SLOTS = 65536

MatchKind = Literal["EXACT", "LPM"]


@dataclass(frozen=True)
class Field:
    name: str
    bitwidth: int


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Table:
    name: str
    match: tuple[tuple[Field, MatchKind], ...]
    actions: tuple[str, ...]
    size: int
    direct_counter: str | None = None


@dataclass(frozen=True)
class Register:
    name: str
    bitwidth: int
    size: int
    tna_bitwidth: int | None = None
    """Tofino register cells hold at most 32 bits: timestamps there are the low 32 bits of
    the nanosecond clock (deltas stay right for 4.29 s, beyond any RTT or sojourn here)."""

    def width(self, arch: str) -> int:
        return self.tna_bitwidth if arch == "tna" and self.tna_bitwidth else self.bitwidth


@dataclass(frozen=True)
class Counter:
    """An indirect counter, indexed by class id, counting packets and bytes."""

    name: str
    size: int


@dataclass(frozen=True)
class Digest:
    name: str
    members: tuple[Field, ...]


def qualified(name: str) -> str:
    """A name of the ingress control as P4Info spells it (``ScidmzIngress.tap_ports``)."""
    return f"{CONTROL}.{name}"


NO_ACTION = Action("NoAction")
ACTIONS: tuple[Action, ...] = (
    NO_ACTION,
    Action(qualified("set_class"), (Field("class_id", 8),)),
    Action(qualified("set_tap_role"), (Field("role", 8),)),
    Action(
        qualified("set_settings"),
        (
            Field("c_th", 16),
            Field("t_th_ns", 48),
            Field("idle_ns", 48),
            Field("rtt_max_ns", 48),
        ),
    ),
)
TABLES: tuple[Table, ...] = (
    Table(
        qualified("classify_v4"),
        ((Field("hdr.ipv4.dst_addr", 32), "LPM"),),
        (qualified("set_class"), "NoAction"),
        size=256,
        direct_counter=qualified("class_bytes_v4"),
    ),
    Table(
        qualified("classify_v6"),
        ((Field("hdr.ipv6.dst_addr", 128), "LPM"),),
        (qualified("set_class"), "NoAction"),
        size=256,
        direct_counter=qualified("class_bytes_v6"),
    ),
    Table(
        qualified("reverse_v4"),
        ((Field("hdr.ipv4.src_addr", 32), "LPM"),),
        (qualified("set_class"), "NoAction"),
        size=256,
    ),
    Table(
        qualified("reverse_v6"),
        ((Field("hdr.ipv6.src_addr", 128), "LPM"),),
        (qualified("set_class"), "NoAction"),
        size=256,
    ),
    Table(
        qualified("tap_ports"),
        ((Field("std.ingress_port", 9), "EXACT"),),
        (qualified("set_tap_role"), "NoAction"),
        size=16,
    ),
    Table(qualified("settings"), (), (qualified("set_settings"), "NoAction"), size=1),
)
REGISTERS: tuple[Register, ...] = (
    Register(qualified("queuing_delay_ns"), 48, CLASS_SLOTS, 32),  # index: class (alg. 5)
    Register(qualified("packet_ts"), 48, FLOW_SLOTS, 32),  # ingress-tap time by packet hash
    Register(qualified("packet_class"), 8, FLOW_SLOTS),  # ... and that packet's class
    Register(qualified("seq_ts"), 48, FLOW_SLOTS, 32),  # data time by hash(flow, expected ACK)
    Register(qualified("seq_sig"), 32, FLOW_SLOTS),  # the slot's owner; 0 after a retransmission
    Register(qualified("flow_packets"), 16, FLOW_SLOTS),  # C_REG of algorithm 7
    Register(qualified("flow_last_ns"), 48, FLOW_SLOTS, 32),  # TS_REG of algorithm 7
    Register(qualified("flow_active"), 8, FLOW_SLOTS),  # AF_REG of algorithm 7
    # P4BS loss method 1: the next SEQ each flow slot expects; data below it is resent
    Register(qualified("flow_next_seq"), 32, FLOW_SLOTS),
    # per class, for a mean BR1 sojourn per sample time: the sum of the sojourns of the
    # packets seen leaving (in units of 1.024 us, ns >> 10) and how many there were
    Register(qualified("queuing_delay_sum_1024ns"), 48, CLASS_SLOTS, 32),
    Register(qualified("queuing_delay_count"), 32, CLASS_SLOTS),
    # the ingress time of the last packet seen on a tapped port: the end of the interval
    # the counters cover, so rates are counted bytes over the switch's own time between
    # two reads, not over the collector's (a busy tap or a late reply moves that)
    Register(qualified("tap_clock_ns"), 48, 1, 32),
)
COUNTERS: tuple[Counter, ...] = (
    # index: class id; data packets and bytes at BR1 ingress
    Counter(qualified("class_traffic"), CLASS_SLOTS),
    Counter(qualified("class_retrans"), CLASS_SLOTS),  # ... of which resent (SEQ below next)
    Counter(qualified("class_egress"), CLASS_SLOTS),  # data leaving BR1, by class entered as
)
PER_CLASS_REGISTERS = ("queuing_delay_ns", "queuing_delay_sum_1024ns", "queuing_delay_count")
"""Registers indexed by class id: with the counters, what a program pays per class."""
_PER_CLASS = frozenset({qualified(n) for n in PER_CLASS_REGISTERS} | {c.name for c in COUNTERS})
"""Every per-class array, by its qualified name."""
QD_SUM_SHIFT = 10
"""``queuing_delay_sum_1024ns`` adds each sojourn in ns shifted right by this much."""
TNA_QD_SAMPLE_MASK = 0xF
"""The TNA program sums the sojourns of one packet in 16 (packet hash & mask == 0): its
32-bit cells then wrap after 16 x 2^32 x 1.024 us of summed sojourn, e.g. 8.5 s of sample
time for a 1 Gb/s link with a full 100 ms queue (v1model's 48-bit cells sum every packet)."""
DIGESTS: tuple[Digest, ...] = (
    Digest("rtt_sample_t", (Field("flow_hash", 32), Field("class_id", 8), Field("rtt_ns", 32))),
    Digest("flow_start_t", (Field("flow_hash", 32), Field("class_id", 8))),
    Digest("flow_stop_t", (Field("flow_hash", 32), Field("class_id", 8), Field("reason", 8))),
)


TNA_PIPE = "pipe"
"""bf-p4c prefixes P4Info names with the pipeline instance (``pipe.ScidmzIngress.x``)."""


TNA_KEYS = {"std.ingress_port": "ig_intr_md.ingress_port"}
"""Match keys named after an architecture's intrinsic metadata."""


def key_name(name: str, arch: str) -> str:
    return TNA_KEYS.get(name, name) if arch == "tna" else name


def canonical_name(name: str) -> str:
    """A P4Info name without a pipeline prefix: ``pipe.ScidmzIngress.x`` -> ``ScidmzIngress.x``."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == CONTROL:
        return ".".join(parts[1:])
    return name


def digest_struct(digest: p4i.Digest) -> str:
    """Digests are matched by their struct type: v1model names the digest after it, TNA
    after the ``Digest`` extern instance in the deparser."""
    return digest.type_spec.struct.name or digest.preamble.name


class PipelineError(ValueError):
    """A P4Info that lacks what the collector needs; the message lists every problem."""


def _ids(prefix: int, names: list[str]) -> dict[str, int]:
    return {name: (prefix << 24) | (index + 1) for index, name in enumerate(names)}


def build_p4info(arch: Literal["v1model", "tna"] = "v1model") -> p4i.P4Info:
    """The P4Info of the programs in ``p4/<arch>/`` (ids: the prefix byte, then a sequence)."""
    action_ids = _ids(p4i.P4Ids.ACTION, [a.name for a in ACTIONS])
    table_ids = _ids(p4i.P4Ids.TABLE, [t.name for t in TABLES])
    counters = [t.direct_counter for t in TABLES if t.direct_counter]
    counter_ids = _ids(p4i.P4Ids.DIRECT_COUNTER, counters)
    register_ids = _ids(p4i.P4Ids.REGISTER, [r.name for r in REGISTERS])
    indirect_ids = _ids(p4i.P4Ids.COUNTER, [c.name for c in COUNTERS])
    digest_ids = _ids(p4i.P4Ids.DIGEST, [d.name for d in DIGESTS])

    prefix = f"{TNA_PIPE}." if arch == "tna" else ""
    info = p4i.P4Info()
    info.pkg_info.arch = arch
    info.pkg_info.name = "scidmz"
    for action in ACTIONS:
        action_entry = info.actions.add()
        action_entry.preamble.id = action_ids[action.name]
        action_entry.preamble.name = (
            action.name if action is NO_ACTION else f"{prefix}{action.name}"
        )
        action_entry.preamble.alias = action.name.rsplit(".", 1)[-1]
        for number, param in enumerate(action.params, start=1):
            action_entry.params.add(id=number, name=param.name, bitwidth=param.bitwidth)
    for table in TABLES:
        table_entry = info.tables.add()
        table_entry.preamble.id = table_ids[table.name]
        table_entry.preamble.name = f"{prefix}{table.name}"
        table_entry.preamble.alias = table.name.rsplit(".", 1)[-1]
        for number, (field, kind) in enumerate(table.match, start=1):
            table_entry.match_fields.add(
                id=number,
                name=key_name(field.name, arch),
                bitwidth=field.bitwidth,
                match_type=p4i.MatchField.MatchType.Value(kind),
            )
        for name in table.actions:
            table_entry.action_refs.add(id=action_ids[name])
        if table.direct_counter:
            table_entry.direct_resource_ids.append(counter_ids[table.direct_counter])
        table_entry.size = table.size
    for table in TABLES:
        if not table.direct_counter:
            continue
        counter = info.direct_counters.add()
        counter.preamble.id = counter_ids[table.direct_counter]
        counter.preamble.name = f"{prefix}{table.direct_counter}"
        counter.preamble.alias = table.direct_counter.rsplit(".", 1)[-1]
        counter.spec.unit = p4i.CounterSpec.Unit.BYTES
        counter.direct_table_id = table_ids[table.name]
    for indirect in COUNTERS:
        counter_entry = info.counters.add()
        counter_entry.preamble.id = indirect_ids[indirect.name]
        counter_entry.preamble.name = f"{prefix}{indirect.name}"
        counter_entry.preamble.alias = indirect.name.rsplit(".", 1)[-1]
        counter_entry.spec.unit = p4i.CounterSpec.Unit.BOTH
        counter_entry.size = indirect.size
    for register in REGISTERS:
        register_entry = info.registers.add()
        register_entry.preamble.id = register_ids[register.name]
        register_entry.preamble.name = f"{prefix}{register.name}"
        register_entry.preamble.alias = register.name.rsplit(".", 1)[-1]
        register_entry.type_spec.bitstring.bit.bitwidth = register.width(arch)
        register_entry.size = register.size
    for digest in DIGESTS:
        digest_entry = info.digests.add()
        digest_entry.preamble.id = digest_ids[digest.name]
        instance = digest.name.removesuffix("_t")
        digest_entry.preamble.name = (
            f"{prefix}ScidmzIngressDeparser.{instance}_digest" if arch == "tna" else digest.name
        )
        digest_entry.preamble.alias = digest_entry.preamble.name.rsplit(".", 1)[-1]
        digest_entry.type_spec.struct.name = digest.name
        struct = info.type_info.structs[digest.name]
        for member in digest.members:
            spec = p4t.P4DataTypeSpec()
            spec.bitstring.bit.bitwidth = member.bitwidth
            struct.members.add(name=member.name, type_spec=spec)
    return info


def check_p4info(info: p4i.P4Info) -> None:
    """Raise ``PipelineError`` naming every entity that is missing or has the wrong width."""
    problems: list[str] = []
    arch = info.pkg_info.arch or "v1model"
    actions = {canonical_name(a.preamble.name): a for a in info.actions}
    for action in ACTIONS:
        found = actions.get(action.name)
        if found is None:
            problems.append(f"action {action.name} is missing")
            continue
        widths = {p.name: p.bitwidth for p in found.params}
        for param in action.params:
            if widths.get(param.name) != param.bitwidth:
                problems.append(
                    f"action {action.name} param {param.name}: want bit<{param.bitwidth}>, "
                    f"found {_width(widths.get(param.name))}"
                )
    tables = {canonical_name(t.preamble.name): t for t in info.tables}
    for table in TABLES:
        found_table = tables.get(table.name)
        if found_table is None:
            problems.append(f"table {table.name} is missing")
            continue
        fields = {m.name: m for m in found_table.match_fields}
        for field, kind in table.match:
            match = fields.get(key_name(field.name, arch))
            if match is None or match.bitwidth != field.bitwidth:
                problems.append(
                    f"table {table.name} key {field.name}: want {kind} bit<{field.bitwidth}>, "
                    f"found {_width(match.bitwidth if match else None)}"
                )
            elif p4i.MatchField.MatchType.Name(match.match_type) != kind:
                problems.append(f"table {table.name} key {field.name}: want {kind} match")
    counters = {canonical_name(c.preamble.name) for c in info.direct_counters}
    for table in TABLES:
        if table.direct_counter and table.direct_counter not in counters:
            problems.append(f"direct counter {table.direct_counter} is missing")
    indirect = {canonical_name(c.preamble.name): c for c in info.counters}
    for wanted in COUNTERS:
        found_counter = indirect.get(wanted.name)
        if found_counter is None:
            problems.append(f"counter {wanted.name} is missing")
        elif (
            found_counter.size < MIN_CLASS_SLOTS
            or found_counter.spec.unit != p4i.CounterSpec.Unit.BOTH
        ):
            problems.append(
                f"counter {wanted.name}: want packets and bytes [{MIN_CLASS_SLOTS}..], found "
                f"{p4i.CounterSpec.Unit.Name(found_counter.spec.unit)}[{found_counter.size}]"
            )
    registers = {canonical_name(r.preamble.name): r for r in info.registers}
    for register in REGISTERS:
        found_register = registers.get(register.name)
        width = found_register.type_spec.bitstring.bit.bitwidth if found_register else None
        want = register.width(arch)
        if found_register is None:
            problems.append(f"register {register.name} is missing")
        elif width != want or found_register.size < _least_size(register):
            problems.append(
                f"register {register.name}: want bit<{want}>[{_least_size(register)}], "
                f"found {_width(width)}[{found_register.size}]"
            )
    digests = {digest_struct(d) for d in info.digests}
    for digest in DIGESTS:
        if digest.name not in digests:
            problems.append(f"digest {digest.name} is missing")
            continue
        struct = info.type_info.structs.get(digest.name)
        members = (
            {m.name: m.type_spec.bitstring.bit.bitwidth for m in struct.members} if struct else {}
        )
        for member in digest.members:
            if members.get(member.name) != member.bitwidth:
                problems.append(
                    f"digest {digest.name} member {member.name}: want bit<{member.bitwidth}>, "
                    f"found {_width(members.get(member.name))}"
                )
    if problems:
        raise PipelineError("the P4Info does not fit scidmz: " + "; ".join(problems))


MIN_CLASS_SLOTS = FIRST_DTN_CLASS + 1
"""A program with per-class arrays this small holds one DTN class (the paper's testbed)."""


def _least_size(register: Register) -> int:
    return MIN_CLASS_SLOTS if register.name in _PER_CLASS else register.size


def declared_dtn_classes(info: p4i.P4Info) -> int:
    """How many DTN classes a (checked) P4Info holds: its smallest per-class array, less
    the campus class and class 0. The collector programs at most this many DTN hosts."""
    sizes = [r.size for r in info.registers if canonical_name(r.preamble.name) in _PER_CLASS]
    sizes += [c.size for c in info.counters if canonical_name(c.preamble.name) in _PER_CLASS]
    return max(0, min(sizes, default=0) - FIRST_DTN_CLASS)


def _width(bitwidth: int | None) -> str:
    return "nothing" if bitwidth is None else f"bit<{bitwidth}>"
