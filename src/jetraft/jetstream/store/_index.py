"""The in-memory index both stores keep: per-message entries in chunks, and per subject.

``SeqIndex`` ties two parts together: the entries of each stored message, in chunks of
consecutive sequences (``_index_chunks.py``), and per subject the sorted sequences of its
messages (``_index_subjects.py``). A removed message leaves a tombstone in its chunk until the
chunk's tombstones reach half of its entries, when the chunk is rewritten without them; a chunk
without live messages is dropped. So the index costs memory for live messages only (at most one
tombstone per live entry, plus a few dozen per chunk): deleted sequences, skipped ones and gaps
cost nothing, however they are spread. Subject ids are recycled when a subject empties.

Filters with wildcards resolve to sets of subject ids, cached per filter tuple and kept current
incrementally as subjects appear and disappear (a new subject costs one predicate call per
cached filter). Scans pick the cheaper of walking the entries and bisecting the per-subject
lists, with a bounded walk first because matches are usually dense.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from typing import Generic, TypeVar

from jetraft.jetstream.store._index_chunks import MASK, SHIFT, Chunk
from jetraft.jetstream.store._index_subjects import (
    Entry,
    Seqs,
    e_count,
    e_count_ge,
    e_first,
    e_last,
    e_next_ge,
    e_prev_le,
    e_seqs,
)
from jetraft.jetstream.store._match import Matcher, compile_filters, is_literal

T = TypeVar("T")

_SMALL_SELECTION = 8  # up to this many subjects: bisect their lists instead of walking
_MAX_CACHED_FILTERS = 64
_MIN_REWRITE = 32  # tombstones a chunk may keep regardless of its size


Selection = Collection[int] | None
"""Subject ids to consider; None means every subject."""

Add = Callable[[int], None]  # an array's bound append


def _ignore(_value: int) -> None:
    """What the memory store's index appends in place of locations and record lengths."""


