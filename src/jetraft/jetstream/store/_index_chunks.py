"""The per-message part of the store's index: entries in chunks of consecutive sequences.

Per message: subject id, timestamp, accounted size, and either the file location and record
length (file store) or the message object (memory store). Entries live in chunks of
``CHUNK`` consecutive sequences, keyed by ``seq >> SHIFT``; a chunk holds entries only for
sequences that were stored in it, as aligned arrays. A removed message leaves a tombstone
(subject id -1) until ``SeqIndex`` (``_index.py``) has the chunk rewritten without them.

A chunk is "dense" while its entries are consecutive sequences (the common case: appends in
order, removals as tombstones): entry ``i`` is sequence ``base + i``, found by subtraction.
After a gap or a rewrite its entries' offsets are listed (``offs``) and found by bisection.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

SHIFT = 12
CHUNK = 1 << SHIFT  # sequences per chunk
MASK = CHUNK - 1


class Chunk(Generic[T]):
    """The entries of up to ``CHUNK`` consecutive sequences starting at ``k << SHIFT``.

    Entry ``i`` is sequence ``base + i`` while ``offs`` is None (dense), else
    ``(k << SHIFT) + offs[i]``. ``sids[i] < 0`` marks a tombstone."""

    __slots__ = ("base", "k", "live", "locs", "objs", "offs", "rlens", "sids", "sizes", "tss")

    def __init__(self, k: int, base: int, file_mode: bool) -> None:
        self.k = k
        self.base = base
        self.offs: array[int] | None = None
        self.sids = array("i")
        self.tss = array("q")
        self.sizes = array("I")
        self.locs = array("Q") if file_mode else None
        self.rlens = array("I") if file_mode else None
        self.objs: list[T | None] | None = None if file_mode else []
        self.live = 0

    def index(self, seq: int) -> int:
        """The entry of ``seq`` (live or a tombstone), -1 when it has none."""
        offs = self.offs
        if offs is None:
            i = seq - self.base
            return i if 0 <= i < len(self.sids) else -1
        off = seq & MASK
        i = bisect_left(offs, off)
        return i if i < len(offs) and offs[i] == off else -1

    def lower(self, seq: int) -> int:
        """The first entry at or after ``seq`` (len(sids) when none)."""
        offs = self.offs
        if offs is None:
            return min(max(seq - self.base, 0), len(self.sids))
        return bisect_left(offs, seq - (self.k << SHIFT))

    def seq_at(self, i: int) -> int:
        offs = self.offs
        return self.base + i if offs is None else (self.k << SHIFT) + offs[i]

    def seqs(self) -> Iterator[tuple[int, int]]:
        """(entry, seq) of the live entries, in order."""
        sids, offs = self.sids, self.offs
        if offs is None:
            base = self.base
            return ((i, base + i) for i, sid in enumerate(sids) if sid >= 0)
        top = self.k << SHIFT
        return ((i, top + offs[i]) for i, sid in enumerate(sids) if sid >= 0)

    def rewrite(self) -> None:
        """Drop the tombstones (the chunk keeps at least one live entry)."""
        keep = [i for i, sid in enumerate(self.sids) if sid >= 0]
        top = self.k << SHIFT
        offs = [self.seq_at(i) - top for i in keep]
        if offs[-1] - offs[0] + 1 == len(offs):
            self.offs = None
            self.base = top + offs[0]
        else:
            self.offs = array("H", offs)
        self.sids = array("i", [self.sids[i] for i in keep])
        self.tss = array("q", [self.tss[i] for i in keep])
        self.sizes = array("I", [self.sizes[i] for i in keep])
        if self.locs is not None and self.rlens is not None:
            self.locs = array("Q", [self.locs[i] for i in keep])
            self.rlens = array("I", [self.rlens[i] for i in keep])
        if self.objs is not None:
            objs = self.objs
            self.objs = [objs[i] for i in keep]

    def nbytes(self) -> int:
        arrays = [self.sids, self.tss, self.sizes]
        if self.offs is not None:
            arrays.append(self.offs)
        if self.locs is not None and self.rlens is not None:
            arrays += [self.locs, self.rlens]
        return sum(a.itemsize * a.buffer_info()[1] for a in arrays)
