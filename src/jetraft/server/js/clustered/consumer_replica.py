"""This server's replica of one clustered consumer: a member of the consumer's RAFT group,
placed on servers of its stream.

Every replica applies the committed entries (starts, deliveries, acks, naks, ...) to the
same consumer state machine (``jetstream.consumer.ConsumerCore``), so a new leader carries
on from the replicated delivered and ack state, never from guesses. The leader runs the
consumer (``js.consumer_runtime.ConsumerRuntime``, the single server's code): it answers
pull requests, delivers, takes acks and redelivers; what it changes is proposed here and
applied when committed. An ack sent as a request is answered once its entry is committed
(a quorum holds it on disk).

Retention (interest, workqueue): sequences a consumer no longer needs go to the stream's
leader, which removes them by a ``Retire`` entry of the stream's group once no consumer
needs them (every consumer of such a stream has a replica on every server of the stream,
so the stream's leader sees all of them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import (
    Acked,
    ConsumerCore,
    Dropped,
    Exhausted,
    MsgSource,
    Start,
    decode_entries,
    encode_entries,
)
from jetraft.jetstream.consumer import Entry as ConsumerEntry
from jetraft.jetstream.meta import ConsumerAssignment
from jetraft.jetstream.store.disk import OS_DISK, StoreDisk
from jetraft.raft.ready import RaftError, Role, SoftState
from jetraft.raft.types import Entry
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.advisories import consumer_leader_elected, consumer_quorum_lost
from jetraft.server.js.clustered.group import GroupHost, RaftGroup
from jetraft.server.js.clustered.stream_replica import StreamReplica
from jetraft.server.js.commit import Callback, join_request
from jetraft.server.js.consumer_env import ConsumerEnv
from jetraft.server.js.consumer_runtime import ConsumerRuntime

log = logging.getLogger("jetraft.js.consumer")

MAX_BATCH = 1024  # entries per proposal (a batch this long is proposed at once)


class ConsumerHost(GroupHost, Protocol):
    @property
    def router(self) -> Router: ...

    @property
    def domain(self) -> str: ...

    def retire(self, account: str, stream: str, seqs: Sequence[int]) -> None:
        """Consumers no longer need ``seqs``: the stream's leader decides their removal."""
        ...

    def delete_consumer(self, account: str, stream: str, name: str) -> None:
        """An inactive consumer asks to be deleted (through the meta leader)."""
        ...

    def stream_replica(self, account: str, name: str) -> StreamReplica | None:
        """This server's replica of the stream now (serving or leaving), if any."""
        ...


class _Snapshot(msgspec.Struct, array_like=True):
    started: bool
    state: bytes  # consumer_state's encoding


