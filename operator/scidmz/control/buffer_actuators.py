"""Where the border router's buffer goes (the second knob, P4BS seed 003): a Linux bfifo
qdisc's limit (tc), the software target's simulator, or nowhere.

The contract is the rate actuators' (``control.actuators``), in bytes: ``apply`` returns the
buffer now in force and raises ``ActuatorError`` on a failure the caller retries on its next
trial; ``current`` reads the buffer in force (None if it cannot tell). Sizes are frame bytes,
what a bfifo's ``limit`` counts. ``queue_counters`` reads the queue's own drop and pass
counters where the actuator can (``spec.buffer.lossSignal: actuator``), in bytes: the share
of bytes a queue drops is the loss of eq. (2), whatever the packets' sizes. A bfifo counts
every tail drop, which no tap outside the router can, but counts it per skb while it counts
what it sent in bytes and GSO segments: on a router that forwards GSO or GRO bursts (Linux
with offloads on, the lab) one dropped skb is 2–64 KB, so drops over sent packets reads the
loss 10–40× too low. The tc actuator therefore weighs each drop by the mean size of the skbs
the queue holds (:class:`DropLedger`): a full drop-tail queue refuses arrivals from the same
stream it holds.

The plug-in point for a router that is not Linux (P4BS sets ``buffer-size`` under a Junos
class-of-service scheduler): any object with these three methods, see
``docs/components/buffer.md``. Vendor configuration is out of scope here; a plug-in owns it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

from scidmz.control.actuators import (
    TC_H_ROOT,
    ActuatorError,
    GrpcClient,
    open_interface,
    read_ground_truth,
)
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)

MIN_BUFFER_BYTES = 1514
"""One full Ethernet frame: a smaller drop-tail buffer refuses every full-size packet."""


@dataclass(frozen=True)
class QueueCounters:
    """The queue's cumulative counters in bytes: what it dropped at its tail and what it
    passed on."""

    dropped: float
    passed: float


def drop_ratio(before: QueueCounters | None, after: QueueCounters | None) -> float:
    """The share of arrivals the queue dropped between two reads (NaN when either read is
    missing, nothing arrived or a counter went back: a qdisc replaced, a simulator reset)."""
    if before is None or after is None:
        return math.nan
    dropped, passed = after.dropped - before.dropped, after.passed - before.passed
    if dropped < 0 or passed < 0 or dropped + passed <= 0:
        return math.nan
    return dropped / (dropped + passed)


class BufferActuator(Protocol):
    name: str

    async def apply(self, buffer_bytes: float) -> float:
        """Set the buffer; returns the buffer now in force, in frame bytes."""
        ...

    async def current(self) -> float | None:
        """The buffer in force now; None if the actuator cannot tell."""
        ...

    async def queue_counters(self) -> QueueCounters | None:
        """The queue's drop and pass counters now; None if the actuator cannot read them."""
        ...

    async def close(self) -> None: ...


def checked_buffer_bytes(buffer_bytes: float) -> int:
    """A buffer every actuator accepts: finite, whole bytes, at least one frame."""
    if not math.isfinite(buffer_bytes) or buffer_bytes < MIN_BUFFER_BYTES:
        raise ActuatorError(
            f"buffer must be at least {MIN_BUFFER_BYTES} bytes (one frame), got {buffer_bytes}"
        )
    return int(buffer_bytes)


class DryRunBufferActuator:
    """Sets nothing; the tuner still runs its trials on what the link does anyway."""

    name = "dryRun"

    def __init__(self) -> None:
        self.applied: list[int] = []

    async def apply(self, buffer_bytes: float) -> float:
        self.applied.append(checked_buffer_bytes(buffer_bytes))
        log.debug("dry run: buffer = %d bytes", self.applied[-1])
        return float(self.applied[-1])

    async def current(self) -> float | None:
        return float(self.applied[-1]) if self.applied else None

    async def queue_counters(self) -> QueueCounters | None:
        return None  # no queue: the API refuses lossSignal actuator with a dry run

    async def close(self) -> None:
        return


