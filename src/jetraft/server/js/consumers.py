"""Consumers on a running server: subscriptions, delivery, timers and persistence.

The deterministic part lives in ``jetraft.jetstream.consumer``; this module is the asyncio
glue around it. One ``StreamConsumers`` per stream owns that stream's consumers; one
``ConsumerRuntime`` per consumer subscribes to its ack (and flow control) subjects, delivers
to pull requests or to its push deliver subject, runs its timers, and writes its state.

Every change of replicated consumer state goes through ``ConsumerRuntime.propose``, which
today applies the entry locally; the RAFT issue replaces that with replication.

How the stream glue wires this in: ``StreamConsumers(ConsumerEnv(router, account, rng), port)``
with ``port`` a ``StreamPort`` (``js_streams.StreamRuntime``); the consumer set registers
itself as an observer of ``port.stream`` and ``consumers`` is meant to be the stream's
retention registry (``stream.consumers = cs.consumers``). ``restore()`` once the stream is
recovered, ``close()`` on shutdown, ``stream_deleted()`` on STREAM.DELETE. The account context
implements ``consumer_api.ApiContext`` (``now_ns()``, ``stream_consumers(stream)``).

Durability: each consumer has a ``CommitQueue`` (see ``commit``) whose commits write its whole
state atomically (temp file, fsync, rename, directory fsync; checksummed) in a worker thread.
Answers that confirm a change wait for the commit that covers it: create, update and pause
answers, and the answer to an ack sent as a request (double ack, nats-py ``ack_sync``).
Changes nobody waits for (deliveries, plain acks) are committed at most ``STATE_FLUSH_S``
later (and on shutdown); a crash can lose that window of them, which only causes redelivery
(at-least-once), never a lost message and never a confirmed ack. CONSUMER.DELETE is answered
once the state file's removal is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import ConsumerCore, Dropped, MsgSource
from jetraft.jetstream.consumer_config import StreamFacts
from jetraft.jetstream.consumer_errors import cerr
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.disk import OS_DISK, StoreDisk, remove_dir
from jetraft.server.core.internal import InternalClient
from jetraft.server.js.commit import note_job
from jetraft.server.js.consumer_env import ConsumerEnv
from jetraft.server.js.consumer_runtime import STATE_FILE, ConsumerRuntime

if TYPE_CHECKING:
    from jetraft.jetstream.store.types import StreamStore
    from jetraft.jetstream.stream import Stream

log = logging.getLogger("jetraft.js.consumers")


class StreamPort(Protocol):
    """What consumers need from their stream (``js_streams.StreamRuntime`` provides it)."""

    @property
    def name(self) -> str: ...

    @property
    def stream(self) -> Stream:
        """The stream state machine (observers, retention re-checks)."""
        ...

    @property
    def store(self) -> StreamStore: ...

    def facts(self) -> StreamFacts: ...

    def on_consumer_ack(self, seq: int) -> None:
        """A consumer no longer needs ``seq`` (interest / workqueue retention)."""
        ...

    def consumer_dir(self) -> Path | None:
        """Where this stream's consumers persist their state (None: not persisted)."""
        ...


