"""The file store's space reclaim: what ``FileStore`` does to give disk space back.

* Secure erase (``erase``): a removed message's record is overwritten in place with an
  ERASED record, once its DEL record is durable (``_overwrite_erased``, at the next sync).
* Front blocks: a sealed block wholly below the durable first sequence is unlinked
  (``_drop_front_blocks``).
* Rewrites: the sealed blocks with the least live data (under half) are rewritten with only
  what still matters (``_compact_some``, ``compact_block``; ``_compact`` computes the kept
  records from the block's bytes).

``FileSpace`` is the part of ``FileStore`` (its only subclass, in ``file.py``) that does this
work over the store's blocks and index; the store decides when (at block rotation and in
``begin_sync``, see ``file.py``'s module doc on durability and checkpoints). A base class
rather than an object the store calls: the compiled build keeps its calls direct.
"""

from __future__ import annotations

import contextlib

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._block_reads import BlockReads
from jetraft.jetstream.store._blocks import OFF_BITS, OFF_MASK, Block
from jetraft.jetstream.store._compact import rewrite
from jetraft.jetstream.store.disk import StoreDisk
from jetraft.jetstream.store.types import StoreError


class FileSpace(BlockReads):
    """Erase, unlink and rewrite over the file store's state (set up by ``FileStore``)."""

    # The store's state that this work changes, beside what reads use (``BlockReads``).
    _disk: StoreDisk
    _block_size: int
    _unsynced: bool
    _dir_dirty: bool
    _dirty_blocks: set[int]
    _durable_floor: int
    _durable_head: int
    _erase_new: list[tuple[Block, int, int, int, int]]
    _erase_ready: list[tuple[Block, int, int, int, int]]

    # --- secure erase ----------------------------------------------------------------------

    def erase(self, seq: int) -> bool:
        """Remove ``seq`` and overwrite its record on disk (after its DEL is durable)."""
        self._check()
        ix = self._ix
        if not ix.is_live(seq):
            return False
        loc, rlen, ts = ix.file_entry(seq)
        block = self._blocks[loc >> OFF_BITS]
        self._remove(seq)
        block.erasing += 1
        self._erase_new.append((block, loc & OFF_MASK, rlen, seq, ts))
        return True

    def _overwrite_erased(self) -> list[str]:
        """Overwrite the records whose DEL the previous sync made durable; returns the
        sealed block files to sync (the active one is synced anyway)."""
        paths: list[str] = []
        for block, off, rlen, seq, ts in self._erase_ready:
            block.erasing -= 1
            self._disk.overwrite(block.path, off, rec.erased_record(rlen, seq, ts, self._cipher))
            if self._rcache is not None and self._rcache[0] == block.idx:
                self._rcache = None
            if block is self._active:
                self._unsynced = True
            elif block.path not in paths:
                paths.append(block.path)
        self._erase_ready = []
        return paths

    # --- space -----------------------------------------------------------------------------

    def _drop_front_blocks(self) -> None:
        """Unlink sealed blocks wholly below the *durable* first sequence, and older than a
        block whose head records are durable: a crash must find neither a FLOOR without its
        messages gone nor a store that forgot its sequences because all blocks went."""
        first = min(self._ix.first, self._durable_floor)
        while len(self._blocks) > 1:
            b = next(iter(self._blocks.values()))
            if b is self._active or b.max_ref >= first or b.erasing or b.idx >= self._durable_head:
                return
            self._unlink_block(b)

    def _unlink_block(self, b: Block) -> None:
        self._files.drop(b.idx)
        if self._rcache is not None and self._rcache[0] == b.idx:
            self._rcache = None
        with contextlib.suppress(FileNotFoundError):
            self._disk.remove(b.path)
        del self._blocks[b.idx]
        self._dir_dirty = True
        self._unsettle_after(b.idx)

    def _compact_some(self) -> None:
        """Rewrite the sealed blocks with the smallest live share (under half), reading at
        most two block sizes per rotation: write amplification stays bounded. Only blocks that
        lost nothing since the last sync (see ``_compact``); at a rotation that is every block,
        since everything written was just made durable."""
        cands = [
            b
            for b in self._blocks.values()
            if b is not self._active
            and b.size
            and not b.settled
            and not b.erasing
            and b.idx not in self._dirty_blocks
            and b.live_bytes * 2 < b.size
        ]
        cands.sort(key=lambda b: b.live_bytes / b.size)
        budget = 2 * self._block_size
        for b in cands:
            if budget <= 0:
                break
            budget -= b.size
            self.compact_block(b.idx)

    def compact_block(self, idx: int) -> None:
        """Rewrite sealed block ``idx`` keeping only what durably still matters (see
        ``_compact``); unlinked when nothing does."""
        self._check()
        b = self._blocks[idx]
        if b is self._active or b.erasing or b.idx in self._dirty_blocks:
            raise StoreError("only a sealed block unchanged since the last sync can be rewritten")
        try:
            data = self._files.get(b).pread(0, b.size)
        except OSError as e:
            raise self._fail(e) from e
        older = [a for a in self._blocks.values() if a.idx < b.idx]
        durable_first = min(self._ix.first, self._durable_floor)
        r = rewrite(b, data, self._ix, older, durable_first, self._cipher)
        self._files.drop(b.idx)
        if self._rcache is not None and self._rcache[0] == b.idx:
            self._rcache = None
        if not r.out:
            self._unlink_block(b)
            return
        self._replace_block(b, r.out)
        ix = self._ix
        for seq, new_off, _ in r.moved:
            ix.set_loc(seq, (b.idx << OFF_BITS) | new_off)
        b.size = len(r.out)
        b.first_msg = r.present[0] if r.present else 0
        b.last_msg = r.present[-1] if r.present else 0
        b.present = r.present
        b.live = len(r.moved)
        b.live_bytes = sum(n for _, _, n in r.moved)
        b.max_ref = r.max_ref
        b.has_dels = r.has_dels
        b.settled = not (r.present and len(r.present) != len(r.moved))
        self._unsettle_after(b.idx)

    def _unsettle_after(self, idx: int) -> None:
        """Messages left an older block: DEL records in newer blocks may have become moot."""
        for c in self._blocks.values():
            if c.idx > idx and c.has_dels:
                c.settled = False

    def _replace_block(self, b: Block, data: bytearray) -> None:
        try:
            self._disk.write_atomic(b.path, bytes(data))
        except OSError as e:
            raise self._fail(e) from e
