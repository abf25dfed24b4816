"""The asyncio driver of one RAFT core: the only place RAFT touches time and I/O.

A timer turns into ticks; messages from the transport, ticks and proposals are fed to the
core; each Ready is handled in the contract's order (ready.py):

1. persist: a snapshot is saved (durable on return) and restored into the state machine;
   entries and hard state are buffered in the WAL, then ONE `wal.sync()` (fsync, run in
   a thread so the loop stays responsive) makes the whole Ready durable;
2. send its messages (the driver asserts each one depends only on durable state). A
   leader's AppendEntries go out before its own fsync, overlapping it with the
   followers' (see storage.split_messages for why that is safe);
3. apply committed entries; a proposal's future resolves with the state machine's result;
4. advance the core.

Group commit: while one fsync runs, arriving proposals and messages wait in queues and
all go into the next Ready, so one fsync covers every proposal that arrived meanwhile.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .core import RaftCore
from .membership import ChangeKind, MembershipChange
from .messages import AppendResponse, Message, VoteRequest, VoteResponse
from .ready import NotLeader, ProposalDropped, RaftConfig, RaftError, Ready, Role, SoftState
from .ready import Status as CoreStatus
from .storage import (
    LogStore,
    RecoveredState,
    core_from_recovered,
    persist_ready,
    split_messages,
)
from .transport import Transport
from .types import Entry, EntryKind


class StateMachine(Protocol):
    def apply(self, entry: Entry) -> object:
        """Apply a committed NORMAL entry; the result answers the proposer."""

    def snapshot(self) -> bytes:
        """The state after the last applied entry."""

    def restore(self, data: bytes) -> None:
        """Replace the state by a snapshot's."""


@dataclass(frozen=True, slots=True)
class Applied:
    index: int
    result: object  # what StateMachine.apply returned (None for membership changes)


class NodeStopped(RaftError):
    """The node was stopped before the proposal was applied."""


_Item = bytes | MembershipChange


