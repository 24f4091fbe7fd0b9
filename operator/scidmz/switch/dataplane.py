"""The data half of the software target: the P4 program's semantics over observations.

``Dataplane`` holds what the program in ``p4/v1model/scidmz.p4`` holds — direct counters
on the classification entries, the ``class_traffic`` indirect counter, the registers, the
digest queues — and updates them from a source's ``Observation`` the way the program would:

* data entering BR1 through a port whose ``tap_ports`` role is the campus or DTN side is
  classified by destination (``classify_v4/v6``, longest prefix first); unclassified
  traffic, or traffic on an untapped port, measures nothing;
* a class's BR1 sojourn lands in ``queuing_delay_ns[class]`` only when the bottleneck side
  is tapped too (algorithm 5 needs both copies of a packet);
* loss telemetry: a group's resent data counts in ``class_retrans``; its data seen leaving
  BR1 in ``class_egress`` and in the sojourn sum and count registers (bottleneck side
  tapped). The sources count retransmissions themselves, so ``flow_next_seq``, the
  program's per-flow state for it, stays zero here;
* returning ACKs are classified by source (``reverse_v4/v6``) on the bottleneck side; their
  RTT becomes an ``rtt_sample_t`` digest unless it is beyond the settings' RTT horizon;
* activity-rule transitions become ``flow_start_t`` / ``flow_stop_t`` digests and update
  the ``flow_*`` registers of the flow's slot;
* ``tap_clock_ns`` holds the source's clock (the time of its last frame), modulo the
  register's width, once a tap port has a role.

No I/O and no clocks: the runner passes ``now_ns``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_network

import numpy as np
import numpy.typing as npt
from finsy.proto import p4i, p4r

from scidmz.contract import pipeline as contract
from scidmz.contract.p4runtime import EntryKey, ids_by_name
from scidmz.contract.pipeline import QD_SUM_SHIFT, qualified
from scidmz.switch.digests import DigestQueue, DigestRecord
from scidmz.switch.entries import Change, UpdateError
from scidmz.switch.observation import ActivityRule, Address, FlowChange, Observation

Network = IPv4Network | IPv6Network
U64Array = npt.NDArray[np.uint64]

INGRESS_ROLES = frozenset({contract.ROLE_CAMPUS_SIDE, contract.ROLE_DTN_SIDE})
DEFAULT_SETTINGS = (10, 100_000_000, 2_000_000_000, 1_000_000_000)
"""The program's default ``set_settings(c_th, t_th_ns, idle_ns, rtt_max_ns)``."""


@dataclass(frozen=True)
class Route:
    network: Network
    class_id: int
    key: EntryKey


@dataclass(frozen=True)
class Settings:
    c_th: int
    t_th_ns: int
    idle_ns: int
    rtt_max_ns: int

    def activity_rule(self) -> ActivityRule:
        return ActivityRule(self.c_th, self.t_th_ns / 1e9, self.idle_ns / 1e9)


def _int(value: bytes) -> int:
    return int.from_bytes(value, "big")


def _count(counter: U64Array | None, index: int, count_bytes: int, packets: int) -> None:
    """An indirect counter's cell (bytes, packets) += what a group added."""
    if counter is not None and index < counter.shape[0]:
        counter[index, 0] += np.uint64(count_bytes)
        counter[index, 1] += np.uint64(packets)


def _lookup(routes: tuple[Route, ...], address: Address) -> Route | None:
    for route in routes:  # sorted longest prefix first
        if address.version == route.network.version and address in route.network:
            return route
    return None


