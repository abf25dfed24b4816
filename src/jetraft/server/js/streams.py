"""One stream on a running server: its subscriptions, the publish path with group commit,
expiry timers, and the bridge to its consumers.

Publish path: a message on one of the stream's subjects becomes a ``StoreMsg`` entry stamped
with the proposer's clock and goes through ``propose`` (today: applied at once, so the next
publish already sees its effect on expected-sequence checks and dedupe). What happens to the
PubAck depends on durability:

* durable (file storage, ``sync_interval`` 0, persist_mode default): the PubAck is held until
  an fsync that covers the message has returned. The fsync runs in a worker thread (see
  ``js_store_glue.prepare_sync``), one at a time per stream; everything applied while one
  runs is covered by the next (group commit), so one fsync serves every message of a loop
  turn and async publishers keep their throughput.
* lazy (memory storage, ``sync_interval`` > 0, persist_mode async): the PubAck goes out at
  once; file data is written to the OS every loop turn and fsync'd on the interval timer.

Every answer to a publisher (errors and duplicates too) goes through the same queue, so a
publisher never learns about message n+1 before message n is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast

from jetraft.jetstream import errors as E
from jetraft.jetstream.consumer_config import StreamFacts
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
)
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.consumers import ConsumerEnv, StreamConsumers
from jetraft.server.js.store_glue import CONSUMERS_DIR, prepare_sync

log = logging.getLogger("jetraft.js.streams")

# Worker threads for fsyncs: syncs of one stream never overlap; a few threads let streams on
# the same disk sync side by side without an unbounded pile of them.
_SYNC_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="js-sync")


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

    def __init__(self, acct: StreamHost, stream: Stream, stream_dir: Path | None) -> None:
        self.acct = acct
        self._stream = stream
        self.stream_dir = stream_dir
        self.loop = asyncio.get_running_loop()
        self.client = InternalClient(acct.router, acct.account, f"stream {stream.name}")
        # Consumers observe the stream themselves; their set doubles as the stream's
        # retention registry, and their "no longer needed" comes back through our propose.
        self.consumers = StreamConsumers(ConsumerEnv(acct.router, acct.account, acct.rng), self)
        stream.consumers = cast("dict[str, RetentionConsumer]", self.consumers.consumers)
        stream.add_observer(self)
        self.closed = False
        self.durable = self._must_sync()
        self._acks: list[PubAck] = []  # waiting for the next sync
        self._inflight: list[PubAck] = []  # covered by the sync running now
        self._commit_scheduled = False
        self._syncing = False
        self._dirty = False
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._expire_timer: asyncio.TimerHandle | None = None
        self._expire_due_ns = 0

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

    def _must_sync(self) -> bool:
        """Must a PubAck wait for fsync? (cached in ``durable``; see ``config_changed``)"""
        cfg = self.stream.config
        return (
            cfg.storage == "file"
            and self.stream_dir is not None
            and self.acct.sync_interval_ns == 0
            and cfg.persist_mode != "async"
        )

    def config_changed(self) -> None:
        """After an UpdateConfig: re-subscribe and refresh what depends on the config."""
        self.durable = self._must_sync()
        self.subscribe()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.subscribe()
        bad = self.consumers.restore()
        for name in bad:
            log.error("stream %s: consumer %s left on disk, not loaded", self.name, name)
        self._arm_expiry()
        self._arm_lazy_timer()

    def subscribe(self) -> None:
        for sub in list(self.client.subs.values()):
            self.client.unsubscribe(sub)
        for subject in self.stream.config.subjects:
            self.client.subscribe(subject, self._on_publish)

    def close(self) -> None:
        """Server shutdown: stop taking messages, flush what was acked, keep data."""
        if self.closed:
            return
        self.closed = True
        self.client.close()
        self.consumers.close()
        for timer in (self._lazy_timer, self._expire_timer):
            if timer is not None:
                timer.cancel()
        self.stream.remove_observer(self)
        try:
            self.store.flush()
            self.store.sync()
        except Exception as exc:
            log.error("stream %s: final sync failed: %s", self.name, exc)
        else:
            # Everything is on disk now, including what the running sync was covering.
            self._send_acks(self._inflight + self._acks)
        self._acks = self._inflight = []
        self.store.close()

    def delete(self) -> None:
        """STREAM.DELETE: stop, tell consumers, and drop the store's data."""
        self.closed = True
        self.client.close()
        self.consumers.stream_deleted()
        for timer in (self._lazy_timer, self._expire_timer):
            if timer is not None:
                timer.cancel()
        self.stream.remove_observer(self)
        self._acks = []
        self.store.delete()

    # --- proposing ---------------------------------------------------------------------------

    def propose(self, entry: Entry) -> Result:
        """The seam where RAFT slots in; on one server the entry is applied right away."""
        result = self.stream.apply(entry)
        self._schedule_commit()
        return result

    def _on_publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if self.closed:
            return
        try:
            result = self.propose(StoreMsg(subject, reply or "", hdr, data, now_ns()))
        except StoreError as exc:
            # The store refused to write (full disk, failed device): the publisher hears it.
            log.error("stream %s: store failed: %s", self.name, exc)
            result = PubAck(reply or "", self.name, 0, False, E.store_failed(str(exc)))
        except Exception as exc:
            # A bug must not leave the publisher waiting for a PubAck that never comes.
            log.exception("stream %s: storing a message on %s failed", self.name, subject)
            result = PubAck(reply or "", self.name, 0, False, E.store_failed(str(exc)))
        if not reply or self.stream.config.no_ack or not isinstance(result, PubAck):
            return
        if self.durable:
            self._acks.append(result)
            # propose() schedules the commit, unless it raised: the answer must still go.
            self._schedule_commit()
        else:
            self.client.publish(reply, result.body())

    # --- group commit ------------------------------------------------------------------------

    def _schedule_commit(self) -> None:
        self._dirty = True
        if not self._commit_scheduled and not self.closed:
            self._commit_scheduled = True
            self.loop.call_soon(self._commit)

    def _commit(self) -> None:
        """Once per loop turn after changes: write out, and (durable) start a sync that
        covers everything applied so far, unless one is running (it re-checks when done)."""
        self._commit_scheduled = False
        if self.closed:
            return
        self._arm_expiry()
        store = self.store
        if not self.durable:
            try:
                store.flush()
            except Exception as exc:
                log.error("stream %s: write failed: %s", self.name, exc)
            self._dirty = False
            return
        if self._syncing:
            return
        acks, self._acks = self._acks, []
        if not acks and not self._dirty:
            return
        self._dirty = False
        try:
            work = prepare_sync(store)
        except Exception as exc:
            log.error("stream %s: sync failed: %s", self.name, exc)
            self._fail_acks(acks, exc)
            return
        if work is None:  # nothing left to make durable
            self._send_acks(acks)
            return
        self._syncing = True
        self._inflight = acks
        fut = self.loop.run_in_executor(_SYNC_POOL, work)
        fut.add_done_callback(lambda f: self._synced(f, acks))

    def _synced(self, fut: asyncio.Future[None], acks: list[PubAck]) -> None:
        self._syncing = False
        self._inflight = []
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is not None:
            log.error("stream %s: fsync failed: %s", self.name, exc)
            self._fail_acks(acks, exc)
        elif not self.closed:
            self._send_acks(acks)
        if (self._acks or self._dirty) and not self.closed:
            self._commit_scheduled = True
            self.loop.call_soon(self._commit)

    def _send_acks(self, acks: Sequence[PubAck]) -> None:
        publish = self.client.publish
        for ack in acks:
            publish(ack.reply, ack.body())

    def _fail_acks(self, acks: Sequence[PubAck], exc: BaseException) -> None:
        """The data may not be durable: tell publishers it failed (they retry; dedupe by
        Nats-Msg-Id makes the retry safe)."""
        for ack in acks:
            failed = PubAck(ack.reply, ack.stream, 0, False, E.store_failed(str(exc)), ack.domain)
            self.client.publish(ack.reply, failed.body())

    def _arm_lazy_timer(self) -> None:
        interval = self.acct.sync_interval_ns
        if self.closed or self.stream_dir is None or self.stream.config.storage != "file":
            return
        if interval <= 0 and self.stream.config.persist_mode != "async":
            return
        delay_s = interval / 1e9 if interval > 0 else 1.0
        self._lazy_timer = self.loop.call_later(delay_s, self._lazy_sync)

    def _lazy_sync(self) -> None:
        """Lazy mode: nothing waits for this sync, so it runs on the loop (one fsync per
        interval), keeping the store single-threaded."""
        self._lazy_timer = None
        if self.closed:
            return
        try:
            if self.store.needs_sync:
                self.store.sync()
        except Exception as exc:
            log.error("stream %s: fsync failed: %s", self.name, exc)
        self._arm_lazy_timer()

    # --- expiry ------------------------------------------------------------------------------

    def _arm_expiry(self) -> None:
        due = self.stream.next_expiry_ns()
        if due is None or self.closed:
            return
        if self._expire_timer is not None:
            if self._expire_due_ns <= due:
                return
            self._expire_timer.cancel()
        self._expire_due_ns = due
        delay_s = max(due - now_ns(), 0) / 1e9 + 0.001
        self._expire_timer = self.loop.call_later(delay_s, self._on_expire)

    def _on_expire(self) -> None:
        self._expire_timer = None
        if self.closed:
            return
        self.propose(Expire(now_ns()))
        self._arm_expiry()

    # --- StreamObserver: removals outside the publish path still need a commit -------------

    def on_stored(self, seq: int, subject: str) -> None:
        pass

    def on_removed(self, seqs: Sequence[int]) -> None:
        self._schedule_commit()

    def on_purged(self, first_seq: int, filter_subject: str) -> None:
        self._schedule_commit()
