"""The replica of a clustered stream with ``storage: file``: its messages live in a FileStore.

A memory replica (``StreamReplica``) keeps the whole stream in memory and in RAFT snapshots.
This one keeps it in a checkpointed FileStore (``jetstream.store.file``) in the group's
directory (``<raft dir>/stream``), so memory holds the index only, and it is a RAFT
``DurableStateMachine``: the log is compacted under a marker, never copied into snapshots.

Exactness after a crash. Apply decisions depend on the store's content (discard new, max per
subject, expected last seq, purge keep, dedupe), so the store must restart as exactly the
state after some entry J, and replay J+1.. on top:

* after applying a run of entries the replica appends a CKPT record (``store.checkpoint``)
  holding J and everything else the stream needs at J (the config in force, the dedupe
  window, the last Nats-Msg-Id, the TTL schedule): what lies before it in the store is the
  state after entry J. Opening cuts the records after the last CKPT (a partly applied run);
* a checkpoint is written every ``CKPT_MSGS`` messages (or ``CKPT_ENTRIES`` entries, or
  when the state beside the store is larger, so its encoding costs O(1) per message), and
  the store is synced in a worker thread right after it (``begin_sync``); once that sync
  returns, J is ``durable_index()``, and the RAFT driver may compact its log up to there.
  There is no fsync per publish here: the RAFT log's fsync makes a PubAck durable;
* the store's irreversible space work (erase, unlink, rewrite) acts only on removals that a
  durable checkpoint covers (see the FileStore module doc);
* ``restore`` (a snapshot from the leader) replaces the store and writes the snapshot's
  checkpoint in one crash-safe step (``FileStore.restore``), durable on return;
* ``apply`` skips entries at or below J (replayed after a restart);
* a store that is lost or damaged while the log says it was compacted past what the store
  holds: see ``RaftGroup.start`` (the log is dropped and the replica rejoins as a damaged
  one, repaired from its peers, never voting on what it forgot).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.store.types import StoreCorruption
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.spool import FileSnapshotData, FileSpool
from jetraft.raft.types import Entry, SnapshotBytes, read_at, whole
from jetraft.server.js.clustered.stream_replica import (
    KEEP_MSGS,
    ReplicaHost,
    StreamReplica,
    _Snapshot,
)

log = logging.getLogger("jetraft.js.stream")

STORE_DIR = "stream"
CKPT_MSGS = 8192  # messages between two checkpoints (each followed by one store fsync)
CKPT_ENTRIES = 4096  # entries between two checkpoints (entries without messages)
_SYNCS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="stream-sync")


class _Checkpoint(msgspec.Struct, array_like=True):
    """What the stream needs beside its store at the checkpoint's index."""

    config: StreamConfig
    dedupe: list[tuple[str, int, int]]
    last_msg_id: str
    ttl: list[tuple[int, int]]


def checkpoint_state(stream: Stream) -> bytes:
    """The checkpoint's state: what the stream keeps beside its store, and its config."""
    dedupe, last_msg_id, ttl = stream.beside_store()
    return msgspec.msgpack.encode(_Checkpoint(stream.config, dedupe, last_msg_id, ttl))


def stream_at_checkpoint(
    store: FileStore, sa: StreamAssignment, domain: str
) -> tuple[Stream, int]:
    """The stream as of the store's last checkpoint, and that checkpoint's index (0 and a
    new stream when there is none)."""
    found = store.checkpointed
    if found is None:
        return StreamReplica._with_store(sa, store, domain), 0
    index, blob = found
    ck = msgspec.msgpack.decode(blob, type=_Checkpoint)
    stream = Stream(ck.config, store, sa.created_ns, domain)
    stream.reload(ck.config, ck.dedupe, ck.last_msg_id, ck.ttl)
    return stream, index


def store_dir(host: ReplicaHost, sa: StreamAssignment) -> Path:
    return host.raft_dir(sa.group) / STORE_DIR


def open_replica_store(directory: Path, name: str) -> FileStore:
    """The replica's checkpointed store. A damaged one is moved aside (never deleted) and
    an empty one takes its place: the replica then holds nothing, and the group start
    sees that its log was compacted past it (see RaftGroup.start)."""
    try:
        return FileStore(str(directory), checkpoints=True)
    except StoreCorruption as exc:
        aside = directory.with_name(f"{directory.name}.corrupt-{time.time_ns()}")
        log.error("stream %s: replica store damaged (%s); moved to %s, repairing from peers",
                  name, exc, aside)
        os.rename(directory, aside)
        return FileStore(str(directory), checkpoints=True)