class SeqIndex(Generic[T]):
    """Sequence and subject bookkeeping; ``T`` is what the memory store keeps per message."""

    __slots__ = (
        "_caches",
        "_chunks",
        "_keys",
        "_tail",
        "_tail_adds",
        "_tail_sids",
        "bytes",
        "file_mode",
        "first",
        "free",
        "last",
        "last_ts",
        "msgs",
        "names",
        "num_subjects",
        "per",
        "sid_of",
    )

    def __init__(self, file_mode: bool) -> None:
        self.file_mode = file_mode
        self.first = 1  # first live seq; last + 1 when empty
        self.last = 0
        self.last_ts = 0
        self.msgs = 0
        self.bytes = 0
        # Chunks holding at least one live entry, by k; _keys lists their k ascending.
        self._chunks: dict[int, Chunk[T]] = {}
        self._keys: list[int] = []
        self._tail: Chunk[T] | None = None  # the chunk appends go to
        # The ``append`` methods of the tail's sids, tss, sizes, locs and rlens arrays, bound
        # once per chunk (see ``_bind_tail``), and the sids array they were bound for.
        self._tail_sids: array[int] | None = None
        self._tail_adds: tuple[Add, Add, Add, Add, Add] = (_ignore,) * 5
        self.sid_of: dict[str, int] = {}
        self.names: list[str | None] = []
        self.per: list[Entry | None] = []
        self.free: list[int] = []
        self.num_subjects = 0
        self._caches: OrderedDict[tuple[str, ...], tuple[Matcher, set[int]]] = OrderedDict()

    # --- subjects --------------------------------------------------------------------------

    def sid(self, subject: str) -> int:
        return self.sid_of.get(subject, -1)

    def _new_sid(self, subject: str) -> int:
        if self.free:
            sid = self.free.pop()
            self.names[sid] = subject
        else:
            sid = len(self.names)
            self.names.append(subject)
            self.per.append(None)
        self.sid_of[subject] = sid
        self.num_subjects += 1
        for matcher, members in self._caches.values():
            if matcher(subject):
                members.add(sid)
        return sid

    def _free_sid(self, sid: int) -> None:
        name = self.names[sid]
        assert name is not None
        del self.sid_of[name]
        self.names[sid] = None
        self.per[sid] = None
        self.free.append(sid)
        self.num_subjects -= 1
        for _, members in self._caches.values():
            members.discard(sid)

    def _subj_remove(self, sid: int, seq: int) -> None:
        e = self.per[sid]
        assert e is not None
        if type(e) is int:
            self._free_sid(sid)
            return
        assert isinstance(e, Seqs)
        a, h = e.arr, e.head
        if a[h] == seq:
            h += 1
            if h > 32 and h * 2 > len(a):
                del a[:h]
                h = 0
            e.head = h
        else:
            i = bisect_left(a, seq, h)
            del a[i]
        if len(a) - e.head == 1:
            self.per[sid] = a[e.head]

    def select(self, key: tuple[str, ...]) -> Selection:
        """Resolve normalised filters (see ``_match.normalize``) to subject ids.

        The returned collection may be a live cache: callers that mutate the index while
        iterating it must copy it first.
        """
        if not key:
            return None
        if all(is_literal(f) for f in key):
            sids = [sid for f in key if (sid := self.sid_of.get(f, -1)) >= 0]
            return sids if len(sids) <= _SMALL_SELECTION else set(sids)
        hit = self._caches.get(key)
        if hit is not None:
            self._caches.move_to_end(key)
            return hit[1]
        matcher = compile_filters(key)
        members = {sid for name, sid in self.sid_of.items() if matcher(name)}
        self._caches[key] = (matcher, members)
        if len(self._caches) > _MAX_CACHED_FILTERS:
            self._caches.popitem(last=False)
        return members

    def live_sids(self) -> Iterator[int]:
        return iter(self.sid_of.values())

    # --- chunks ----------------------------------------------------------------------------

    def _find(self, seq: int) -> tuple[Chunk[T], int] | None:
        """The chunk and entry of a live ``seq``."""
        c = self._chunks.get(seq >> SHIFT)
        if c is None:
            return None
        i = c.index(seq)
        if i < 0 or c.sids[i] < 0:
            return None
        return c, i

    def _drop_chunk(self, c: Chunk[T]) -> None:
        del self._chunks[c.k]
        keys = self._keys
        if keys[0] == c.k:
            del keys[0]
        else:
            del keys[bisect_left(keys, c.k)]
        if self._tail is c:
            self._tail = None

    def _chunks_from(self, seq: int) -> Iterator[Chunk[T]]:
        """Chunks that may hold sequences >= seq, in order."""
        keys, chunks = self._keys, self._chunks
        for j in range(bisect_left(keys, seq >> SHIFT), len(keys)):
            yield chunks[keys[j]]

    def _chunks_down_from(self, seq: int) -> Iterator[Chunk[T]]:
        """Chunks that may hold sequences <= seq, newest first."""
        keys, chunks = self._keys, self._chunks
        for j in range(bisect_right(keys, seq >> SHIFT) - 1, -1, -1):
            yield chunks[keys[j]]

    def entries(self, lo: int, hi: int) -> Iterator[tuple[int, Chunk[T], int]]:
        """(seq, chunk, entry) of every live message in [lo, hi], in order."""
        for c in self._chunks_from(lo):
            if c.k << SHIFT > hi:
                return
            sids = c.sids
            for i in range(c.lower(lo), len(sids)):
                if sids[i] >= 0:
                    seq = c.seq_at(i)
                    if seq > hi:
                        return
                    yield seq, c, i

    # --- mutation --------------------------------------------------------------------------

    def _reset(self, first: int) -> None:
        """No messages any more; ``first`` becomes the next sequence to be stored."""
        self.first = first
        self._chunks = {}
        self._keys = []
        self._tail = None

    def append(
        self, seq: int, subject: str, ts: int, size: int, loc: int, rlen: int, obj: T | None
    ) -> int:
        """Record a stored message; returns its subject id."""
        if seq <= self.last:
            raise ValueError(f"sequence {seq} not above last sequence {self.last}")
        if self.msgs == 0:
            self._reset(seq)
        sid = self.sid_of.get(subject, -1)
        if sid < 0:
            sid = self._new_sid(subject)
        c = self._tail
        k = seq >> SHIFT
        if c is None or c.k != k:
            c = self._tail = Chunk(k, seq, self.file_mode)
            self._chunks[k] = c
            self._keys.append(k)
        elif c.offs is not None:
            c.offs.append(seq & MASK)
        elif seq != c.base + len(c.sids):
            # A gap inside the chunk (skipped sequences): list the offsets from now on.
            start = c.base & MASK
            c.offs = array("H", range(start, start + len(c.sids)))
            c.offs.append(seq & MASK)
        if c.sids is not self._tail_sids:
            self._bind_tail(c)  # a new tail, or its arrays were rewritten
        add_sid, add_ts, add_size, add_loc, add_rlen = self._tail_adds
        add_sid(sid)
        add_ts(ts)
        add_size(size)
        if c.objs is None:
            add_loc(loc)
            add_rlen(rlen)
        else:
            c.objs.append(obj)
        c.live += 1
        self.last = seq
        self.last_ts = ts
        self.msgs += 1
        self.bytes += size
        e = self.per[sid]
        if e is None:
            self.per[sid] = seq
        elif type(e) is int:
            self.per[sid] = Seqs(e, seq)
        else:
            e.arr.append(seq)  # type: ignore[union-attr]
        return sid

    def _bind_tail(self, c: Chunk[T]) -> None:
        """Bind the ``append`` methods of ``c``'s arrays for ``append``. In the compiled build
        ``arr.append(x)`` is a generic method call that looks the method up by name each
        time (about 600 instructions; an append is five or six); a bound method is called
        directly. ``append`` checks the sids array's identity before every use, so a chunk
        whose arrays ``Chunk.rewrite`` replaced is bound again."""
        self._tail_sids = c.sids
        locs, rlens = c.locs, c.rlens
        self._tail_adds = (
            c.sids.append,
            c.tss.append,
            c.sizes.append,
            locs.append if locs is not None else _ignore,
            rlens.append if rlens is not None else _ignore,
        )

    def skip_to(self, seq: int) -> None:
        """``last`` becomes ``seq`` without a message."""
        if seq <= self.last:
            return
        self.last = seq
        if self.msgs == 0:
            self._reset(seq + 1)

    def remove(self, seq: int) -> int:
        """Remove one message; returns its accounted size, or -1 when there is none."""
        if seq < self.first or seq > self.last:
            return -1
        found = self._find(seq)
        if found is None:
            return -1
        c, i = found
        sid = c.sids[i]
        c.sids[i] = -1
        if c.objs is not None:
            c.objs[i] = None
        size = c.sizes[i]
        self.msgs -= 1
        self.bytes -= size
        self._subj_remove(sid, seq)
        c.live -= 1
        if c.live == 0:
            self._drop_chunk(c)
        else:
            dead = len(c.sids) - c.live
            if dead >= _MIN_REWRITE and dead * 2 >= len(c.sids):
                c.rewrite()
        if self.msgs == 0:
            self._reset(self.last + 1)
        elif seq == self.first:
            self.first = self._next_live_after(seq)
        return size

    def _next_live_after(self, seq: int) -> int:
        """The first live seq > seq (there is one: msgs > 0)."""
        for c in self._chunks_from(seq + 1):
            sids = c.sids
            for i in range(c.lower(seq + 1), len(sids)):
                if sids[i] >= 0:
                    return c.seq_at(i)
        raise AssertionError("index: no live message although msgs > 0")

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq`` (past the end: the next store gets ``seq``).

        Returns how many messages were removed.
        """
        if seq <= self.first:
            return 0
        if seq > self.last:
            removed = self.msgs
            self.clear(max(self.last, seq - 1))
            return removed
        removed = 0
        nbytes = 0
        first = self.first
        for c in list(self._chunks_from(first)):
            if c.k << SHIFT >= seq:
                break
            sids, sizes = c.sids, c.sizes
            end = c.lower(seq)
            for i in range(c.lower(first), end):
                sid = sids[i]
                if sid >= 0:
                    removed += 1
                    nbytes += sizes[i]
                    self._subj_remove(sid, c.seq_at(i))
                    sids[i] = -1
                    c.live -= 1
                    if c.objs is not None:
                        c.objs[i] = None
            dead = len(sids) - c.live
            if c.live == 0:
                self._drop_chunk(c)
            elif dead >= _MIN_REWRITE and dead * 2 >= len(sids):
                c.rewrite()
        self.msgs -= removed
        self.bytes -= nbytes
        if self.msgs == 0:
            self._reset(self.last + 1)
        else:
            self.first = self._next_live_after(seq - 1)
        return removed

    def clear(self, last: int) -> None:
        """Drop everything; ``last`` becomes the last sequence."""
        self.last = max(self.last, last)
        self.msgs = 0
        self.bytes = 0
        self.sid_of.clear()
        self.names.clear()
        self.per.clear()
        self.free.clear()
        self.num_subjects = 0
        for _, members in self._caches.values():
            members.clear()
        self._reset(self.last + 1)

    def set_loc(self, seq: int, loc: int) -> None:
        """File mode: the message's record moved (a block rewrite)."""
        found = self._find(seq)
        assert found is not None and found[0].locs is not None
        found[0].locs[found[1]] = loc

    # --- per-message queries ---------------------------------------------------------------

    def is_live(self, seq: int) -> bool:
        if seq < self.first or seq > self.last:
            return False
        c = self._chunks.get(seq >> SHIFT)
        if c is None:
            return False
        i = c.index(seq)
        return i >= 0 and c.sids[i] >= 0

    def locate(self, seq: int) -> tuple[int, int, int] | None:
        """File mode: (location, record length, subject id) of a live ``seq``."""
        c = self._chunks.get(seq >> SHIFT)
        if c is None or seq < self.first:
            return None
        offs = c.offs
        if offs is None:
            i = seq - c.base
            if i < 0 or i >= len(c.sids):
                return None
        else:
            off = seq & MASK
            i = bisect_left(offs, off)
            if i >= len(offs) or offs[i] != off:
                return None
        sid = c.sids[i]
        if sid < 0:
            return None
        return c.locs[i], c.rlens[i], sid  # type: ignore[index]

    def obj(self, seq: int) -> T | None:
        """Memory mode: the object stored for a live ``seq``."""
        found = self._find(seq)
        if found is None or found[0].objs is None:
            return None
        return found[0].objs[found[1]]

    def size(self, seq: int) -> int:
        """The accounted size of a live ``seq``."""
        found = self._find(seq)
        assert found is not None
        return found[0].sizes[found[1]]

    def file_entry(self, seq: int) -> tuple[int, int, int]:
        """File mode: (location, record length, timestamp) of a live ``seq``."""
        found = self._find(seq)
        assert found is not None
        c, i = found
        return c.locs[i], c.rlens[i], c.tss[i]  # type: ignore[index]

    def first_ts(self) -> int:
        if not self.msgs:
            return 0
        found = self._find(self.first)
        assert found is not None
        return found[0].tss[found[1]]

    def num_deleted(self) -> int:
        return self.last - self.first + 1 - self.msgs if self.msgs else 0

    def deleted(self) -> list[int]:
        """The sequences between first and last without a message."""
        if not self.msgs:
            return []
        out: list[int] = []
        expect = self.first
        for seq, _c, _i in self.entries(self.first, self.last):
            if seq > expect:
                out.extend(range(expect, seq))
            expect = seq + 1
        out.extend(range(expect, self.last + 1))
        return out

    # --- scans -----------------------------------------------------------------------------

    def next_live(self, start: int) -> int:
        """First live seq >= start, 0 if none."""
        if start < self.first:
            start = self.first
        if start > self.last:
            return 0
        for c in self._chunks_from(start):
            sids = c.sids
            for i in range(c.lower(start), len(sids)):
                if sids[i] >= 0:
                    return c.seq_at(i)
        return 0

    def prev_live(self, upto: int) -> int:
        """Last live seq <= upto, 0 if none."""
        if upto > self.last:
            upto = self.last
        if upto < self.first:
            return 0
        for c in self._chunks_down_from(upto):
            sids = c.sids
            for i in range(c.lower(upto + 1) - 1, -1, -1):
                if sids[i] >= 0:
                    return c.seq_at(i)
        return 0

    def next_seq(self, start: int, sel: Selection) -> int:
        """First seq >= start whose subject is selected, 0 if none."""
        if sel is None:
            return self.next_live(start)
        if start < self.first:
            start = self.first
        if start > self.last or not sel:
            return 0
        n = len(sel)
        if n > _SMALL_SELECTION:
            found = self._walk_fwd(start, sel, max(256, 32 * n))
            if found >= 0:
                return found
        per = self.per
        best = 0
        for sid in sel:
            e = per[sid]
            assert e is not None
            s = e_next_ge(e, start)
            if s and (not best or s < best):
                best = s
        return best

    def _walk_fwd(self, start: int, sel: Collection[int], budget: int) -> int:
        """Look at most ``budget`` entries: the seq found, 0 at the end, -1 out of budget."""
        for c in self._chunks_from(start):
            sids = c.sids
            lo = c.lower(start)
            end = min(len(sids), lo + budget)
            for i in range(lo, end):
                if sids[i] in sel:
                    return c.seq_at(i)
            budget -= end - lo
            if budget <= 0:
                return -1
        return 0

    def prev_seq(self, upto: int, sel: Selection) -> int:
        """Last seq <= upto whose subject is selected, 0 if none."""
        if sel is None:
            return self.prev_live(upto)
        if upto > self.last:
            upto = self.last
        if upto < self.first or not sel:
            return 0
        n = len(sel)
        if n > _SMALL_SELECTION:
            budget = max(256, 32 * n)
            for c in self._chunks_down_from(upto):
                sids = c.sids
                hi = c.lower(upto + 1) - 1
                end = max(-1, hi - budget)
                for i in range(hi, end, -1):
                    if sids[i] in sel:
                        return c.seq_at(i)
                budget -= hi - end
                if budget <= 0:
                    break
            else:
                return 0
        per = self.per
        best = 0
        for sid in sel:
            e = per[sid]
            assert e is not None
            s = e_prev_le(e, upto)
            if s > best:
                best = s
        return best

    def _count_live_ge(self, start: int) -> int:
        """Live messages with seq >= start (first < start <= last), from the nearer end."""
        k = start >> SHIFT
        keys, chunks = self._keys, self._chunks
        j = bisect_left(keys, k)
        c = chunks.get(k)
        inside = 0
        if c is not None:
            sids = c.sids
            inside = sum(1 for i in range(c.lower(start), len(sids)) if sids[i] >= 0)
            j += 1  # the chunks after it
        if len(keys) - j <= j:
            return inside + sum(chunks[keys[m]].live for m in range(j, len(keys)))
        below = sum(chunks[keys[m]].live for m in range(j - (1 if c is not None else 0)))
        return self.msgs - below - ((c.live - inside) if c is not None else 0)

    def count(self, start: int, sel: Selection) -> int:
        """Messages with seq >= start whose subject is selected."""
        if start > self.last:
            return 0
        per = self.per
        if start <= self.first:
            if sel is None:
                return self.msgs
            return sum(e_count(e) for sid in sel if (e := per[sid]) is not None)
        if sel is None:
            return self._count_live_ge(start)
        span = self.last - start + 1
        if len(sel) * 16 <= span:
            return sum(e_count_ge(e, start) for sid in sel if (e := per[sid]) is not None)
        total = 0
        for c in self._chunks_from(start):
            sids = c.sids
            total += sum(1 for i in range(c.lower(start), len(sids)) if sids[i] in sel)
        return total

    def count_last_per_subject(self, start: int, sel: Selection) -> int:
        """Selected subjects whose last message has seq >= start."""
        per = self.per
        ids = self.live_sids() if sel is None else sel
        return sum(1 for sid in ids if (e := per[sid]) is not None and e_last(e) >= start)

    def last_seqs(self, sel: Selection) -> list[int]:
        per = self.per
        ids = self.live_sids() if sel is None else sel
        return sorted(e_last(e) for sid in ids if (e := per[sid]) is not None)

    def seqs_between(self, lo: int, hi: int, sel: Selection) -> list[int]:
        """Sorted selected seqs in [lo, hi]."""
        lo = max(lo, self.first)
        hi = min(hi, self.last)
        if lo > hi:
            return []
        if sel is not None and len(sel) <= _SMALL_SELECTION:
            out: list[int] = []
            for sid in sel:
                e = self.per[sid]
                assert e is not None
                out.extend(e_seqs(e, lo, hi))
            out.sort()
            return out
        if sel is None:
            return [seq for seq, _c, _i in self.entries(lo, hi)]
        return [seq for seq, c, i in self.entries(lo, hi) if c.sids[i] in sel]

    def subject_counts(self, sel: Selection) -> dict[str, int]:
        per, names = self.per, self.names
        ids = self.live_sids() if sel is None else sel
        return {names[sid]: e_count(per[sid]) for sid in ids}  # type: ignore[arg-type,misc]

    def subject_count(self, sid: int) -> int:
        e = self.per[sid]
        return 0 if e is None else e_count(e)

    def subject_first(self, sid: int) -> int:
        e = self.per[sid]
        return 0 if e is None else e_first(e)

    def subject_last(self, sid: int) -> int:
        e = self.per[sid]
        return 0 if e is None else e_last(e)

    def seq_for_time(self, ts: int) -> int:
        """First live seq stored at or after ``ts`` (timestamps assumed non-decreasing)."""
        if not self.msgs:
            return self.last + 1
        keys, chunks = self._keys, self._chunks
        for k in keys:
            c = chunks[k]
            tss = c.tss
            if tss[-1] < ts:
                continue
            for i in range(bisect_left(tss, ts), len(tss)):
                if c.sids[i] >= 0:
                    return c.seq_at(i)
        return self.last + 1

    # --- introspection ---------------------------------------------------------------------

    def nbytes(self) -> int:
        """Bytes held by the per-message arrays and per-subject lists (no object headers)."""
        total = sum(c.nbytes() for c in self._chunks.values())
        for e in self.per:
            if e is not None and not isinstance(e, int):
                total += e.arr.itemsize * e.arr.buffer_info()[1]
        return total

    def num_chunks(self) -> int:
        return len(self._chunks)
