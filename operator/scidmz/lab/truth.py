"""Ground truth from the kernel for a lab run: what the senders' TCP stacks and the qdiscs
say, sampled every interval, written beside the collector's samples.

Per class (DTN, campus), from the senders' sockets (``ss -tin``, i.e. TCP_INFO): delivered
rate (Δ bytes_acked), smoothed and minimum RTT, retransmitted segments, mean cwnd and the
flows that sent data. From ``tc -s``: the bottleneck's backlog at the sample (and so its
queuing delay, backlog / B), drops and bytes sent; the campus shaper's rate u, backlog and
drops. From netlink, read every ~10 ms between samples (:class:`BacklogMeter`): the
bottleneck's *mean* backlog over the interval, ``queuing_delay_mean_s``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scidmz.contract.netns import named_netns_exists
from scidmz.control.actuators import TC_H_ROOT
from scidmz.lab import topology

_FIELD = re.compile(r"(\w+):([^\s]+)")
FLOW_COLUMNS = (
    "t_s", "class", "flow", "cwnd_segments", "rtt_s", "bytes_acked", "retransmitted_segments",
    "delivery_rate_bps", "pacing_rate_bps", "bbr_bandwidth_bps", "bbr_min_rtt_s",
    "bbr_pacing_gain",
)  # fmt: skip
"""flows.csv's columns (datasets recorded before 2026-11-25's third session end at
``retransmitted_segments``)."""
log = logging.getLogger(__name__)

BACKLOG_POLL_S = 0.01
"""How often :class:`BacklogMeter` reads the bottleneck's backlog between samples (a netlink
dump costs ~0.25 ms: ~2.5 % of a core)."""


@dataclass(frozen=True)
class TcpFlow:
    """One socket's TCP_INFO as ``ss -tin`` prints it (times in seconds)."""

    local: str
    peer: str
    congestion_control: str
    rtt_s: float
    min_rtt_s: float
    cwnd_segments: int
    bytes_acked: int
    data_segments_out: int
    retransmitted_segments: int
    delivery_rate_bps: float = math.nan
    """The kernel's last delivery-rate sample (what BBR's bandwidth filter is fed)."""
    pacing_rate_bps: float = math.nan
    bbr_bandwidth_bps: float = math.nan
    """BBR only: its max-filtered bottleneck bandwidth estimate (``bbr:(bw:…)``) ..."""
    bbr_min_rtt_s: float = math.nan
    """... its min-RTT estimate (``mrtt``) ..."""
    bbr_pacing_gain: float = math.nan
    """... and the gain its pacing rate applies to the estimate now."""

    @property
    def peer_port(self) -> int:
        return int(self.peer.rsplit(":", 1)[1])


def parse_ss(text: str) -> list[TcpFlow]:
    """``ss -tinH`` output -> one :class:`TcpFlow` per connection (header line + info line)."""
    flows = []
    lines = [line for line in text.splitlines() if line.strip()]
    for header, info in zip(lines[::2], lines[1::2], strict=False):
        columns = header.split()
        if len(columns) < 5:
            continue
        fields = dict(_FIELD.findall(info))
        words = info.split()
        rtt = fields.get("rtt", "0/0").split("/")[0]
        retrans = fields.get("retrans", "0/0").split("/")[-1]
        flows.append(
            TcpFlow(
                local=columns[3],
                peer=columns[4],
                congestion_control=words[0] if words and ":" not in words[0] else "",
                rtt_s=float(rtt) / 1e3,
                min_rtt_s=float(fields.get("minrtt", rtt)) / 1e3,
                cwnd_segments=int(fields.get("cwnd", 0)),
                bytes_acked=int(fields.get("bytes_acked", 0)),
                data_segments_out=int(fields.get("data_segs_out", 0)),
                retransmitted_segments=int(retrans),
                delivery_rate_bps=_bps(_SPACED_RATE["delivery_rate"].search(info)),
                pacing_rate_bps=_bps(_SPACED_RATE["pacing_rate"].search(info)),
                **_bbr_fields(info),
            )
        )
    return flows