class RaftNode:
    def __init__(
        self,
        node_id: str,
        peers: Sequence[str],
        core_config: RaftConfig,
        wal: LogStore,
        transport: Transport,
        state_machine: StateMachine,
        tick_interval_s: float = 0.1,
        rng: random.Random | None = None,
        *,
        recovered: RecoveredState | None = None,
        learners: Sequence[str] = (),
        snapshot_entries: int = 8192,
        keep_entries: int = 1024,
        bootstrap_size: int = 0,
    ) -> None:
        """`wal` and `recovered` come from `Wal.open`; without `recovered` the log is new.
        Every `snapshot_entries` applied entries the state machine is snapshotted and the
        log compacted, keeping `keep_entries` for followers slightly behind."""
        self.id = node_id
        self.wal = wal
        self.transport = transport
        self.sm = state_machine
        self.tick_interval_s = tick_interval_s
        self.snapshot_entries = snapshot_entries
        self.keep_entries = keep_entries
        rng = rng or random.Random()
        if recovered is None:
            self.core = RaftCore(
                node_id, core_config, rng, peers=peers, learners=learners,
                bootstrap_size=bootstrap_size,
            )
        else:
            self.core = core_from_recovered(
                node_id, core_config, rng, recovered, peers=peers, learners=learners,
                bootstrap_size=bootstrap_size,
            )
            if recovered.snapshot is not None:
                state_machine.restore(recovered.snapshot.data)
        hs = recovered.hard_state if recovered is not None else None
        # What is durable, as this driver wrote it: checked before every send.
        self._durable_term = hs.term if hs else 0
        self._durable_vote = hs.vote if hs else ""
        self._durable_last = self.core.log.last_index
        self._inbox: list[Message] = []
        self._proposals: list[tuple[_Item, asyncio.Future[Applied]]] = []
        self._pending: dict[int, tuple[int, asyncio.Future[Applied]]] = {}
        self._ticks_due = 0
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._listeners: list[Callable[[SoftState], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopping = False
        self.fsyncs = 0
        self.readies = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name=f"raft-{self.id}")
        self._timer = loop.call_later(self.tick_interval_s, self._on_timer)
        self._wake.set()

    async def stop(self) -> None:
        """Stop after the Ready in progress (an fsync is never abandoned half way)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
        self._wake.set()
        if self._task is not None:
            await self._task
        for _, fut in self._proposals:
            _fail(fut, NodeStopped("node stopped"))
        for _, fut in self._pending.values():
            _fail(fut, NodeStopped("node stopped"))
        self._proposals.clear()
        self._pending.clear()

    def receive(self, msg: Message) -> None:
        """Called by the transport for each message addressed to this node."""
        self._inbox.append(msg)
        self._wake.set()

    def set_bootstrap_peers(self, peers: Sequence[str]) -> None:
        """The servers a group that is still bootstrapping may ask for votes."""
        self.core.set_bootstrap_peers(peers)

    def subscribe(self, callback: Callable[[SoftState], None]) -> None:
        """callback(soft_state) on each change of leader, role or term."""
        self._listeners.append(callback)

    def _on_timer(self) -> None:
        self._ticks_due += 1
        self._wake.set()
        self._timer = asyncio.get_running_loop().call_later(self.tick_interval_s, self._on_timer)

    # ------------------------------------------------------------------ queries
    @property
    def leader(self) -> str:
        return self.core.lead

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER

    def status(self) -> CoreStatus:
        """Term, commit, applied; on the leader each peer's match index and how many ticks
        ago it was heard from (times tick_interval_s for seconds)."""
        return self.core.status()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait until predicate() holds, re-checking after each Ready; TimeoutError."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._progress.wait()

    async def wait_for_leader(self, timeout_s: float) -> str:
        await self.wait_for(lambda: self.core.lead != "", timeout_s)
        return self.core.lead

    # ------------------------------------------------------------------ API
    def propose_nowait(self, data: bytes) -> asyncio.Future[Applied]:
        """Queue a proposal; the future resolves once it is applied here. Raises
        NotLeader (naming the leader, to forward to) on a follower."""
        return self._enqueue(data)

    async def propose(self, data: bytes) -> Applied:
        return await self._enqueue(data)

    async def change_membership(self, change: MembershipChange) -> int:
        """Propose one membership change; returns its index once applied here."""
        return (await self._enqueue(change)).index

    async def add_member(self, node_id: str, *, timeout_s: float = 30.0) -> None:
        """Add node_id as a learner, wait until it has caught up, then promote it."""
        await self.change_membership(MembershipChange(ChangeKind.ADD_LEARNER, node_id))
        await self.wait_for(lambda: self.core.learner_caught_up(node_id), timeout_s)
        await self.change_membership(MembershipChange(ChangeKind.PROMOTE, node_id))

    async def remove_member(self, node_id: str) -> int:
        return await self.change_membership(MembershipChange(ChangeKind.REMOVE, node_id))

    def transfer_leadership(self, to: str | None = None) -> str:
        """Start handing leadership to `to` (or the most up-to-date voter)."""
        target = self.core.transfer_leadership(to)
        self._wake.set()
        return target

    def _enqueue(self, item: _Item) -> asyncio.Future[Applied]:
        if self._stopping:
            raise NodeStopped("node stopped")
        if not self.is_leader:
            raise NotLeader(self.core.lead)
        fut: asyncio.Future[Applied] = asyncio.get_running_loop().create_future()
        self._proposals.append((item, fut))
        self._wake.set()
        return fut

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        core = self.core
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            self._feed()
            while not self._stopping and core.has_ready():
                await self._handle_ready(core.ready())
                self._feed()  # what arrived during the fsync goes into the next Ready
            ev, self._progress = self._progress, asyncio.Event()
            ev.set()

    def _feed(self) -> None:
        core = self.core
        if self._inbox:
            inbox, self._inbox = self._inbox, []
            for m in inbox:
                core.step(m)
        while self._ticks_due:
            self._ticks_due -= 1
            core.tick()
        if self._proposals:
            props, self._proposals = self._proposals, []
            batch: list[tuple[bytes, asyncio.Future[Applied]]] = []
            for item, fut in props:
                if fut.done():
                    continue
                if isinstance(item, bytes):
                    batch.append((item, fut))
                    continue
                self._propose_batch(batch)
                batch = []
                try:
                    index = core.change_membership(item)
                except (RaftError, ValueError) as exc:
                    fut.set_exception(exc)
                    continue
                self._pending[index] = (core.term, fut)
            self._propose_batch(batch)

    def _propose_batch(self, batch: list[tuple[bytes, asyncio.Future[Applied]]]) -> None:
        if not batch:
            return
        core = self.core
        try:
            first = core.propose_batch([data for data, _ in batch])
        except RaftError as exc:
            for _, fut in batch:
                fut.set_exception(exc)
            return
        term, pending = core.term, self._pending
        for k, (_, fut) in enumerate(batch):
            pending[first + k] = (term, fut)

    async def _handle_ready(self, rd: Ready) -> None:
        self.readies += 1
        wal = self.wal
        if rd.snapshot is not None:
            await asyncio.to_thread(wal.save_snapshot, rd.snapshot)
            self.sm.restore(rd.snapshot.data)
            self._drop_pending_upto(rd.snapshot.meta.index)
        persist_ready(wal, rd, snapshot=False)
        send = self.transport.send
        early, late = split_messages(rd, self._durable_term, self._durable_vote)
        for m in early:  # a leader's AppendEntries overlap its own fsync (storage.py)
            self._check_durable(m)
            send(m)
        if rd.must_sync:
            await asyncio.to_thread(wal.sync)
            self.fsyncs += 1
        self._note_durable(rd)
        for m in late:
            self._check_durable(m)
            send(m)
        for e in rd.committed:
            self._apply(e)
        if rd.repaired:
            await asyncio.to_thread(wal.clear_corruption)
        self.core.advance(rd)
        if rd.soft_state is not None:
            for cb in list(self._listeners):
                cb(rd.soft_state)
        await self._maybe_snapshot()

    def _note_durable(self, rd: Ready) -> None:
        if rd.hard_state is not None and rd.must_sync:
            self._durable_term, self._durable_vote = rd.hard_state.term, rd.hard_state.vote
        if rd.snapshot is not None:
            self._durable_last = rd.snapshot.meta.index
        if rd.entries:
            self._durable_last = rd.entries[-1].index

    def _check_durable(self, m: Message) -> None:
        """The persistence contract: nothing leaves before what it depends on is durable."""
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        ok = pre or m.term <= self._durable_term
        if isinstance(m, VoteResponse) and m.granted and not m.pre_vote:
            ok = ok and self._durable_vote == m.to
        elif isinstance(m, AppendResponse) and not m.reject:
            ok = ok and m.index <= self._durable_last
        if not ok:
            raise AssertionError(f"{self.id}: {m} would leave before its state is durable")

    def _apply(self, e: Entry) -> None:
        result = self.sm.apply(e) if e.kind is EntryKind.NORMAL else None
        if not self._pending:
            return
        p = self._pending.pop(e.index, None)
        if p is None:
            return
        term, fut = p
        if fut.done():
            return
        if term == e.term:
            fut.set_result(Applied(e.index, result))
        else:
            fut.set_exception(ProposalDropped(f"entry {e.index} was replaced by a new leader"))

    def _drop_pending_upto(self, index: int) -> None:
        for i in [i for i in self._pending if i <= index]:
            _, fut = self._pending.pop(i)
            _fail(fut, ProposalDropped(f"outcome of entry {i} unknown: snapshot installed"))

    async def _maybe_snapshot(self) -> None:
        core = self.core
        snap = core.log.snapshot
        base = snap.meta.index if snap is not None else 0
        if core.applied - base < self.snapshot_entries:
            return
        new = core.create_snapshot(core.applied, self.sm.snapshot())
        await asyncio.to_thread(self.wal.save_snapshot, new)
        core.compact(new, new.meta.index - self.keep_entries)


def _fail(fut: asyncio.Future[Applied], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