class SimBufferActuator(GrpcClient):
    """``scidmz.v1.SimActuator/SetBottleneckBuffer`` on the software target: BR1's buffer
    in the simulator, within the scenario's ``bottleneck.max_buffer_*`` (above it the
    simulator answers OUT_OF_RANGE, raised here naming the bound)."""

    name = "sim-buffer"
    stub_class = telemetry_pb2_grpc.SimActuatorStub

    async def apply(self, buffer_bytes: float) -> float:
        request = telemetry_pb2.BufferSize(bytes=checked_buffer_bytes(buffer_bytes))
        return float((await self._call("SetBottleneckBuffer", request)).bytes)

    async def current(self) -> float | None:
        truth = await read_ground_truth(self._stub, self._timeout)
        held = None if truth is None else float(truth.bottleneck_buffer_bytes)
        return held if held else None

    async def queue_counters(self) -> QueueCounters | None:
        truth = await read_ground_truth(self._stub, self._timeout)
        if truth is None:
            return None
        return QueueCounters(truth.bottleneck_dropped_bytes, truth.bottleneck_departed_bytes)


@dataclass(frozen=True)
class FifoQdisc:
    """The bfifo that holds the router's queue: its handle and parent in netlink."""

    handle: int
    parent: int
    limit_bytes: int
    backlog_bytes: int
    dropped_packets: int = 0
    """Tail drops, one per skb (a GSO burst is one)."""
    sent_packets: int = 0
    """Packets sent, a GSO skb counted as its segments."""
    sent_bytes: int = 0
    queued_packets: int = 0
    """skbs in the queue now (``backlog_bytes`` is their bytes)."""


SKB_SIZE_WEIGHT = 0.2
"""Weight of each read's mean queued skb size in the running mean (ours: reads come every
sample time T; 0.2 forgets a change of offloads or traffic mix within ~10 reads)."""


@dataclass(frozen=True)
class DropLedger:
    """The bytes a bfifo dropped, from its skb drop count (a pure running account).

    Each new drop is taken as the running mean size of the skbs seen queued (backlog /
    queue length, at reads that find a queue); before any read found one, as the mean
    sent packet. Measured on the lab at 1 Gb/s (100 Cubic campus flows and a Cubic DTN, GSO
    on, a 2 MB buffer, reads every second, skbs of 14 KB on average): 1.36 % of the bytes
    against 1.51 % by the kernel's byte balance (bytes into BR1 less bytes out and queued),
    where drops over sent packets read 0.15 %. The shortfall is drop-tail's: a large skb is
    the likelier not to fit."""

    drops: int = 0
    """The skb drop count at the last read."""
    dropped_bytes: float = 0.0
    skb_bytes: float = math.nan
    """The running mean size of a queued skb (NaN until a read finds a queue)."""

    def read(self, fifo: FifoQdisc) -> tuple[DropLedger, QueueCounters]:
        """The ledger after one read of ``fifo``, and the queue's counters in bytes. A
        drop count that went back (a qdisc replaced) restarts the account, which
        ``drop_ratio`` then refuses once as it refuses the sent bytes that went back."""
        size = self.skb_bytes
        if fifo.queued_packets > 0:
            seen = fifo.backlog_bytes / fifo.queued_packets
            size = seen if math.isnan(size) else size + SKB_SIZE_WEIGHT * (seen - size)
        weight = size
        if math.isnan(weight):
            weight = fifo.sent_bytes / fifo.sent_packets if fifo.sent_packets > 0 else 0.0
        restarted = fifo.dropped_packets < self.drops
        new = fifo.dropped_packets if restarted else fifo.dropped_packets - self.drops
        dropped = (0.0 if restarted else self.dropped_bytes) + new * weight
        ledger = DropLedger(fifo.dropped_packets, dropped, size)
        return ledger, QueueCounters(dropped, float(fifo.sent_bytes))


def find_buffer_fifo(qdiscs: list[dict[str, Any]]) -> FifoQdisc | str:
    """The bfifo whose limit is the interface's buffer, from a qdisc dump as plain dicts
    (``kind``, ``handle``, ``parent``, ``limit``, ``backlog``): a root bfifo, or the bfifo
    child of a root tbf (a shaped router port). Otherwise the reason it is not usable."""
    root = next((q for q in qdiscs if q["parent"] == TC_H_ROOT), None)
    if root is None:
        return "no root qdisc"
    if root["kind"] == "bfifo":
        fifo = root
    elif root["kind"] == "tbf":
        child = next((q for q in qdiscs if q["parent"] == root["handle"] | 1), None)
        if child is None or child["kind"] != "bfifo":
            return (
                "its root tbf has no bfifo child with a handle (the tbf's own fifo cannot be "
                "changed alone); add one once: tc qdisc add dev IFACE parent "
                f"{root['handle'] >> 16:x}:1 handle 10: bfifo limit BYTES"
            )
        fifo = child
    else:
        return f"its root qdisc is {root['kind']}, not bfifo or tbf"
    return FifoQdisc(
        fifo["handle"], fifo["parent"], int(fifo["limit"]), int(fifo["backlog"]),
        int(fifo.get("drops", 0)), int(fifo.get("packets", 0)), int(fifo.get("bytes", 0)),
        int(fifo.get("qlen", 0)),
    )  # fmt: skip


