"""This server's replica of one clustered stream: a member of the stream's RAFT group.

Every replica applies the committed entries of the group to the same deterministic stream
state machine (``jetstream.stream.Stream``). Here (memory streams) the log is the durable
record: the messages are kept in a MemoryStore and rebuilt from the log's snapshot and
entries on restart. File streams' replicas keep them in a file store instead
(``stream_file.FileStreamReplica``).

The leader alone:

* subscribes to the stream's subjects, so publishes anywhere in the cluster reach it; each
  one becomes a ``StoreMsg`` stamped with its clock; those that arrive in one loop turn go
  into one ``StoreBatch`` entry (one log entry, one framing and one decode per batch: the
  per-entry costs of RAFT and the log were most of a publish's cost), and the RAFT node
  batches proposals into one log append and one fsync. The PubAcks of a batch leave once
  its entry is committed, fsync'd on a quorum, and applied here. If leadership is lost
  first, no PubAck is sent: the publisher times out and retries (Nats-Msg-Id makes that
  safe);
* proposes ``Expire`` entries when messages reach max_age or their TTL;
* brings the group in line with the assignment: a changed config becomes an
  ``UpdateConfig`` entry, servers added to the assignment join (as learners, promoted once
  caught up), servers no longer in it are removed (leadership moves first when it is us).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.store.types import StreamStore
from jetraft.jetstream.stream import (
    Entry as StreamEntry,
)
from jetraft.jetstream.stream import (
    Expire,
    LogEntry,
    OpResult,
    PubAck,
    Result,
    Retire,
    StoreBatch,
    StoreMsg,
    Stream,
    UpdateConfig,
    decode_log_entry,
    encode_entry,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.client import PubBatch
from jetraft.raft.driver import Outcome
from jetraft.raft.node import Applied, NodeStopped
from jetraft.raft.ready import NotLeader, ProposalDropped, RaftError, Role, SoftState
from jetraft.raft.types import Entry, SnapshotBytes
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.advisories import stream_leader_elected, stream_quorum_lost
from jetraft.server.js.clustered.group import GroupHost, RaftGroup
from jetraft.server.js.expiry import ExpiryTimer
from jetraft.server.js.sourcing import Sourcer

log = logging.getLogger("jetraft.js.stream")

PROPOSE_TIMEOUT_S = 5.0
MIN_SNAPSHOT_ENTRIES = 8192
SNAPSHOT_CHECK_EVERY = 1024
KEEP_MSGS = 1024  # messages kept in the log after a snapshot (RaftNode's keep_entries)
# A batch of publishes is proposed at the end of the loop turn, or sooner at these sizes (a
# batch is one log entry: followers that fall behind get it whole, in AppendEntries of
# about 1 MB).
MAX_BATCH_MSGS = 256
MAX_BATCH_BYTES = 256 * 1024
# How long a lagging replica holds a direct get back while it catches up.
DIRECT_CATCH_UP_S = 2.0


class ReplicaHost(GroupHost, Protocol):
    @property
    def router(self) -> Router: ...

    @property
    def domain(self) -> str: ...

    def account_named(self, name: str) -> Account | None: ...

    def stream_leader_changed(self, replica: StreamReplica) -> None: ...


DirectHandler = Callable[["StreamReplica", str, str | None, bytes], None]


class _Snapshot(msgspec.Struct, array_like=True):
    config: StreamConfig
    created_ns: int
    chunks: list[bytes]
    dedupe: list[tuple[str, int, int]]
    last_msg_id: str
    ttl: list[tuple[int, int]]
    index: int = 0  # the last entry applied to the state (file replicas mark it)


class StreamReplica:
    def __init__(self, host: ReplicaHost, sa: StreamAssignment, *, joining: bool) -> None:
        self.host = host
        self.sa = sa
        account = host.account_named(sa.account)
        assert account is not None
        self.account = account
        # The config the group started with: a replica replays the group's log from its
        # first entry (joining or restarting without a snapshot), and the entries before
        # an UpdateConfig were applied under the old config (a smaller max_msg_size, say,
        # would refuse messages the others stored).
        self.applied_index = 0  # of the last entry applied (file replicas: see stream_file)
        self.stream = self._make_stream(host, sa)
        self.client = InternalClient(host.router, account, f"stream {sa.account} > {sa.name}")
        self.client.stream = sa.name
        self.direct = InternalClient(host.router, account, f"direct get {sa.account} > {sa.name}")
        # The leader reads the stream's origins (mirror / sources) and proposes the copies.
        self.sourcer = Sourcer(
            InternalClient(host.router, account, f"sourcing {sa.account} > {sa.name}"),
            lambda: self.stream,
            self._store_sourced,
            f"{sa.account} > {sa.name}",
        )
        self._direct_waits: set[asyncio.Task[None]] = set()
        self.group = RaftGroup(
            host,
            sa.group,
            self,
            () if joining else sa.peers,
            on_role=self._on_role,
            on_quorum_lost=self._advise_quorum_lost,
        )
        self.closed = False
        self._leading = False
        self.expiry = ExpiryTimer(lambda: self.stream, self._expire)
        self._reconcile_task: asyncio.Task[None] | None = None
        self._to_retire: set[int] = set()
        self.apply_listeners: list[Callable[[StreamEntry, Result], None]] = []
        self._batch: list[StoreMsg] = []  # publishes of this loop turn, not yet proposed
        self._batch_bytes = 0
        # Leader: the entries it proposed, by id of their bytes, until applied or failed:
        # its own entries are applied without decoding them again.
        self._own: dict[int, tuple[bytes, LogEntry]] = {}
        self._msgs_applied = 0  # publishes applied, for pacing snapshots
        self.last_msgs = 0  # publishes in the entry applied last
        self._entries_applied = 0

    def _make_stream(self, host: ReplicaHost, sa: StreamAssignment) -> Stream:
        return self._with_store(sa, MemoryStore(), host.domain)

    @staticmethod
    def _with_store(sa: StreamAssignment, store: StreamStore, domain: str) -> Stream:
        """A new replica's stream on an empty store."""
        first = sa.first_config
        stream = Stream(first, store, sa.created_ns, domain)
        if first.first_seq > 1:
            # As on one server: the empty store starts at first_seq. Every replica does it
            # from the assignment, before any entry (or snapshot) is applied.
            stream.store.purge(None, first.first_seq, 0)
        return stream

    @property
    def name(self) -> str:
        return self.sa.name

    @property
    def key(self) -> tuple[str, str]:
        return (self.sa.account, self.sa.name)

    @property
    def is_leader(self) -> bool:
        """Leading and serving (subscribed to the stream's subjects): the RAFT role comes
        a moment earlier, before the role change reached this replica."""
        return self._leading and self.group.is_leader

    @property
    def leader(self) -> str:
        return self.group.leader

    async def start(self, *, known: bool = False) -> None:
        await self.group.start(known=known)

    async def stop(self) -> None:
        self._close()
        await self.group.stop()

    async def destroy(self) -> None:
        self._close()
        await self.group.destroy()

    def _close(self) -> None:
        self.closed = True
        self._lose_leadership()
        self.client.close()
        self.direct.close()
        self.sourcer.client.close()

    def serve_direct(self, handler: DirectHandler | None) -> None:
        """Every replica of a stream with allow_direct answers DIRECT.GET; a queue group
        makes exactly one of them answer each request."""
        for sub in list(self.direct.subs.values()):
            self.direct.unsubscribe(sub)
        if handler is None or not self.sa.config.allow_direct or self.closed:
            return

        def on_request(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            node = self.group.node
            if node is None or node.current():
                handler(self, subject, reply, data)
                return
            # A follower answers once it heard from a leader and applied every write it
            # heard was committed: a client that got a PubAck and reads through this
            # replica sees its write.
            task = asyncio.ensure_future(self._answer_caught_up(handler, subject, reply, data))
            self._direct_waits.add(task)
            task.add_done_callback(self._direct_waits.discard)

        base = f"$JS.API.DIRECT.GET.{self.name}"
        self.direct.subscribe(base, on_request, queue="_sys_")
        self.direct.subscribe(base + ".>", on_request, queue="_sys_")

    async def _answer_caught_up(self, handler: DirectHandler, subject: str, reply: str | None,
                                data: bytes) -> None:
        node = self.group.node
        if node is not None:
            # Bounded: a replica that cannot catch up answers with what it holds (a direct
            # get is served by any replica, as on nats-server, and is not linearizable).
            with contextlib.suppress(TimeoutError):
                await node.wait_for(node.current, DIRECT_CATCH_UP_S)
        if not self.closed:
            handler(self, subject, reply, data)

    # --- the state machine (raft.node.StateMachine) ------------------------------------------

    def apply(self, entry: Entry) -> object:
        data = entry.data
        own = self._own.pop(id(data), None) if self._own else None
        e = own[1] if own is not None and own[0] is data else decode_log_entry(data)
        result: object
        self._entries_applied += 1
        if isinstance(e, StoreBatch):
            # Only a leader answers publishers: a follower need not make the PubAcks.
            listeners = self.apply_listeners
            results = self.stream.apply_batch(e, answers=self._leading or bool(listeners))
            for listener in listeners:
                for m, r in zip(e.msgs, results, strict=True):
                    listener(m, r)
            result = results
            self.last_msgs = len(e.msgs)
        else:
            result = one = self.stream.apply(e)
            for listener in self.apply_listeners:
                listener(e, one)
            self.last_msgs = 1
        self._msgs_applied += self.last_msgs
        if self._msgs_applied >= SNAPSHOT_CHECK_EVERY:
            self._pace_snapshots()
        if self._leading and (not self.expiry.armed or isinstance(e, UpdateConfig)):
            self.expiry.arm()
            if isinstance(e, UpdateConfig):
                self.sourcer.follow_config()
        return result

    async def _store_sourced(self, entries: list[StoreMsg]) -> list[PubAck]:
        """The copies as one log entry, like a batch of publishes; their PubAcks once
        applied here."""
        node = self.group.node
        if node is None or not self._leading:
            raise NotLeader("")
        if self._batch:
            self._propose_publishes()  # publishes taken before keep their place
        entry: LogEntry = StoreBatch(entries)
        applied = await asyncio.wait_for(node.propose_nowait(encode_entry(entry)),
                                         PROPOSE_TIMEOUT_S)
        result = applied.result
        if not isinstance(result, list):
            raise RuntimeError(f"stream {self.name}: unexpected result {result!r}")
        return [r for r in result if isinstance(r, PubAck)]

    def _pace_snapshots(self) -> None:
        """A snapshot holds the whole stream, so take one only every max(8192, messages)
        messages: its cost is then spread evenly over the messages it replaces. The log
        counts entries, which hold a batch of messages each: the messages per entry of
        the last stretch convert one into the other."""
        per_entry = self._msgs_applied / max(self._entries_applied, 1)
        self._msgs_applied = self._entries_applied = 0
        node = self.group.node
        if node is not None:
            msgs = max(MIN_SNAPSHOT_ENTRIES, self.stream.store.state().msgs)
            node.driver.snapshot_entries = max(int(msgs / per_entry), 64)
            # The entries kept after a snapshot for followers slightly behind: as many
            # messages as before batching, not as many batches.
            node.driver.keep_entries = max(int(KEEP_MSGS / per_entry), 16)

    def snapshot(self) -> SnapshotBytes:
        chunks = list(self.stream.store.snapshot())
        stream = self.stream
        dedupe, last_msg_id, ttl = stream.beside_store()
        # The index the driver labels this snapshot with (its applied index: entries after
        # our last NORMAL one are membership changes): a file replica restores it exactly.
        node = self.group.node
        index = node.driver.applied if node is not None else self.applied_index
        snap = _Snapshot(stream.config, stream.created_ns, chunks, dedupe, last_msg_id, ttl,
                         index)
        return msgspec.msgpack.encode(snap)

    def restore(self, data: bytes) -> None:
        snap = msgspec.msgpack.decode(data, type=_Snapshot)
        self.stream.store.restore(snap.chunks)
        self.stream.reload(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl)

    # --- leadership --------------------------------------------------------------------------

    def _on_role(self, ss: SoftState) -> None:
        if self.closed:
            return
        if ss.role is Role.LEADER and not self._leading:
            log.info("JetStream cluster new stream leader for '%s > %s' (term %d)",
                     self.sa.account, self.name, ss.term)
            self._leading = True
            # Only the leader republishes, what it applies from now on (nats-server's rule).
            self.stream.republisher = self._republish
            self._subscribe()
            self.expiry.arm()
            self.reconcile()
            self.recheck_retention()  # what a previous leader may not have retired
            self.sourcer.follow_config()
            self._advise_elected()
        elif ss.role is not Role.LEADER and self._leading:
            self._lose_leadership()
        self.host.stream_leader_changed(self)

    def _advise_elected(self) -> None:
        host, replicas = self.host, self.group.peer_infos(with_leader=True)
        now, name, me = time.time_ns(), self.name, host.server_name
        host.advise_leader(
            self.sa.account,
            lambda account: stream_leader_elected(
                account, name, me, replicas, now, host.domain
            ),
        )

    def _advise_quorum_lost(self) -> None:
        if self.closed:
            return
        host, replicas = self.host, self.group.peer_infos(with_leader=True)
        now, name = time.time_ns(), self.name
        log.warning("JetStream cluster stream '%s > %s' has NO quorum, stalled",
                    self.sa.account, name)
        host.advise_leader(
            self.sa.account,
            lambda account: stream_quorum_lost(account, name, replicas, now, host.domain),
        )

    def _republish(self, subject: str, hdr: bytes, data: bytes) -> None:
        self.client.publish(subject, data, None, hdr)

    def _lose_leadership(self) -> None:
        self._leading = False
        self.stream.republisher = None
        self.sourcer.stop()
        self.stream.source_info = None
        self._batch = []  # not proposed: their publishers hear nothing and retry
        self._batch_bytes = 0
        self._own.clear()
        for sub in list(self.client.subs.values()):
            self.client.unsubscribe(sub)
        self.expiry.cancel()

    def _subscribe(self) -> None:
        for sub in list(self.client.subs.values()):
            self.client.unsubscribe(sub)
        for subject in self.stream.config.subjects:
            self.client.subscribe(subject, self._on_publish, run_handler=self._on_publish_run)

    def assignment_changed(self, sa: StreamAssignment) -> None:
        subjects_changed = sa.config.subjects != self.sa.config.subjects
        self.sa = sa
        if self._leading:
            if subjects_changed:
                self._subscribe()
            self.reconcile()

    # --- proposing ---------------------------------------------------------------------------

    def propose(self, entry: StreamEntry) -> asyncio.Future[Applied]:
        """Propose as leader; the future resolves once applied here (NotLeader otherwise).
        Publishes batched so far go first: entries keep the order they were asked in."""
        node = self.group.node
        if node is None:
            raise NotLeader("")
        if self._batch:
            self._propose_publishes()
        return node.propose_nowait(encode_entry(entry))

    async def propose_and_wait(self, entry: StreamEntry) -> Result:
        fut = self.propose(entry)
        applied = await asyncio.wait_for(fut, PROPOSE_TIMEOUT_S)
        result = applied.result
        if not isinstance(result, PubAck | OpResult):
            raise RuntimeError(f"stream {self.name}: unexpected result {result!r}")
        return result

    def _on_publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not self._leading:
            return
        batch = self._batch
        if not batch:
            asyncio.get_running_loop().call_soon(self._end_of_turn)
        batch.append(StoreMsg(subject, reply or "", hdr, data, time.time_ns()))
        self._batch_bytes += len(data) + (len(hdr) if hdr else 0)
        if len(batch) >= MAX_BATCH_MSGS or self._batch_bytes >= MAX_BATCH_BYTES:
            self._propose_publishes()

    def _on_publish_run(self, pubs: PubBatch, first: int, stop: int) -> int:
        """``_on_publish`` for each publish of the runs ``first`` to ``stop`` of one read
        (a client's, or a route's from a client elsewhere), in one call."""
        lines, starts, bodies = pubs.lines, pubs.starts, pubs.bodies
        if not self._leading:
            return starts[stop] - starts[first]
        clock = time.time_ns
        batch = self._batch
        for r in range(first, stop):
            subject, reply, _total, hdr_len, _tail = lines[r]
            reply = reply or ""
            for i in range(starts[r], starts[r + 1]):
                if not batch:
                    asyncio.get_running_loop().call_soon(self._end_of_turn)
                body = bodies[i]
                if hdr_len < 0:
                    batch.append(StoreMsg(subject, reply, None, body, clock()))
                else:
                    batch.append(StoreMsg(subject, reply, body[:hdr_len],
                                          body[hdr_len:], clock()))
                self._batch_bytes += len(body)
                if len(batch) >= MAX_BATCH_MSGS or self._batch_bytes >= MAX_BATCH_BYTES:
                    self._propose_publishes()
                    batch = self._batch
        return starts[stop] - starts[first]

    def _end_of_turn(self) -> None:
        if self._batch:
            self._propose_publishes()

    def _propose_publishes(self) -> None:
        """One entry for the publishes batched so far. A callback rather than a future:
        the PubAcks leave as the entry is applied (the publishers keep their own
        deadlines)."""
        msgs, self._batch, self._batch_bytes = self._batch, [], 0
        node = self.group.node
        if not self._leading or node is None:
            return
        entry: LogEntry = msgs[0] if len(msgs) == 1 else StoreBatch(msgs)
        data = encode_entry(entry)
        key = id(data)
        done = functools.partial(self._acks, key, self.stream.config.no_ack)
        try:
            node.propose_with(data, done)
        except RaftError:
            return  # no leader to take it: the publishers hear nothing and retry
        self._own[key] = (data, entry)

    def _acks(self, key: int, no_ack: bool, outcome: Outcome) -> None:
        """A batch's outcome: one PubAck per publish that asked for one, once applied."""
        self._own.pop(key, None)
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, NotLeader | ProposalDropped | NodeStopped):
                log.warning("stream %s: proposal failed: %s", self.name, outcome)
            return
        if no_ack:
            return
        result = outcome.result
        if isinstance(result, list):
            self.client.publish_answers([(a.reply, a.body()) for a in result if a.reply])
        elif isinstance(result, PubAck) and result.reply:
            self.client.publish(result.reply, result.body())

    # --- retention ---------------------------------------------------------------------------

    def retire(self, seqs: Sequence[int]) -> None:
        """Leader: consumers no longer need ``seqs``; once per loop turn, those no consumer
        needs (interest, workqueue) go in one Retire entry."""
        if not self._leading or self.stream.config.retention == "limits":
            return
        if not self._to_retire:
            asyncio.get_running_loop().call_soon(self._flush_retire)
        self._to_retire.update(seqs)

    def _flush_retire(self) -> None:
        seqs, self._to_retire = sorted(self._to_retire), set()
        if not self._leading or self.closed:
            return
        gone = self.stream.unneeded(seqs)
        if gone:
            try:
                self.propose(Retire(gone))
            except RaftError:
                return

    def recheck_retention(self) -> None:
        """Leader: look at every stored message (a consumer went away, or leadership
        moved here and the old leader may have missed some)."""
        if not self._leading or self.stream.config.retention == "limits":
            return
        store = self.stream.store
        seqs = []
        seq = store.bounds()[0]
        while seq:
            msg = store.load_next(seq)
            if msg is None:
                break
            seqs.append(msg.seq)
            seq = msg.seq + 1
        self.retire(seqs)

    # --- expiry ------------------------------------------------------------------------------

    def _expire(self, now: int) -> None:
        if self._leading and not self.closed:
            with contextlib.suppress(RaftError):
                self.propose(Expire(now))

    # --- bringing the group in line with the assignment --------------------------------------

    def reconcile(self) -> None:
        if self._reconcile_task is None or self._reconcile_task.done():
            self._reconcile_task = asyncio.ensure_future(self._reconcile())

    async def _reconcile(self) -> None:
        try:
            for _ in range(20):  # bounded: each round makes one change or finds none
                if self.closed or not self._leading:
                    return
                if not await self._reconcile_step():
                    return
        except Exception:
            log.exception("stream %s: reconciling with its assignment failed", self.name)

    async def _reconcile_step(self) -> bool:
        node = self.group.node
        if node is None:
            return False
        sa = self.sa
        if sa.config != self.stream.config:
            try:
                await self.propose_and_wait(UpdateConfig(sa.config))
            except (RaftError, TimeoutError) as exc:
                log.debug("stream %s: config update: %s", self.name, exc)
                return False
            return True
        return await self.group.reconcile_members(sa.peers, lambda: self.sa.peers)

    def recheck(self) -> None:
        """Leader, now and then: reconcile again if the group still differs from its
        assignment (a run ends early on a failed step, or after its 20 rounds, and would
        otherwise leave the group as it is until leadership or the assignment changes)."""
        if not self._leading or self.closed:
            return
        if self._reconcile_task is not None and not self._reconcile_task.done():
            return
        if self.sa.config != self.stream.config or self.group.differs_from(self.sa.peers):
            self.reconcile()

    def step_down(self, preferred: str | None = None) -> str:
        node = self.group.node
        if node is None or not node.is_leader:
            raise NotLeader(self.leader)
        return node.transfer_leadership(preferred)

    def cluster_info(self) -> dict[str, Any]:
        return self.group.cluster_info()

