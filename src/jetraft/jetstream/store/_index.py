"""The in-memory index both stores keep: per-sequence arrays and a per-subject index.

Per sequence (aligned arrays, position = seq - base): subject id (-1 = no message), timestamp,
accounted size, and either the file location (file store) or the message object (memory store).
Sequences between ``first`` and ``last`` without a message are "deleted" and also listed, sorted,
in ``dels`` so that counting messages above a sequence is a bisect, not a walk.

Per subject: the sorted sequences of that subject, kept as a plain ``int`` while a subject holds
one message (the common KV case, no allocation) and as an ``array('Q')`` with a head offset once
it holds more (removing the oldest, the per-subject-limit case, is O(1)). Subject ids are
recycled when a subject empties.

Filters with wildcards resolve to sets of subject ids, cached per filter tuple and kept current
incrementally as subjects appear and disappear (a new subject costs one predicate call per
cached filter). Scans pick the cheaper of walking the sequence array and bisecting the
per-subject lists, with a bounded walk first because matches are usually dense.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from collections.abc import Collection, Iterator
from typing import Generic, TypeVar

from jetraft.jetstream.store._match import Matcher, compile_filters, is_literal

T = TypeVar("T")

_SMALL_SELECTION = 8  # up to this many subjects: bisect their lists instead of walking
_MAX_CACHED_FILTERS = 64
_TRIM_MIN = 4096  # trim array heads only past this many dead slots (amortised O(1))


class Seqs:
    """Sorted sequences of one subject with >= 2 messages; ``arr[head:]`` is live."""

    __slots__ = ("arr", "head")

    def __init__(self, first: int, second: int) -> None:
        self.arr = array("Q", (first, second))
        self.head = 0


Entry = int | Seqs


def e_count(e: Entry) -> int:
    return 1 if type(e) is int else len(e.arr) - e.head  # type: ignore[union-attr]


def e_first(e: Entry) -> int:
    return e if type(e) is int else e.arr[e.head]  # type: ignore[union-attr]


def e_last(e: Entry) -> int:
    return e if type(e) is int else e.arr[-1]  # type: ignore[union-attr]


def e_count_ge(e: Entry, seq: int) -> int:
    if type(e) is int:
        return 1 if e >= seq else 0
    assert isinstance(e, Seqs)
    return len(e.arr) - bisect_left(e.arr, seq, e.head)


def e_next_ge(e: Entry, seq: int) -> int:
    """The first sequence >= seq, 0 if none."""
    if type(e) is int:
        return e if e >= seq else 0
    assert isinstance(e, Seqs)
    i = bisect_left(e.arr, seq, e.head)
    return e.arr[i] if i < len(e.arr) else 0


def e_prev_le(e: Entry, seq: int) -> int:
    """The last sequence <= seq, 0 if none."""
    if type(e) is int:
        return e if e <= seq else 0
    assert isinstance(e, Seqs)
    i = bisect_right(e.arr, seq, e.head)
    return e.arr[i - 1] if i > e.head else 0


def e_seqs(e: Entry, lo: int, hi: int) -> list[int]:
    """The sequences in [lo, hi]."""
    if type(e) is int:
        return [e] if lo <= e <= hi else []
    assert isinstance(e, Seqs)
    a = e.arr
    return a[bisect_left(a, lo, e.head) : bisect_right(a, hi, e.head)].tolist()


Selection = Collection[int] | None
"""Subject ids to consider; None means every subject."""


class SeqIndex(Generic[T]):
    """Sequence and subject bookkeeping; ``T`` is what the memory store keeps per message."""

    __slots__ = (
        "_caches",
        "base",
        "bytes",
        "dels",
        "dels_head",
        "file_mode",
        "first",
        "free",
        "last",
        "last_ts",
        "locs",
        "msgs",
        "names",
        "num_subjects",
        "objs",
        "per",
        "rlens",
        "sid_of",
        "sids",
        "sizes",
        "tss",
    )

    def __init__(self, file_mode: bool) -> None:
        self.file_mode = file_mode
        self.first = 1  # first live seq; last + 1 when empty
        self.last = 0
        self.last_ts = 0
        self.base = 1  # seq at array position 0
        self.msgs = 0
        self.bytes = 0
        self.sids = array("i")
        self.tss = array("q")
        self.sizes = array("I")
        self.locs = array("Q")  # file mode: (block << 40) | offset
        self.rlens = array("I")  # file mode: record length
        self.objs: list[T | None] = []  # memory mode
        self.dels = array("Q")
        self.dels_head = 0
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

    def _subj_add(self, sid: int, seq: int) -> None:
        e = self.per[sid]
        if e is None:
            self.per[sid] = seq
        elif type(e) is int:
            self.per[sid] = Seqs(e, seq)
        else:
            e.arr.append(seq)  # type: ignore[union-attr]

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

    # --- mutation --------------------------------------------------------------------------

    def _reset(self, first: int) -> None:
        """No messages any more; ``first`` becomes the next sequence to be stored."""
        self.first = self.base = first
        for arr in (self.sids, self.tss, self.sizes, self.locs, self.rlens, self.dels):
            del arr[:]
        self.objs.clear()
        self.dels_head = 0

    def _pad(self, upto: int) -> None:
        """Sequences last+1..upto become holes (msgs > 0)."""
        n = upto - self.last
        if n <= 0:
            return
        self.sids.extend(array("i", (-1,)) * n)
        self.tss.extend(array("q", (self.last_ts,)) * n)
        self.sizes.extend(array("I", (0,)) * n)
        if self.file_mode:
            self.locs.extend(array("Q", (0,)) * n)
            self.rlens.extend(array("I", (0,)) * n)
        else:
            self.objs.extend([None] * n)
        self.dels.extend(array("Q", range(self.last + 1, upto + 1)))
        self.last = upto

    def append(
        self, seq: int, subject: str, ts: int, size: int, loc: int, rlen: int, obj: T | None
    ) -> int:
        """Record a stored message; returns its subject id."""
        if seq <= self.last:
            raise ValueError(f"sequence {seq} not above last sequence {self.last}")
        if self.msgs == 0:
            self._reset(seq)
        elif seq > self.last + 1:
            self._pad(seq - 1)
        sid = self.sid_of.get(subject, -1)
        if sid < 0:
            sid = self._new_sid(subject)
        self.sids.append(sid)
        self.tss.append(ts)
        self.sizes.append(size)
        if self.file_mode:
            self.locs.append(loc)
            self.rlens.append(rlen)
        else:
            self.objs.append(obj)
        self.last = seq
        self.last_ts = ts
        self.msgs += 1
        self.bytes += size
        self._subj_add(sid, seq)
        return sid

    def skip_to(self, seq: int) -> None:
        """``last`` becomes ``seq`` without a message."""
        if seq <= self.last:
            return
        if self.msgs == 0:
            self.last = seq
            self._reset(seq + 1)
        else:
            self._pad(seq)

    def remove(self, seq: int) -> int:
        """Remove one message; returns its accounted size, or -1 when there is none."""
        if seq < self.first or seq > self.last:
            return -1
        i = seq - self.base
        sid = self.sids[i]
        if sid < 0:
            return -1
        self.sids[i] = -1
        if not self.file_mode:
            self.objs[i] = None
        size = self.sizes[i]
        self.msgs -= 1
        self.bytes -= size
        self._subj_remove(sid, seq)
        if self.msgs == 0:
            self._reset(self.last + 1)
        elif seq == self.first:
            self._advance_first(seq + 1)
        else:
            d = self.dels
            if not len(d) or d[-1] < seq:
                d.append(seq)
            else:
                insort(d, seq, self.dels_head)
        return size

    def _advance_first(self, start: int) -> None:
        """First becomes the first live seq >= start (there is one: msgs > 0)."""
        sids, base = self.sids, self.base
        i = start - base
        while sids[i] < 0:
            i += 1
        first = self.first = base + i
        d, h = self.dels, self.dels_head
        n = len(d)
        if h < n and d[h] < first:
            h = bisect_left(d, first, h)
        if h > _TRIM_MIN and h * 2 > n:
            del d[:h]
            h = 0
        self.dels_head = h
        if i > _TRIM_MIN and i * 2 > len(sids):
            for arr in (sids, self.tss, self.sizes, self.locs, self.rlens):
                del arr[:i]
            if not self.file_mode:
                del self.objs[:i]
            self.base = first

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
        sids, base = self.sids, self.base
        removed = 0
        nbytes = 0
        for i in range(self.first - base, seq - base):
            sid = sids[i]
            if sid >= 0:
                removed += 1
                nbytes += self.sizes[i]
                self._subj_remove(sid, base + i)
                sids[i] = -1
                if not self.file_mode:
                    self.objs[i] = None
        self.msgs -= removed
        self.bytes -= nbytes
        if self.msgs == 0:
            self._reset(self.last + 1)
        else:
            self._advance_first(seq)
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

    # --- queries ---------------------------------------------------------------------------

    def is_live(self, seq: int) -> bool:
        return self.first <= seq <= self.last and self.sids[seq - self.base] >= 0

    def first_ts(self) -> int:
        return self.tss[self.first - self.base] if self.msgs else 0

    def deleted(self) -> list[int]:
        return self.dels[self.dels_head :].tolist()

    def num_deleted(self) -> int:
        return len(self.dels) - self.dels_head

    def next_live(self, start: int) -> int:
        """First live seq >= start, 0 if none."""
        if start < self.first:
            start = self.first
        last = self.last
        if start > last:
            return 0
        sids, base = self.sids, self.base
        for i in range(start - base, last - base + 1):
            if sids[i] >= 0:
                return base + i
        return 0

    def prev_live(self, upto: int) -> int:
        """Last live seq <= upto, 0 if none."""
        if upto > self.last:
            upto = self.last
        if upto < self.first:
            return 0
        sids, base = self.sids, self.base
        for i in range(upto - base, self.first - base - 1, -1):
            if sids[i] >= 0:
                return base + i
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
        """Walk at most ``budget`` slots: the seq found, 0 at the end, -1 out of budget."""
        sids, base = self.sids, self.base
        lo = start - base
        hi = self.last - base + 1
        end = min(hi, lo + budget)
        for i in range(lo, end):
            if sids[i] in sel:
                return base + i
        return 0 if end == hi else -1

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
            sids, base = self.sids, self.base
            hi = upto - base
            lo = self.first - base
            end = max(lo - 1, hi - max(256, 32 * n))
            for i in range(hi, end, -1):
                if sids[i] in sel:
                    return base + i
            if end == lo - 1:
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
            d = self.dels
            holes = len(d) - bisect_left(d, start, self.dels_head)
            return self.last - start + 1 - holes
        span = self.last - start + 1
        if len(sel) * 16 <= span:
            return sum(e_count_ge(e, start) for sid in sel if (e := per[sid]) is not None)
        window = self.sids[start - self.base :]
        return sum(1 for sid in window if sid in sel)

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
        sids, base = self.sids, self.base
        if sel is not None and len(sel) <= _SMALL_SELECTION:
            out: list[int] = []
            for sid in sel:
                e = self.per[sid]
                assert e is not None
                out.extend(e_seqs(e, lo, hi))
            out.sort()
            return out
        if sel is None:
            return [base + i for i in range(lo - base, hi - base + 1) if sids[i] >= 0]
        return [base + i for i in range(lo - base, hi - base + 1) if sids[i] in sel]

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
        tss = self.tss
        i = bisect_left(tss, ts, self.first - self.base, len(tss))
        if i >= len(tss):
            return self.last + 1
        return self.next_live(self.base + i) or self.last + 1
