"""What the collector writes to and reads from the pipeline, by name: pure message building.

P4Info ids differ between compilers (p4c, bf-p4c, the software target), so everything is
resolved by name from the device's own P4Info (``Ids``). From a ``Plan`` (prefixes, tap
ports, settings) come the table entries and digest configuration to install; from the
pipeline come the Read request of every sample time and the parsing of its answer and of
digest lists into the estimators' inputs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

import numpy as np
from finsy.proto import p4i, p4r

from scidmz.contract import pipeline as contract
from scidmz.contract.p4runtime import ids_by_name
from scidmz.contract.pipeline import qualified
from scidmz.telemetry.classes import ClassCells
from scidmz.telemetry.estimators import EMPTY_BATCH, FlowEvent, RttBatch
from scidmz.telemetry.sampling import Poll
from scidmz.telemetry.wire import struct_members

DIGEST_MAX_TIMEOUT_NS = 10_000_000
"""Default of spec.telemetry.digestHold, how long the switch may hold RTT digests: fresher
per-flow RTTs (a 50 ms hold costs the accuracy test ~3 ms on a swinging queue) against more,
smaller lists (bench/collector_scale)."""
DIGEST_MAX_LIST_SIZE = 1024
DIGEST_ACK_TIMEOUT_NS = 1_000_000_000


@dataclass(frozen=True)
class DtnClass:
    """One DTN host's class: its receiver prefix classified as ``class_id``."""

    host: str
    prefix: str
    class_id: int


@dataclass(frozen=True)
class Plan:
    """The classification, tap wiring and settings one link asks of the switch."""

    dtn_classes: tuple[DtnClass, ...]
    """The measured DTN hosts' classes (none: an idle link, campus only)."""
    campus_prefix: str
    campus_port: int
    dtn_port: int
    bottleneck_port: int
    active_flow_packets: int
    active_flow_window_ns: int
    idle_timeout_ns: int
    rtt_horizon_ns: int
    digest_max_timeout_ns: int = DIGEST_MAX_TIMEOUT_NS


def fit_plan(plan: Plan, declared_dtn_classes: int) -> tuple[Plan, tuple[DtnClass, ...]]:
    """The plan a switch whose program holds ``declared_dtn_classes`` DTN classes can run,
    and the DTN classes it cannot (their class id is beyond its per-class arrays)."""
    limit = contract.FIRST_DTN_CLASS + declared_dtn_classes
    kept = tuple(d for d in plan.dtn_classes if d.class_id < limit)
    refused = tuple(d for d in plan.dtn_classes if d.class_id >= limit)
    return replace(plan, dtn_classes=kept), refused


@dataclass(frozen=True)
class Ids:
    """Names to ids in one device's P4Info."""

    tables: dict[str, int]
    actions: dict[str, int]
    registers: dict[str, int]
    counters: dict[str, int]
    digests: dict[str, int]
    digest_names: dict[int, str]
    register_bits: dict[str, int]
    """Each register's cell width in this P4Info (TNA's are narrower: sums wrap sooner)."""

    @classmethod
    def from_p4info(cls, info: p4i.P4Info) -> Ids:
        """Call after ``pipeline.check_p4info``: every name the contract lists is present.
        Names are canonical (no ``pipe.`` prefix); digests are keyed by their struct."""
        digests = {contract.digest_struct(d): d.preamble.id for d in info.digests}
        return cls(
            tables=ids_by_name(info.tables),
            actions=ids_by_name(info.actions),
            registers=ids_by_name(info.registers),
            counters=ids_by_name(info.counters),
            digests=digests,
            digest_names={v: k for k, v in digests.items()},
            register_bits={
                contract.canonical_name(r.preamble.name): r.type_spec.bitstring.bit.bitwidth
                for r in info.registers
            },
        )


