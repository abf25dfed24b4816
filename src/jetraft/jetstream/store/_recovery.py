"""Opening a file store directory: replaying blocks, torn tails, interrupted erases.

Rules (see DESIGN.md, durability contract):

* Only the tail of the *last* non-empty block may be torn (a crash mid-write): when the first
  bad record there has no valid record anywhere after it, the block is truncated at that
  record and the cut is reported in ``truncated``.
* A record that fails its checksum but is framed (its header's magic and length lead to a
  valid record or to the end of its block) is a *suspect*: a secure erase overwrites a record
  in place only after the record's DEL is durable, so a crash during that overwrite leaves
  such a record behind, and a later DEL names its seq. Suspects that a DEL or FLOOR covers
  are erased messages; any other is corruption.
* Any other bad record (an older block, or valid records after the bad bytes) raises
  ``StoreCorruption`` with the file and offset. Nothing is truncated or deleted then: the
  replica must be repaired, the server must not "fix" it by dropping data.
* A torn tail in an older block cannot happen: a block is fsync'd before the next one is
  created.
* Encrypted stores: every record must open with the store's key; one that does not is
  corruption (tampering or bit rot), never skipped.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._blocks import BLOCK_RE, OFF_BITS, Block, block_name
from jetraft.jetstream.store._index import SeqIndex
from jetraft.jetstream.store.cipher import CipherError, RecordCipher
from jetraft.jetstream.store.disk import StoreDisk
from jetraft.jetstream.store.types import StoreCorruption, StoredMsg

MSGS_DIR = "msgs"
# A suspect's seq comes from a header that failed its checksum: believe it only near the
# sequences around it (an erased record sits where its message was).
MAX_SUSPECT_GAP = 1 << 20


def list_blocks(disk: StoreDisk, msgs_dir: str) -> list[Block]:
    names = disk.list(msgs_dir)
    present = set(names)
    for name in names:
        if name.endswith(".dat.tmp"):
            path = os.path.join(msgs_dir, name)
            if name[:-4] not in present:
                raise StoreCorruption(path, 0, "block rewrite left without its block")
            disk.remove(path)  # an interrupted compaction; the block itself is intact
    idxs = sorted(int(m.group(1)) for n in names if (m := BLOCK_RE.match(n)))
    return [Block(i, os.path.join(msgs_dir, block_name(i))) for i in idxs]


@dataclass(slots=True)
class _Replay:
    ix: SeqIndex[StoredMsg]
    cipher: RecordCipher | None
    suspects: dict[int, tuple[str, int]] = field(default_factory=dict)  # seq -> (path, off)


def recover(
    disk: StoreDisk, msgs_dir: str, ix: SeqIndex[StoredMsg], cipher: RecordCipher | None
) -> tuple[list[Block], list[tuple[str, int, int]]]:
    """Replay every block into ``ix``; returns (blocks, truncated (path, offset, bytes cut))."""
    blocks = list_blocks(disk, msgs_dir)
    sizes = [disk.size(b.path) for b in blocks]
    truncated: list[tuple[str, int, int]] = []
    state = _Replay(ix, cipher)
    for k, b in enumerate(blocks):
        data = disk.read(b.path)
        b.size = len(data)
        is_last = all(s == 0 for s in sizes[k + 1 :])
        present: array[int] = array("Q")
        bad = _replay(state, b, data, present, is_last)
        if len(present) != (b.last_msg - b.first_msg + 1 if b.first_msg else 0):
            b.present = present  # a rewritten (or holed) block: exactly what is there
        if bad is None:
            continue
        # Even "runs past the end" may be a flipped length field: look for valid records after.
        torn = rec.valid_record_after(data, bad.offset) < 0
        if not (is_last and torn):
            raise StoreCorruption(b.path, bad.offset, bad.reason)
        f = disk.open_append(b.path)
        try:
            f.truncate(bad.offset)
            f.sync()
        finally:
            f.close()
        truncated.append((b.path, bad.offset, len(data) - bad.offset))
        b.size = bad.offset
    if state.suspects:
        seq = min(state.suspects)
        path, off = state.suspects[seq]
        raise StoreCorruption(path, off, f"checksum mismatch (record of seq {seq})")
    _recount(ix, blocks)
    return blocks, truncated


def _replay(
    st: _Replay, b: Block, data: bytes, present: array[int], is_last: bool
) -> rec.BadRecord | None:
    """Apply the block's records; returns the first bad record that is not a suspect."""
    off, n = 0, len(data)
    while off < n:
        try:
            parsed = rec.check_one(data, off)
        except rec.BadRecord as e:
            rec_len = 0 if e.truncated else rec.framed_length(data, off)
            if not rec_len or (is_last and off + rec_len == n):
                return e  # torn tail (if last) or corruption, decided by the caller
            seq = rec.HEADER.unpack_from(data, off)[5]
            if seq <= st.ix.last or seq > st.ix.last + MAX_SUSPECT_GAP:
                return e
            st.ix.skip_to(seq)
            st.suspects[seq] = (b.path, off)
            # Physically there: a rewrite of a newer block must keep the DEL that covers it.
            present.append(seq)
            if not b.first_msg:
                b.first_msg = seq
            b.last_msg = seq
            b.max_ref = max(b.max_ref, seq)
            off += rec_len
            continue
        _apply(st, b, data, parsed, present)
        off += parsed[2]
    return None