# A file replica's snapshot, as sent to followers: SPOOL_MAGIC, the length (u32) of a
# msgpack _Snapshot without chunks (config, dedupe window, TTLs, index), then the store's
# records (FileStore.snapshot) up to the end. 0xc1 never starts msgpack: a snapshot of the
# whole-in-memory form (StreamReplica.snapshot, sent by a leader of an earlier version)
# is still read.
SPOOL_MAGIC = b"\xc1JRFS1"
_HEAD_LEN = struct.Struct("<I")
READ_CHUNK = 1 << 20  # bytes of records read from the spool at a time during a restore


def spool_snapshot(directory: Path, head: _Snapshot, records: Iterable[bytes]) -> FileSnapshotData:
    """Write a snapshot to a spool file in ``directory``, chunk by chunk."""
    blob = msgspec.msgpack.encode(head)
    spool = FileSpool(str(directory))
    try:
        spool.append(SPOOL_MAGIC + _HEAD_LEN.pack(len(blob)))
        spool.append(blob)
        for chunk in records:
            spool.append(chunk)
        return spool.data()
    except BaseException:
        spool.close()
        raise


def read_snapshot(data: SnapshotBytes) -> tuple[_Snapshot, Iterable[bytes]]:
    """A snapshot's state beside the store, and its records as an iterable of pieces;
    StoreCorruption if its head is damaged (damaged records raise as they are read)."""
    fixed = len(SPOOL_MAGIC) + _HEAD_LEN.size
    start = read_at(data, 0, fixed)
    try:
        if not start.startswith(SPOOL_MAGIC[:1]):
            snap = msgspec.msgpack.decode(whole(data), type=_Snapshot)
            return snap, snap.chunks
        if len(start) < fixed or not start.startswith(SPOOL_MAGIC):
            raise StoreCorruption("<snapshot>", 0, "snapshot header truncated")
        (n,) = _HEAD_LEN.unpack_from(start, len(SPOOL_MAGIC))
        head = read_at(data, fixed, n)
        if len(head) < n:
            raise StoreCorruption("<snapshot>", fixed, "snapshot header truncated")
        return msgspec.msgpack.decode(head, type=_Snapshot), _pieces(data, fixed + n)
    except msgspec.DecodeError as exc:
        raise StoreCorruption("<snapshot>", 0, f"snapshot header: {exc}") from None


def _pieces(data: SnapshotBytes, offset: int) -> Iterator[bytes]:
    size = len(data)
    while offset < size:
        piece = read_at(data, offset, READ_CHUNK)
        if not piece:
            return
        yield piece
        offset += len(piece)


async def open_store_off_loop(directory: Path, name: str) -> FileStore:
    """``open_replica_store`` in a worker thread: recovery reads every block of the
    store, which for a large stream would hold the server's loop for seconds. If the
    caller is cancelled meanwhile (the server stops), the store is released once open."""
    fut = asyncio.get_running_loop().run_in_executor(None, open_replica_store, directory, name)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_abandon_opened)
        raise


