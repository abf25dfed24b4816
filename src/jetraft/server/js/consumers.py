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

Durability choice: the consumer's config is written (and fsync'd) before a create/update is
answered. Its delivery and ack state is written lazily, like nats-server does: marked dirty on
change and flushed in a worker thread at most every ``STATE_FLUSH_S`` (and on shutdown), each
write atomic (temp file, fsync, rename, directory fsync) and checksummed. A crash can lose up
to that window of acks, which only causes redelivery (at-least-once), never a lost message.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import ConsumerCore, Dropped, MsgSource
from jetraft.jetstream.consumer_config import StreamFacts
from jetraft.server.core.internal import InternalClient
from jetraft.server.js.consumer_runtime import STATE_FILE, ConsumerEnv, ConsumerRuntime

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

    def __init__(self, env: ConsumerEnv, stream: StreamPort) -> None:
        self.env = env
        self.stream = stream
        self.consumers: dict[str, ConsumerRuntime] = {}
        stream.stream.add_observer(self)

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
            rt.dirty = True
            rt.kick()

    # --- registry -------------------------------------------------------------------------

    def get(self, name: str) -> ConsumerRuntime | None:
        return self.consumers.get(name)

    def add(self, core: ConsumerCore, fresh: bool) -> ConsumerRuntime:
        """Register and start a consumer. ``fresh``: choose its start position now."""
        rt = ConsumerRuntime(self, core)
        if fresh:
            rt.propose(core.select_start(self.source()))
        self.consumers[core.name] = rt
        if fresh and self.persistent and not core.cfg.mem_storage:
            rt.write_now()
        rt.start()
        return rt

    def delete(self, name: str) -> bool:
        rt = self.consumers.pop(name, None)
        if rt is None:
            return False
        rt.stop(deleted=True)
        path = self.state_path(name)
        if path is not None:
            rt.wait_writes()
            _remove_tree(path.parent)
        if self.retention == "interest":
            # Messages only this consumer still held may go now.
            self.stream.stream.recheck_interest()
        return True

    def restore(self) -> list[str]:
        """Load persisted consumers; returns names that could not be loaded (reported)."""
        bad: list[str] = []
        base = self.stream.consumer_dir()
        if base is None or not base.is_dir():
            return bad
        src = self.source()
        for entry in sorted(base.iterdir()):
            path = entry / STATE_FILE
            if not path.is_file():
                continue
            try:
                stored = consumer_state.decode(path.read_bytes())
            except consumer_state.CorruptState as exc:
                log.error(
                    "consumer %s of stream %s not loaded: %s", entry.name, self.stream.name, exc
                )
                bad.append(entry.name)
                continue
            core = consumer_state.restore(stored)
            # Messages that left the stream while we were down are no longer pending.
            for seq in [s for s in core.state.pending if src.load(s) is None]:
                core.apply(Dropped(seq))
            self.add(core, fresh=False)
        return bad

    def close(self) -> None:
        """Server shutdown: persist and stop (consumers stay on disk)."""
        for rt in list(self.consumers.values()):
            rt.wait_writes()
            if rt.dirty and self.persistent and not rt.cfg.mem_storage:
                try:
                    rt.write_now()
                except OSError as exc:
                    log.error("writing consumer state of %s: %s", rt.name, exc)
            rt.stop(deleted=False)
        self.consumers.clear()
        self.stream.stream.remove_observer(self)

    def stream_deleted(self) -> None:
        """The stream is gone: consumers end (waiting pulls hear 409 Consumer Deleted)."""
        for name in list(self.consumers):
            rt = self.consumers.pop(name)
            rt.stop(deleted=True)
        self.stream.stream.remove_observer(self)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


__all__ = ["ConsumerEnv", "ConsumerRuntime", "StreamConsumers", "StreamPort"]