def _apply(st: _Replay, b: Block, data: bytes, parsed: rec.Parsed, present: array[int]) -> None:
    off, kind, rlen, slen, seq, ts, hlen = parsed
    ix = st.ix
    try:
        body = rec.plain_body(data, off, rlen, st.cipher)
    except CipherError as e:
        raise StoreCorruption(b.path, off, str(e)) from None
    if kind in (rec.KIND_MSG, rec.KIND_ERASED):
        if seq <= ix.last:
            raise StoreCorruption(b.path, off, "message sequence not increasing")
        if kind == rec.KIND_ERASED:
            ix.skip_to(seq)
            ix.last_ts = ts
        else:
            try:
                subject = str(body[:slen], "utf-8")
            except UnicodeDecodeError:
                raise StoreCorruption(b.path, off, "subject is not UTF-8") from None
            plain = rlen - rec.OVERHEAD - (rec.SEAL_OVERHEAD if st.cipher is not None else 0)
            # nats-server accounting: 30 + subject + data, 34 + subject + hdr + data.
            size = plain + (30 if hlen == rec.NO_HDR or hlen == 0 else 34)
            ix.append(seq, subject, ts, size, (b.idx << OFF_BITS) | off, rlen, None)
            present.append(seq)
            if not b.first_msg:
                b.first_msg = seq
            b.last_msg = seq
        b.max_ref = max(b.max_ref, seq)
    elif kind == rec.KIND_DEL:
        for t in rec.del_targets(body):
            ix.remove(t)
            st.suspects.pop(t, None)
        b.max_ref = max(b.max_ref, seq)
        b.has_dels = True
    elif kind == rec.KIND_FLOOR:
        ix.compact(seq)
        ix.last_ts = ts
        for s in [s for s in st.suspects if s < seq]:
            del st.suspects[s]
        b.max_ref = max(b.max_ref, seq - 1)
    elif kind == rec.KIND_SKIP:
        ix.skip_to(seq)
        ix.last_ts = ts
        b.max_ref = max(b.max_ref, seq)
    elif kind != rec.KIND_CKPT:  # a checkpoint changes nothing in the store
        raise StoreCorruption(b.path, off, "snapshot end record inside a block")


def cut_to_checkpoint(
    disk: StoreDisk, msgs_dir: str, cipher: RecordCipher | None
) -> tuple[int, bytes] | None:
    """A checkpointed store (see ``FileStore``, ``checkpoints``): cut every record after the
    last CKPT record, which is the effect of work its owner had not finished (never covered
    by a checkpoint, so never reported durable); returns that checkpoint (index, state), or
    None when there is none (then every block goes: nothing was ever checkpointed).

    Blocks are walked from the last one back, usually one or two are read. A bad record
    followed by valid ones is corruption (raised), as on any open; a torn tail is cut with
    the rest."""
    blocks = list_blocks(disk, msgs_dir)
    found: tuple[int, int, int, bytes] | None = None  # (block position, end, index, state)
    for k in range(len(blocks) - 1, -1, -1):
        b = blocks[k]
        data = disk.read(b.path)
        last = _last_checkpoint(b, data, cipher)
        if last is not None:
            found = (k, *last)
            break
    keep = found[0] if found is not None else -1
    if found is not None:
        # Synced whether cut or not: a process crash may have left the checkpoint written
        # but not durable, and its owner reports it durable as of this open.
        b = blocks[keep]
        f = disk.open_append(b.path)
        try:
            if disk.size(b.path) > found[1]:
                f.truncate(found[1])
            f.sync()
        finally:
            f.close()
    gone = blocks[keep + 1 :]
    for b in reversed(gone):  # newest first: a crash midway leaves a prefix of blocks
        disk.remove(b.path)
    if gone:
        disk.sync_dir(msgs_dir)
    return None if found is None else (found[2], found[3])


def _last_checkpoint(
    b: Block, data: bytes, cipher: RecordCipher | None
) -> tuple[int, int, bytes] | None:
    """(end offset, index, state) of the block's last CKPT record."""
    off, n = 0, len(data)
    last: tuple[int, int, bytes] | None = None
    while off < n:
        try:
            _, kind, rlen, _slen, seq, _ts, _hlen = rec.check_one(data, off)
        except rec.BadRecord as e:
            rec_len = 0 if e.truncated else rec.framed_length(data, off)
            if rec_len:  # an interrupted erase: recovery judges it
                off += rec_len
                continue
            if rec.valid_record_after(data, off) >= 0:
                raise StoreCorruption(b.path, off, e.reason) from None
            break  # a torn tail
        if kind == rec.KIND_CKPT:
            try:
                state = bytes(rec.plain_body(data, off, rlen, cipher))
            except CipherError as e:
                raise StoreCorruption(b.path, off, str(e)) from None
            last = (off + rlen, seq, state)
        off += rlen
    return last


def _recount(ix: SeqIndex[StoredMsg], blocks: list[Block]) -> None:
    by_idx = {b.idx: b for b in blocks}
    for b in blocks:
        b.live = b.live_bytes = 0
    for _seq, c, i in ix.entries(ix.first, ix.last):
        assert c.locs is not None and c.rlens is not None
        b = by_idx[c.locs[i] >> OFF_BITS]
        b.live += 1
        b.live_bytes += c.rlens[i]
