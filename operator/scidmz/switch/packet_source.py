"""Real packets as the software target's packet source (``scidmz target --source packets``).

A small C reader (``scidmz/lab/tapreader.c``) takes frames from packet sockets on the
border's links, with kernel timestamps, and hands one 40-byte record per TCP frame to
:class:`PacketTapSource`, which reduces them the way the P4 program reduces packets
(``p4/scidmz_v1model.p4``) into the same ``Observation`` the simulator's source produces:

* bytes and packets per (ingress port, destination) for data entering BR1 on the campus
  and DTN sides;
* the BR1 sojourn per class: a data frame seen entering (campus/DTN side) and leaving
  (bottleneck side, after the queue) is matched by (sender, port, SEQ); the last sojourn of
  each class is its queuing-delay register, as the program writes it per packet;
* SEQ→ACK RTT matches: one outstanding measurement per flow (expected ACK = SEQ + length),
  closed by the first ACK on the bottleneck side that covers it, dropped if the flow
  retransmits meanwhile (Karn's rule); at most one per flow per ``rtt_sample_interval_s``;
* the activity rule (algorithm 7): a flow becomes active once it sends C_TH packets within
  T_TH, and stops on FIN or after the idle timeout.

A GSO frame counts as the segments it carries (payload / MSS), so C_TH means packets on the
wire whether or not the senders use segmentation offload.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import numpy as np

from scidmz.contract.compiled import compiled
from scidmz.contract.pipeline import STOP_FIN, STOP_IDLE
from scidmz.netsim.records import BoolArray, IntArray
from scidmz.switch.observation import ActivityRule, FlowChange, Observation, RttMatch, Traffic

RECORD = np.dtype(
    [
        ("timestamp_ns", "<u8"),
        ("saddr", "<u4"),
        ("daddr", "<u4"),
        ("seq", "<u4"),
        ("ack", "<u4"),
        ("ip_bytes", "<u4"),
        ("payload_bytes", "<u4"),
        ("sport", "<u2"),
        ("dport", "<u2"),
        ("role", "u1"),
        ("tcp_flags", "u1"),
        ("segments", "<u2"),
    ]
)
"""One frame as ``tapreader`` writes it (addresses in network byte order, as read)."""

ROLE_CAMPUS_IN, ROLE_DTN_IN, ROLE_BOTTLENECK_OUT, ROLE_ACKS_IN = 0, 1, 2, 3
ROLE_BORDER = 4
"""One mirror port carrying both directions of the border link: split by the remote
prefixes into ``ROLE_BOTTLENECK_OUT`` (data towards them) and ``ROLE_ACKS_IN`` (from them)."""
TCP_FIN = 0x01
_PRE_HISTORY_NS = 2_000_000_000  # a frame queued longer than this is not matched
_REORDER_NS = 500_000_000
"""How long a frame seen leaving BR1 waits for its entering copy to be read (ours), when
the reader fell further behind on one socket than ``MAX_HOLD_NS``. The
reader drains one socket after another, so with a near-empty queue a frame's leaving copy
can reach the source before its entering copy: in the lab at 1 Gb/s under the rate loop,
7.5 % of the leaving frames, up to 6,000 frames (~50 ms) ahead. Unmatched, they read as
BR1's loss (method 2 at 4.8 % against the kernel's 0.15 %)."""


@dataclass(frozen=True)
class TapWiring:
    """Which interface carries which side of BR1, and the switch ports they stand for."""

    campus_in: str
    dtn_in: str
    bottleneck_out: str
    acks_in: str
    campus_port: int = 1
    dtn_port: int = 2
    bottleneck_port: int = 3
    more_dtn_in: tuple[str, ...] = ()
    """Further links from DTN hosts into BR1, read as the same DTN port (the DTN hosts
    are told apart by their receiver prefixes, as the switch's classification does)."""
    mirrored: bool = False
    """Every interface is a mirror port: the bottleneck side's frames arrive on it too.
    Otherwise the bottleneck interface is BR1's own egress, read as it transmits (the lab)."""
    remote_prefixes: tuple[IPv4Network, ...] = ()
    """The remote side of the border link (the campus's and every DTN host's receiver
    prefix): with one border interface for both the bottleneck and the ACK roles, a frame
    to one of them is data leaving BR1, a frame from one is an ACK coming back."""

    def __post_init__(self) -> None:
        if self.border and not self.remote_prefixes:
            raise ValueError(
                f"interface {self.bottleneck_out} carries both directions of the border "
                "link: the remote prefixes are needed to tell them apart"
            )

    @property
    def border(self) -> bool:
        """One mirror port carries both directions of the border link."""
        return self.bottleneck_out == self.acks_in

    def taps(self) -> list[str]:
        """``tapreader`` arguments."""
        sides = [
            f"{self.campus_in}={ROLE_CAMPUS_IN}",
            *(f"{i}={ROLE_DTN_IN}" for i in (self.dtn_in, *self.more_dtn_in)),
        ]
        if self.border:  # a mirror port: both directions arrive on it
            return [*sides, f"{self.bottleneck_out}={ROLE_BORDER}"]
        egress = "" if self.mirrored else ",out"
        return [
            *sides,
            f"{self.bottleneck_out}={ROLE_BOTTLENECK_OUT}{egress}",
            f"{self.acks_in}={ROLE_ACKS_IN}",
        ]


def split_border(frames: np.ndarray, prefixes: Sequence[IPv4Network]) -> np.ndarray:
    """``frames`` with each border frame (``ROLE_BORDER``) given its direction: to a
    remote prefix and not from one, data leaving BR1; from one and not to one, an ACK
    returning; to and from (a remote prefix as wide as a default route), data when it
    carries payload or a FIN, else an ACK; neither, dropped (no class's traffic). Pure."""
    border = frames["role"] == ROLE_BORDER
    if not border.any():
        return frames
    # the reader stores network-order bytes read as little endian: swap to compare numbers
    destination = frames["daddr"].byteswap()
    source = frames["saddr"].byteswap()
    to_remote = np.zeros(frames.shape[0], dtype=bool)
    from_remote = np.zeros(frames.shape[0], dtype=bool)
    for prefix in prefixes:
        mask, network = np.uint32(int(prefix.netmask)), np.uint32(int(prefix.network_address))
        to_remote |= (destination & mask) == network
        from_remote |= (source & mask) == network
    carries = (frames["payload_bytes"] > 0) | ((frames["tcp_flags"] & TCP_FIN) != 0)
    both = to_remote & from_remote
    outbound = border & ((to_remote & ~from_remote) | (both & carries))
    inbound = border & ((from_remote & ~to_remote) | (both & ~carries))
    out = frames.copy()
    out["role"][outbound] = ROLE_BOTTLENECK_OUT
    out["role"][inbound] = ROLE_ACKS_IN
    kept: np.ndarray = out[~border | outbound | inbound]
    return kept


def address(network_order: int) -> IPv4Address:
    """An address read as a little-endian u32 from network-order bytes."""
    return IPv4Address(int(network_order).to_bytes(4, "little"))


def flow_hash(key: int) -> int:
    """A stable, non-zero 32-bit flow id from the flow key."""
    return ((key * 0x9E3779B97F4A7C15) >> 32 & 0xFFFFFFFF) or 1


@compiled
def _seq_before(a: int, b: int) -> bool:
    return ((a - b) & 0xFFFFFFFF) >= 0x80000000


@compiled
def _flows_step(
    flow: IntArray, is_ack: BoolArray, ts: IntArray, seq: IntArray, end: IntArray,
    ack: IntArray, fin: BoolArray, segments: IntArray,
    seen: BoolArray, max_end: IntArray, pending: BoolArray, expected_ack: IntArray,
    sent_ts: IntArray, last_rtt_ts: IntArray, window_start: IntArray, window_count: IntArray,
    active: BoolArray, last_seen: IntArray,
    c_th: int, t_th_ns: int, rtt_interval_ns: int,
    out_rtt_flow: IntArray, out_rtt_ns: IntArray, out_change_flow: IntArray,
    out_change_kind: IntArray, out_retrans: BoolArray,
) -> tuple[int, int]:  # fmt: skip
    """Algorithm 7 and the SEQ→ACK matcher over one tick's records; returns the number of
    RTT samples and flow changes written (kind 1 start, 2 FIN). ``out_retrans[i]``: record
    i resends data (P4BS loss method 1: payload starting below the flow's highest SEQ sent,
    not a one-byte keep-alive just below it)."""
    n_rtt = 0
    n_change = 0
    for i in range(flow.shape[0]):
        f = flow[i]
        if is_ack[i]:
            if pending[f] and not _seq_before(ack[i], expected_ack[f]):
                out_rtt_flow[n_rtt] = f
                out_rtt_ns[n_rtt] = ts[i] - sent_ts[f]
                n_rtt += 1
                pending[f] = False
                last_rtt_ts[f] = ts[i]
            continue
        if seen[f] and _seq_before(seq[i], max_end[f]):
            pending[f] = False  # Karn: a retransmission makes the outstanding sample ambiguous
            length = (end[i] - seq[i]) & 0xFFFFFFFF
            keepalive = length == 1 and ((max_end[f] - seq[i]) & 0xFFFFFFFF) == 1
            out_retrans[i] = length > 0 and not keepalive
        else:
            if end[i] != seq[i]:
                max_end[f] = end[i]
                if not pending[f] and ts[i] - last_rtt_ts[f] >= rtt_interval_ns:
                    pending[f] = True
                    expected_ack[f] = end[i]
                    sent_ts[f] = ts[i]
            seen[f] = True
        last_seen[f] = ts[i]
        if not active[f]:
            if ts[i] - window_start[f] > t_th_ns:
                window_start[f] = ts[i]
                window_count[f] = 0
            window_count[f] += segments[i]
            if window_count[f] >= c_th and not fin[i]:
                active[f] = True
                out_change_flow[n_change] = f
                out_change_kind[n_change] = 1
                n_change += 1
        if fin[i] and active[f]:
            active[f] = False
            window_count[f] = 0
            out_change_flow[n_change] = f
            out_change_kind[n_change] = 2
            n_change += 1
    return n_rtt, n_change


class TapState:
    """The reduction from frames to observations, without the capture (pure up to its own
    state: the same records give the same observations)."""

    def __init__(self, wiring: TapWiring, rtt_sample_interval_s: float = 0.01) -> None:
        self.wiring = wiring
        self.rtt_interval_ns = int(rtt_sample_interval_s * 1e9)
        self.rule = ActivityRule(packets_threshold=10, window_s=0.1, idle_timeout_s=2.0)
        self._index: dict[int, int] = {}
        self._hash: list[int] = []
        self._port: list[int] = []
        self._destination: list[IPv4Address] = []
        self._state = self._grow({}, 1024)
        self._pre = np.zeros(0, dtype=RECORD)
        self._post = np.zeros(0, dtype=RECORD)
        self.clock_ns = 0
        """The latest frame's kernel time (CLOCK_REALTIME ns): the tap's clock."""

    @property
    def ports(self) -> frozenset[int]:
        w = self.wiring
        return frozenset({w.campus_port, w.dtn_port, w.bottleneck_port})

    def set_activity_rule(self, rule: ActivityRule) -> None:
        self.rule = rule

    @staticmethod
    def _grow(state: dict[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
        kinds = {
            "seen": np.bool_, "max_end": np.int64, "pending": np.bool_, "expected_ack": np.int64,
            "sent_ts": np.int64, "last_rtt_ts": np.int64, "window_start": np.int64,
            "window_count": np.int64, "active": np.bool_, "last_seen": np.int64,
        }  # fmt: skip
        grown = {}
        for name, kind in kinds.items():
            array: np.ndarray = np.zeros(size, dtype=kind)
            if name == "last_rtt_ts":
                array[:] = -(2**62)
            if name in state:
                array[: state[name].shape[0]] = state[name]
            grown[name] = array
        return grown

    def _flow_ids(self, keys: np.ndarray, frames: np.ndarray, is_ack: np.ndarray) -> np.ndarray:
        """Dense per-flow indices; a flow is registered by its first data frame (its side
        and destination), never by an ACK (a SYN-ACK precedes the first data)."""
        data_keys, first = np.unique(keys[~is_ack], return_index=True)
        data_frames = frames[~is_ack]
        w = self.wiring
        for key, at in zip(data_keys.tolist(), first.tolist(), strict=True):
            if key in self._index:
                continue
            self._index[key] = len(self._hash)
            frame = data_frames[at]
            is_dtn = int(frame["role"]) == ROLE_DTN_IN
            self._hash.append(flow_hash(key))
            self._port.append(w.dtn_port if is_dtn else w.campus_port)
            self._destination.append(address(int(frame["daddr"])))
        if len(self._hash) > self._state["seen"].shape[0]:
            self._state = self._grow(self._state, 2 * len(self._hash))
        unique, inverse = np.unique(keys, return_inverse=True)
        ids = np.array([self._index[key] for key in unique.tolist()], dtype=np.int64)
        return ids[inverse]

    def reduce(self, records: np.ndarray, now_ns: int) -> Observation:
        """One tick's records (any order) -> the tick's observation; ``now_ns`` on the
        records' clock drives the idle timeout."""
        records = np.sort(records, order="timestamp_ns", kind="stable")
        if records.shape[0]:
            self.clock_ns = max(self.clock_ns, int(records["timestamp_ns"][-1]))
        if self.wiring.border:
            records = split_border(records, self.wiring.remote_prefixes)
        role = records["role"]
        data = ((role == ROLE_CAMPUS_IN) | (role == ROLE_DTN_IN)) & (
            (records["payload_bytes"] > 0) | ((records["tcp_flags"] & TCP_FIN) != 0)
        )
        acks = role == ROLE_ACKS_IN
        flows = records[data | acks]
        is_ack = flows["role"] == ROLE_ACKS_IN
        sender = np.where(is_ack, flows["daddr"], flows["saddr"]).astype(np.uint64)
        sport = np.where(is_ack, flows["dport"], flows["sport"]).astype(np.uint64)
        dport = np.where(is_ack, flows["sport"], flows["dport"]).astype(np.uint64)
        keys = (sender << np.uint64(32)) | (sport << np.uint64(16)) | dport
        # An ACK of a flow never seen sending cannot close a measurement: leave it out.
        senders = np.concatenate(
            [keys[~is_ack], np.fromiter(self._index, np.uint64, len(self._index))]
        )
        known = ~is_ack | np.isin(keys, senders)
        flows, keys, is_ack = flows[known], keys[known], is_ack[known]
        ids = self._flow_ids(keys, flows, is_ack) if flows.shape[0] else np.zeros(0, np.int64)
        n = flows.shape[0]
        out_rtt_flow = np.zeros(n, np.int64)
        out_rtt_ns = np.zeros(n, np.int64)
        out_change_flow = np.zeros(n, np.int64)
        out_change_kind = np.zeros(n, np.int64)
        out_retrans = np.zeros(n, np.bool_)
        s = self._state
        n_rtt, n_change = _flows_step(
            ids, is_ack, flows["timestamp_ns"].astype(np.int64), flows["seq"].astype(np.int64),
            (flows["seq"].astype(np.int64) + flows["payload_bytes"]) & 0xFFFFFFFF,
            flows["ack"].astype(np.int64), (flows["tcp_flags"] & TCP_FIN) != 0,
            flows["segments"].astype(np.int64),
            s["seen"], s["max_end"], s["pending"], s["expected_ack"], s["sent_ts"],
            s["last_rtt_ts"], s["window_start"], s["window_count"], s["active"], s["last_seen"],
            self.rule.packets_threshold, int(self.rule.window_s * 1e9), self.rtt_interval_ns,
            out_rtt_flow, out_rtt_ns, out_change_flow, out_change_kind, out_retrans,
        )  # fmt: skip
        traffic = self._traffic(
            records[data], records[role == ROLE_BOTTLENECK_OUT], out_retrans[:n][~is_ack]
        )
        remotes = {
            int(i): address(int(r))
            for i, r in zip(ids[is_ack], flows["saddr"][is_ack], strict=True)
        }
        matches = tuple(
            RttMatch(self._hash[f], remotes.get(f, self._destination[f]), int(rtt))
            for f, rtt in zip(
                out_rtt_flow[:n_rtt].tolist(), out_rtt_ns[:n_rtt].tolist(), strict=True
            )
        )
        changes = [
            self._change(f, started=kind == 1, reason=STOP_FIN)
            for f, kind in zip(
                out_change_flow[:n_change].tolist(),
                out_change_kind[:n_change].tolist(),
                strict=True,
            )
        ]
        count = len(self._hash)
        idle = s["active"][:count] & (
            now_ns - s["last_seen"][:count] > int(self.rule.idle_timeout_s * 1e9)
        )
        for f in np.flatnonzero(idle).tolist():
            s["active"][f] = False
            s["window_count"][f] = 0
            changes.append(self._change(f, started=False, reason=STOP_IDLE))
        return Observation(
            bottleneck_port=self.wiring.bottleneck_port,
            traffic=traffic,
            rtt_matches=matches,
            flow_changes=tuple(changes),
            clock_ns=self.clock_ns,
        )

    def _change(self, f: int, started: bool, reason: int) -> FlowChange:
        return FlowChange(
            flow_hash=self._hash[f],
            port=self._port[f],
            destination=self._destination[f],
            started=started,
            reason=0 if started else reason,
        )

    def _traffic(
        self, entering: np.ndarray, leaving: np.ndarray, resent: np.ndarray
    ) -> tuple[Traffic, ...]:
        """Bytes and packets per (side, destination) (``resent``: per entering frame, a
        retransmission), with each group's last sojourn and what of it left BR1."""
        pre = np.concatenate([self._pre, entering])
        leaving = np.concatenate([self._post, leaving])
        if pre.shape[0]:
            horizon = int(pre["timestamp_ns"].max()) - _PRE_HISTORY_NS
            pre = pre[pre["timestamp_ns"].astype(np.int64) >= horizon]
        left = np.zeros(0, dtype=RECORD)
        waited: np.ndarray = np.zeros(0, dtype=np.int64)
        matched_out = np.zeros(leaving.shape[0], dtype=bool)
        if leaving.shape[0] and pre.shape[0]:
            pre_keys = _frame_keys(pre)
            order = np.lexsort((pre["timestamp_ns"], pre_keys))  # by key, then time
            sorted_keys = pre_keys[order]
            sorted_ts = pre["timestamp_ns"][order].astype(np.int64)
            post_keys = _frame_keys(leaving)
            leave_ts = leaving["timestamp_ns"].astype(np.int64)
            # the latest entering copy of each leaving frame, or the one before it when the
            # latest entered after it left (a retransmission read before the original left)
            at = np.searchsorted(sorted_keys, post_keys, side="right") - 1
            safe = np.maximum(at, 0)
            back = (at >= 1) & (sorted_ts[safe] > leave_ts)
            back &= sorted_keys[np.maximum(at - 1, 0)] == post_keys
            at = np.where(back, at - 1, at)
            safe = np.maximum(at, 0)
            found = (at >= 0) & (sorted_keys[safe] == post_keys) & (sorted_ts[safe] <= leave_ts)
            matched_out = found
            matched = pre[order[at[found]]]
            # each leaving frame as the group it entered as (role, destination), in time order
            left = leaving[found]
            left["role"], left["daddr"] = matched["role"], matched["daddr"]
            waited = leave_ts[found] - matched["timestamp_ns"].astype(np.int64)
            # a frame leaves once: forget what matched
            keep = np.ones(pre.shape[0], dtype=bool)
            keep[order[at[found]]] = False
            pre = pre[keep]
        self._pre = pre
        # a leaving frame whose entering copy is not read yet waits for it a while
        waiting = leaving[~matched_out]
        if waiting.shape[0]:
            newest = max(int(waiting["timestamp_ns"].max()), self.clock_ns)
            waiting = waiting[waiting["timestamp_ns"].astype(np.int64) >= newest - _REORDER_NS]
        self._post = waiting
        if left.shape[0] > 1:  # in the order they left (the reader interleaves sockets)
            in_time = np.argsort(left["timestamp_ns"], kind="stable")
            left, waited = left[in_time], waited[in_time]
        return self._groups(entering, resent, left, waited)

    def _groups(
        self, entering: np.ndarray, resent: np.ndarray, left: np.ndarray, waited: np.ndarray
    ) -> tuple[Traffic, ...]:
        """Per (side, destination), vectorised: what entered and what of it was resent,
        what left BR1 (``left``, with ``waited`` its sojourns, in time order) and the last
        of those sojourns."""
        entering_keys, left_keys = _group_keys(entering), _group_keys(left)
        keys = np.unique(np.concatenate([entering_keys, left_keys]))
        into, out = np.searchsorted(keys, entering_keys), np.searchsorted(keys, left_keys)
        size, segments = entering["ip_bytes"].astype(np.int64), entering["segments"]
        left_segments = left["segments"].astype(np.int64)

        def total(where: np.ndarray, values: np.ndarray) -> list[int]:
            # exact: float64 holds these integer sums (far below 2^53) without rounding
            sums = np.bincount(where, weights=values, minlength=keys.shape[0])
            return [int(v) for v in sums]

        columns = (
            total(into, size), total(into, segments),
            total(into, size * resent), total(into, segments * resent),
            total(out, left["ip_bytes"]), total(out, left_segments),
            total(out, waited * left_segments),
        )  # fmt: skip
        last = np.zeros(keys.shape[0], dtype=np.int64)
        if out.shape[0]:  # the last frame of a group to leave gives its register
            groups, from_end = np.unique(out[::-1], return_index=True)
            last[groups] = waited[::-1][from_end]
        w = self.wiring
        return tuple(
            Traffic(
                port=w.dtn_port if key >> 32 == ROLE_DTN_IN else w.campus_port,
                destination=address(key & 0xFFFFFFFF),
                bytes=columns[0][k],
                packets=columns[1][k],
                queuing_delay_ns=int(last[k]),
                retrans_bytes=columns[2][k],
                retrans_packets=columns[3][k],
                egress_bytes=columns[4][k],
                egress_packets=columns[5][k],
                queuing_delay_sum_ns=columns[6][k],
            )
            for k, key in enumerate(keys.tolist())
        )


def _group_keys(frames: np.ndarray) -> np.ndarray:
    """(side, destination) of a frame as one 64-bit key that sorts as the pair does."""
    return (frames["role"].astype(np.uint64) << np.uint64(32)) | frames["daddr"].astype(np.uint64)


def _frame_keys(frames: np.ndarray) -> np.ndarray:
    """(sender, port, SEQ) of a frame as one 64-bit key."""
    sender = (frames["saddr"].astype(np.uint64) * np.uint64(0x9E3779B1)) & np.uint64(0xFFFF)
    return (
        (sender << np.uint64(48))
        | (frames["sport"].astype(np.uint64) << np.uint64(32))
        | frames["seq"].astype(np.uint64)
    )


MAX_HOLD_NS = 300_000_000
"""The longest the live source holds frames back for a socket that lags (ours). Measured
on the lab at 1 Gb/s with the whole loop on 2 cores: the reader drained one socket up to
365 ms behind another (99th percentile 53 ms, median 0.07 ms)."""


def release(
    held: np.ndarray, latest: dict[int, int], now_ns: int, max_hold_ns: int = MAX_HOLD_NS
) -> tuple[np.ndarray, np.ndarray, int]:
    """The frames every socket has been read past, and the rest, held (``reduce`` puts a
    batch in time order).

    The reader drains its sockets one after another, and each socket's frames come in
    time order, so a frame may go forward once every socket heard from in the last
    ``max_hold_ns`` has delivered a later one: the watermark is the least of the
    sockets' (tap roles') ``latest`` frame times, but never older than ``now_ns -
    max_hold_ns`` (an idle socket holds nothing back). Counting frames in time order, a
    sample's counters cover the same stretch of time on every side of BR1: counted as
    read, the counters of one side ran up to tens of ms ahead of the other's, and method 2
    read that as loss. Pure; returns (ready, held, watermark)."""
    floor = now_ns - max_hold_ns
    heard = [at for at in latest.values() if at >= floor]
    watermark = max(min(heard), floor) if heard else now_ns
    times = held["timestamp_ns"].astype(np.int64)
    return held[times <= watermark], held[times > watermark], watermark


class PacketTapSource(TapState):
    """A ``PacketSource`` over a running ``tapreader``: call :meth:`start` first, :meth:`close`
    at the end (both idempotent)."""

    def __init__(
        self,
        wiring: TapWiring,
        reader_argv: Sequence[str],
        stats_path: Path,
        rtt_sample_interval_s: float = 0.01,
    ) -> None:
        super().__init__(wiring, rtt_sample_interval_s)
        self._argv = [*reader_argv, str(stats_path), *wiring.taps()]
        self.stats_path = stats_path
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self.frames = 0
        self._held = np.zeros(0, dtype=RECORD)
        self._latest: dict[int, int] = {}

    def start(self) -> None:
        if self._process is not None:
            return
        self._process = subprocess.Popen(self._argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._thread = threading.Thread(target=self._read, name="tapreader", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 5.0
        while not self.stats_path.exists():
            if self._process.poll() is not None:
                error = self._process.stderr.read().decode() if self._process.stderr else ""
                raise RuntimeError(f"tapreader exited: {error.strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError("tapreader did not start within 5 s")
            time.sleep(0.02)

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while chunk := os.read(fd, 1 << 20):
            with self._lock:
                self._buffer += chunk

    def advance(self, elapsed_s: float) -> Observation:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(f"tapreader exited with {self._process.returncode}")
        with self._lock:
            usable = len(self._buffer) - len(self._buffer) % RECORD.itemsize
            chunk = bytes(self._buffer[:usable])
            del self._buffer[:usable]
        records = np.frombuffer(chunk, dtype=RECORD)
        self.frames += records.shape[0]
        for role in np.unique(records["role"]).tolist():
            at = int(records["timestamp_ns"][records["role"] == role].max())
            self._latest[role] = max(self._latest.get(role, 0), at)
        now = time.time_ns()
        ready, self._held, _ = release(np.concatenate([self._held, records]), self._latest, now)
        return self.reduce(ready, now)

    def capture_stats(self) -> dict[str, dict[str, int]]:
        """Frames and kernel drops per tapped interface, as the reader last wrote them."""
        try:
            stats: dict[str, dict[str, int]] = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}
        return stats

    def close(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._process = None