def _abandon_opened(fut: asyncio.Future[FileStore]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().abandon()


class FileStreamReplica(StreamReplica):
    """Make one with ``await FileStreamReplica.open(...)``: its store is opened (recovered)
    in a worker thread first, before the replica (and its RAFT group, which votes and
    applies) exists. The constructor opens it on the calling thread when not given."""

    def __init__(self, host: ReplicaHost, sa: StreamAssignment, *, joining: bool,
                 store: FileStore | None = None) -> None:
        self._opened = store
        super().__init__(host, sa, joining=joining)

    @classmethod
    async def open(cls, host: ReplicaHost, sa: StreamAssignment, *,
                   joining: bool) -> FileStreamReplica:
        store = await open_store_off_loop(store_dir(host, sa), sa.name)
        return cls(host, sa, joining=joining, store=store)

    def _make_stream(self, host: ReplicaHost, sa: StreamAssignment) -> Stream:
        store, self._opened = self._opened, None
        if store is None:
            store = open_replica_store(store_dir(host, sa), sa.name)
        self._sync: concurrent.futures.Future[None] | None = None
        self._sync_index = 0
        self._since_msgs = self._since_entries = 0
        self._store_closed = False
        stream, self.applied_index = stream_at_checkpoint(store, sa, host.domain)
        self._durable = self.applied_index
        return stream

    # --- the state machine ---------------------------------------------------------------

    def durable_index(self) -> int:
        return self._durable

    def apply(self, entry: Entry) -> object:
        if entry.index <= self.applied_index:
            return None  # held already: replayed after a restart
        result = super().apply(entry)
        self.applied_index = entry.index
        self._since_msgs += self.last_msgs
        self._since_entries += 1
        if self._since_msgs >= self._ckpt_pace() or self._since_entries >= CKPT_ENTRIES:
            self._checkpoint()
        return result

    def _ckpt_pace(self) -> int:
        # The checkpoint's encoding grows with the state beside the store: space them so
        # that its cost per message stays bounded.
        stream = self.stream
        return max(CKPT_MSGS, stream.beside_store_len())

    def _pace_snapshots(self) -> None:
        """Compact the log as soon as a checkpoint is durable (a marker, no copy of the
        stream: checkpoints pace it), keeping as many entries as a memory replica keeps."""
        per_entry = self._msgs_applied / max(self._entries_applied, 1)
        self._msgs_applied = self._entries_applied = 0
        node = self.group.node
        if node is not None:
            node.driver.snapshot_entries = 1
            node.driver.keep_entries = max(int(KEEP_MSGS / per_entry), 16)

    def _checkpoint(self) -> None:
        """Checkpoint and start a sync, unless one is running (then at the next apply)."""
        if self._sync is not None:
            if not self._sync.done():
                return
            self._sync_finished(self._sync)
        store = self.stream.store
        assert isinstance(store, FileStore)
        store.checkpoint(self.applied_index, checkpoint_state(self.stream))
        self._since_msgs = self._since_entries = 0
        finish = store.begin_sync()
        if finish is None:
            self._durable = self.applied_index
            return
        self._sync_index = self.applied_index
        fut = self._sync = _SYNCS.submit(finish)
        loop = asyncio.get_running_loop()
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(self._sync_finished, f))

    def _sync_finished(self, fut: concurrent.futures.Future[None]) -> None:
        if fut is not self._sync:
            return
        self._sync = None
        exc = fut.exception()
        if exc is None:
            self._durable = max(self._durable, self._sync_index)
            return
        log.error("stream %s: replica store sync failed: %s", self.name, exc)
        node = self.group.node
        if node is not None:
            node.driver.fail(exc)  # acknowledges nothing more; a restart recovers

    def _wait_sync(self) -> None:
        fut = self._sync
        if fut is not None:
            concurrent.futures.wait([fut])
            self._sync_finished(fut)

    def snapshot(self) -> SnapshotBytes:
        """The stream's state for a follower, written to a spool file in the group's
        directory (see ``spool_snapshot``), not built in memory."""
        stream = self.stream
        dedupe, last_msg_id, ttl = stream.beside_store()
        node = self.group.node
        index = node.driver.applied if node is not None else self.applied_index
        head = _Snapshot(stream.config, stream.created_ns, [], dedupe, last_msg_id, ttl, index)
        return spool_snapshot(self.group.dir, head, stream.store.snapshot())

    def restore(self, data: SnapshotBytes) -> None:
        """Durable on return: the snapshot's records and its checkpoint replace the store's
        content in one crash-safe step. The records are read from ``data`` (the group's
        spool file) a piece at a time."""
        snap, chunks = read_snapshot(data)
        self._wait_sync()
        store = self.stream.store
        assert isinstance(store, FileStore)
        state = msgspec.msgpack.encode(
            _Checkpoint(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl))
        store.restore(chunks, (snap.index, state))
        self.stream.reload(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl)
        self.applied_index = self._durable = snap.index
        self._since_msgs = self._since_entries = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def stop(self) -> None:
        """Kept on stop: a last checkpoint, synced, so a restart replays nothing."""
        await super().stop()
        await self._settle_store(keep=True)

    async def destroy(self) -> None:
        self._close()
        await self.group.stop()
        await self._settle_store(keep=False)
        await self.group.destroy()  # removes the group's directory, the store's with it

    async def _settle_store(self, *, keep: bool) -> None:
        fut = self._sync
        if fut is not None:
            await asyncio.wrap_future(fut)
            self._sync_finished(fut)
        store = self.stream.store
        assert isinstance(store, FileStore)
        if self._store_closed:
            return
        self._store_closed = True
        if not keep:
            store.abandon()
            return
        if self.applied_index > self._durable:
            store.checkpoint(self.applied_index, checkpoint_state(self.stream))
        await asyncio.to_thread(store.close)
