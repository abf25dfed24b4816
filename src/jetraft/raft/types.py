"""Values shared by the RAFT core, its durable log and its driver.

Node ids are strings (server names or peer ids); "" means "nobody".
Everything here is immutable so a Ready can be handed to I/O without copies.

The values made per entry and per message (here, in messages.py and ready.py) are frozen
msgspec Structs rather than frozen dataclasses: a frozen dataclass sets each field through
object.__setattr__ (about 1 us to build one), a Struct is built in C (about 0.1 us). None
of them can be part of a reference cycle, so the garbage collector does not track them.
"""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec


class EntryKind(enum.IntEnum):
    NORMAL = 0  # opaque state-machine payload
    CONFIG = 1  # membership change, data encodes the new configuration
    NOOP = 2  # appended by a new leader to commit entries of earlier terms


class Entry(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """On the wire (messages.py) as [term, index, kind, data]."""

    term: int
    index: int
    kind: EntryKind
    data: bytes


class HardState(msgspec.Struct, frozen=True, gc=False):
    """What must be durable before any message that depends on it is sent."""

    term: int = 0
    vote: str = ""
    commit: int = 0


class Membership(msgspec.Struct, frozen=True, gc=False):
    """Who votes and who only follows. ``size`` is the cluster size a quorum is counted
    against while fewer voters are known than the group was started for (a group
    bootstrapped with some of its servers missing): a quorum is always a majority of
    max(size, number of voters)."""

    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()
    size: int = 0

    def quorum(self) -> int:
        return max(self.size, len(self.voters)) // 2 + 1


class SnapshotMeta(msgspec.Struct, frozen=True, gc=False):
    index: int
    term: int
    membership: Membership


class SnapshotData(Protocol):
    """A snapshot's bytes that need not be in memory (a spool file: see spool.py): its
    length, and reads at offsets. The leader reads the chunks it sends from it; a follower
    hands the whole series to the state machine as one."""

    def __len__(self) -> int: ...

    def read(self, offset: int, n: int) -> bytes:
        """Up to n bytes from offset (fewer only at the end)."""
        ...


SnapshotBytes = bytes | SnapshotData


def read_at(data: SnapshotBytes, offset: int, n: int) -> bytes:
    """Bytes [offset, offset + n) of a snapshot's data, whichever form it has."""
    if isinstance(data, bytes):
        return data[offset : offset + n]
    return data.read(offset, n)


def whole(data: SnapshotBytes) -> bytes:
    """All of a snapshot's data in memory (for state machines that keep it there)."""
    if isinstance(data, bytes):
        return data
    return data.read(0, len(data))


class Snapshot(msgspec.Struct, frozen=True, gc=False):
    """The state machine's state after entry meta.index. An `external` snapshot is a
    marker with no data: the state machine keeps that state durably in its own storage
    (see node.StateMachine.durable_index); it is never sent to a peer. `data` is bytes,
    or (a durable state machine's, sent to or received from a peer) a SnapshotData whose
    bytes stay on disk; it is never encoded by msgspec (wal_format writes bytes only)."""

    meta: SnapshotMeta
    data: SnapshotBytes
    external: bool = False