class StreamConsumers:
    """The consumers of one stream.

    ``consumers`` doubles as the stream's retention registry (its values have ``name``,
    ``filters`` and ``needs_ack``). It observes the stream state machine itself (the
    ``on_*`` methods) to keep pending state and counts in step with removals and purges."""

    def __init__(
        self,
        env: ConsumerEnv,
        stream: StreamPort,
        disk: StoreDisk = OS_DISK,
        cipher: RecordCipher | None = None,
        created: asyncio.Future[None] | None = None,
    ) -> None:
        self.env = env
        self._created_gate = created  # the stream's create, while its files are syncing
        self.stream = stream
        self.disk = disk
        self.cipher = cipher  # the stream's: consumer state is sealed with it
        self.consumers: dict[str, ConsumerRuntime] = {}
        # Removals of deleted consumers' files still running: a new consumer of the same name
        # writes only once they are done.
        self._removing: dict[str, asyncio.Future[None]] = {}
        # Consumers whose state could not be loaded: name -> why. The name stays reserved
        # and the files stay as they are (an operator repairs or removes them).
        self.offline: dict[str, str] = {}
        # Told of stored messages only while there are consumers to tell (``_count``).
        stream.stream.add_observer(self, stores=False)

    @property
    def name(self) -> str:
        return self.stream.name

    @property
    def retention(self) -> str:
        return self.stream.stream.config.retention

    @property
    def persistent(self) -> bool:
        return self.stream.consumer_dir() is not None

    def facts(self) -> StreamFacts:
        return self.stream.facts()

    def source(self) -> MsgSource:
        return self.stream.store

    def consumer_ack(self, seq: int) -> None:
        self.stream.on_consumer_ack(seq)

    def new_client(self, name: str) -> InternalClient:
        return InternalClient(self.env.router, self.env.account, name)

    def state_path(self, name: str) -> Path | None:
        base = self.stream.consumer_dir()
        if base is None:
            return None
        return base / name / STATE_FILE

    def disk_gate(self, name: str) -> asyncio.Future[None] | None:
        gates = (self._removing.get(name), self._created_gate)
        pending = [f for f in gates if f is not None and not f.done()]
        if len(pending) < 2:
            return pending[0] if pending else None
        both: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def one_done(_f: asyncio.Future[None]) -> None:
            if all(f.done() for f in pending) and not both.done():
                both.set_result(None)

        for f in pending:
            f.add_done_callback(one_done)
        return both

    # --- stream observer ------------------------------------------------------------------

    def on_stored(self, seq: int, subject: str) -> None:
        for rt in self.consumers.values():
            rt.core.on_stored(seq, subject)
            rt.kick()

    def on_removed(self, seqs: Sequence[int]) -> None:
        for rt in list(self.consumers.values()):
            for entry in rt.core.on_removed(seqs):
                rt.propose(entry, notify=False)

    def on_purged(self, first_seq: int, filter_subject: str) -> None:
        src = self.source()
        for rt in list(self.consumers.values()):
            for entry in rt.core.purged(first_seq, src):
                rt.propose(entry, notify=False)
            rt.core.purge_floor(first_seq)
            rt.changed()
            rt.kick()

    # --- registry -------------------------------------------------------------------------

    def get(self, name: str) -> ConsumerRuntime | None:
        return self.consumers.get(name)

    def add(self, core: ConsumerCore, fresh: bool) -> ConsumerRuntime:
        """Register and start a consumer. ``fresh``: a create, answered once its state is
        durable; if that fails the consumer is removed again before the error answer."""
        if core.name in self.offline:
            raise cerr(10195, err=self.offline[core.name])
        if fresh and self.persistent and not core.cfg.mem_storage and "\x00" in core.name:
            raise cerr(10012, err=f"consumer name {core.name!r} cannot be stored")
        rt = ConsumerRuntime(self, core)
        if fresh:
            rt.propose(core.select_start(self.source()))
        self.consumers[core.name] = rt
        self._count()
        if fresh and rt.commits is not None:
            rt.write_now()
            rt.commits.after_durable(lambda exc: self._created(rt, exc))
        rt.start()
        return rt

    def _count(self) -> None:
        """The stream tells us of each stored message only while we have consumers: without
        any, the call per published message would do nothing."""
        self.stream.stream.observe_stores(self, bool(self.consumers))

    def _created(self, rt: ConsumerRuntime, exc: BaseException | None) -> None:
        if exc is not None and self.consumers.get(rt.name) is rt:
            log.error("consumer %s > %s not created: %s", self.name, rt.name, exc)
            self.delete(rt.name)

    def delete(self, name: str) -> bool:
        """Stop the consumer and remove its state durably; the request being handled (if
        any) is answered once the removal is durable, or with its error."""
        rt = self.consumers.pop(name, None)
        if rt is None:
            return False
        self._count()
        rt.stop(deleted=True)
        fut = note_job(self._remove_files(rt), f"removing consumer {self.name} > {name}")
        self._removing[name] = fut
        fut.add_done_callback(lambda f: self._removed(name, f))
        if self.retention == "interest":
            # Messages only this consumer still held may go now.
            self.stream.stream.recheck_interest()
        return True

    async def _remove_files(self, rt: ConsumerRuntime) -> None:
        if rt.queue is not None:
            await rt.queue.abandon()  # no state write may land after the removal
        path = self.state_path(rt.name)
        if path is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, remove_dir, self.disk, str(path.parent))

    def _removed(self, name: str, fut: asyncio.Future[None]) -> None:
        if self._removing.get(name) is fut:
            del self._removing[name]

    def restore(self) -> list[str]:
        """Load persisted consumers; returns the names that could not be loaded (each also
        reported in the log and kept in ``offline``)."""
        base = self.stream.consumer_dir()
        disk = self.disk
        if base is None or not disk.exists(str(base)):
            return []
        src = self.source()
        for name in disk.list(str(base)):
            path = base / name / STATE_FILE
            if not disk.exists(str(path)):
                continue  # an empty directory left by an interrupted delete
            try:
                blob = disk.read(str(path))
                stored = consumer_state.decode(blob, self.cipher, (self.stream.name, name))
            except (consumer_state.CorruptState, OSError) as exc:
                log.error(
                    "consumer %s > %s is offline, its state was not loaded: %s",
                    self.stream.name,
                    name,
                    exc,
                )
                self.offline[name] = str(exc)
                continue
            core = consumer_state.restore(stored)
            # Messages that left the stream while we were down are no longer pending.
            for seq in [s for s in core.state.pending if src.load(s) is None]:
                core.apply(Dropped(seq))
            self.add(core, fresh=False)
        return sorted(self.offline)

    async def close(self) -> None:
        """Server shutdown: stop, commit what is left (consumers stay on disk)."""
        runtimes = list(self.consumers.values())
        self.consumers.clear()
        self.stream.stream.remove_observer(self)
        for rt in runtimes:
            rt.stop(deleted=False)
        for rt in runtimes:
            if rt.queue is not None:
                await rt.queue.drain()
        for fut in list(self._removing.values()):
            await asyncio.wait([fut])

    def stream_deleted(self) -> None:
        """The stream is gone: consumers end (waiting pulls hear 409 Consumer Deleted)."""
        self._deleted = list(self.consumers.values())
        self.consumers.clear()
        for rt in self._deleted:
            rt.stop(deleted=True)
        self.stream.stream.remove_observer(self)

    async def abandon(self) -> None:
        """After ``stream_deleted``: wait until no consumer writes any more."""
        for rt in self._deleted:
            if rt.queue is not None:
                await rt.queue.abandon()
        for fut in list(self._removing.values()):
            await asyncio.wait([fut])

    _deleted: list[ConsumerRuntime] = []


__all__ = ["ConsumerEnv", "ConsumerRuntime", "StreamConsumers", "StreamPort"]