def _plain(qdisc: Any) -> dict[str, Any]:
    options = qdisc.get_attr("TCA_OPTIONS") or {}
    stats = qdisc.get_attr("TCA_STATS2")
    queue = (stats.get_attr("TCA_STATS_QUEUE") if stats else None) or {}
    basic = (stats.get_attr("TCA_STATS_BASIC") if stats else None) or {}
    return {
        "kind": qdisc.get_attr("TCA_KIND"),
        "handle": qdisc["handle"],
        "parent": qdisc["parent"],
        "limit": options.get("limit", 0) if isinstance(options, dict) else 0,
        "backlog": queue.get("backlog", 0),
        "drops": queue.get("drops", 0),
        "packets": basic.get("packets", 0),
        "bytes": basic.get("bytes", 0),
        "qlen": queue.get("qlen", 0),
    }


class TcBufferActuator:
    """A Linux router port's drop-tail buffer: the ``limit`` of its bfifo (at the root, or
    under a root tbf), changed in place. Measured (``bench/buffer_change.py``): a bfifo
    limit change keeps the backlog, packets above the new limit drain at line rate and
    arrivals drop meanwhile; a new fifo grafted in its place would flush it.

    Build it with ``await TcBufferActuator.open(...)``."""

    name = "tc-buffer"

    def __init__(self, interface: str, ipr: Any, index: int) -> None:
        self.interface = interface
        self._ipr = ipr
        self._index = index
        self._drops = DropLedger()

    @classmethod
    async def open(cls, interface: str, netns: str | None = None) -> TcBufferActuator:
        ipr, index = await open_interface(interface, netns, "tc buffer actuator")
        # pyroute2 0.9 encodes pfifo but not bfifo; both take `struct tc_fifo_qopt`.
        plugins = await ipr.tc("modules")
        plugins.setdefault("bfifo", plugins["pfifo"])
        actuator = cls(interface, ipr, index)
        fifo = await actuator._fifo()
        if isinstance(fifo, str):
            ipr.close()
            where = f"{interface} in network namespace {netns}" if netns else interface
            raise ActuatorError(f"{where} has no buffer to size: {fifo}")
        return actuator

    async def _fifo(self) -> FifoQdisc | str:
        try:
            dump = [_plain(q) async for q in await self._ipr.get_qdiscs(index=self._index)]
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            return f"qdiscs unreadable ({error})"
        return find_buffer_fifo(dump)

    async def apply(self, buffer_bytes: float) -> float:
        limit = checked_buffer_bytes(buffer_bytes)
        fifo = await self._fifo()
        if isinstance(fifo, str):
            raise ActuatorError(f"tc buffer on {self.interface}: {fifo}")
        try:
            await self._ipr.tc(
                "change", "bfifo", self._index, handle=fifo.handle, parent=fifo.parent, limit=limit
            )
        except Exception as error:  # pyroute2 raises NetlinkError and friends
            raise ActuatorError(f"tc buffer on {self.interface}: {error}") from None
        return float(limit)

    async def current(self) -> float | None:
        fifo = await self._fifo()
        if isinstance(fifo, str):
            log.info("tc buffer on %s: cannot read the buffer in force (%s)", self.interface, fifo)
            return None
        return float(fifo.limit_bytes)

    async def queue_counters(self) -> QueueCounters | None:
        """The bfifo's tail drops and what it sent, in bytes (its qdisc statistics, each
        drop weighed by :class:`DropLedger`)."""
        fifo = await self._fifo()
        if isinstance(fifo, str):
            log.info("tc buffer on %s: cannot read the queue's counters (%s)", self.interface, fifo)
            return None
        self._drops, counters = self._drops.read(fifo)
        return counters

    async def backlog_bytes(self) -> int | None:
        """The bytes queued in the fifo now (what a limit change must keep)."""
        fifo = await self._fifo()
        return None if isinstance(fifo, str) else fifo.backlog_bytes

    async def close(self) -> None:
        self._ipr.close()
