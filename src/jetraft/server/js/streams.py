"""One stream on a running server: its subscriptions, the publish path with group commit,
expiry timers, and the bridge to its consumers.

Publish path: a message on one of the stream's subjects becomes a ``StoreMsg`` entry stamped
with the proposer's clock and goes through ``propose`` (today: applied at once, so the next
publish already sees its effect on expected-sequence checks and dedupe). Every change goes
through ``propose``, which touches the stream's ``CommitQueue`` (see ``commit``); the PubAck,
and any API answer that confirms a change, waits for the queue:

* durable (file storage, ``sync_interval`` 0, persist_mode default): until an fsync that
  covers the change returned. The fsync runs in a worker thread (``store_glue.prepare_sync``),
  one at a time per stream; everything applied meanwhile is covered by the next one (group
  commit), so one fsync serves every message of a loop turn and async publishers keep their
  throughput.
* lazy (``sync_interval`` > 0 or persist_mode async): until the data was handed to the OS
  (a process crash loses nothing acknowledged; a power loss may lose the interval); fsync
  rounds run on the interval timer, in the worker thread too.
* memory storage: at once.

Every answer to a publisher (errors and duplicates too) goes through the same queue, so a
publisher never learns about message n+1 before message n is durable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast

from jetraft.jetstream import errors as E
from jetraft.jetstream.consumer_config import StreamFacts
from jetraft.jetstream.lone_id_publish import store_lone_id, takes_lone_ids
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.types import StoreError, StreamStore
from jetraft.jetstream.stream import (
    ConsumerAck,
    Entry,
    Expire,
    PubAck,
    Result,
    RetentionConsumer,
    StoreMsg,
    Stream,
    lone_msg_id_in,
)
from jetraft.protocol.client import PubBatch
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.commit import CommitQueue, Prepared, note_job
from jetraft.server.js.consumers import ConsumerEnv, StreamConsumers
from jetraft.server.js.expiry import ExpiryTimer
from jetraft.server.js.sourcing import Sourcer
from jetraft.server.js.store_glue import CONSUMERS_DIR, prepare_sync, remove_stream_dir

log = logging.getLogger("jetraft.js.streams")

def now_ns() -> int:
    return time.time_ns()


class StreamHost(Protocol):
    """The account a stream runs in (``manager.JsAccount`` provides it)."""

    @property
    def router(self) -> Router: ...

    @property
    def account(self) -> Account: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def sync_interval_ns(self) -> int: ...


class StreamRuntime:
    """The asyncio side of one ``Stream``."""

    def __init__(
        self,
        acct: StreamHost,
        stream: Stream,
        stream_dir: Path | None,
        cipher: RecordCipher | None = None,
        created: asyncio.Future[None] | None = None,
    ) -> None:
        self.acct = acct
        # A new stream's files are still being synced until this is done: no commit of the
        # stream or of its consumers may be reported durable before (see ``manager``).
        self.created = created
        self._stream = stream
        self.stream_dir = stream_dir
        self.loop = asyncio.get_running_loop()
        self.client = InternalClient(acct.router, acct.account, f"stream {stream.name}")
        self.client.stream = stream.name
        # Consumers observe the stream themselves; their set doubles as the stream's
        # retention registry, and their "no longer needed" comes back through our propose.
        self.cipher = cipher  # encryption at rest: the stream's record cipher
        env = ConsumerEnv(acct.router, acct.account, acct.rng, stream.domain)
        self.consumers = StreamConsumers(env, self, cipher=cipher, created=created)
        stream.consumers = cast("dict[str, RetentionConsumer]", self.consumers.consumers)
        stream.add_observer(self, stores=False)  # (on_stored has nothing to do)
        self.closed = False
        self.commits = CommitQueue(f"stream {stream.name}", self._prepare_commit, gate=created)
        # (reply, PubAck body) waiting for the next commit (one batch)
        self._acks: list[tuple[str, bytes]] = []
        self._persisted = False
        self.durable = False
        self._update_mode()
        self._expiry_scheduled = False
        self._lazy_timer: asyncio.TimerHandle | None = None
        self.expiry = ExpiryTimer(lambda: self._stream, self._expire)
        self.sourcer = Sourcer(
            InternalClient(acct.router, acct.account, f"sourcing {stream.name}"),
            lambda: self._stream,
            self._store_sourced,
            stream.name,
        )
        self._republished: list[tuple[str, bytes, bytes]] = []

    # --- identity ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._stream.name

    @property
    def stream(self) -> Stream:
        return self._stream

    @property
    def store(self) -> StreamStore:
        return self.stream.store

    def facts(self) -> StreamFacts:
        cfg = self.stream.config
        return StreamFacts(
            name=cfg.name,
            subjects=cfg.subjects,
            retention=cfg.retention,
            replicas=cfg.num_replicas,
            max_msgs_per_subject=cfg.max_msgs_per_subject,
            max_consumers=cfg.max_consumers,
            limits_max_ack_pending=cfg.consumer_limits.max_ack_pending,
            limits_inactive_threshold_ns=cfg.consumer_limits.inactive_threshold,
        )

    def consumer_dir(self) -> Path | None:
        if self.stream_dir is None or self.stream.config.storage == "memory":
            return None
        return self.stream_dir / CONSUMERS_DIR

    def on_consumer_ack(self, seq: int) -> None:
        if self.stream.config.retention != "limits" and not self.closed:
            self.propose(ConsumerAck(seq))

    def _update_mode(self) -> None:
        """Durable (fsync before answering), lazy (write before answering, fsync on the
        timer) or memory (answer at once); see the module doc."""
        cfg = self.stream.config
        self._persisted = cfg.storage == "file" and self.stream_dir is not None
        self.durable = (
            self._persisted
            and self.acct.sync_interval_ns == 0
            and cfg.persist_mode != "async"
        )
        lazy = self._persisted and not self.durable
        self.commits.set_write(self._write_out if lazy else None)

    def config_changed(self) -> None:
        """After an UpdateConfig: re-subscribe and refresh what depends on the config."""
        self._update_mode()
        self.subscribe()
        if self._lazy_timer is None:
            self._arm_lazy_timer()
        self.sourcer.follow_config()

    async def _store_sourced(self, entries: list[StoreMsg]) -> list[PubAck]:
        acks = []
        for entry in entries:
            result = self.propose(entry)
            if not isinstance(result, PubAck):
                raise RuntimeError(f"stream {self.name}: unexpected result {result!r}")
            acks.append(result)
        return acks

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.stream.republisher = self._republish
        self.subscribe()
        self.consumers.restore()
        self._arm_expiry()
        self._arm_lazy_timer()
        self.sourcer.follow_config()

    def subscribe(self) -> None:
        for sub in list(self.client.subs.values()):
            self.client.unsubscribe(sub)
        for subject in self.stream.config.subjects:
            self.client.subscribe(subject, self._on_publish, run_handler=self._on_publish_run)

    def _republish(self, subject: str, hdr: bytes, data: bytes) -> None:
        """Copies leave after the current turn, in order: a copy that lands in another
        stream is then stored from the loop, never from inside this stream's apply (two
        streams republishing into each other would otherwise recurse)."""
        queue = self._republished
        if not queue:
            self.loop.call_soon(self._send_republished)
        queue.append((subject, hdr, data))

    def _send_republished(self) -> None:
        queue, self._republished = self._republished, []
        publish = self.client.publish
        for subject, hdr, data in queue:
            publish(subject, data, None, hdr)

    def _stop_intake(self) -> None:
        self.closed = True
        self.stream.republisher = None
        self.sourcer.stop()
        self.sourcer.client.close()
        self.client.close()
        self.expiry.cancel()
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        self.stream.remove_observer(self)

    async def close(self) -> None:
        """Server shutdown: stop taking messages, let the running fsync finish, commit what
        is left and answer everyone waiting, keep the data."""
        if self.closed:
            return
        self._stop_intake()
        await self.consumers.close()
        await self.commits.drain()
        try:
            self.store.close()
        except Exception as exc:
            log.error("stream %s: closing the store failed: %s", self.name, exc)

    def delete(self) -> asyncio.Future[None]:
        """STREAM.DELETE: stop, end the consumers, and remove the stream's files durably.
        The returned future (also noted for the request being answered) completes once the
        removal is durable and fails if it could not be done."""
        self._stop_intake()
        self.consumers.stream_deleted()
        return note_job(self._remove(), f"deleting stream {self.name}")

    async def _remove(self) -> None:
        if self.created is not None and not self.created.done():
            await asyncio.wait([self.created])  # its fsyncs must not find the files gone
        await self.consumers.abandon()
        await self.commits.abandon()
        self.store.abandon()
        if self.stream_dir is not None:
            await self.loop.run_in_executor(None, remove_stream_dir, self.stream_dir)

    # --- proposing ---------------------------------------------------------------------------

    def propose(self, entry: Entry) -> Result:
        """The seam where RAFT slots in; on one server the entry is applied right away and
        the commit queue makes it durable (answers that confirm it wait for the queue)."""
        try:
            return self.stream.apply(entry)
        finally:
            self._changed()

    def _changed(self) -> None:
        if self._persisted:
            self.commits.touch()
        if not self._expiry_scheduled and not self.closed:
            self._expiry_scheduled = True
            self.loop.call_soon(self._after_turn)

    def _after_turn(self) -> None:
        self._expiry_scheduled = False
        if not self.closed:
            self._arm_expiry()

    def _on_publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if self.closed:
            return
        try:
            self._answer_one(reply, self._apply_one(subject, reply, hdr, data))
        finally:
            self._changed()

    def _on_publish_run(self, batch: PubBatch, first: int, stop: int) -> int:
        """The runs ``first`` to ``stop`` of a client's publishes (one socket read): each
        message stored and answered as by ``_on_publish``, the commit queue touched once.
        The hot path of a durable stream: what ``_answer_one`` decides per message is
        decided once here, and a message whose only header is its Nats-Msg-Id (what the
        Spark sink and nats.py's ``js.publish`` send) skips the entry and the PubAck object,
        its body stored as it arrived (``lone_id_publish``)."""
        if self.closed:
            return 0
        lines, starts, bodies = batch.lines, batch.starts, batch.bodies
        stream = self.stream
        batched = self._persisted and not stream.config.no_ack
        by_id = batched and takes_lone_ids(stream)
        head = self._ack_head()
        # The lone-id path calls by name, not through local aliases: the compiled build
        # calls directly then (an alias is a generic call with boxed arguments). ``apply``
        # stays looked up as an attribute, once per call: fault-injection tests replace it.
        apply = stream.apply
        try:
            for r in range(first, stop):
                subject, reply, _total, hdr_len, _tail = lines[r]
                for i in range(starts[r], starts[r + 1]):
                    body = bodies[i]
                    if by_id and hdr_len > 0:
                        msg_id = lone_msg_id_in(body, hdr_len)
                        if msg_id is not None:
                            try:
                                seq = store_lone_id(
                                    stream, subject, body, hdr_len, msg_id, now_ns()
                                )
                            except Exception as exc:
                                self._answer_one(reply, self._refused(subject, reply, exc))
                                continue
                            if seq != 0:  # else a refusal: apply() below answers it
                                if reply:
                                    self._queue_ack(
                                        reply,
                                        b"%s%d}" % (head, seq)
                                        if seq > 0 and head is not None
                                        else PubAck(
                                            reply, self.name, abs(seq), seq < 0, None,
                                            stream.domain,
                                        ).body(),
                                    )
                                continue
                    try:
                        if hdr_len < 0:
                            result = apply(StoreMsg(subject, reply or "", None, body, now_ns()))
                        else:
                            hdr, data = body[:hdr_len], body[hdr_len:]
                            result = apply(StoreMsg(subject, reply or "", hdr, data, now_ns()))
                    except Exception as exc:
                        result = self._refused(subject, reply, exc)
                    if not (reply and batched and isinstance(result, PubAck)):
                        self._answer_one(reply, result)
                        continue
                    self._queue_ack(reply, result.body())
        finally:
            self._changed()
        return starts[stop] - starts[first]

    def _ack_head(self) -> bytes | None:
        """The bytes of a plain PubAck before its sequence number (None with a domain, whose
        PubAcks say so)."""
        if self.stream.domain:
            return None
        body = PubAck("", self.name, 0).body()
        return body[: -len(b"0}")]

    def _queue_ack(self, reply: str, body: bytes) -> None:
        """A PubAck waits for the next commit. Answers wait in batches: one commit-queue
        callback per batch, the batch closed when the queue takes it (``_prepare_commit``),
        so a batch never holds an answer whose message the commit does not cover."""
        acks = self._acks
        acks.append((reply, body))
        if len(acks) == 1:
            self.commits.after_durable(functools.partial(self._answer, acks))

    def _apply_one(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> Result:
        """Apply one publish (``propose`` without its ``_changed``, which the caller does)."""
        try:
            return self.stream.apply(StoreMsg(subject, reply or "", hdr, data, now_ns()))
        except Exception as exc:
            return self._refused(subject, reply, exc)

    def _refused(self, subject: str, reply: str | None, exc: Exception) -> PubAck:
        """The answer to a publish whose apply raised."""
        if isinstance(exc, StoreError):
            # The store refused to write (full disk, failed device): the publisher hears it.
            log.error("stream %s: store failed: %s", self.name, exc)
        else:
            # A bug must not leave the publisher waiting for a PubAck that never comes.
            log.exception("stream %s: storing a message on %s failed", self.name, subject)
        return PubAck(reply or "", self.name, 0, False, E.store_failed(str(exc)))

    def _answer_one(self, reply: str | None, result: Result) -> None:
        """Send or queue the answer to one publish."""
        if not reply or self.stream.config.no_ack or not isinstance(result, PubAck):
            return
        if not self._persisted:
            self.client.publish(reply, result.body())
            return
        self._queue_ack(reply, result.body())

    def _answer(self, acks: list[tuple[str, bytes]], exc: BaseException | None) -> None:
        if exc is None:
            self.client.publish_answers(acks)
            return
        publish = self.client.publish
        # The data may not be durable: tell the publishers it failed (they retry; dedupe by
        # Nats-Msg-Id makes the retry safe).
        err = E.store_failed(str(exc))
        for reply, _ in acks:
            failed = PubAck(reply, self.name, 0, False, err, self.stream.domain)
            publish(reply, failed.body())

    # --- commits -----------------------------------------------------------------------------

    def _prepare_commit(self) -> Prepared:
        """On the loop: write everything out and return the fsync for a worker thread."""
        self._acks = []  # the batch registered so far is covered by this commit
        store = self.store
        work = prepare_sync(store)
        return Prepared(work, complete=not store.deferred_work)

    def _write_out(self) -> None:
        """Lazy mode: hand what was applied to the OS (survives a process crash)."""
        self._acks = []
        self.store.flush()

    def _arm_lazy_timer(self) -> None:
        interval = self.acct.sync_interval_ns
        if self.closed or not self._persisted or self.durable:
            return
        delay_s = interval / 1e9 if interval > 0 else 1.0
        self._lazy_timer = self.loop.call_later(delay_s, self._lazy_sync)

    def _lazy_sync(self) -> None:
        """Lazy mode: nothing waits for this fsync; it runs in a worker thread like every
        other commit."""
        self._lazy_timer = None
        if self.closed:
            return
        if self.store.needs_sync or self.store.deferred_work:
            self.commits.sync_soon()
        self._arm_lazy_timer()

    # --- expiry ------------------------------------------------------------------------------

    def _arm_expiry(self) -> None:
        if not self.closed:
            self.expiry.arm()

    def _expire(self, now: int) -> None:
        if not self.closed:
            self.propose(Expire(now))

    # --- StreamObserver: removals outside the publish path still need a commit -------------

    def on_stored(self, seq: int, subject: str) -> None:
        pass

    def on_removed(self, seqs: Sequence[int]) -> None:
        self._changed()

    def on_purged(self, first_seq: int, filter_subject: str) -> None:
        self._changed()