_RATE = r"([0-9.]+)([KMG]?)bps"
"""A rate as ss prints it: a number, an optional SI prefix, "bps"."""
_SPACED_RATE = {
    name: re.compile(rf"\b{name} {_RATE}\b") for name in ("delivery_rate", "pacing_rate")
}
_BBR = re.compile(r"\bbbr:\(([^)]*)\)")
_BBR_BW = re.compile(_RATE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}


def _bps(match: re.Match[str] | None) -> float:
    return float(match.group(1)) * _SCALE[match.group(2)] if match else math.nan


def _bbr_fields(info: str) -> dict[str, float]:
    """``bbr:(bw:…bps,mrtt:…,pacing_gain:…,cwnd_gain:…)`` as ss prints BBR's state (mrtt in
    ms); nothing for other congestion controls."""
    match = _BBR.search(info)
    if match is None:
        return {}
    fields = dict(part.split(":", 1) for part in match.group(1).split(",") if ":" in part)
    return {
        "bbr_bandwidth_bps": _bps(_BBR_BW.fullmatch(fields.get("bw", ""))),
        "bbr_min_rtt_s": float(fields["mrtt"]) / 1e3 if "mrtt" in fields else math.nan,
        "bbr_pacing_gain": float(fields.get("pacing_gain", "nan")),
    }


