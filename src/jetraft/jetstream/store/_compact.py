"""Block rewrites (compaction) of the file store: which records of a sealed block still
matter, computed from the block's bytes and the index.

A rewrite is durable at once (``write_atomic``), so it may drop only what is *durably* moot;
the store passes ``durable_first`` (the lower of the first sequence and the FLOOR that is
durable) and rewrites only blocks without removals since the last sync (``Block.volatile``):

* MSG: kept when live (its location moves), or when it sits between the durable FLOOR and
  the current first sequence (a purge not yet durable must not lose its messages early);
* DEL: the targets at or above ``durable_first`` that stay physically present (in an older
  block, or kept in this one by the rule above);
* ERASED: becomes a SKIP when at or above ``durable_first`` (its sequence still bounds the
  last sequence), else dropped;
* FLOOR, SKIP: kept when at or above ``durable_first``;
* CKPT: the block's last one is kept, in place (it may be the newest of the store, where a
  checkpointed store's recovery cuts); earlier ones are superseded by it;
* and when the records dropped reached a higher sequence than those kept, a SKIP to it: a
  block never forgets how far the sequence went (a removed last message), whatever newer
  blocks made durable yet.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass, field

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._blocks import OFF_BITS, Block
from jetraft.jetstream.store._index import SeqIndex
from jetraft.jetstream.store.cipher import CipherError, RecordCipher
from jetraft.jetstream.store.types import StoreCorruption, StoredMsg

_TORN_ERASE = -1  # a record whose erase was interrupted (accepted when it was opened)


def _records(b: Block, data: bytes, ix: SeqIndex[StoredMsg]) -> list[rec.Parsed]:
    """The block's records; one that fails its checksum but is framed and whose seq is not
    live is an interrupted erase (recovery accepted it because a DEL covers it)."""
    out: list[rec.Parsed] = []
    off = 0
    while off < len(data):
        try:
            parsed = rec.check_one(data, off)
        except rec.BadRecord as e:
            rec_len = 0 if e.truncated else rec.framed_length(data, off)
            seq = rec.HEADER.unpack_from(data, off)[5] if rec_len else 0
            if not rec_len or ix.is_live(seq):
                raise StoreCorruption(b.path, e.offset, e.reason) from None
            parsed = (off, _TORN_ERASE, rec_len, 0, seq, 0, 0)
        out.append(parsed)
        off += parsed[2]
    return out


@dataclass(slots=True)
class Rewrite:
    out: bytearray = field(default_factory=bytearray)
    moved: list[tuple[int, int, int]] = field(default_factory=list)  # live: seq, offset, len
    present: array[int] = field(default_factory=lambda: array("Q"))  # every MSG kept
    max_ref: int = 0
    has_dels: bool = False


def rewrite(
    b: Block,
    data: bytes,
    ix: SeqIndex[StoredMsg],
    older: list[Block],
    durable_first: int,
    cipher: RecordCipher | None,
) -> Rewrite:
    """What block ``b`` (its bytes ``data``) becomes; ``older``: the blocks before it."""
    older = [a for a in older if a.first_msg]
    older_lasts = [a.last_msg for a in older]
    here = b.idx << OFF_BITS
    first = ix.first

    dead_kept: set[int] = set()  # MSG records kept although removed (see above)

    def needed(t: int) -> bool:
        if t < durable_first:
            return False
        if t in dead_kept:
            return True
        j = bisect_left(older_lasts, t)
        return j < len(older) and older[j].holds(t)

    r = Rewrite()
    records = _records(b, data, ix)
    last_ckpt = max((p[0] for p in records if p[1] == rec.KIND_CKPT), default=-1)
    out = r.out
    top = top_ts = 0  # the highest sequence any record of the block implies
    with memoryview(data) as mv:
        for off, kind, rlen, _slen, seq, ts, _hlen in records:
            if kind == rec.KIND_CKPT:
                if off == last_ckpt:
                    out += mv[off : off + rlen]
                continue
            if kind not in (rec.KIND_DEL, rec.KIND_FLOOR) and seq > top:
                top, top_ts = seq, ts
            if kind == rec.KIND_MSG:
                found = ix.locate(seq)
                live = found is not None and found[0] == here | off
                if live or durable_first <= seq < first:
                    if live:
                        r.moved.append((seq, len(out), rlen))
                    else:
                        dead_kept.add(seq)
                    r.present.append(seq)
                    out += mv[off : off + rlen]
                    r.max_ref = max(r.max_ref, seq)
            elif kind == rec.KIND_DEL:
                try:
                    body = rec.plain_body(data, off, rlen, cipher)
                except CipherError as e:
                    raise StoreCorruption(b.path, off, str(e)) from None
                keep = [t for t in rec.del_targets(body) if needed(t)]
                if keep:
                    rec.append_dels(out, keep, cipher)
                    r.max_ref = max(r.max_ref, keep[-1])
                    r.has_dels = True
            elif kind == rec.KIND_ERASED or kind == _TORN_ERASE:
                if seq >= durable_first:
                    rec.append_control(out, rec.KIND_SKIP, seq, ts, b"", cipher)
                    r.max_ref = max(r.max_ref, seq)
            elif seq >= durable_first:  # FLOOR or SKIP still in force
                out += mv[off : off + rlen]
                r.max_ref = max(r.max_ref, seq - 1 if kind == rec.KIND_FLOOR else seq)
    if top > r.max_ref:
        rec.append_control(out, rec.KIND_SKIP, top, top_ts, b"", cipher)
        r.max_ref = top
    return r
