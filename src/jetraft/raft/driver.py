"""The production driver of one RAFT core, without a clock or threads of its own.

`Driver` owns a RaftCore, its durable log and its state machine, and does what the
Ready contract (ready.py) asks, in its order: persist, send, apply, advance. It also
keeps the proposals' bookkeeping, takes snapshots, notices its own removal from the
group and stops on a storage error. Both hosts run this same code:

- node.RaftNode, the asyncio host: timers, futures, fsync in a worker thread;
- the simulator (sim/), on virtual time, with disks that crash, stall and fail.

Blocking I/O (fsync, snapshot writes) is not called here: `process()` is a generator
that yields each such call (a `Job`, a callable without arguments) to the host, which
runs it (in a thread, or later in simulated time) and sends back its result, or throws
its exception in. Inputs that arrive meanwhile (messages, ticks, proposals) queue up and
all go into the next Ready: one fsync covers everything that arrived during the last.

Storage errors: a failed write or fsync is never retried (after a failed fsync the
kernel may have dropped the dirty pages: a retry that succeeds would claim durability
for lost data). The driver stops at once, sends nothing that depended on the failed
write, acknowledges nothing, fails every waiting proposal with NodeFailed and reports
the error through `on_error`; the owner restarts the node, which recovers from what is
really on disk.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Generator, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .core import RaftCore
from .membership import MembershipChange, decode_membership
from .messages import AppendEntries, AppendResponse, Heartbeat, Message, VoteRequest, VoteResponse
from .ready import (
    NotLeader,
    ProposalDropped,
    RaftConfig,
    RaftError,
    Ready,
    Role,
    SnapshotUnavailable,
    SoftState,
)
from .storage import LogStore, RecoveredState, core_from_recovered, persist_ready, split_messages
from .types import Entry, EntryKind, Membership, Snapshot, SnapshotBytes, whole

log = logging.getLogger("jetraft.raft")


class StateMachine(Protocol):
    """What a raft group replicates.

    `apply` sees every committed NORMAL entry once per life of the process, in index
    order; Entry.index tells where it is. After a restart, entries after the last
    snapshot are applied again: a state machine that keeps its own durable state (see
    DurableStateMachine) skips those it already holds."""

    def apply(self, entry: Entry) -> object:
        """Apply a committed NORMAL entry; the result answers the proposer."""

    def snapshot(self) -> SnapshotBytes:
        """The state after the last applied entry (bytes, or a SnapshotData whose bytes
        stay on disk: a durable state machine's, sent to followers chunk by chunk)."""

    def restore(self, data: bytes) -> None:
        """Replace the state by a snapshot's."""


@runtime_checkable
class DurableStateMachine(StateMachine, Protocol):
    """A state machine that keeps its state durably in its own storage (a stream store).

    `durable_index()`: every entry applied up to this index is durable in its own
    storage. The node then compacts its log up to there (minus keep_entries) without
    asking for snapshot bytes: it stores an external marker. When a follower needs a
    snapshot, the leader asks `snapshot()` for the current applied state and sends it.
    `restore(data)` must be durable when it returns (the node then stores a marker).
    On restart the node does not call restore: it replays the committed entries after
    the marker, and the state machine skips those whose index it already holds.

    A snapshot received from the leader may reach `restore` as a SnapshotData (the
    group's spool file, see spool.py) rather than bytes: read it in pieces."""

    def durable_index(self) -> int: ...

    def restore(self, data: SnapshotBytes) -> None:
        """Replace the state by a snapshot's, durably."""


class Applied(msgspec.Struct, frozen=True):
    index: int
    result: object  # what StateMachine.apply returned (None for membership changes)


class NodeStopped(RaftError):
    """The node was stopped before the proposal was applied."""


class NodeRemoved(NodeStopped):
    """The node learned that it is no longer a member of its group."""


class NodeFailed(NodeStopped):
    """The node stopped on a storage error (`cause`); it acknowledged nothing after it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"node stopped on a storage error: {cause!r}")
        self.cause = cause


class ProposalTimeout(RaftError):
    """No outcome within the proposal's deadline. The outcome is unknown: the entry may
    still be committed later."""


class State(enum.Enum):
    RUNNING = "running"
    STOPPED = "stopped"
    REMOVED = "removed"
    FAILED = "failed"


Item = bytes | MembershipChange
Job = Callable[[], object]
Process = Generator[Job, object, None]
Outcome = Applied | BaseException
DoneCallback = Callable[[object, Outcome], None]


class _StorageFailed(Exception):
    pass


class Driver:
    def __init__(
        self,
        node_id: str,
        peers: Sequence[str],
        core_config: RaftConfig,
        wal: LogStore,
        state_machine: StateMachine,
        send: Callable[[Message], None],
        on_done: DoneCallback,
        rng: random.Random,
        *,
        recovered: RecoveredState | None = None,
        learners: Sequence[str] = (),
        snapshot_entries: int = 8192,
        keep_entries: int = 1024,
        bootstrap_size: int = 0,
    ) -> None:
        """`on_done(token, outcome)` answers each proposal (see propose). Every
        `snapshot_entries` applied entries the log is compacted, keeping `keep_entries`
        for followers slightly behind. `bootstrap_size`: see RaftCore.in_bootstrap."""
        self.id = node_id
        self.wal = wal
        self.sm = state_machine
        self._send_fn = send
        self._on_done = on_done
        self.snapshot_entries = snapshot_entries
        self.keep_entries = keep_entries
        # (Checked once: isinstance against a runtime protocol is slow.)
        self._durable = state_machine if isinstance(state_machine, DurableStateMachine) else None
        self.durable_sm = self._durable is not None
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
            snap = recovered.snapshot
            if snap is not None and not snap.external:
                state_machine.restore(whole(snap.data))
        self.core.snapshot_source = self._snapshot_source
        hs = recovered.hard_state if recovered is not None else None
        # What is durable, as this driver wrote it: checked before every send.
        self._durable_term = hs.term if hs else 0
        self._durable_vote = hs.vote if hs else ""
        self._durable_last = self.core.log.last_index
        # Index of the state machine's state. A self-durable one may hold more than the
        # log says is applied (it skips those entries when they are replayed).
        self._sm_index = self.core.log.applied
        self._adopt_held_state()
        self._inbox: list[Message] = []
        self.heard_commit = 0  # the highest commit index a leader told us of
        self._ticks_due = 0
        self._queued: list[tuple[Item, object]] = []  # proposals not yet in the log
        self._pending: dict[int, tuple[int, object]] = {}  # index -> (term, token)
        self._busy = False  # inside process(): the core has a Ready outstanding
        self.state = State.RUNNING
        self.error: BaseException | None = None
        self.on_soft_state: list[Callable[[SoftState], None]] = []
        self.on_removed: Callable[[], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        # Tests and the simulator: see each Ready, and each committed entry as it is applied.
        self.observe_ready: Callable[[Ready], None] | None = None
        # The host's transport batches messages (one frame per peer and loop turn):
        # flush() puts those sent so far on the wire now.
        self.flush: Callable[[], None] | None = None
        self.observe_apply: Callable[[Entry], None] | None = None
        self.fsyncs = 0
        self.readies = 0
        # A replica that was ever a member, then sees a committed configuration without
        # itself, was removed. A node joining a group replays configurations from before
        # it was added: those do not count until it has seen itself in one.
        self._was_member = node_id in peers or node_id in learners or self._member_of(
            self.core.log.membership_at(self.core.log.offset)
        )
        self._removed = False  # a committed configuration without us was applied
        # Removed before this restart? Only a leader can tell (see _handle_ready): the
        # newest committed configuration here may be an old removal of a server that was
        # added again since. Until then, out of its configuration, it does not campaign.
        self._check_membership(self.core.log.membership_at(self.core.log.committed))

    def _adopt_held_state(self) -> None:
        """A self-durable state machine may hold entries the log does not say are
        committed (its commit index is written with later Readys), or a snapshot it
        restored just before a crash while the log still holds another history there:
        never commit the log's entries on its word, only start counting from what it
        holds. As a leader it may offer that state to followers (see
        RaftCore.sendable_snapshot): it holds nothing but committed entries."""
        if self._durable is not None:
            self._sm_index = max(self._sm_index, self._durable.durable_index())

    # ------------------------------------------------------------------ inputs
    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    def receive(self, msg: Message) -> None:
        if self.state is State.RUNNING:
            self._inbox.append(msg)
            if isinstance(msg, AppendEntries):
                if msg.commit > self.heard_commit:
                    self.heard_commit = msg.commit
            elif isinstance(msg, Heartbeat) and msg.leader_commit > self.heard_commit:
                self.heard_commit = msg.leader_commit

    @property
    def applied(self) -> int:
        """The last entry applied to the state machine."""
        return self._sm_index

    def caught_up(self) -> bool:
        """Everything this node has heard is committed is applied here: a read served now
        sees every write whose commit news reached this node before the read (a leader sends
        that news before the replies that confirm the write, on the same connections)."""
        return self._sm_index >= self.heard_commit

    def tick(self) -> bool:
        """One tick of the clock. True if the host must run process() (there is work)."""
        if self.state is not State.RUNNING:
            return False
        if self._busy:
            self._ticks_due += 1  # process() feeds it between two Readys
            return False
        # An idle follower's tick only counts time: no need to wake the host for it.
        self.core.tick()
        return self.core.has_ready()

    def has_work(self) -> bool:
        if self.state is not State.RUNNING:
            return False
        return bool(self._inbox or self._ticks_due or self._queued) or self.core.has_ready()

    def propose(self, item: Item, token: object) -> None:
        """Queue a proposal; on_done(token, Applied | exception) answers it once it is
        applied here, or fails. Raises NotLeader (naming the leader) on a follower."""
        if self.state is not State.RUNNING:
            raise self._stopped_error()
        if self.core.role is not Role.LEADER:
            raise NotLeader(self.core.lead)
        self._queued.append((item, token))

    def stop(self) -> None:
        """Stop (the host waits for a Ready in progress first); fail every proposal."""
        if self.state is State.RUNNING:
            self.state = State.STOPPED
        self._fail_all(self._stopped_error())

    # ------------------------------------------------------------------ processing
    def process(self) -> Process:
        """Feed what arrived and handle Readys until there is nothing left to do."""
        if self.state is not State.RUNNING:
            return
        core = self.core
        self._busy = True
        try:
            self._feed()
            while self.state is State.RUNNING:
                # Messages alone (an idle group's heartbeats and answers) need no Ready.
                for m in core.take_messages():
                    self._send(m)
                if not core.has_ready():
                    break
                yield from self._handle_ready(core.ready())
                if self.state is State.RUNNING:
                    self._feed()  # what arrived during the fsync goes into the next Ready
        except _StorageFailed:
            pass
        finally:
            self._busy = False

    def _feed(self) -> None:
        core = self.core
        if self._inbox:
            inbox, self._inbox = self._inbox, []
            for m in inbox:
                core.step(m)
        while self._ticks_due:
            self._ticks_due -= 1
            core.tick()
        if self._queued:
            queued, self._queued = self._queued, []
            batch: list[tuple[bytes, object]] = []
            for item, token in queued:
                if isinstance(item, bytes):
                    batch.append((item, token))
                    continue
                self._propose_batch(batch)
                batch = []
                try:
                    index = core.change_membership(item)
                except (RaftError, ValueError) as exc:
                    self._on_done(token, exc)
                    continue
                self._pending[index] = (core.term, token)
            self._propose_batch(batch)

    def _propose_batch(self, batch: list[tuple[bytes, object]]) -> None:
        if not batch:
            return
        core = self.core
        try:
            first = core.propose_batch([data for data, _ in batch])
        except RaftError as exc:
            for _, token in batch:
                self._on_done(token, exc)
            return
        term, pending = core.term, self._pending
        for k, (_, token) in enumerate(batch):
            pending[first + k] = (term, token)

    def _io(self, job: Job) -> Generator[Job, object, object]:
        try:
            return (yield job)
        except Exception as exc:  # OSError (EIO, ENOSPC...), WalError: never retried
            self._fail_storage(exc)
            raise _StorageFailed from exc

    def _handle_ready(self, rd: Ready) -> Process:
        self.readies += 1
        if self.observe_ready is not None:
            self.observe_ready(rd)
        wal = self.wal
        if rd.snapshot is not None:
            yield from self._install(rd.snapshot)
        try:
            persist_ready(wal, rd, snapshot=False)
        except Exception as exc:  # the WAL failed earlier, or refuses the entries
            self._fail_storage(exc)
            raise _StorageFailed from exc
        early, late = split_messages(rd, self._durable_term, self._durable_vote)
        for m in early:  # a leader's AppendEntries overlap its own fsync (storage.py)
            self._send(m)
        applied = 0
        if rd.must_sync and self.core.role is Role.LEADER:
            applied = self._apply_durable(rd)
        if rd.must_sync:
            yield from self._io(wal.sync)
            self.fsyncs += 1
        self._note_durable(rd)
        for m in late:
            self._send(m)
        committed = rd.committed
        if late and applied < len(committed) and self.flush is not None:
            # A follower's answers (its leader commits on them) leave before it applies.
            self.flush()
        for k in range(applied, len(committed)):
            self._apply(committed[k])
        self.core.advance(rd)
        if rd.snapshot is not None and self.durable_sm:
            # Keep the marker, not the data, in memory: followers get fresh state.
            marker = Snapshot(rd.snapshot.meta, b"", external=True)
            self.core.compact(marker, marker.meta.index)
        if rd.repaired:
            yield from self._io(wal.clear_corruption)
        if rd.soft_state is not None:
            self._soft_state_changed(rd.soft_state)
        if self._removed and self.core.leader_says_member is False:
            # A committed configuration without us, and the leader's newest has us not
            # either (a server removed once and added again replays its old removal:
            # its leader says it is a member).
            self._become_removed()
        elif self.state is State.RUNNING:
            yield from self._maybe_snapshot()

    def _apply_durable(self, rd: Ready) -> int:
        """Leader, before the Ready's fsync: apply the committed entries that an earlier
        Ready made durable here (those before the ones this Ready writes); returns how
        many.

        They are committed, so durable on a quorum, and durable here too: their outcome
        (a PubAck) need not wait for the fsync of the entries that arrived since. On a
        leader this takes one fsync off every acknowledgement: entries are committed by
        answers stepped after the Ready that wrote them, so the next Ready applies them
        while it persists the next batch. Nothing sent depends on it (messages keep
        their order around the fsync). A follower answers nobody when it applies, but its
        leader waits for its answer to the entries this Ready writes: it applies after
        the fsync, once that answer is on its way (``flush``)."""
        committed = rd.committed
        if not committed or rd.snapshot is not None:
            return 0
        limit = self._durable_last
        if rd.entries:
            limit = min(limit, rd.entries[0].index - 1)
        n = 0
        for e in committed:
            if e.index > limit or self.state is not State.RUNNING:
                break
            self._apply(e)
            n += 1
        return n

    def _install(self, snap: Snapshot) -> Process:
        """A snapshot from the leader: durable before anything continues it."""
        if self._durable is not None:
            # The state machine makes the restored state durable itself; only then may
            # the log say that its state starts there (a crash in between replays
            # entries the state machine already holds, which it skips). It reads the
            # data in pieces when it is a spool file.
            self._durable.restore(snap.data)
            marker = Snapshot(snap.meta, b"", external=True)
            yield from self._io(lambda: self.wal.save_snapshot(marker))
        else:
            data = whole(snap.data)
            full = snap if data is snap.data else Snapshot(snap.meta, data)
            yield from self._io(lambda: self.wal.save_snapshot(full))
            self.sm.restore(data)
        self._sm_index = snap.meta.index
        self._drop_pending_upto(snap.meta.index)
        self._check_membership(snap.meta.membership)

    def _note_durable(self, rd: Ready) -> None:
        if rd.hard_state is not None and rd.must_sync:
            self._durable_term, self._durable_vote = rd.hard_state.term, rd.hard_state.vote
        if rd.snapshot is not None:
            self._durable_last = rd.snapshot.meta.index
        if rd.entries:
            self._durable_last = rd.entries[-1].index

    def _send(self, m: Message) -> None:
        self.check_durable(m)
        self._send_fn(m)

    def check_durable(self, m: Message) -> None:
        """The persistence contract: nothing leaves before what it depends on is durable."""
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        ok = pre or m.term <= self._durable_term
        if isinstance(m, VoteResponse) and m.granted and not m.pre_vote:
            # Safe once this vote, or a later term, is durable (in the same Ready a
            # replica may grant a vote in one term and move on to the next).
            ok = ok and (self._durable_vote == m.to or m.term < self._durable_term)
        elif isinstance(m, AppendResponse) and not m.reject:
            ok = ok and m.index <= self._durable_last
        if not ok:
            raise AssertionError(f"{self.id}: {m} would leave before its state is durable")

    def _apply(self, e: Entry) -> None:
        if self.observe_apply is not None:
            self.observe_apply(e)
        result = None
        if e.kind is EntryKind.NORMAL:
            result = self.sm.apply(e)
        elif e.kind is EntryKind.CONFIG:
            self._check_membership(decode_membership(e.data))
        self._sm_index = max(self._sm_index, e.index)
        p = self._pending.pop(e.index, None) if self._pending else None
        if p is None:
            return
        term, token = p
        if term == e.term:
            self._on_done(token, Applied(e.index, result))
        else:
            self._on_done(token, ProposalDropped(f"entry {e.index} was replaced by a new leader"))

    def _drop_pending_upto(self, index: int) -> None:
        for i in [i for i in self._pending if i <= index]:
            _, token = self._pending.pop(i)
            exc = ProposalDropped(f"outcome of entry {i} unknown: snapshot installed")
            self._on_done(token, exc)

    def _soft_state_changed(self, ss: SoftState) -> None:
        if ss.role is not Role.LEADER:
            # Nothing queued will be proposed here; what is in the log may still be
            # committed by the next leader, but this node can no longer tell: say so now
            # rather than leave the proposers waiting.
            for _, token in self._queued:
                self._on_done(token, NotLeader(ss.leader))
            self._queued = []
            for index, (_, token) in list(self._pending.items()):
                self._on_done(token, ProposalDropped(
                    f"leadership lost before entry {index} was applied here; it may still "
                    "be committed"))
            self._pending.clear()
        for cb in list(self.on_soft_state):
            cb(ss)

    # ------------------------------------------------------------------ membership
    def _member_of(self, m: Membership) -> bool:
        return self.id in m.voters or self.id in m.learners

    def _check_membership(self, m: Membership) -> None:
        """Called with each configuration that becomes committed here, in log order."""
        if self._member_of(m):
            self._was_member = True
            self._removed = False
        elif self._was_member:
            self._removed = True

    def _become_removed(self) -> None:
        """Stop for good: no campaigning, no voting, no answers that could disturb the
        group (a removed replica is not in its configuration any more)."""
        if self.state is not State.RUNNING:
            return
        self.state = State.REMOVED
        self._fail_all(NodeRemoved(f"{self.id} was removed from its group"))
        if self.on_removed is not None:
            self.on_removed()

    # ------------------------------------------------------------------ snapshots
    def _snapshot_source(self) -> tuple[int, SnapshotBytes]:
        try:
            return self._sm_index, self.sm.snapshot()
        except OSError as exc:
            # A spool file that cannot be written (a full disk) is no storage failure of
            # the group: the follower waits, and is offered a snapshot again later.
            log.warning("RAFT node %s: no snapshot for a follower now: %s", self.id, exc)
            raise SnapshotUnavailable(str(exc)) from exc

    def _maybe_snapshot(self) -> Process:
        core = self.core
        snap = core.log.snapshot
        base = snap.meta.index if snap is not None else 0
        if self._durable is not None:
            upto = min(self._durable.durable_index(), core.applied)
            if upto - base < self.snapshot_entries or upto < core.log.offset:
                return
            new = core.create_snapshot(upto, b"", external=True)
        else:
            if core.applied - base < self.snapshot_entries:
                return
            new = core.create_snapshot(core.applied, whole(self.sm.snapshot()))
        yield from self._io(lambda: self.wal.save_snapshot(new))
        core.compact(new, new.meta.index - self.keep_entries)

    # ------------------------------------------------------------------ failures
    def _stopped_error(self) -> NodeStopped:
        if self.state is State.REMOVED:
            return NodeRemoved(f"{self.id} was removed from its group")
        if self.state is State.FAILED and self.error is not None:
            return NodeFailed(self.error)
        return NodeStopped("node stopped")

    def fail(self, exc: BaseException) -> None:
        """Stop as on a storage error (the host hit an unexpected error processing)."""
        self._fail_storage(exc)

    def _fail_storage(self, exc: BaseException) -> None:
        if self.state is not State.RUNNING:
            return
        self.state = State.FAILED
        self.error = exc
        self._fail_all(NodeFailed(exc))
        if self.on_error is not None:
            self.on_error(exc)

    def _fail_all(self, exc: BaseException) -> None:
        queued, self._queued = self._queued, []
        pending, self._pending = self._pending, {}
        for _, token in queued:
            self._on_done(token, exc)
        for _, token in pending.values():
            self._on_done(token, exc)
