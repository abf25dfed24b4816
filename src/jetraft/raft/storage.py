"""Glue between the core and the durable log, shared by the asyncio driver and the simulator.

`persist_ready` writes what a Ready asks to persist, in the contract's order; the caller
fsyncs (`Wal.sync`) when `Ready.must_sync`, before sending the Ready's messages.
`core_from_recovered` rebuilds a core from what `Wal.open` recovered.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from .core import RaftCore
from .messages import AppendEntries, Heartbeat, Message
from .ready import RaftConfig, Ready
from .types import Entry, HardState, Snapshot


class LogStore(Protocol):
    """The part of wal.Wal the drivers use."""

    def append(self, entries: Sequence[Entry]) -> None: ...

    def set_hard_state(self, hs: HardState) -> None: ...

    def sync(self) -> None: ...

    def save_snapshot(self, snap: Snapshot) -> None: ...

    def compact(self, upto_index: int) -> None: ...

    def clear_corruption(self) -> None: ...


class RecoveredState(Protocol):
    """The shape of wal.Recovered."""

    @property
    def hard_state(self) -> HardState: ...

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def entries(self) -> list[Entry]: ...

    @property
    def corrupt(self) -> str | None: ...

    @property
    def acked_tail(self) -> tuple[int, int] | None: ...


def persist_ready(wal: LogStore, rd: Ready, *, snapshot: bool = True) -> None:
    """Buffer (or, for a snapshot, durably write) what rd asks to persist. The snapshot
    goes first: it may replace the log that the entries then continue. With
    snapshot=False the caller has saved rd.snapshot already."""
    if snapshot and rd.snapshot is not None:
        wal.save_snapshot(rd.snapshot)
    if rd.entries:
        wal.append(rd.entries)
    if rd.hard_state is not None:
        wal.set_hard_state(rd.hard_state)


def core_from_recovered(
    node_id: str,
    config: RaftConfig,
    rng: random.Random,
    recovered: RecoveredState,
    *,
    peers: Sequence[str] = (),
    learners: Sequence[str] = (),
    bootstrap_size: int = 0,
) -> RaftCore:
    """A core resuming from durable state. A corrupt log makes a replica that neither
    votes nor campaigns until its leader has repaired it."""
    return RaftCore(
        node_id,
        config,
        rng,
        peers=peers,
        learners=learners,
        hard_state=recovered.hard_state,
        snapshot=recovered.snapshot,
        entries=recovered.entries,
        corrupt=recovered.corrupt is not None,
        acked_tail=recovered.acked_tail,
        bootstrap_size=bootstrap_size,
    )


def split_messages(
    rd: Ready, durable_term: int, durable_vote: str
) -> tuple[list[Message], list[Message]]:
    """(early, late): messages that may leave before rd is durable, and the rest.

    A leader may send AppendEntries and heartbeats while its own fsync runs (etcd does
    the same) when the Ready does not change its durable term or vote: they depend only
    on its log, and the leader counts its own copy of new entries toward a quorum only
    when it steps the followers' answers, which the drivers do after this Ready is
    durable. So no commit index it sends or applies counts an entry it has not
    persisted, and a crash before the fsync loses nothing anyone relies on."""
    hs = rd.hard_state
    if hs is not None and (hs.term, hs.vote) != (durable_term, durable_vote):
        return [], list(rd.messages)
    early: list[Message] = []
    late: list[Message] = []
    for m in rd.messages:
        (early if isinstance(m, AppendEntries | Heartbeat) else late).append(m)
    return early, late
