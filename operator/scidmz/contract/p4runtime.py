"""P4Runtime encodings both ends of scidmz use: the collector (a client) and the software
switch (a server). One copy, so the two can never disagree on what identifies an entry or
how a number travels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from finsy.proto import p4r

from scidmz.contract.pipeline import canonical_name

EntryKey = tuple[int, tuple[tuple[int, bytes, int], ...], int]
"""What identifies a table entry: table id, match fields (id, canonical value, prefix
length or -1), priority."""


def canonical(value: bytes) -> bytes:
    """A bytestring without leading zero bytes (at least one byte), as switches return
    values: b"\\x00\\x07" and b"\\x07" are the same match."""
    return value.lstrip(b"\0") or b"\0"


def bitstring(value: int) -> bytes:
    """P4Runtime's canonical bytestring: big-endian, no leading zero bytes, at least one."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def uint128(value: int) -> p4r.Uint128:
    """An election id (or any 128-bit number) as P4Runtime carries it."""
    return p4r.Uint128(high=value >> 64, low=value & ((1 << 64) - 1))


def from_uint128(value: p4r.Uint128) -> int:
    return (value.high << 64) | value.low


def entry_key(entry: p4r.TableEntry) -> EntryKey:
    """What identifies an entry: table, match (canonical values), priority."""
    fields = []
    for match in entry.match:
        if match.WhichOneof("field_match_type") == "lpm":
            value, prefix = match.lpm.value, match.lpm.prefix_len
        else:
            value, prefix = match.exact.value, -1
        fields.append((match.field_id, canonical(value), prefix))
    return entry.table_id, tuple(sorted(fields)), entry.priority


class _Preamble(Protocol):
    name: str
    id: int


class _Entity(Protocol):
    @property
    def preamble(self) -> _Preamble: ...


def ids_by_name(entities: Iterable[_Entity]) -> dict[str, int]:
    """P4Info entities (tables, actions, counters, registers) by canonical name (no TNA
    ``pipe.`` prefix)."""
    return {canonical_name(e.preamble.name): e.preamble.id for e in entities}
