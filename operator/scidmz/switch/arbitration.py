"""Client arbitration of the software P4Runtime target (P4Runtime spec §5, one role).

Pure bookkeeping over immutable state: the gRPC layer calls ``arbitrate`` when a stream
sends a MasterArbitrationUpdate and ``disconnect`` when a stream ends, and sends every
affected client the update this module returns. The primary is the client with the highest
election id; the others are backups. Writes are accepted only from the primary with its
election id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType


class Verdict(Enum):
    """What a client's arbitration request gets (the gRPC status code the spec names)."""

    PRIMARY = "OK"
    BACKUP = "ALREADY_EXISTS"
    WRONG_DEVICE = "NOT_FOUND"
    ELECTION_ID_IN_USE = "INVALID_ARGUMENT"


@dataclass(frozen=True)
class Arbitration:
    """Connected clients (stream id → election id) of one device."""

    device_id: int
    clients: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def primary(self) -> int | None:
        """The stream id of the primary client, if any."""
        if not self.clients:
            return None
        return max(self.clients, key=lambda client: self.clients[client])

    @property
    def primary_election_id(self) -> int:
        primary = self.primary
        return 0 if primary is None else self.clients[primary]

    def verdict(self, client: int) -> Verdict:
        return Verdict.PRIMARY if client == self.primary else Verdict.BACKUP

    def may_write(self, election_id: int) -> bool:
        """Spec §5: a write must carry the primary's election id."""
        return self.primary is not None and election_id == self.primary_election_id


def arbitrate(
    state: Arbitration, client: int, device_id: int, election_id: int
) -> tuple[Arbitration, Verdict, tuple[int, ...]]:
    """A stream asks to be (re)elected.

    Returns the new state, this client's verdict, and the other clients whose role changed
    (they must be sent a fresh MasterArbitrationUpdate: a demoted primary, or a backup that
    became primary because the primary lowered its election id).
    """
    if device_id != state.device_id:
        return state, Verdict.WRONG_DEVICE, ()
    for other, other_id in state.clients.items():
        if other != client and other_id == election_id:
            return state, Verdict.ELECTION_ID_IN_USE, ()
    before = state.primary
    clients = dict(state.clients)
    clients[client] = election_id
    after = Arbitration(state.device_id, MappingProxyType(clients))
    if before == after.primary:
        return after, after.verdict(client), ()
    changed = tuple(c for c in (before, after.primary) if c is not None and c != client)
    return after, after.verdict(client), changed


def disconnect(state: Arbitration, client: int) -> tuple[Arbitration, tuple[int, ...]]:
    """A stream ended; returns the new state and the clients to notify (a new primary)."""
    if client not in state.clients:
        return state, ()
    clients = {c: e for c, e in state.clients.items() if c != client}
    after = Arbitration(state.device_id, MappingProxyType(clients))
    promoted = after.primary
    notify = (promoted,) if promoted is not None and promoted != state.primary else ()
    return after, notify
