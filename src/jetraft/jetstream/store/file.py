"""The file stream store: append-only, checksummed block files plus the in-memory index.

Layout of a stream directory::

    LOCK                    flock'd while a FileStore has the directory open (real disks)
    msgs/blk.00000001.dat   block files, appended to in order, rotated at ``block_size``

Every file operation goes through the storage seam (``disk.StoreDisk``): the real file system
in production, the crash-modelling ``MemDisk`` in the power-loss tests.

Messages stay on disk; memory holds only the index (about 36 bytes per live message: subject
id, timestamp, size, location, record length, plus the per-subject sequence list; nothing for
deleted or skipped sequences, see ``_index``) and reads are positioned reads with a read-ahead
when access is sequential.

Durability: records go to a write buffer; ``flush()`` writes it to the OS, ``sync()`` writes
and syncs it: one fsync covers everything stored, removed or purged since the previous sync
(group commit). ``begin_sync()`` splits that in two so the fsync can run in a worker thread.
Removals are recorded as DEL records and bulk removals from the front as one FLOOR record,
both batched at flush time. A block is fsync'd before the next one is created. Two kinds of
work wait for the sync *after* the one that made their record durable (``deferred_work``):
secure erase (``erase``) overwrites a message's record in place with an ERASED record only
once its DEL is durable, so a crash mid-overwrite is recognisable (see ``_recovery``); and a
block below a new FLOOR is unlinked only once that FLOOR is durable.

Space: a sealed block is unlinked once every sequence it refers to is below the first
sequence; at every block rotation the sealed block with the least live data (under half) is
rewritten with only its live messages (``write_atomic``), which bounds the space of KV-style
streams whose old revisions die all over the place.

Encryption at rest: with a ``RecordCipher`` every record body is sealed (see ``_records``).

Code: ``FileStore`` (here: opening, writing, syncing, checkpoints, lifecycle) stands on two
base classes, the read path (``_block_reads.BlockReads``) and space reclaim
(``_reclaim.FileSpace``: erase overwrites, unlinking, rewrites).

Opening never deletes stream data (see ``_recovery``): a torn tail of the last block is
truncated and reported in ``truncated``; any other bad record raises ``StoreCorruption``.

Checkpointed stores (``checkpoints=True``; a clustered stream's replica): the owner applies
work in units (RAFT entries) and appends a CKPT record, ``checkpoint(index, state)``, after
each unit it wants to be able to restart from; opening cuts every record after the last
CKPT record (the effects of a unit not finished) and reports it in ``checkpointed``, so the
store is exactly the state after some whole unit. Space work that cannot be undone (secure
erase, unlinking blocks, block rewrites) then only acts on removals that a *durable*
checkpoint covers: the durable floor, head and erase lists advance only with syncs that
began right at a checkpoint, and block rewrites run in ``begin_sync`` instead of at block
rotation (whose fsync makes records durable that a checkpoint may not cover yet).
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._blocks import OFF_BITS, Block, ReadFiles, block_name
from jetraft.jetstream.store._index import SeqIndex
from jetraft.jetstream.store._reclaim import FileSpace
from jetraft.jetstream.store._recovery import MSGS_DIR, cut_to_checkpoint, recover
from jetraft.jetstream.store._restore import restore_into, settle_restore
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.disk import OS_DISK, AppendFile, OsDisk, StoreDisk, remove_dir
from jetraft.jetstream.store.types import (
    Limits,
    PlainMsg,
    StoreCorruption,
    StoreError,
)

DEFAULT_BLOCK_SIZE = 8 << 20
# Final: the compiled build reads these as C statics (or constants); a plain module global
# is a dict lookup at every use, several per stored message.
_pack_head: Final = rec.HEADER.pack
_pack_crc: Final = rec.CRC.pack
_OVERHEAD: Final = 36  # rec.OVERHEAD, as a literal: a constant in the compiled code
_crc32: Final = zlib.crc32
_MAGIC: Final = rec.MAGIC
_KIND_MSG: Final = 1  # rec.KIND_MSG
_NO_HDR: Final = 0xFFFFFFFF  # rec.NO_HDR
FLUSH_BYTES: Final = 1 << 20  # write the buffer to the OS once it holds this much
READ_AHEAD = 128 << 10


class FileStore(FileSpace):
    """A stream store in ``directory`` (created if missing). Raises ``StoreCorruption`` when
    the directory holds damaged records, ``StoreError`` when another store has it open."""

    def _size_of(self, subject: str, headers: bytes | None, data: bytes) -> int:
        # file_msg_size, written out: types.py is not compiled, and this runs per message.
        if headers:
            return 34 + len(subject) + len(headers) + len(data)
        return 30 + len(subject) + len(data)

    def __init__(
        self,
        directory: str | os.PathLike[str],
        limits: Limits | None = None,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        read_ahead: int = READ_AHEAD,
        disk: StoreDisk | None = None,
        cipher: RecordCipher | None = None,
        first_block: int = 1,
        lock: bool = True,
        checkpoints: bool = False,
        sync_new: bool = True,
    ) -> None:
        super().__init__(limits or Limits(), file_mode=True)
        # False: a new store's first block is named durably by its first sync, like every
        # later block (nothing in it is promised before): a stream create then needs one
        # fsync less. True: a new store is durable as opened (``needs_sync`` is False).
        self._sync_new = sync_new
        self._root = os.fspath(directory)
        self._msgs_dir = os.path.join(self._root, MSGS_DIR)
        self._block_size = block_size
        self._read_ahead = read_ahead
        self._disk = disk if disk is not None else OS_DISK
        self._cipher = cipher
        self._first_block = first_block
        self._failed = None
        self.truncated: list[tuple[str, int, int]] = []
        self._checkpoints = checkpoints
        # Checkpointed stores: the last checkpoint found on open (None: none, the store
        # opened empty), and where the newest one written ends (block, offset).
        self.checkpointed: tuple[int, bytes] | None = None
        self._ckpt_end = (0, 0)
        self._disk.makedirs(self._root)
        self._lock_fd = -1
        if lock and isinstance(self._disk, OsDisk):
            # Two processes appending to one stream would interleave records: refuse.
            self._lock_fd = os.open(os.path.join(self._root, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                raise StoreError(f"stream store {self._root} is in use by another store") from None
        try:
            self._open()
        except BaseException:
            self._unlock()
            raise

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @property
    def directory(self) -> str:
        return self._root

    # --- opening ---------------------------------------------------------------------------

    def _open(self) -> None:
        disk = self._disk
        settle_restore(disk, self._root)
        disk.makedirs(self._msgs_dir)
        if self._checkpoints:
            self.checkpointed = cut_to_checkpoint(disk, self._msgs_dir, self._cipher)
        self._ix = SeqIndex(True)
        blocks, self.truncated = recover(disk, self._msgs_dir, self._ix, self._cipher)
        self._blocks = {b.idx: b for b in blocks}
        self._files = ReadFiles(disk)
        self._wbuf = bytearray()
        # The last subject written and its UTF-8 bytes: publishers mostly repeat a subject
        # (the same str object, from the parser's cache), so it is encoded once.
        self._subj_str = ""
        self._subj_bytes = b""
        self._pending_dels: list[int] = []
        self._floor_written = self._ix.first
        # What the last finished sync made durable, and what the running one will: the FLOOR
        # in force, and the newest block whose head records are on disk. Blocks are unlinked
        # only below both (see _drop_front_blocks).
        self._durable_floor = self._synced_floor = self._ix.first
        self._durable_head = self._synced_head = 0
        self._last_covered = self._ix.last
        self._unsynced = False
        self._dir_dirty = False
        self._retired: list[AppendFile] = []  # sealed blocks' writers, closed after a sync
        self._dirty_blocks = set()  # blocks that lost messages since the last sync
        # Secure erase: (block, offset, length, seq, ts) whose DEL is not durable yet / is.
        self._erase_new = []
        self._erase_ready = []
        self._rcache = None
        self._last_end = (0, 0)
        if blocks:
            self._active = blocks[-1]
            self._wf: AppendFile = disk.open_append(self._active.path)
        else:
            self._new_active(max(self._first_block, 1))
            if self._sync_new:
                disk.sync_dir(self._msgs_dir)
                self._dir_dirty = False
        self._ckpt_end = (self._active.idx, self._active.size)

    def _new_active(self, idx: int) -> None:
        block = Block(idx, os.path.join(self._msgs_dir, block_name(idx)))
        if self._disk.exists(block.path):
            raise StoreCorruption(block.path, 0, "a block file beyond the last one exists")
        self._wf = self._disk.open_append(block.path)
        self._blocks[idx] = block
        self._active = block
        self._dir_dirty = True
        ix = self._ix
        if ix.last:
            # Head records: the block alone tells the first and last sequence, so older
            # blocks can go without taking that knowledge with them.
            rec.append_control(self._wbuf, rec.KIND_FLOOR, ix.first, ix.last_ts, b"", self._cipher)
            rec.append_control(self._wbuf, rec.KIND_SKIP, ix.last, ix.last_ts, b"", self._cipher)
            block.max_ref = ix.last
            self._floor_written = ix.first
            self._last_covered = max(self._last_covered, ix.last)

    # --- writing ---------------------------------------------------------------------------

    def _append(
        self, seq: int, subject: str, headers: bytes | None, data: bytes, ts: int, size: int
    ) -> int:
        if self._cipher is not None:
            return self._put_sealed(seq, subject, headers, data, ts, size)
        if headers is None:
            return self._put(seq, subject, ts, size, _NO_HDR, data, b"")
        return self._put(seq, subject, ts, size, len(headers), headers, data)

    def store_body(
        self, subject: str, body: bytes, hdr_len: int, ts_ns: int
    ) -> tuple[int, list[int]]:
        """``store`` of a publish's header block and payload as they arrived, one piece
        (``BaseStore.store_body``): the record holds them in that order, so the body goes in
        whole, without cutting it in two and joining the halves again."""
        if hdr_len <= 0 or self._cipher is not None:
            return super().store_body(subject, body, hdr_len, ts_ns)
        self._check()
        if not subject:
            raise StoreError("empty subject")
        seq = self._ix.last + 1
        # file_msg_size(subject, headers, data), as _size_of
        sid = self._put(seq, subject, ts_ns, 34 + len(subject) + len(body), hdr_len, body, b"")
        lim = self._limits
        if lim.max_msgs_per_subject <= 0 and lim.max_msgs <= 0 and lim.max_bytes <= 0:
            return seq, []
        return seq, self._enforce(sid)

    def _put(
        self, seq: int, subject: str, ts: int, size: int, hlen: int, part: bytes, rest: bytes
    ) -> int:
        """Write the clear MSG record of ``seq`` (``hlen``: its header length field; the
        record's body is ``part`` then ``rest``) and index it; returns its subject id.
        Inline rather than through ``rec.append_msg``: this runs once per stored message."""
        if seq > self._last_covered + 1:
            # The sequence jumped (a purge past the end, skipped sequences) and no record says
            # so yet: write that first, or a replay would see this message far beyond the last
            # one it knows and fill the gap slot by slot (gigabytes for a purge to seq 10^9).
            self._emit_controls()
        active = self._active
        buf = self._wbuf
        off = active.size + len(buf)
        if off >= self._block_size:
            self._rotate()
            active = self._active
            off = active.size + len(buf)
        if subject is self._subj_str:
            bsubj = self._subj_bytes
        else:
            bsubj = subject.encode()
            self._subj_str = subject
            self._subj_bytes = bsubj
        rlen = _OVERHEAD + len(bsubj) + len(part) + len(rest)
        head = _pack_head(_MAGIC, rlen, _KIND_MSG, 0, len(bsubj), seq, ts, hlen)
        # One joined record and one checksum call: cheaper than checksumming the parts in
        # turn (one copy; an empty ``rest`` costs nothing).
        body = b"".join((head, bsubj, part, rest))
        buf += body
        buf += _pack_crc(_crc32(body))
        # _indexed, inline (a call less per message in the pure build)
        sid = self._ix.append(seq, subject, ts, size, (active.idx << OFF_BITS) | off, rlen, None)
        if not active.first_msg:
            active.first_msg = seq
        active.last_msg = active.max_ref = seq
        active.live += 1
        active.live_bytes += rlen
        self._last_covered = seq
        if len(buf) >= FLUSH_BYTES:
            self._write_out()
        return sid

    def _put_sealed(
        self, seq: int, subject: str, headers: bytes | None, data: bytes, ts: int, size: int
    ) -> int:
        """``_put`` with encryption at rest (the record's body sealed, see ``_records``)."""
        if seq > self._last_covered + 1:
            self._emit_controls()  # see _put
        active = self._active
        buf = self._wbuf
        off = active.size + len(buf)
        if off >= self._block_size:
            self._rotate()
            active = self._active
            off = active.size + len(buf)
        rlen = rec.append_msg(buf, seq, ts, subject.encode(), headers, data, self._cipher)
        return self._indexed(seq, subject, ts, size, active, off, rlen)

    def _indexed(
        self, seq: int, subject: str, ts: int, size: int, active: Block, off: int, rlen: int
    ) -> int:
        """The record of ``seq`` was appended at ``off`` of ``active``: index it, count it
        in its block, write the buffer out once it is big enough."""
        sid = self._ix.append(seq, subject, ts, size, (active.idx << OFF_BITS) | off, rlen, None)
        if not active.first_msg:
            active.first_msg = seq
        active.last_msg = active.max_ref = seq
        active.live += 1
        active.live_bytes += rlen
        self._last_covered = seq
        if len(self._wbuf) >= FLUSH_BYTES:
            self._write_out()
        return sid

    def _before_remove(self, seq: int) -> None:
        found = self._ix.locate(seq)
        assert found is not None
        loc, rlen, _sid = found
        b = self._blocks.get(loc >> OFF_BITS)
        if b is not None:
            b.live -= 1
            b.live_bytes -= rlen
            b.settled = False
            self._dirty_blocks.add(b.idx)
        self._pending_dels.append(seq)

    def _compacted(self) -> None:
        """Blocks straddling the new first seq lost messages without DEL bookkeeping."""
        first = self._ix.first
        for b in self._blocks.values():
            if b.first_msg and b.first_msg >= first:
                break
            if b.first_msg:
                self._recount(b)

    def _recount(self, b: Block) -> None:
        ix = self._ix
        b.live = b.live_bytes = 0
        b.settled = False
        lo, hi = max(b.first_msg, ix.first), min(b.last_msg, ix.last)
        for _seq, c, i in ix.entries(lo, hi):
            assert c.locs is not None and c.rlens is not None
            if c.locs[i] >> OFF_BITS == b.idx:
                b.live += 1
                b.live_bytes += c.rlens[i]

    def _emit_controls(self) -> None:
        """Append the DEL / FLOOR / SKIP records that describe removals since the last write."""
        ix, buf, active = self._ix, self._wbuf, self._active
        if self._pending_dels:
            first = ix.first
            seqs = sorted(s for s in self._pending_dels if s >= first)
            self._pending_dels.clear()
            if seqs:
                rec.append_dels(buf, seqs, self._cipher)
                active.max_ref = max(active.max_ref, seqs[-1])
                active.has_dels = True
        if ix.first != self._floor_written:
            rec.append_control(buf, rec.KIND_FLOOR, ix.first, ix.last_ts, b"", self._cipher)
            self._floor_written = ix.first
            active.max_ref = max(active.max_ref, ix.first - 1)
            self._last_covered = max(self._last_covered, ix.first - 1)
        if ix.last > self._last_covered:
            rec.append_control(buf, rec.KIND_SKIP, ix.last, ix.last_ts, b"", self._cipher)
            self._last_covered = ix.last
            active.max_ref = max(active.max_ref, ix.last)

    def store_run(self, msgs: Sequence[PlainMsg]) -> int:
        """``_append``'s records and index entries for a run of messages without headers
        (``BaseStore.store_run``), in one loop: no call chain per message."""
        if self._cipher is not None or self.prunes_on_store:
            return super().store_run(msgs)
        self._check()
        ix = self._ix
        seq = first = ix.last + 1
        if seq > self._last_covered + 1:
            self._emit_controls()  # as in _append
        buf = self._wbuf
        block_size = self._block_size
        ix_append = ix.append
        active = self._active
        for m in msgs:
            subject = m.subject
            if not subject:
                raise StoreError("empty subject")
            off = active.size + len(buf)
            if off >= block_size:
                self._rotate()
                active = self._active
                off = active.size + len(buf)
            bsubj = subject.encode()
            data = m.data
            ts = m.ts_ns
            rlen = _OVERHEAD + len(bsubj) + len(data)
            head = _pack_head(_MAGIC, rlen, _KIND_MSG, 0, len(bsubj), seq, ts, _NO_HDR)
            body = b"".join((head, bsubj, data))
            buf += body
            buf += _pack_crc(_crc32(body))
            # file_msg_size(subject, None, data)
            size = 30 + len(subject) + len(data)
            ix_append(seq, subject, ts, size, (active.idx << OFF_BITS) | off, rlen, None)
            if not active.first_msg:
                active.first_msg = seq
            active.last_msg = active.max_ref = seq
            active.live += 1
            active.live_bytes += rlen
            self._last_covered = seq
            if len(buf) >= FLUSH_BYTES:
                self._write_out()
            seq += 1
        return first

    def _write_out(self) -> None:
        """Write the buffer (and pending control records) to the active block, no fsync."""
        self._emit_controls()
        buf = self._wbuf
        if not buf:
            return
        try:
            self._wf.write(bytes(buf))
        except OSError as e:
            raise self._fail(e) from e
        self._active.size += len(buf)
        buf.clear()
        self._unsynced = True

    def _rotate(self) -> None:
        """Seal the active block (written and fsync'd) and start the next one."""
        self._write_out()
        try:
            if self._unsynced:
                self._wf.sync()
                self._unsynced = False
            # A sync running in a worker thread may still hold this writer: close it later.
            self._retired.append(self._wf)
            sealed = self._active.idx
            self._new_active(sealed + 1)
        except OSError as e:
            raise self._fail(e) from e
        if self._checkpoints:
            return  # durable, but not covered by a checkpoint: see begin_sync
        # Everything written so far is durable now (older blocks were synced when sealed):
        # the space work that waits for durability can run.
        self._durable_floor = self._floor_written
        self._durable_head = max(self._durable_head, sealed)
        self._dirty_blocks.clear()
        self._drop_front_blocks()
        self._compact_some()

    @property
    def needs_sync(self) -> bool:
        ix = self._ix
        return bool(
            self._wbuf
            or self._unsynced
            or self._dir_dirty
            or self._pending_dels
            or ix.first != self._floor_written
            or ix.last > self._last_covered
        )

    @property
    def deferred_work(self) -> bool:
        """Erases to overwrite or blocks to unlink once the current records are durable."""
        if self._erase_new or self._erase_ready:
            return True
        b = next(iter(self._blocks.values()))
        return (
            b is not self._active
            and b.max_ref < self._ix.first
            and not b.erasing
            and b.idx < self._active.idx
        )

    def flush(self) -> None:
        """Hand everything buffered to the OS (survives a process crash, not a power loss)."""
        self._check()
        self._write_out()

    def sync(self) -> None:
        """Make everything done so far durable, deferred work included (at most three
        rounds of one fsync each; see the module doc)."""
        for _ in range(3):
            finish = self.begin_sync()
            if finish is not None:
                finish()
            if not self.deferred_work:
                return

    def begin_sync(self) -> Callable[[], None] | None:
        """Group commit split in two, so the fsync can leave the owner's thread.

        On the owner thread: the deferred work that the previous sync made possible is done,
        everything stored, removed or purged so far is written to the OS, and the blocking
        half is returned (sync of the active block, of blocks overwritten by erases, and of
        the directory when a block file was created or removed); None when nothing needs
        syncing. The callable may run on any thread while the owner keeps using the store;
        once it has returned, everything done before ``begin_sync()`` is durable. The
        previous one must have returned before ``begin_sync``, ``sync`` or ``close`` is
        called again. If it fails it raises and the store refuses all further work (a failed
        fsync leaves the page cache in an unknown state, so nothing after it can be trusted).
        """
        self._check()
        # The previous sync finished: what it covered is durable.
        self._durable_floor = max(self._durable_floor, self._synced_floor)
        self._durable_head = max(self._durable_head, self._synced_head)
        for f in self._retired:
            f.close()
        self._retired.clear()
        disk = self._disk
        try:
            paths = self._overwrite_erased()
            self._drop_front_blocks()
            if self._checkpoints:
                self._compact_some()
        except OSError as e:
            raise self._fail(e) from e
        self._write_out()
        if not self._checkpoints or self._at_checkpoint():
            # What this sync makes durable may be built on by the space work of later ones
            # (checkpointed: only when it ends with a checkpoint, see the module doc).
            self._synced_floor = self._floor_written
            self._synced_head = self._active.idx
            self._dirty_blocks.clear()
            self._erase_ready += self._erase_new
            self._erase_new = []
        files = [self._wf] if self._unsynced else []
        dir_path = self._msgs_dir if self._dir_dirty else None
        self._unsynced = self._dir_dirty = False
        if not files and not paths and dir_path is None:
            return None

        def finish() -> None:
            try:
                for f in files:
                    f.sync()
                for path in paths:
                    h = disk.open_append(path)
                    try:
                        h.sync()
                    finally:
                        h.close()
                if dir_path is not None:
                    disk.sync_dir(dir_path)
            except (OSError, ValueError) as e:
                self._failed = e
                raise StoreError(f"stream store {self._root} failed: {e}") from e

        return finish

    # --- checkpoints (see the module doc) -----------------------------------------------

    def checkpoint(self, index: int, state: bytes) -> None:
        """Record that the store now holds the owner's state after unit ``index`` (with
        ``state``, opaque here, returned by the open that finds this checkpoint last).
        Buffered like every record: durable with the next sync."""
        self._check()
        self._emit_controls()  # the removals of the unit go before its checkpoint
        if self._active.size + len(self._wbuf) >= self._block_size:
            self._rotate()
        rec.append_control(self._wbuf, rec.KIND_CKPT, index, 0, state, self._cipher)
        self._ckpt_end = (self._active.idx, self._active.size + len(self._wbuf))
        if len(self._wbuf) >= FLUSH_BYTES:
            self._write_out()

    def _at_checkpoint(self) -> bool:
        """Nothing was stored or removed since the last checkpoint (after a write-out)."""
        return (
            self._ckpt_end == (self._active.idx, self._active.size + len(self._wbuf))
            and not self._pending_dels
            and self._ix.first == self._floor_written
            and self._ix.last <= self._last_covered
        )

    # --- lifecycle -------------------------------------------------------------------------

    def restore(
        self, chunks: Iterable[bytes], checkpoint: tuple[int, bytes] | None = None
    ) -> None:
        """Replace the content with a snapshot, crash-safely (see ``_restore``): a damaged
        snapshot raises and leaves the current content untouched. ``checkpoint``: (index,
        state) written after the snapshot's records, in the same atomic step."""
        self._check()
        first_new = max(self._blocks) + 1
        staged = restore_into(
            self._disk,
            self._root,
            first_new,
            lambda path, first: FileStore(
                path,
                self._limits,
                block_size=self._block_size,
                disk=self._disk,
                cipher=self._cipher,
                first_block=first,
                lock=False,
            ),
            chunks,
            checkpoint,
        )
        assert staged
        self._close_files()
        settle_restore(self._disk, self._root)
        self._open()

    def _close_files(self) -> None:
        self._files.close()
        for f in self._retired:
            f.close()
        self._retired.clear()
        self._wf.close()
        self._rcache = None

    def abandon(self) -> None:
        """Close without writing anything more (a failed restore, a deleted stream)."""
        if not self._closed:
            self._closed = True
            self._close_files()
            self._unlock()

    def close(self) -> None:
        """Sync and release the directory (idempotent)."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.sync()
        finally:
            self._closed = True
            self._close_files()
            self._unlock()

    def delete(self) -> None:
        """Remove the store's files durably, and its directory when nothing else is in it."""
        self.abandon()
        disk = self._disk
        remove_dir(disk, self._msgs_dir)
        lock = os.path.join(self._root, "LOCK")
        if disk.exists(lock):
            disk.remove(lock)
        if not disk.list(self._root):
            remove_dir(disk, self._root)

    # --- introspection (tests, benchmarks, monitoring) -------------------------------------

    def block_files(self) -> list[str]:
        return [b.path for b in self._blocks.values()]

    @property
    def disk(self) -> StoreDisk:
        return self._disk

    def index_bytes(self) -> int:
        """Bytes held by the index arrays (per message, per subject, and the lists of records
        kept by rewritten blocks), not counting Python object headers."""
        total = self._ix.nbytes()
        for b in self._blocks.values():
            if b.present is not None:
                total += b.present.itemsize * b.present.buffer_info()[1]
        return total
