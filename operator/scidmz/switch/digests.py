"""Digest batching, delivery and acknowledgement of the software target (P4Runtime §16).

A ``DigestQueue`` per digest extern holds what the data plane packed until the controller
configured the digest (``DigestEntry``) and then releases lists by the spec's rule: a
``DigestList`` goes out when at least one digest is ready and either the oldest has waited
``max_timeout_ns`` or ``max_list_size`` digests are ready (0: no size limit). Lists the
controller has not acked are outstanding; at most ``max_outstanding`` are, so a slow
controller holds digests back (bounded by ``capacity``, the excess counted as dropped)
instead of being flooded. A list unacked after ``ack_timeout_ns`` stops counting as
outstanding (the spec lets the data plane generate the same data again), and is counted.

Time is injected (``now_ns``); nothing here does I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DigestRecord = tuple[int, ...]
"""One packed digest: its struct members' values, in P4Info order."""

DEFAULT_CAPACITY = 1_000_000
DEFAULT_MAX_OUTSTANDING = 16


@dataclass(frozen=True)
class DigestConfig:
    max_timeout_ns: int
    max_list_size: int
    ack_timeout_ns: int

    def problems(self) -> list[str]:
        found = []
        if self.max_timeout_ns < 0:
            found.append("max_timeout_ns must be >= 0")
        if self.max_list_size < 0:
            found.append("max_list_size must be >= 0")
        if self.ack_timeout_ns < 0:
            found.append("ack_timeout_ns must be >= 0")
        return found


@dataclass(frozen=True)
class ReadyList:
    list_id: int
    records: tuple[DigestRecord, ...]


@dataclass
class DigestQueue:
    """Pending digests of one digest extern and its outstanding lists."""

    capacity: int = DEFAULT_CAPACITY
    max_outstanding: int = DEFAULT_MAX_OUTSTANDING
    config: DigestConfig | None = None
    dropped: int = 0
    delivered: int = 0
    expired_lists: int = 0
    _pending: deque[tuple[int, DigestRecord]] = field(default_factory=deque)
    _outstanding: dict[int, int] = field(default_factory=dict)
    _next_list_id: int = 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    def configure(self, config: DigestConfig | None) -> None:
        """Enable (or, with None, disable and forget) delivery."""
        self.config = config
        if config is None:
            self._pending.clear()
            self._outstanding.clear()

    def push(self, records: list[DigestRecord], now_ns: int) -> None:
        """What the data plane packed at ``now_ns``. Unconfigured digests are not kept
        (the extern is off until the controller inserts its DigestEntry)."""
        if self.config is None:
            return
        room = self.capacity - len(self._pending)
        if len(records) > room:
            self.dropped += len(records) - max(room, 0)
            records = records[: max(room, 0)]
        self._pending.extend((now_ns, record) for record in records)

    def ack(self, list_id: int) -> bool:
        """The controller acked ``list_id``; False when it was not outstanding."""
        return self._outstanding.pop(list_id, None) is not None

    def poll(self, now_ns: int) -> ReadyList | None:
        """The next list to send now, if the rule says one is due."""
        config = self.config
        if config is None or not self._pending:
            return None
        if config.ack_timeout_ns > 0:
            expired = [
                i for i, at in self._outstanding.items() if now_ns - at >= config.ack_timeout_ns
            ]
            for list_id in expired:
                del self._outstanding[list_id]
            self.expired_lists += len(expired)
        if len(self._outstanding) >= self.max_outstanding:
            return None
        size = config.max_list_size
        full = size > 0 and len(self._pending) >= size
        waited = now_ns - self._pending[0][0] >= config.max_timeout_ns
        if not (full or waited):
            return None
        count = len(self._pending) if size == 0 else min(size, len(self._pending))
        records = tuple(self._pending.popleft()[1] for _ in range(count))
        list_id = self._next_list_id
        self._next_list_id += 1
        self._outstanding[list_id] = now_ns
        self.delivered += count
        return ReadyList(list_id, records)