class Dataplane:
    """Counters, registers and digest queues of one pipeline instance."""

    def __init__(
        self,
        p4info: p4i.P4Info,
        on_settings: Callable[[ActivityRule], None] | None = None,
    ) -> None:
        name = contract.canonical_name
        self.tables = {t.preamble.id: name(t.preamble.name) for t in p4info.tables}
        self.table_ids = {table: id_ for id_, table in self.tables.items()}
        self.action_names = {a.preamble.id: name(a.preamble.name) for a in p4info.actions}
        self.registers: dict[int, U64Array] = {
            r.preamble.id: np.zeros(r.size, dtype=np.uint64) for r in p4info.registers
        }
        self.register_ids = ids_by_name(p4info.registers)
        self.register_bits = {
            r.preamble.id: r.type_spec.bitstring.bit.bitwidth for r in p4info.registers
        }
        self.counters: dict[int, U64Array] = {
            c.preamble.id: np.zeros((c.size, 2), dtype=np.uint64) for c in p4info.counters
        }
        self.counter_ids = ids_by_name(p4info.counters)
        self.direct_counter_tables = {
            c.preamble.id: c.direct_table_id for c in p4info.direct_counters
        }
        self.digests: dict[int, DigestQueue] = {
            d.preamble.id: DigestQueue() for d in p4info.digests
        }
        self.digest_ids = {contract.digest_struct(d): d.preamble.id for d in p4info.digests}
        self.direct: dict[EntryKey, list[int]] = {}
        self._routes: dict[EntryKey, Route] = {}
        self._reverse: dict[EntryKey, Route] = {}
        self._sorted: tuple[tuple[Route, ...], tuple[Route, ...]] | None = ((), ())
        self.roles: dict[int, int] = {}
        self.settings = Settings(*DEFAULT_SETTINGS)
        self._on_settings = on_settings
        # The source's activity rule runs whatever is installed; the program only sees
        # (and reports) flows it can classify. A flow already active when its prefix gets
        # installed is reported then, as its next C_TH packets would make the program do.
        self._active: dict[int, FlowChange] = {}
        self._reported: set[int] = set()
        self._now_ns = 0

    # ---- entries -------------------------------------------------------------------------
    def _what(self, entry: p4r.TableEntry) -> tuple[str, str, list[int]]:
        """The entry's table (short name), action (full name) and parameters as integers."""
        table = self.tables.get(entry.table_id, "").rsplit(".", 1)[-1]
        action = self.action_names.get(entry.action.action.action_id, "")
        return table, action, [_int(p.value) for p in entry.action.action.params]

    def check(self, change: Change) -> None:
        """Refuse what the program would not run, before anything is changed: settings
        outside their ranges (C_TH 0 counts every flow active at its first packet, and a
        zero window or timeout stops every flow at once). Refused, such a write left the
        entry installed while the data path kept the old settings: a Read showed c_th 0."""
        if change.new is None:
            return
        table, action, params = self._what(change.new)
        if table == "settings" and action.endswith("set_settings"):
            names = ("c_th", "t_th_ns", "idle_ns", "rtt_max_ns")
            bad = [f"{n} = {v}" for n, v in zip(names, params, strict=False) if v < 1]
            if bad or len(params) != len(names):
                raise UpdateError(
                    "INVALID_ARGUMENT", f"settings: {', '.join(bad) or 'parameters'} out of range"
                )

    def apply(self, change: Change) -> None:
        """Follow one committed entry change: routes, tap roles, settings, direct counters
        (which live and die with their entries; a modified entry keeps its counts). What it
        costs is what changed; routes are re-sorted once, at the next lookup."""
        for entry, adding in ((change.old, False), (change.new, True)):
            if entry is None:
                continue
            table, action, params = self._what(entry)
            if table == "settings" and action.endswith("set_settings"):
                self._set_settings(Settings(*params) if adding else Settings(*DEFAULT_SETTINGS))
            elif table == "tap_ports" and action.endswith("set_tap_role"):
                port = _int(entry.match[0].exact.value)
                if adding:
                    self.roles[port] = params[0]
                else:
                    self.roles.pop(port, None)
            elif table in ("classify_v4", "classify_v6", "reverse_v4", "reverse_v6"):
                self._route(table, action, entry, params, change.key, adding)
        if change.new is None or change.key not in self._routes:
            self.direct.pop(change.key, None)  # deleted (a modify keeps its counts)

    def _route(
        self,
        table: str,
        action: str,
        entry: p4r.TableEntry,
        params: list[int],
        key: EntryKey,
        adding: bool,
    ) -> None:
        routes = self._routes if table.startswith("classify") else self._reverse
        self._sorted = None
        if not adding:
            routes.pop(key, None)
            return
        if not action.endswith("set_class") or not entry.match:
            return
        lpm = entry.match[0].lpm
        width = 32 if table.endswith("v4") else 128
        value = _int(lpm.value).to_bytes(width // 8, "big")
        routes[key] = Route(ip_network((value, lpm.prefix_len)), params[0], key)
        if table.startswith("classify"):
            self.direct.setdefault(key, [0, 0])

    def _set_settings(self, settings: Settings) -> None:
        if settings != self.settings:
            self.settings = settings
            if self._on_settings is not None:
                self._on_settings(settings.activity_rule())

    def _sorted_routes(self) -> tuple[tuple[Route, ...], tuple[Route, ...]]:
        if self._sorted is None:
            by_length = lambda r: -r.network.prefixlen  # noqa: E731
            self._sorted = (
                tuple(sorted(self._routes.values(), key=by_length)),
                tuple(sorted(self._reverse.values(), key=by_length)),
            )
        return self._sorted

    @property
    def routes(self) -> tuple[Route, ...]:
        """The classification routes, longest prefix first."""
        return self._sorted_routes()[0]

    @property
    def reverse_routes(self) -> tuple[Route, ...]:
        return self._sorted_routes()[1]

    def entries_settled(self) -> None:
        """After a batch of changes: a flow already active when its prefix got installed is
        reported now, as its next C_TH packets would make the program do."""
        unreported = [c for h, c in self._active.items() if h not in self._reported]
        self._report_flows(unreported, self._now_ns)

    # ---- the data path -----------------------------------------------------------------
    def observe(self, observation: Observation, now_ns: int) -> None:
        """Apply one tick of tap observations (see the module docstring)."""
        bottleneck_tapped = (
            self.roles.get(observation.bottleneck_port) == contract.ROLE_BOTTLENECK_SIDE
        )
        class_traffic = self._counter("class_traffic")
        class_retrans = self._counter("class_retrans")
        class_egress = self._counter("class_egress")
        qd = self.registers.get(self.register_ids.get(qualified("queuing_delay_ns"), -1))
        qd_sum = self.register_ids.get(qualified("queuing_delay_sum_1024ns"), -1)
        qd_count = self.register_ids.get(qualified("queuing_delay_count"), -1)
        for traffic in observation.traffic:
            if self.roles.get(traffic.port) not in INGRESS_ROLES:
                continue
            route = _lookup(self.routes, traffic.destination)
            if route is None:
                continue
            counts = self.direct[route.key]
            counts[0] += traffic.bytes
            counts[1] += traffic.packets
            _count(class_traffic, route.class_id, traffic.bytes, traffic.packets)
            _count(class_retrans, route.class_id, traffic.retrans_bytes, traffic.retrans_packets)
            if bottleneck_tapped and traffic.egress_packets > 0:
                _count(class_egress, route.class_id, traffic.egress_bytes, traffic.egress_packets)
                self._add(qd_sum, route.class_id, traffic.queuing_delay_sum_ns >> QD_SUM_SHIFT)
                self._add(qd_count, route.class_id, traffic.egress_packets)
            if (
                bottleneck_tapped
                and traffic.queuing_delay_ns > 0
                and qd is not None
                and route.class_id < qd.shape[0]
            ):
                qd[route.class_id] = traffic.queuing_delay_ns
        if observation.clock_ns > 0 and self.roles:
            self._set(self.register_ids.get(qualified("tap_clock_ns"), -1), 0, observation.clock_ns)
        if bottleneck_tapped:
            self._rtt_digests(observation, now_ns)
        self._flow_digests(observation, now_ns)

    def _add(self, register_id: int, index: int, amount: int) -> None:
        """A register cell += amount, wrapping at its width as the program's would."""
        register = self.registers.get(register_id)
        if register is not None and index < register.shape[0]:
            self._set(register_id, index, int(register[index]) + amount)

    def _set(self, register_id: int, index: int, value: int) -> None:
        """A register cell = value, modulo its width (from the P4Info) as the program's
        would keep it; a register or cell the P4Info lacks is not written."""
        register = self.registers.get(register_id)
        if register is not None and index < register.shape[0]:
            register[index] = np.uint64(value % (1 << self.register_bits[register_id]))

    def _counter(self, name: str) -> U64Array | None:
        return self.counters.get(self.counter_ids.get(qualified(name), -1))

    def _rtt_digests(self, observation: Observation, now_ns: int) -> None:
        queue = self.digests.get(self.digest_ids.get("rtt_sample_t", -1))
        if queue is None:
            return
        records: list[DigestRecord] = []
        horizon = self.settings.rtt_max_ns
        for match in observation.rtt_matches:
            route = _lookup(self.reverse_routes, match.remote)
            if route is None or not 0 <= match.rtt_ns < horizon:
                continue
            records.append((match.flow_hash, route.class_id, min(match.rtt_ns, 0xFFFFFFFF)))
        queue.push(records, now_ns)

    def _flow_digests(self, observation: Observation, now_ns: int) -> None:
        for change in observation.flow_changes:
            if change.started:
                self._active[change.flow_hash] = change
            else:
                self._active.pop(change.flow_hash, None)
        self._report_flows(observation.flow_changes, now_ns)

    def _report_flows(self, changes: Iterable[FlowChange], now_ns: int) -> None:
        """Algorithm 7's digests and registers for the changes the program can see."""
        self._now_ns = max(self._now_ns, now_ns)
        start = self.digests.get(self.digest_ids.get("flow_start_t", -1))
        stop = self.digests.get(self.digest_ids.get("flow_stop_t", -1))
        active = self.registers.get(self.register_ids.get(qualified("flow_active"), -1))
        packets = self.registers.get(self.register_ids.get(qualified("flow_packets"), -1))
        last = self.registers.get(self.register_ids.get(qualified("flow_last_ns"), -1))
        starts: list[DigestRecord] = []
        stops: list[DigestRecord] = []
        for change in changes:
            if change.started == (change.flow_hash in self._reported):
                continue  # a stop the program never reported a start for, or a repeat
            if self.roles.get(change.port) not in INGRESS_ROLES:
                continue
            route = _lookup(self.routes, change.destination)
            if route is None:
                continue
            slot = change.flow_hash % contract.FLOW_SLOTS
            if active is not None and packets is not None and last is not None:
                active[slot] = 1 if change.started else 0
                packets[slot] = self.settings.c_th if change.started else 0
                last[slot] = now_ns
            if change.started:
                self._reported.add(change.flow_hash)
                starts.append((change.flow_hash, route.class_id))
            else:
                self._reported.discard(change.flow_hash)
                stops.append((change.flow_hash, route.class_id, change.reason))
        if start is not None:
            start.push(starts, now_ns)
        if stop is not None:
            stop.push(stops, now_ns)

    # ---- reads -------------------------------------------------------------------------
    def direct_counter(self, key: EntryKey) -> tuple[int, int]:
        """(bytes, packets) of a classification entry; (0, 0) for other entries."""
        counts = self.direct.get(key, [0, 0])
        return counts[0], counts[1]
