"""Opening a file store directory: finishing a restore swap, replaying blocks, torn tails.

Rules (see DESIGN.md, durability contract):

* Only the tail of the *last* non-empty block may be torn (a crash mid-write): when the first
  bad record there has no valid record anywhere after it, the block is truncated at that
  record and the cut is reported in ``truncated``.
* Any other bad record (an older block, or valid records after the bad bytes) raises
  ``StoreCorruption`` with the file and offset. Nothing is truncated or deleted then: the
  replica must be repaired, the server must not "fix" it by dropping data.
* A torn tail in an older block cannot happen in normal operation: a block is fsync'd before
  the next one is created. A crash after unsynced writes could, on some file systems, persist
  later pages before earlier ones; that shows as corruption (a false alarm that only concerns
  messages that were never acknowledged).
"""

from __future__ import annotations

import os
import shutil
from array import array

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._blocks import (
    BLOCK_RE,
    OFF_BITS,
    Block,
    fsync_dir,
)
from jetraft.jetstream.store._index import SeqIndex
from jetraft.jetstream.store.types import StoreCorruption, StoredMsg

MSGS_DIR = "msgs"
OLD_DIR = "msgs.old"
RESTORE_DIR = "restore.tmp"
RESTORE_DONE = "DONE"


def settle_restore(root: str) -> None:
    """Finish or undo a restore interrupted by a crash (see FileStore.restore).

    Only our own temporary directories are removed; stream data is moved, never dropped,
    unless a complete replacement (``DONE`` marker) has taken its place.
    """
    msgs = os.path.join(root, MSGS_DIR)
    old = os.path.join(root, OLD_DIR)
    tmp = os.path.join(root, RESTORE_DIR)
    done = os.path.exists(os.path.join(tmp, RESTORE_DONE))
    if not os.path.exists(msgs) and os.path.exists(old):
        if done and os.path.isdir(os.path.join(tmp, MSGS_DIR)):
            os.rename(os.path.join(tmp, MSGS_DIR), msgs)  # roll forward
        else:
            os.rename(old, msgs)  # roll back
        fsync_dir(root)
    if os.path.exists(old) and os.path.exists(msgs):
        shutil.rmtree(old)
    if os.path.exists(tmp):
        shutil.rmtree(tmp)


def list_blocks(msgs_dir: str) -> list[Block]:
    names = os.listdir(msgs_dir)
    present = set(names)
    for name in names:
        if name.endswith(".dat.tmp"):
            path = os.path.join(msgs_dir, name)
            if name[:-4] not in present:
                raise StoreCorruption(path, 0, "block rewrite left without its block")
            os.unlink(path)  # an interrupted compaction; the block itself is intact
    idxs = sorted(int(m.group(1)) for n in names if (m := BLOCK_RE.match(n)))
    return [Block(i, os.path.join(msgs_dir, f"blk.{i:08d}.dat")) for i in idxs]


def recover(
    msgs_dir: str, ix: SeqIndex[StoredMsg]
) -> tuple[list[Block], list[tuple[str, int, int]]]:
    """Replay every block into ``ix``; returns (blocks, truncated (path, offset, bytes cut))."""
    blocks = list_blocks(msgs_dir)
    sizes = [os.path.getsize(b.path) for b in blocks]
    truncated: list[tuple[str, int, int]] = []
    for k, b in enumerate(blocks):
        with open(b.path, "rb") as f:
            data = f.read()
        b.size = len(data)
        present: array[int] = array("Q")
        end = _replay(ix, b, data, present)
        if len(present) != (b.last_msg - b.first_msg + 1 if b.first_msg else 0):
            b.present = present  # a rewritten (or skip-holed) block: exactly what is there
        if end is None:
            continue
        bad = end
        is_last = all(s == 0 for s in sizes[k + 1 :])
        # Even "runs past the end" may be a flipped length field: look for valid records after.
        torn = rec.valid_record_after(data, bad.offset) < 0
        if not (is_last and torn):
            raise StoreCorruption(b.path, bad.offset, bad.reason)
        with open(b.path, "r+b") as f:
            f.truncate(bad.offset)
            f.flush()
            os.fsync(f.fileno())
        truncated.append((b.path, bad.offset, len(data) - bad.offset))
        b.size = bad.offset
    _recount(ix, blocks)
    return blocks, truncated


def _replay(
    ix: SeqIndex[StoredMsg], b: Block, data: bytes, present: array[int]
) -> rec.BadRecord | None:
    """Apply the block's records; returns the first bad record (None when all are good)."""
    idx_bits = b.idx << OFF_BITS
    mv = memoryview(data)
    try:
        for off, kind, rlen, slen, seq, ts, hlen in rec.scan(data):
            if kind == rec.KIND_MSG:
                if seq <= ix.last:
                    raise StoreCorruption(b.path, off, "message sequence not increasing")
                p = off + rec.HDR_SIZE
                try:
                    subject = str(mv[p : p + slen], "utf-8")
                except UnicodeDecodeError:
                    raise StoreCorruption(b.path, off, "subject is not UTF-8") from None
                # nats-server accounting: 30 + subject + data, 34 + subject + hdr + data.
                size = rlen - rec.OVERHEAD + (30 if hlen == rec.NO_HDR or hlen == 0 else 34)
                ix.append(seq, subject, ts, size, idx_bits | off, rlen, None)
                present.append(seq)
                if not b.first_msg:
                    b.first_msg = seq
                b.last_msg = seq
                b.max_ref = max(b.max_ref, seq)
            elif kind == rec.KIND_DEL:
                for t in rec.del_targets(mv[off + rec.HDR_SIZE : off + rlen - 4]):
                    ix.remove(t)
                b.max_ref = max(b.max_ref, seq)
                b.has_dels = True
            elif kind == rec.KIND_FLOOR:
                ix.compact(seq)
                ix.last_ts = ts
                b.max_ref = max(b.max_ref, seq - 1)
            elif kind == rec.KIND_SKIP:
                ix.skip_to(seq)
                ix.last_ts = ts
                b.max_ref = max(b.max_ref, seq)
            else:
                raise StoreCorruption(b.path, off, "snapshot end record inside a block")
    except rec.BadRecord as e:
        return e
    finally:
        mv.release()
    return None


def _recount(ix: SeqIndex[StoredMsg], blocks: list[Block]) -> None:
    by_idx = {b.idx: b for b in blocks}
    for b in blocks:
        b.live = b.live_bytes = 0
    sids, locs, rlens = ix.sids, ix.locs, ix.rlens
    for i, sid in enumerate(sids):
        if sid >= 0:
            b = by_idx[locs[i] >> OFF_BITS]
            b.live += 1
            b.live_bytes += rlens[i]
