"""The per-subject part of the store's index: the sorted sequences of one subject.

A subject holding one message keeps it as a plain ``int`` (the common KV case: no
allocation); once it holds more, a ``Seqs``: an ``array('Q')`` with a head offset, so that
removing the oldest (the per-subject-limit case) is O(1). The ``e_*`` functions read either
form. ``SeqIndex`` (``_index.py``) keeps one such entry per subject id.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right


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

