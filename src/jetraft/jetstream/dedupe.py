"""A stream's dedupe window: the ``Nats-Msg-Id`` of every message stored within the stream's
``duplicate_window``, with its sequence and time, oldest first.

The stream state machine (``stream.py``) owns one and decides with it; entries leave by
their time against the time of the publish that looks (both stamped by the proposer, so
every replica prunes alike). It outlives the messages: a message removed from the store
still dedupes until its window passes, so it travels in snapshots (``entries``/``load``).
The per-publish paths of ``Stream`` read and add to ``ids`` directly (no call per message).
"""

from __future__ import annotations

from collections import OrderedDict


class DedupeWindow:
    """Nats-Msg-Id -> (seq, ts_ns), oldest first (for pruning by entry time)."""

    def __init__(self) -> None:
        self.ids: OrderedDict[str, tuple[int, int]] = OrderedDict()
        # No entry expires before this time (the oldest one's time + the window; -1: look):
        # spares the per-publish look at the oldest entry. A hint, never a decision.
        self.prune_due = -1

    def __len__(self) -> int:
        return len(self.ids)

    def clear(self) -> None:
        self.ids.clear()
        self.prune_due = -1

    def prune(self, now_ns: int, window: int) -> None:
        """Forget the ids stored before ``now_ns - window``."""
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
        dd = self.ids
        dd[msg_id] = (seq, ts_ns)
        dd.move_to_end(msg_id)

    def entries(self) -> list[tuple[str, int, int]]:
        """(msg id, seq, ts), oldest first: what a snapshot keeps."""
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self.ids.items()]

    def load(self, entries: list[tuple[str, int, int]]) -> None:
        """Replace the window with a snapshot's (see ``entries``)."""
        self.ids = OrderedDict((msg_id, (seq, ts)) for msg_id, seq, ts in entries)
        self.prune_due = -1
