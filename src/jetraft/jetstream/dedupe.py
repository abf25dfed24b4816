"""A stream's dedupe window: the ``Nats-Msg-Id`` of every message stored within the stream's
``duplicate_window``, with its sequence and time, oldest first.

The stream state machine (``stream.py``) owns one and decides with it; entries leave by
their time against the time of the publish that looks (both stamped by the proposer, so
every replica prunes alike). It outlives the messages: a message removed from the store
still dedupes until its window passes, so it travels in snapshots (``entries``/``load``).
The per-publish paths of ``Stream`` read ``ids`` and add as ``add_new`` does, inline (no
call per message).

The layout serves the per-publish case, a new id, in a window of several hundred thousand:
``ids`` is a plain dict from id to sequence, ``order`` and ``times`` two deques with each
id and its time in the order they were added, which pruning pops from the left. An
OrderedDict of (seq, time) tuples, which this replaced, allocates a list node and a tuple
per id and looks the key up twice to store it (each a memory miss in a table that size),
mypyc calls its methods generically, and a dict of tuples is one more container the
cyclic garbage collector walks in full, entry by entry, at each full collection (a dict
holding only strings and ints it leaves alone). A plain dict cannot give its oldest key
cheaply once keys were deleted from its front (each look scans the deleted slots from the
start), hence the deques.
"""

from __future__ import annotations

from collections import deque


class DedupeWindow:
    """Nats-Msg-Id -> seq, with the ids and their times oldest first (for pruning by time).

    ``order`` lists the keys of ``ids`` in the dict's order, ``times`` their times at the
    same positions. Re-adding an id it holds (``remember``: rebuilding the window from the
    store) moves it to the end with its new sequence and time, as the OrderedDict's
    ``move_to_end`` did; its old place in the deques stays until the next prune or
    ``entries`` drops it (``stale``), which keeps a rebuild with many re-adds linear."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.order: deque[str] = deque()
        self.times: deque[int] = deque()
        self.stale = False  # a re-add left an old place in the deques (see ``remember``)
        # No entry expires before this time (the oldest one's time + the window; -1: look):
        # spares the per-publish look at the oldest entry. A hint, never a decision.
        self.prune_due = -1

    def __len__(self) -> int:
        return len(self.ids)

    def clear(self) -> None:
        self.ids.clear()
        self.order.clear()
        self.times.clear()
        self.stale = False
        self.prune_due = -1

    def prune(self, now_ns: int, window: int) -> None:
        """Forget the ids stored before ``now_ns - window``."""
        if now_ns <= self.prune_due:
            return
        if self.stale:
            self._compact()
        cutoff = now_ns - window
        dd = self.ids
        order = self.order
        times = self.times
        while times:
            ts = times[0]
            if ts >= cutoff:
                self.prune_due = ts + window
                return
            times.popleft()
            del dd[order.popleft()]
        self.prune_due = -1

    def add_new(self, msg_id: str, seq: int, ts_ns: int) -> None:
        """Remember an id the window does not hold (the publish path looked it up first)."""
        self.ids[msg_id] = seq
        self.order.append(msg_id)
        self.times.append(ts_ns)

    def remember(self, msg_id: str, seq: int, ts_ns: int) -> None:
        """Remember an id, held or not; a held one moves to the end with its new values
        (its old place in the deques turns stale until ``_compact``)."""
        dd = self.ids
        if msg_id in dd:
            del dd[msg_id]  # stored again below: last in the dict's order
            self.stale = True
        dd[msg_id] = seq
        self.order.append(msg_id)
        self.times.append(ts_ns)

    def _compact(self) -> None:
        """Drop the stale places re-adds left in the deques: an id's place is its last."""
        seen: set[str] = set()
        order: list[str] = []
        times: list[int] = []
        for msg_id, ts in zip(reversed(self.order), reversed(self.times), strict=True):
            if msg_id not in seen:
                seen.add(msg_id)
                order.append(msg_id)
                times.append(ts)
        order.reverse()
        times.reverse()
        self.order = deque(order)
        self.times = deque(times)
        self.stale = False

    def entries(self) -> list[tuple[str, int, int]]:
        """(msg id, seq, ts), oldest first: what a snapshot keeps."""
        if self.stale:
            self._compact()
        dd = self.ids
        return [(msg_id, dd[msg_id], ts) for msg_id, ts in zip(self.order, self.times, strict=True)]

    def load(self, entries: list[tuple[str, int, int]]) -> None:
        """Replace the window with a snapshot's (see ``entries``)."""
        self.ids = {msg_id: seq for msg_id, seq, _ in entries}
        time_of = {msg_id: ts for msg_id, _, ts in entries}
        self.order = deque(self.ids)
        self.times = deque([time_of[msg_id] for msg_id in self.ids])
        self.stale = False
        self.prune_due = -1
