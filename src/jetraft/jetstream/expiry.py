"""What an ``Expire`` entry removes: ``max_age`` and per-message ``Nats-TTL`` expiry, and the
subject delete markers it leaves (stream config ``subject_delete_marker_ttl``, see
``markers``).

The stream state machine (``stream.py``) owns a ``TtlSchedule`` beside its store and applies
``Expire(now_ns)`` with these functions; "now" comes in the entry, so every replica removes
the same messages. ``next_expiry_ns`` tells the runtime when to propose the next one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.markers import is_marker, marker_header
from jetraft.jetstream.publish_headers import MSG_TTL, NS_PER_S, nats_headers, parse_ttl_s
from jetraft.jetstream.store.types import StoredMsg, StreamStore

NEVER = -1  # the expiry time that stands for Nats-TTL "never" in ``TtlSchedule.entries``


class TtlSchedule:
    """The messages stored with a ``Nats-TTL``: when each expires, and those that never do."""

    def __init__(self) -> None:
        # (expires_at_ns, seq) of messages with a Nats-TTL.
        self.heap: list[tuple[int, int]] = []
        # Messages whose Nats-TTL is "never": max_age does not remove them (nats-server's
        # rule); other limits, purges and deletes still do. May hold removed sequences
        # (pruned below the first one at each expiry), never misses a stored one.
        self.never: set[int] = set()

    def __len__(self) -> int:
        return len(self.heap) + len(self.never)

    def add(self, seq: int, ts_ns: int, ttl_s: int) -> None:
        """Message ``seq`` stored at ``ts_ns`` with a Nats-TTL of ``ttl_s`` (see
        ``parse_ttl_s``: -1 never, 0 none)."""
        if ttl_s > 0:
            heapq.heappush(self.heap, (ts_ns + ttl_s * NS_PER_S, seq))
        elif ttl_s < 0:
            self.never.add(seq)

    def add_stored(self, msg: StoredMsg) -> None:
        """A stored message, by its headers (recovery: an invalid Nats-TTL counts as none,
        the publish that carried it was refused)."""
        if not msg.headers:
            return
        text = nats_headers(msg.headers).get(MSG_TTL)
        if text is None:
            return
        try:
            ttl_s = parse_ttl_s(text)
        except ApiError:
            return
        self.add(msg.seq, msg.ts_ns, ttl_s)

    def entries(self, first: int) -> list[tuple[int, int]]:
        """(expires_at_ns, seq) for a snapshot, TTL "never" as an expiry time of ``NEVER``
        (only for sequences from ``first`` on, the stored ones)."""
        ttl = list(self.heap)
        if self.never:
            ttl += [(NEVER, seq) for seq in sorted(self.never) if seq >= first]
        return ttl

    def load(self, ttl: list[tuple[int, int]]) -> None:
        """Replace the schedule with a snapshot's (see ``entries``)."""
        self.heap = [(at, seq) for at, seq in ttl if at != NEVER]
        heapq.heapify(self.heap)
        self.never = {seq for at, seq in ttl if at == NEVER}


def scan(store: StreamStore, start_seq: int) -> Iterator[StoredMsg]:
    """The stored messages from ``start_seq`` on, in order."""
    seq = max(start_seq, 1)
    while True:
        msg = store.load_next(seq)
        if msg is None:
            return
        yield msg
        seq = msg.seq + 1


def expire(store: StreamStore, ttl: TtlSchedule, now_ns: int, max_age: int) -> list[int]:
    """Remove what is due at ``now_ns`` (``max_age``, 0 for none, and the TTLs); returns the
    sequences removed."""
    never = ttl.never
    if never:
        first = store.bounds()[0]
        never.difference_update([s for s in never if s < first])
    removed = list(store.expire(now_ns, never)) if max_age > 0 else []
    heap = ttl.heap
    while heap and heap[0][0] <= now_ns:
        _, seq = heapq.heappop(heap)
        if store.remove(seq):
            removed.append(seq)
    return removed


def expire_leaving_markers(
    store: StreamStore,
    ttl: TtlSchedule,
    now_ns: int,
    max_age: int,
    marker_ttl_s: int,
    removed: Callable[[list[int]], None],
    stored: Callable[[int, str, list[int]], None],
) -> int:
    """Expire as ``expire`` does, but the last message of a subject leaves a subject delete
    marker in its place (see ``markers``); returns how many went. The stream hears of each
    removal (``removed``) and of each marker stored (``stored``) as it happens."""
    heap = ttl.heap
    due: set[int] = set()
    if max_age > 0:
        cutoff = now_ns - max_age
        for msg in scan(store, store.bounds()[0]):
            if msg.ts_ns > cutoff:
                break
            if msg.seq not in ttl.never:
                due.add(msg.seq)
    while heap and heap[0][0] <= now_ns:
        due.add(heapq.heappop(heap)[1])
    gone = 0
    for seq in sorted(due):
        held = store.load(seq)
        if held is None:
            continue
        subject = held.subject
        last = store.subjects_state(subject).get(subject, 0) == 1
        if not last or is_marker(held.headers):
            if store.remove(seq):
                gone += 1
                removed([seq])
            continue
        mseq, limited = store.store(subject, marker_header(marker_ttl_s), b"", now_ns)
        heapq.heappush(heap, (now_ns + marker_ttl_s * NS_PER_S, mseq))
        if store.remove(seq):  # the marker's rollup of its subject
            gone += 1
            limited = [*limited, seq]
        stored(mseq, subject, limited)
    return gone


def next_expiry_ns(store: StreamStore, ttl: TtlSchedule, max_age: int) -> int | None:
    """When the next Expire entry would remove something (None: nothing to expire)."""
    due: int | None = None
    if max_age > 0:
        state = store.state()
        first_ts = state.first_ts_ns
        if ttl.never and state.msgs:
            first_ts = store.oldest_ts(ttl.never)
        if state.msgs and first_ts:
            due = first_ts + max_age
    if ttl.heap:
        ttl_due = ttl.heap[0][0]
        due = ttl_due if due is None else min(due, ttl_due)
    return due
