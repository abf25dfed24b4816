"""The dedupe window (a dict of ids to sequences, deques of the ids and times in order)
against the OrderedDict it replaced: any sequence of adds, re-adds, prunes, snapshot round
trips and clears leaves the same ids with the same values in the same order, and the same
pruning hint."""

from __future__ import annotations

import gc
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.dedupe import DedupeWindow


class _Reference:
    """The window as it was: one OrderedDict, re-adds moved to the end."""

    def __init__(self) -> None:
        self.ids: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.prune_due = -1

    def prune(self, now_ns: int, window: int) -> None:
        if now_ns <= self.prune_due:
            return
        cutoff = now_ns - window
        dd = self.ids
        while dd:
            msg_id, (_, ts) = next(iter(dd.items()))
            if ts >= cutoff:
                self.prune_due = ts + window
                return
            del dd[msg_id]
        self.prune_due = -1

    def remember(self, msg_id: str, seq: int, ts_ns: int) -> None:
        self.ids[msg_id] = (seq, ts_ns)
        self.ids.move_to_end(msg_id)

    def entries(self) -> list[tuple[str, int, int]]:
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self.ids.items()]


_IDS = st.sampled_from([f"id{i}" for i in range(12)])
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), _IDS, st.integers(0, 60)),
        st.tuples(st.just("remember"), _IDS, st.integers(0, 60)),
        st.tuples(st.just("prune"), st.integers(0, 80), st.integers(0, 30)),
        st.tuples(st.just("reload"), st.just(""), st.just(0)),
        st.tuples(st.just("clear"), st.just(""), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=400)
@given(_OPS)
def test_window_matches_the_ordered_dict_it_replaced(ops: list[tuple[str, object, int]]) -> None:
    win = DedupeWindow()
    ref = _Reference()
    seq = 0
    for op, a, b in ops:
        if op == "add":
            msg_id = str(a)
            if msg_id in win.ids:  # the publish path adds only ids it did not find
                continue
            seq += 1
            win.add_new(msg_id, seq, b)
            ref.remember(msg_id, seq, b)
        elif op == "remember":
            seq += 1
            win.remember(str(a), seq, b)
            ref.remember(str(a), seq, b)
        elif op == "prune":
            now = int(str(a))
            win.prune(now, b)
            ref.prune(now, b)
        elif op == "reload":
            win.load(win.entries())
            ref.prune_due = -1
        else:
            win.clear()
            ref.ids.clear()
            ref.prune_due = -1
        assert win.entries() == ref.entries()
        assert win.prune_due == ref.prune_due
        assert len(win) == len(ref.ids)


def test_prune_after_a_re_add_keeps_the_younger_entries_behind_it() -> None:
    """An id added again goes last: pruning must not stop at its old place (it would keep
    an expired id listed after it) nor drop it with the old time."""
    win = DedupeWindow()
    win.add_new("a", 1, 10)
    win.add_new("b", 2, 20)
    win.remember("a", 3, 50)
    win.prune(now_ns=60, window=30)  # cutoff 30: b (20) expires, a (50) stays
    assert win.entries() == [("a", 3, 50)]
    assert win.prune_due == 80


def test_the_id_map_is_left_alone_by_the_cyclic_collector() -> None:
    """Ids map to plain ints: a dict holding only strings and ints is untracked, so a full
    collection does not walk a window of several hundred thousand ids (a dict of tuples is
    walked entry by entry)."""
    win = DedupeWindow()
    for i in range(100):
        win.add_new(f"id{i}", i + 1, 1_000_000_000 + i)
    win.remember("id3", 101, 2_000_000_000)
    assert not gc.is_tracked(win.ids)