def _bytes(value: int, bitwidth: int) -> bytes:
    return value.to_bytes((bitwidth + 7) // 8, "big")


def _action(ids: Ids, name: str, params: tuple[tuple[int, int], ...]) -> p4r.TableAction:
    """``params``: (value, bitwidth) in the action's parameter order (ids 1, 2, ...)."""
    action = p4r.TableAction()
    action.action.action_id = ids.actions[qualified(name)]
    for param_id, (value, bitwidth) in enumerate(params, start=1):
        action.action.params.add(param_id=param_id, value=_bytes(value, bitwidth))
    return action


def _lpm_entry(ids: Ids, table: str, prefix: str, class_id: int) -> p4r.TableEntry:
    network = ipaddress.ip_network(prefix)
    width = network.max_prefixlen
    entry = p4r.TableEntry(table_id=ids.tables[qualified(table)])
    match = entry.match.add(field_id=1)
    match.lpm.value = _bytes(int(network.network_address), width)
    match.lpm.prefix_len = network.prefixlen
    entry.action.CopyFrom(_action(ids, "set_class", ((class_id, 8),)))
    return entry


def desired_entries(ids: Ids, plan: Plan) -> list[p4r.TableEntry]:
    """Classification (both directions), tap roles and the settings default action."""
    entries = []
    for prefix, class_id in (
        *((dtn.prefix, dtn.class_id) for dtn in plan.dtn_classes),
        (plan.campus_prefix, contract.CLASS_CAMPUS),
    ):
        family = "v4" if ipaddress.ip_network(prefix).version == 4 else "v6"
        entries.append(_lpm_entry(ids, f"classify_{family}", prefix, class_id))
        entries.append(_lpm_entry(ids, f"reverse_{family}", prefix, class_id))
    for port, role in (
        (plan.campus_port, contract.ROLE_CAMPUS_SIDE),
        (plan.dtn_port, contract.ROLE_DTN_SIDE),
        (plan.bottleneck_port, contract.ROLE_BOTTLENECK_SIDE),
    ):
        entry = p4r.TableEntry(table_id=ids.tables[qualified("tap_ports")])
        entry.match.add(field_id=1).exact.value = _bytes(port, 9)
        entry.action.CopyFrom(_action(ids, "set_tap_role", ((role, 8),)))
        entries.append(entry)
    settings = p4r.TableEntry(table_id=ids.tables[qualified("settings")], is_default_action=True)
    settings.action.CopyFrom(
        _action(
            ids,
            "set_settings",
            (
                (plan.active_flow_packets, 16),
                (plan.active_flow_window_ns, 48),
                (plan.idle_timeout_ns, 48),
                (plan.rtt_horizon_ns, 48),
            ),
        )
    )
    entries.append(settings)
    return entries


def managed_tables(ids: Ids) -> list[int]:
    """Tables whose entries the collector owns (stale ones are deleted at set-up)."""
    names = ("classify_v4", "classify_v6", "reverse_v4", "reverse_v6", "tap_ports")
    return [ids.tables[qualified(name)] for name in names]


def digest_entries(ids: Ids, max_timeout_ns: int = DIGEST_MAX_TIMEOUT_NS) -> list[p4r.DigestEntry]:
    entries = []
    for digest in contract.DIGESTS:
        entry = p4r.DigestEntry(digest_id=ids.digests[digest.name])
        entry.config.max_timeout_ns = max_timeout_ns
        entry.config.max_list_size = DIGEST_MAX_LIST_SIZE
        entry.config.ack_timeout_ns = DIGEST_ACK_TIMEOUT_NS
        entries.append(entry)
    return entries


LOSS_COUNTERS = ("class_traffic", "class_retrans", "class_egress")


def poll_request(ids: Ids) -> list[p4r.Entity]:
    """One Read per sample time: the classification entries' direct counters, every cell
    of the per-class registers (last and summed sojourns) and counters (traffic, resent,
    egress), wildcard reads whatever the number of classes, and the tap's clock."""
    entities = []
    for table in ("classify_v4", "classify_v6"):
        entity = p4r.Entity()
        entity.direct_counter_entry.table_entry.table_id = ids.tables[qualified(table)]
        entities.append(entity)
    for name in (*contract.PER_CLASS_REGISTERS, "tap_clock_ns"):
        entity = p4r.Entity()
        entity.register_entry.register_id = ids.registers[qualified(name)]
        entities.append(entity)
    for name in LOSS_COUNTERS:
        entity = p4r.Entity()
        entity.counter_entry.counter_id = ids.counters[qualified(name)]
        entities.append(entity)
    return entities


_CELL_FIELDS = {
    ("queuing_delay_ns", 0): "queuing_delay_ns",
    ("queuing_delay_sum_1024ns", 0): "sojourn_sum",
    ("queuing_delay_count", 0): "sojourn_count",
    ("class_traffic", 0): "ingress_packets",
    ("class_traffic", 1): "ingress_bytes",
    ("class_retrans", 0): "retrans_packets",
    ("class_egress", 0): "egress_packets",
    ("class_egress", 1): "egress_bytes",
}


def parse_poll(entities: list[p4r.Entity], at_s: float, ids: Ids, plan: Plan) -> Poll:
    """Each class's cells: the direct counters summed per class (the entry's ``set_class``
    argument), the per-class registers and counters by index, for the campus and the
    plan's DTN classes (cells of other classes are not this link's)."""
    names = {
        **{ids.registers[qualified(n)]: n for n in contract.PER_CLASS_REGISTERS},
        **{ids.counters[qualified(n)]: n for n in LOSS_COUNTERS},
    }
    wanted = {contract.CLASS_CAMPUS, *(d.class_id for d in plan.dtn_classes)}
    cells: dict[int, dict[str, int]] = {c: {"bytes": 0} for c in wanted}
    clock_id = ids.registers[qualified("tap_clock_ns")]
    tap_clock_ns = 0
    for entity in entities:
        kind = entity.WhichOneof("entity")
        if kind == "register_entry" and entity.register_entry.register_id == clock_id:
            if entity.register_entry.index.index == 0:
                tap_clock_ns = int.from_bytes(entity.register_entry.data.bitstring, "big")
        elif kind == "direct_counter_entry":
            counter = entity.direct_counter_entry
            params = counter.table_entry.action.action.params
            if params:
                class_id = int.from_bytes(params[0].value, "big")
                if class_id in cells:
                    cells[class_id]["bytes"] += counter.data.byte_count
        elif kind == "register_entry":
            register = entity.register_entry
            if register.index.index in cells:
                field = _CELL_FIELDS.get((names.get(register.register_id, ""), 0))
                if field:
                    value = int.from_bytes(register.data.bitstring, "big")
                    cells[register.index.index][field] = value
        elif kind == "counter_entry":
            counter_entry = entity.counter_entry
            if counter_entry.index.index in cells:
                name = names.get(counter_entry.counter_id, "")
                data = (counter_entry.data.packet_count, counter_entry.data.byte_count)
                for column in (0, 1):
                    field = _CELL_FIELDS.get((name, column))
                    if field:
                        cells[counter_entry.index.index][field] = data[column]
    read = {c: ClassCells(**values) for c, values in cells.items()}
    return Poll(
        at_s=at_s,
        campus=read[contract.CLASS_CAMPUS],
        dtns={d.class_id: read[d.class_id] for d in plan.dtn_classes},
        dtn_hosts={d.class_id: d.host for d in plan.dtn_classes},
        sum_bits=ids.register_bits[qualified("queuing_delay_sum_1024ns")],
        count_bits=ids.register_bits[qualified("queuing_delay_count")],
        tap_clock_ns=tap_clock_ns,
        clock_bits=ids.register_bits[qualified("tap_clock_ns")],
    )


def parse_digest(ids: Ids, digest: p4r.DigestList, at_s: float) -> tuple[RttBatch, list[FlowEvent]]:
    """A digest list as RTT samples or flow events. Flows are keyed by their register slot
    (hash mod FLOW_SLOTS): the data plane keeps per-flow state by slot, so two flows that
    share a slot are one flow to it, and must be to the collector too."""
    name = ids.digest_names.get(digest.digest_id)
    if name == "rtt_sample_t":
        values = struct_members(digest, 3)
        if not values.shape[0]:
            return EMPTY_BATCH, []
        batch = RttBatch(
            values[:, 0],
            values[:, 1],
            values[:, 2] / 1e9,
            np.full(values.shape[0], at_s),
        )
        return batch, []
    if name == "flow_start_t":
        rows = struct_members(digest, 2)
        return EMPTY_BATCH, [
            FlowEvent(int(h) % contract.FLOW_SLOTS, True, at_s, int(c)) for h, c in rows[:, :2]
        ]
    if name == "flow_stop_t":
        rows = struct_members(digest, 3)
        return EMPTY_BATCH, [
            FlowEvent(int(h) % contract.FLOW_SLOTS, False, at_s, int(c)) for h, c in rows[:, :2]
        ]
    return EMPTY_BATCH, []


def active_slots_request(ids: Ids) -> list[p4r.Entity]:
    entity = p4r.Entity()
    entity.register_entry.register_id = ids.registers[qualified("flow_active")]
    return [entity]


def parse_active_slots(entities: list[p4r.Entity]) -> frozenset[int]:
    """The slots the data plane holds active: the AF set after a (re)connect."""
    return frozenset(
        e.register_entry.index.index
        for e in entities
        if e.WhichOneof("entity") == "register_entry"
        and int.from_bytes(e.register_entry.data.bitstring, "big") != 0
    )
