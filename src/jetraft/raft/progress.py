"""What a leader knows about each follower's log, and the flow control built on it.

A follower is in one of three states (as in etcd's raft):
- PROBE: we do not know where its log matches ours; one AppendEntries at a time, backing
  off on each rejection until one is accepted;
- REPLICATE: the logs match up to `match`; AppendEntries are pipelined optimistically
  (`next` moves ahead when sent) up to `max_inflight` messages not yet acknowledged;
- SNAPSHOT: the entries it needs are compacted away; the snapshot `snap` travels in
  chunks, one in flight at a time (`snap_offset` bytes acknowledged so far); nothing else
  is sent until the follower has installed it. An unanswered chunk is sent again.
"""

from __future__ import annotations

import enum
from collections import deque

from .types import Snapshot


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    __slots__ = (
        "inflight",
        "last_heard_tick",
        "learner",
        "leaving_ticks",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snap",
        "snap_offset",
        "snapshot_wait_ticks",
        "state",
    )

    def __init__(self, next_index: int, *, learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False  # PROBE: an AppendEntries is out, wait for its answer
        self.pending_snapshot = 0  # SNAPSHOT: index of the snapshot sent
        self.snapshot_wait_ticks = 0  # SNAPSHOT: ticks since the last chunk was sent
        self.snap: Snapshot | None = None  # SNAPSHOT: the snapshot being sent
        self.snap_offset = 0  # SNAPSHOT: bytes of it the follower acknowledged
        self.inflight: deque[int] = deque()  # REPLICATE: last index of each unacked message
        self.recent_active = False  # heard from it in this check-quorum period
        self.last_heard_tick = -1  # leader's tick count when we last heard from it
        self.learner = learner
        # >= 0: removed by the configuration in force; still sent the log (and the
        # commit index) so that it learns of its removal, for a while (ticks counted
        # once the removal is committed).
        self.leaving_ticks = -1

    def __repr__(self) -> str:
        return (
            f"Progress({self.state.value} match={self.match} next={self.next} "
            f"inflight={len(self.inflight)})"
        )

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snap = None
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.snap = None
        self.inflight.clear()

    def become_snapshot(self, snap: Snapshot) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = snap.meta.index
        self.snap = snap
        self.snap_offset = 0
        self.snapshot_wait_ticks = 0
        self.inflight.clear()

    def is_paused(self, max_inflight: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= max_inflight
        return True

    def sent(self, last_index: int, has_entries: bool) -> None:
        """An AppendEntries ending at last_index went out."""
        if self.state is ProgressState.REPLICATE:
            if has_entries:
                self.next = last_index + 1
                self.inflight.append(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def maybe_update(self, index: int) -> bool:
        """The follower's log matches ours up to index. True if that is news."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def maybe_decr_to(self, rejected: int, hint_index: int) -> bool:
        """AppendEntries at prev_index `rejected` was refused; the follower suggests that
        the logs may agree at hint_index. False if the rejection is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        if hint_index < self.match:
            # The follower no longer holds entries it acknowledged: its disk lost them
            # (a corrupt log). Start again from what it has.
            self.match = hint_index
        self.next = max(min(rejected, hint_index + 1), self.match + 1)
        self.probe_sent = False
        return True