class ConsumerReplica:
    def __init__(
        self,
        host: ConsumerHost,
        ca: ConsumerAssignment,
        stream: StreamReplica,
        account: Account,
        *,
        joining: bool,
    ) -> None:
        self.host = host
        self.ca = ca
        self._stream = stream  # the stream replica it observes (see ``stream``)
        self.account = account
        self.core = ConsumerCore(ca.stream, ca.name, ca.config, ca.created_ns)
        self.started = False  # a Start entry was applied
        self._start_term = -1  # the term in which this replica last proposed Start
        self.group = RaftGroup(host, ca.group, self, () if joining else ca.peers,
                               on_role=self._on_role, on_quorum_lost=self._advise_quorum_lost)
        self.runtime: ConsumerRuntime | None = None
        self.env = ConsumerEnv(host.router, account, random.Random(), host.domain)
        self.next_client = InternalClient(host.router, account, f"pull {ca.stream} > {ca.name}")
        self.closed = False
        self._last: asyncio.Future[Any] | None = None  # the newest proposal
        # Entries proposed in this loop turn, proposed together at its end (``_flush``),
        # with the runtime that proposed them and callbacks waiting for their commit.
        self._batch: list[ConsumerEntry] = []
        self._batch_rt: ConsumerRuntime | None = None
        self._waiters: list[Callback] = []
        self.initial_info: dict[str, Any] | None = None
        self._reconcile_task: asyncio.Task[None] | None = None
        stream.stream.add_observer(self)
        stream.stream.add_consumer(self)

    @property
    def stream(self) -> StreamReplica:
        """The stream replica its server has now. The one it was made with may have been
        destroyed (the server left the stream) and another made (it came back): reading
        the old one's store, which nobody updates any more, delivers nothing new for
        good. Until another is made, the last one is kept."""
        self.follow_stream()
        return self._stream

    def follow_stream(self) -> None:
        """Observe the stream replica its server has now, if another one was made."""
        current = self.host.stream_replica(self.ca.account, self.ca.stream)
        if current is not None and current is not self._stream and not self.closed:
            self._observe(current)

    def _observe(self, replica: StreamReplica) -> None:
        self._forget_stream()
        self._stream = replica
        replica.stream.add_observer(self)
        replica.stream.add_consumer(self)
        if self.runtime is not None:
            self.runtime.kick()  # what the new one holds may be deliverable

    def _forget_stream(self) -> None:
        stream = self._stream.stream
        stream.remove_observer(self)
        if stream.consumers.get(self.name) is self:
            del stream.consumers[self.name]

    # --- identity (the stream's retention registry) ------------------------------------------

    @property
    def name(self) -> str:
        return self.ca.name

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.ca.account, self.ca.stream, self.ca.name)

    @property
    def filters(self) -> tuple[str, ...]:
        return self.core.filters

    def needs_ack(self, seq: int, subject: str) -> bool:
        return self.core.needs_ack(seq, subject)

    @property
    def is_leader(self) -> bool:
        """Leading and serving (its runtime started and subscribed)."""
        return self.runtime is not None and self.group.is_leader

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, known: bool = False) -> None:
        await self.group.start(known=known)

    async def stop(self) -> None:
        self._close(deleted=False)
        await self.group.stop()

    async def destroy(self) -> None:
        """Deleted (or this server left the group): stop and remove its log."""
        self._close(deleted=True)
        await self.group.destroy()

    def _close(self, deleted: bool) -> None:
        if self.closed:
            return
        self.closed = True
        if self.runtime is not None:
            self.runtime.stop(deleted=deleted)
            self.runtime = None
        self.next_client.close()
        self._forget_stream()

    def assignment_changed(self, ca: ConsumerAssignment) -> None:
        self.ca = ca
        if ca.config != self.core.cfg:
            if self.runtime is not None:
                self.runtime.update_config(ca.config)
            else:
                self.core.update_config(ca.config)
        if self.runtime is not None:
            self.reconcile()

    def reconcile(self) -> None:
        """Leader: bring the group's membership in line with the assignment."""
        if self._reconcile_task is None or self._reconcile_task.done():
            self._reconcile_task = asyncio.ensure_future(self._reconcile())

    async def _reconcile(self) -> None:
        for _ in range(20):  # bounded: each round makes one change or finds none
            if self.closed or self.runtime is None:
                return
            if not await self.group.reconcile_members(self.ca.peers, lambda: self.ca.peers):
                return

    def recheck(self) -> None:
        """Leader, now and then: reconcile again if the group still differs from its
        assignment (see ``StreamReplica.recheck``)."""
        if self.closed or self.runtime is None:
            return
        if self._reconcile_task is not None and not self._reconcile_task.done():
            return
        if self.group.differs_from(self.ca.peers):
            self.reconcile()

    # --- the state machine (raft.node.StateMachine) --------------------------------------------

    def apply(self, entry: Entry) -> object:
        done: list[int] = []
        freed = False
        core = self.core
        # Runs of acks of an explicit-ack consumer (the acks of one client read) are applied
        # together, with the state one by one would leave (``apply_explicit_acks``).
        acks: list[int] | None = [] if core.cfg.ack_policy == "explicit" else None
        for e in decode_entries(entry.data):
            kind = type(e)
            if acks is not None:
                if kind is Acked:
                    acks.append(e.sseq)
                    continue
                if acks:
                    freed = True
                    done += core.apply_explicit_acks(acks)
                    acks.clear()
            if kind is Start:
                if self.started:
                    continue  # only the first start counts (a second leader may race)
                self.started = True
                done += core.apply(e)
                self._started()
                freed = True
                continue
            if kind is Acked or kind is Exhausted or kind is Dropped:
                freed = True
            done += core.apply(e)
        if acks:
            freed = True
            done += core.apply_explicit_acks(acks)
        if self.runtime is not None:
            self.runtime.applied(done, freed)
        return done

    def _started(self) -> None:
        if self.runtime is None and self._leading():
            self._serve(restore=False)  # the cursor is where Start put it
        if self.runtime is not None:
            # What the create request is answered with: the state before the first
            # delivery (clients read num_pending from it, e.g. KV watchers).
            self.initial_info = self.info()

    def snapshot(self) -> bytes:
        blob = consumer_state.encode(consumer_state.snapshot(self.core))
        return msgspec.msgpack.encode(_Snapshot(self.started, blob))

    def restore(self, data: bytes) -> None:
        snap = msgspec.msgpack.decode(data, type=_Snapshot)
        restored = consumer_state.restore(consumer_state.decode(snap.state))
        self.core.state = restored.state
        self.core.restore_cursor()
        self.started = snap.started

    # --- the replicator the leader's runtime proposes through -----------------------------------

    def propose(self, entry: ConsumerEntry) -> bool:
        """Queue ``entry``; the entries of one loop turn go to the group as one (``Batch``)."""
        batch = self._batch
        if not batch:
            # Checked once per batch: leadership lost later in the turn fails the whole
            # batch when it is proposed (``_flush``), and its deliveries go out again.
            node = self.group.node
            if node is None or not node.is_leader:
                return False  # leadership is gone: the next leader carries on from the log
            self._batch_rt = self.runtime
            asyncio.get_running_loop().call_soon(self._flush)
        batch.append(entry)
        if len(batch) >= MAX_BATCH:
            self._flush()
        return True

    def _flush(self) -> None:
        batch, waiters = self._batch, self._waiters
        if not batch:
            return
        self._batch, self._waiters = [], []
        rt, self._batch_rt = self._batch_rt, None
        node = self.group.node
        try:
            if node is None or not node.is_leader:
                raise RaftError("not the consumer leader")
            self._last = fut = node.propose_nowait(encode_entries(batch))
        except RaftError as exc:
            for callback in waiters:
                callback(exc)
            if rt is not None and rt is self.runtime:
                rt.refused(batch)
            return
        fut.add_done_callback(functools.partial(self._settled, rt, batch, waiters))

    def _settled(
        self,
        rt: ConsumerRuntime | None,
        batch: list[ConsumerEntry],
        waiters: list[Callback],
        fut: asyncio.Future[Any],
    ) -> None:
        exc = _outcome(fut)
        for callback in waiters:
            callback(exc)
        if exc is not None and rt is not None and rt is self.runtime:
            # Dropped (a transfer in progress, leadership lost): the runtime that handed
            # its messages out hands them out again if it keeps leading.
            rt.refused(batch)

    def touch(self) -> None:
        join_request(self)

    def after_durable(self, callback: Callback) -> None:
        if self._batch:
            self._waiters.append(callback)  # the batch not proposed yet covers it
            return
        last = self._last
        if last is None or last.done():
            callback(_outcome(last))
            return
        last.add_done_callback(lambda f: callback(_outcome(f)))

    # --- leadership ----------------------------------------------------------------------------

    def _on_role(self, ss: SoftState) -> None:
        if self.closed:
            return
        if ss.role is Role.LEADER and self.runtime is None:
            log.info("JetStream cluster new consumer leader for '%s > %s > %s'", *self.key)
            self._lead(ss.term)
            self._advise_elected()
        elif ss.role is not Role.LEADER and self.runtime is not None:
            self.runtime.stop(deleted=False, leadership=True)
            self.runtime = None
            for sub in list(self.next_client.subs.values()):
                self.next_client.unsubscribe(sub)

    def _advise_elected(self) -> None:
        host, replicas = self.host, self.group.peer_infos(with_leader=True)
        (account, stream, name), now, me = self.key, time.time_ns(), host.server_name
        host.advise_leader(
            account,
            lambda acct: consumer_leader_elected(
                acct, stream, name, me, replicas, now, host.domain
            ),
        )

    def _advise_quorum_lost(self) -> None:
        if self.closed:
            return
        host, replicas = self.host, self.group.peer_infos(with_leader=True)
        (account, stream, name), now = self.key, time.time_ns()
        log.warning("JetStream cluster consumer '%s > %s > %s' has NO quorum, stalled",
                    *self.key)
        host.advise_leader(
            account,
            lambda acct: consumer_quorum_lost(acct, stream, name, replicas, now, host.domain),
        )

    def _leading(self) -> bool:
        node = self.group.node
        return not self.closed and node is not None and node.is_leader

    def _lead(self, term: int) -> None:
        if self.started:
            self._serve(restore=True)
            return
        # A new consumer serves only once its Start entry is applied: that entry sets the
        # cursor, so a delivery made before it would be repeated from the start position.
        # Proposed once per term until one commits (only the first applied counts).
        if self._start_term != term:
            self._start_term = term
            self.propose(self.core.select_start(self.stream.stream.store))

    def _serve(self, *, restore: bool) -> None:
        core = self.core
        if restore:
            core.restore_cursor()
        rt = ConsumerRuntime(_Owner(self), core, self)
        self.runtime = rt
        base = f"$JS.API.CONSUMER.MSG.NEXT.{self.ca.stream}.{self.ca.name}"
        self.next_client.subscribe(base, self._on_next)
        if self.host.domain:
            prefix = f"$JS.{self.host.domain}.API.CONSUMER.MSG.NEXT."
            self.next_client.subscribe(f"{prefix}{self.ca.stream}.{self.ca.name}", self._on_next)
        rt.start()
        self.reconcile()

    def _on_next(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        rt = self.runtime
        if rt is not None and reply:
            rt.pull_request(reply, data)

    def step_down(self, preferred: str | None = None) -> str:
        node = self.group.node
        if node is None or not node.is_leader:
            raise RaftError("not the consumer leader")
        return node.transfer_leadership(preferred)

    def info(self) -> dict[str, Any]:
        rt = self.runtime
        if rt is None:
            raise RaftError("not the consumer leader")
        out = rt.info()
        out["cluster"] = self.group.cluster_info()
        return out

    # --- the stream's observer (the leader keeps pending state in step) --------------------------

    def on_stored(self, seq: int, subject: str) -> None:
        rt = self.runtime
        if rt is not None:
            self.core.on_stored(seq, subject)
            rt.kick()

    def on_removed(self, seqs: Sequence[int]) -> None:
        rt = self.runtime
        if rt is not None:
            for entry in self.core.on_removed(seqs):
                rt.propose(entry, notify=False)

    def on_purged(self, first_seq: int, filter_subject: str) -> None:
        rt = self.runtime
        if rt is not None:
            for entry in self.core.purged(first_seq, self.stream.stream.store):
                rt.propose(entry, notify=False)
            rt.kick()


def _outcome(fut: asyncio.Future[Any] | None) -> BaseException | None:
    if fut is None:
        return None
    if fut.cancelled():
        return RaftError("proposal cancelled")
    return fut.exception()


class _Owner:
    """What the leader's ConsumerRuntime needs from its stream (``ConsumerOwner``)."""

    def __init__(self, replica: ConsumerReplica) -> None:
        self.replica = replica
        self.env = replica.env

    @property
    def retention(self) -> str:
        return self.replica.stream.stream.config.retention

    @property
    def persistent(self) -> bool:
        return False  # the group's log is the durable record

    def source(self) -> MsgSource:
        return self.replica.stream.stream.store

    def consumer_ack(self, seq: int) -> None:
        ca = self.replica.ca
        self.replica.host.retire(ca.account, ca.stream, (seq,))

    def new_client(self, name: str) -> InternalClient:
        return InternalClient(self.replica.host.router, self.replica.account, name)

    def state_path(self, name: str) -> None:
        return None

    @property
    def disk(self) -> StoreDisk:
        return OS_DISK

    @property
    def cipher(self) -> None:
        return None  # no state file: the group's log is the record

    def disk_gate(self, name: str) -> None:
        return None

    def delete(self, name: str) -> bool:
        ca = self.replica.ca
        self.replica.host.delete_consumer(ca.account, ca.stream, name)
        return True