def class_truth(
    now: Iterable[TcpFlow],
    before: Mapping[str, TcpFlow],
    interval_s: float,
    prefix: str,
    packets_threshold: int = 10,
) -> dict[str, float]:
    """One class's figures over an interval from two snapshots of its sockets (keyed by
    local address). A flow is active if it sent at least ``packets_threshold`` data segments
    in the interval (the collector's C_TH rule), which also leaves out iperf3's control
    connection."""
    rate_bytes = 0.0
    retransmits = 0
    segments = 0
    rtts: list[float] = []
    min_rtts: list[float] = []
    cwnds: list[float] = []
    active = 0
    for flow in now:
        previous = before.get(flow.local)
        acked = flow.bytes_acked - (previous.bytes_acked if previous else 0)
        sent = flow.data_segments_out - (previous.data_segments_out if previous else 0)
        retransmits += flow.retransmitted_segments - (
            previous.retransmitted_segments if previous else 0
        )
        segments += max(sent, 0)
        rate_bytes += max(acked, 0)
        if sent >= packets_threshold:
            active += 1
            rtts.append(flow.rtt_s)
            min_rtts.append(flow.min_rtt_s)
            cwnds.append(flow.cwnd_segments)
    return {
        f"{prefix}_rate_bps": rate_bytes * 8 / interval_s,
        f"{prefix}_rtt_s": _mean(rtts),
        f"{prefix}_min_rtt_s": min(min_rtts) if min_rtts else float("nan"),
        f"{prefix}_retransmitted_segments": float(retransmits),
        f"{prefix}_sent_segments": float(segments),
        # data_segs_out counts retransmissions too, as the tap's packets do
        f"{prefix}_retransmission_ratio": retransmits / segments if segments > 0 else math.nan,
        f"{prefix}_cwnd_segments": _mean(cwnds),
        f"{prefix}_active_flows": float(active),
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def qdisc_stats(tc_json: str) -> dict[str, float]:
    """The root qdisc's counters from ``tc -s -j qdisc show dev X`` (rate in bit/s)."""
    for qdisc in json.loads(tc_json):
        if qdisc.get("root"):
            return {
                "rate_bps": float(qdisc.get("options", {}).get("rate", 0)) * 8,
                "backlog_bytes": float(qdisc.get("backlog", 0)),
                "drops": float(qdisc.get("drops", 0)),
                "sent_bytes": float(qdisc.get("bytes", 0)),
            }
    return {"rate_bps": float("nan"), "backlog_bytes": 0.0, "drops": 0.0, "sent_bytes": 0.0}


def link_bytes(ip_json: str) -> dict[str, tuple[float, float]]:
    """``ip -s -j link show`` -> {interface: (rx bytes, tx bytes)}."""
    return {
        link["ifname"]: (
            float(link["stats64"]["rx"]["bytes"]),
            float(link["stats64"]["tx"]["bytes"]),
        )
        for link in json.loads(ip_json or "[]")
        if "stats64" in link
    }


def read_link_bytes(namespace: str) -> dict[str, tuple[float, float]]:
    done = subprocess.run(
        ["ip", "-n", namespace, "-s", "-j", "link", "show"],
        capture_output=True,
        text=True,
        check=False,
    )
    return link_bytes(done.stdout)


def read_flows(namespace: str, address: str, port: int) -> dict[str, TcpFlow]:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "ss", "-tinH", "dst", f"{address}:{port}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {flow.local: flow for flow in parse_ss(done.stdout)}


def byte_balance_loss(entered: float, left: float, grown: float) -> float:
    """BR1's own loss over one truth interval: of the bytes that entered it, those neither
    sent nor still queued. Signed (within [−1, 1]), not clamped at 0: the link counters and
    the backlog are read at different instants, so one second's figure errs either way by
    up to ~0.1 points at 1 Gb/s; clamped at 0 (half the seconds on the lab at 1 Gb/s),
    their mean read 0.19–0.23 % where the bfifo dropped ~2.5 skbs a second, at most 0.14 %
    even were each a 64 KB GSO burst. The mean over seconds of the signed figure is the loss
    over them. NaN if nothing entered."""
    if entered <= 0:
        return math.nan
    return min(max((entered - left - grown) / entered, -1.0), 1.0)


def read_qdisc(namespace: str, interface: str) -> dict[str, float]:
    done = subprocess.run(
        ["tc", "-n", namespace, "-s", "-j", "qdisc", "show", "dev", interface],
        capture_output=True,
        text=True,
        check=False,
    )
    return qdisc_stats(done.stdout or "[]")


def root_backlog_bytes(qdiscs: Iterable[Any]) -> float | None:
    """The root qdisc's backlog from pyroute2's ``get_qdiscs`` messages (None: no root)."""
    for qdisc in qdiscs:
        if qdisc["parent"] != TC_H_ROOT:
            continue
        stats = qdisc.get_attr("TCA_STATS2") or {}
        queue = dict(stats.get("attrs", [])).get("TCA_STATS_QUEUE")
        if queue is not None:
            return float(queue["backlog"])
        legacy = qdisc.get_attr("TCA_STATS")
        return float(legacy["backlog"]) if legacy is not None else None
    return None


@dataclass
class BacklogMean:
    """The mean of equally spaced backlog readings over one interval."""

    total_bytes: float = 0.0
    readings: int = 0
    missed: int = 0

    def add(self, backlog_bytes: float | None) -> None:
        if backlog_bytes is None:
            self.missed += 1
            return
        self.total_bytes += backlog_bytes
        self.readings += 1

    def take(self) -> tuple[float, int]:
        """(mean backlog in bytes, readings) since the last take; NaN when nothing was read."""
        mean = self.total_bytes / self.readings if self.readings else math.nan
        readings = self.readings
        self.total_bytes, self.readings = 0.0, 0
        return mean, readings


@dataclass
class BacklogMeter:
    """The bottleneck's backlog over netlink, read many times per sample interval.

    One ``tc -s`` snapshot per second is a poor estimate of a window's mean queuing delay:
    a BBR DTN's probe-rtt empties the queue for ~0.3 s every ~10 s, and a 1 s snapshot
    either misses the dip or lands in it (lab ``bbr-100-fixed``, 2026-11-23: 10 s windows
    of snapshots at 89, 99, 92, 93 and 97 ms around a queue full at 99.7 ms most of the
    time). The simulator reports the time mean; this meter gives the lab's.
    """

    namespace: str
    interface: str
    mean: BacklogMean = field(default_factory=BacklogMean)
    _ipr: Any = None
    _index: int = -1

    def open(self) -> BacklogMeter:
        from pyroute2 import IPRoute

        where = f"{self.interface} in namespace {self.namespace}"
        if not named_netns_exists(self.namespace):
            raise topology.LabError(f"cannot read the backlog of {where}: no such namespace")
        try:
            self._ipr = IPRoute(netns=self.namespace)
            links = self._ipr.link_lookup(ifname=self.interface)
        except Exception as error:  # a missing namespace, no CAP_NET_ADMIN, ...
            self.close()
            raise topology.LabError(f"cannot read the backlog of {where}: {error}") from None
        if not links:
            self.close()
            raise topology.LabError(f"cannot read the backlog of {where}: no such interface")
        self._index = links[0]
        return self

    def read(self) -> None:
        """One reading into :attr:`mean` (a failed read is counted as missed, not raised:
        the run goes on with the snapshot)."""
        try:
            backlog = root_backlog_bytes(self._ipr.get_qdiscs(index=self._index))
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            if self.mean.missed == 0:
                log.warning("backlog of %s unreadable (%s)", self.interface, error)
            backlog = None
        self.mean.add(backlog)

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()


class TruthSampler:
    """Call :meth:`sample` once per interval; each call returns one row of ground truth."""

    def __init__(
        self,
        bottleneck_bps: float,
        packets_threshold: int = 10,
        sites: Sequence[topology.DtnSite] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``sites``: the lab's DTN hosts (none: the first, as the testbed has it). With
        several, the ``dtn_*`` columns are their union (the aggregate class) and each host
        has its own ``host_<name>_*`` columns."""
        self.bottleneck_bps = bottleneck_bps
        self.packets_threshold = packets_threshold
        self.sites = list(sites) or [topology.FIRST_DTN]
        self._flows: dict[str, dict[str, TcpFlow]] = {"dtn": {}, "campus": {}}
        self._hosts: dict[str, dict[str, TcpFlow]] = {s.name: {} for s in self.sites}
        self._qdiscs: dict[str, dict[str, float]] = {}
        self._links: dict[str, tuple[float, float]] = {}
        self._links_read_s = math.nan
        self._wall = wall_clock

    def flow_rows(self) -> list[dict[str, float | str]]:
        """Every flow of the last sample (``FLOW_COLUMNS`` but ``t_s``): class, local
        address, cwnd, srtt, retransmissions, the kernel's delivery and pacing rates and
        BBR's estimates (the modeller's per-flow view, written to flows.csv by ``lab
        record``)."""
        return [
            {
                "class": prefix,
                "flow": flow.local,
                "cwnd_segments": float(flow.cwnd_segments),
                "rtt_s": flow.rtt_s,
                "bytes_acked": float(flow.bytes_acked),
                "retransmitted_segments": float(flow.retransmitted_segments),
                "delivery_rate_bps": flow.delivery_rate_bps,
                "pacing_rate_bps": flow.pacing_rate_bps,
                "bbr_bandwidth_bps": flow.bbr_bandwidth_bps,
                "bbr_min_rtt_s": flow.bbr_min_rtt_s,
                "bbr_pacing_gain": flow.bbr_pacing_gain,
            }
            for prefix, flows in self._flows.items()
            for flow in flows.values()
        ]

    def sample(
        self, interval_s: float, backlog_mean: tuple[float, int] | None = None
    ) -> dict[str, float]:
        """One row; ``backlog_mean`` is (mean bytes, readings) of the bottleneck over the
        interval (:class:`BacklogMeter`), recorded as ``queuing_delay_mean_s``."""
        row: dict[str, float] = {}
        # BR1's link counters first, stamped: what the tap counts is judged against them
        # over a sample's own interval, and the ss and tc reads below take ~100 ms
        links = read_link_bytes(topology.BORDER)
        read_s = self._wall()
        row["links_epoch_s"] = read_s
        link_interval_s = read_s - self._links_read_s if self._links else interval_s
        self._links_read_s = read_s
        hosts = {s.name: read_flows(s.namespace, s.receiver, s.port) for s in self.sites}
        classes = {
            "dtn": {k: f for flows in hosts.values() for k, f in flows.items()},
            "campus": read_flows(topology.CAMPUS, *topology.receiver(False)),
        }
        for prefix, flows in classes.items():
            row |= class_truth(
                flows.values(), self._flows[prefix], interval_s, prefix, self.packets_threshold
            )
            self._flows[prefix] = flows
        if len(self.sites) > 1:
            for name, flows in hosts.items():
                row |= class_truth(
                    flows.values(), self._hosts[name], interval_s, f"host_{name}",
                    self.packets_threshold,
                )  # fmt: skip
                self._hosts[name] = flows
        backlog_before = self._qdiscs.get("bottleneck", {}).get("backlog_bytes")
        for name, (namespace, interface) in (
            ("bottleneck", topology.BOTTLENECK),
            ("shaper", topology.CAMPUS_SHAPER),
        ):
            stats = read_qdisc(namespace, interface)
            before = self._qdiscs.get(name, stats)
            row[f"{name}_backlog_bytes"] = stats["backlog_bytes"]
            row[f"{name}_drops"] = stats["drops"] - before["drops"]
            row[f"{name}_sent_rate_bps"] = (
                (stats["sent_bytes"] - before["sent_bytes"]) * 8 / interval_s
            )
            self._qdiscs[name] = stats
            if name == "shaper":
                row["campus_rate_limit_bps"] = stats["rate_bps"]
        row["queuing_delay_s"] = row["bottleneck_backlog_bytes"] * 8 / self.bottleneck_bps
        if backlog_mean is not None:
            mean_bytes, readings = backlog_mean
            row["bottleneck_backlog_mean_bytes"] = mean_bytes
            row["bottleneck_backlog_readings"] = float(readings)
            row["queuing_delay_mean_s"] = mean_bytes * 8 / self.bottleneck_bps
        # Campus packets wait in the campus shaper before they reach the tap: the kernel's
        # RTT includes that wait, an RTT measured at the border cannot.
        u = row["campus_rate_limit_bps"]
        row["campus_shaper_delay_s"] = row["shaper_backlog_bytes"] * 8 / u if u > 0 else 0.0
        row["campus_rtt_at_tap_s"] = row["campus_rtt_s"] - row["campus_shaper_delay_s"]
        # What enters BR1 per class, as the tap counts it (frames, with retransmissions),
        # over the time between the two reads of the counters

        def received(interface: str) -> float:
            now_rx = links.get(interface, (0.0, 0.0))[0]
            return now_rx - self._links.get(interface, (now_rx, 0.0))[0]

        dtn_interfaces = [s.border_interface for s in self.sites]
        row["dtn_offered_rate_bps"] = sum(map(received, dtn_interfaces)) * 8 / link_interval_s
        row["campus_offered_rate_bps"] = received("bc") * 8 / link_interval_s
        if len(self.sites) > 1:
            for site in self.sites:
                rate = received(site.border_interface) * 8 / link_interval_s
                row[f"host_{site.name}_offered_rate_bps"] = rate
        # BR1's own loss in bytes: what entered it, less what left it and what it still
        # holds (tc's drop count is of skbs, and its sent count of GSO segments)
        entered = sum(
            links.get(i, (0.0, 0.0))[0] - self._links.get(i, links.get(i, (0.0, 0.0)))[0]
            for i in ("bc", *dtn_interfaces)
        )
        left = (
            links.get("bn", (0.0, 0.0))[1] - self._links.get("bn", links.get("bn", (0.0, 0.0)))[1]
        )
        grown = row["bottleneck_backlog_bytes"] - (
            backlog_before if backlog_before is not None else row["bottleneck_backlog_bytes"]
        )
        row["bottleneck_loss_ratio"] = byte_balance_loss(entered, left, grown)
        self._links = links
        return row
