"""A stream's dedupe window: the ``Nats-Msg-Id`` of every message stored within the stream's
``duplicate_window``, with its sequence and time, oldest first.

The stream state machine (``stream.py``) owns one and decides with it; entries leave by
their time against the time of the publish that looks (both stamped by the proposer, so
every replica prunes alike). It outlives the messages: a message removed from the store
still dedupes until its window passes, so it travels in snapshots (``entries``/``load``).
The per-publish paths of ``Stream`` read ``ids`` and add through ``add_new`` (or inline, as
``add_new`` does: a plain dict store and a deque append).

Why a plain dict and a deque rather than an OrderedDict: a new id is the per-publish case,
and an OrderedDict's store also allocates a list node and looks the key up a second time
(its index in the table: one more memory miss in a window of several hundred thousand
ids), and mypyc calls an OrderedDict's methods generically where it calls a dict's
directly. A plain dict cannot give its oldest key cheaply once keys were deleted from its
front (each look scans the deleted slots from the start), hence ``order``: the ids in the
order they were added, which pruning pops from the left.
"""

from __future__ import annotations

from collections import deque


class DedupeWindow:
    """Nats-Msg-Id -> (seq, ts_ns), oldest first (for pruning by entry time).

    ``ids`` keeps insertion order (a re-added id moves to the end, as the OrderedDict this
    replaced did with ``move_to_end``); ``order`` lists the same ids in the same order
    unless ``reordered`` says a re-add left it stale, in which case it is rebuilt from
    ``ids`` before it is used."""

    def __init__(self) -> None:
        self.ids: dict[str, tuple[int, int]] = {}
        self.order: deque[str] = deque()
        self.reordered = False
        # No entry expires before this time (the oldest one's time + the window; -1: look):
        # spares the per-publish look at the oldest entry. A hint, never a decision.
        self.prune_due = -1

    def __len__(self) -> int:
        return len(self.ids)

    def clear(self) -> None:
        self.ids.clear()
        self.order.clear()
        self.reordered = False
        self.prune_due = -1

    def prune(self, now_ns: int, window: int) -> None:
        """Forget the ids stored before ``now_ns - window``."""
        if now_ns <= self.prune_due:
            return
        cutoff = now_ns - window
        dd = self.ids
        if self.reordered:
            self.order = deque(dd)
            self.reordered = False
        order = self.order
        while order:
            msg_id = order[0]
            ts = dd[msg_id][1]
            if ts >= cutoff:
                self.prune_due = ts + window
                return
            order.popleft()
            del dd[msg_id]
        self.prune_due = -1

    def add_new(self, msg_id: str, seq: int, ts_ns: int) -> None:
        """Remember an id the window does not hold (the publish path looked it up first)."""
        self.ids[msg_id] = (seq, ts_ns)
        self.order.append(msg_id)

    def remember(self, msg_id: str, seq: int, ts_ns: int) -> None:
        """Remember an id, held or not; a held one moves to the end with its new values."""
        dd = self.ids
        if msg_id in dd:
            del dd[msg_id]  # stored again below: last in the dict's order
            self.reordered = True
            dd[msg_id] = (seq, ts_ns)
            return
        dd[msg_id] = (seq, ts_ns)
        self.order.append(msg_id)

    def entries(self) -> list[tuple[str, int, int]]:
        """(msg id, seq, ts), oldest first: what a snapshot keeps."""
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self.ids.items()]

    def load(self, entries: list[tuple[str, int, int]]) -> None:
        """Replace the window with a snapshot's (see ``entries``)."""
        self.ids = {msg_id: (seq, ts) for msg_id, seq, ts in entries}
        self.order = deque(self.ids)
        self.reordered = False
        self.prune_due = -1
