"""The in-memory RAFT log of one replica: entries since the last compaction, with marks.

Marks, always `offset <= applied <= committed <= last_index` and `stable <= last_index`:
- offset: index (and term) of the last compacted entry; entries start at offset + 1;
- stable: entries up to here are durable (reported back through RaftCore.advance);
- committed: known committed; applied: handed to the state machine through a Ready.

The log also tracks which configuration is in force: the one in the latest CONFIG entry
(committed or not), else the one at the offset (from the snapshot or the bootstrap peers).
"""

from __future__ import annotations

from collections.abc import Sequence

from .membership import decode_membership
from .types import Entry, EntryKind, Membership, Snapshot


class LogSafetyError(RuntimeError):
    """An operation would change or drop a committed entry: a bug or a broken disk."""


class RaftLog:
    def __init__(
        self,
        base_membership: Membership,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        commit: int = 0,
    ) -> None:
        self.offset = 0
        self.offset_term = 0
        self.snapshot: Snapshot | None = None  # latest full snapshot, sent to lagging peers
        self.pending_snapshot: Snapshot | None = None  # received from a leader, not durable
        self._entries: list[Entry] = []
        self._configs: list[tuple[int, Membership]] = []
        self._base_membership = base_membership
        if snapshot is not None:
            self.snapshot = snapshot
            self.offset, self.offset_term = snapshot.meta.index, snapshot.meta.term
            self._base_membership = snapshot.meta.membership
        self._load(entries)
        self.stable = self.last_index
        self.committed = max(self.offset, min(commit, self.last_index))
        self.applied = self.offset

    def _load(self, entries: Sequence[Entry]) -> None:
        """Keep the recovered entries that continue the offset contiguously, in term order
        (whatever is older than the snapshot is covered by it)."""
        prev_term = self.offset_term
        expected = self.offset + 1
        for e in entries:
            if e.index < expected:
                continue
            if e.index != expected or e.term < prev_term:
                break
            self._push(e)
            prev_term, expected = e.term, expected + 1

    # ------------------------------------------------------------------ queries
    @property
    def first_index(self) -> int:
        return self.offset + 1

    @property
    def last_index(self) -> int:
        return self.offset + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.offset_term

    def term(self, index: int) -> int | None:
        """Term of the entry at index; None if compacted away or not in the log."""
        if index == self.offset:
            return self.offset_term
        if index < self.offset or index > self.last_index:
            return None
        return self._entries[index - self.offset - 1].term

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's election restriction: is a log ending at (last_index, last_term) at least
        as up to date as ours?"""
        mine = self.last_term
        return last_term > mine or (last_term == mine and last_index >= self.last_index)

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.offset - 1]

    def slice(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries [lo, hi), at least one if lo < hi, stopping once max_bytes is reached."""
        start, stop = lo - self.offset - 1, hi - self.offset - 1
        if start < 0:
            raise LogSafetyError(f"slice from compacted index {lo}")
        out: list[Entry] = []
        size = 0
        for e in self._entries[start:stop]:
            size += len(e.data) + 24
            if out and size > max_bytes:
                break
            out.append(e)
        return out

    def unstable(self) -> list[Entry]:
        return self._entries[self.stable - self.offset :]

    def committed_to_apply(self) -> list[Entry]:
        return self._entries[self.applied - self.offset : self.committed - self.offset]

    def membership(self) -> Membership:
        return self._configs[-1][1] if self._configs else self._base_membership

    def membership_at(self, index: int) -> Membership:
        best = self._base_membership
        for i, m in self._configs:
            if i > index:
                break
            best = m
        return best

    def rejoined_at(self, node: str) -> int:
        """If `node` was a member of an earlier configuration, left, and is back (or about
        to be): the index of the last configuration without it; else 0. What precedes
        it is another life of that server in this group."""
        def member(m: Membership) -> bool:
            return node in m.voters or node in m.learners

        seen = member(self._base_membership)
        gap = 0
        for i, m in self._configs:
            if member(m):
                seen = True
            elif seen:
                gap = i
        return gap

    def removed_member(self, node: str) -> bool:
        """Was `node` a member of a configuration we know, and removed by one that is
        committed (and not added back since)?"""
        def member(m: Membership) -> bool:
            return node in m.voters or node in m.learners

        if member(self.membership()) or member(self.membership_at(self.committed)):
            return False
        if member(self._base_membership):
            return True
        return any(member(m) for i, m in self._configs if i <= self.committed)

    def last_config_index(self) -> int:
        return self._configs[-1][0] if self._configs else self.offset

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest i <= index whose term is <= term, with that term; the term is 0 when
        it is not known (compacted). Used by both sides of the fast back-off."""
        index = min(index, self.last_index)
        while index > self.offset:
            t = self._entries[index - self.offset - 1].term
            if t <= term:
                return index, t
            index -= 1
        if index == self.offset and self.offset_term <= term:
            return index, self.offset_term
        return index, 0

    # ------------------------------------------------------------------ changes
    def _push(self, e: Entry) -> None:
        self._entries.append(e)
        if e.kind is EntryKind.CONFIG:
            self._configs.append((e.index, decode_membership(e.data)))

    def append(self, entries: Sequence[Entry]) -> None:
        """Leader append of contiguous entries at last_index + 1."""
        if not entries:
            return
        first = entries[0].index
        if first != self.last_index + 1 or entries[-1].index != first + len(entries) - 1:
            raise LogSafetyError(f"append of {first}.. after {self.last_index}")
        self._extend(entries)

    def _extend(self, entries: Sequence[Entry]) -> None:
        self._entries.extend(entries)
        config = EntryKind.CONFIG
        for e in entries:
            if e.kind is config:
                self._configs.append((e.index, decode_membership(e.data)))

    def maybe_append(
        self, prev_index: int, prev_term: int, commit: int, entries: Sequence[Entry]
    ) -> int | None:
        """Follower append. Returns the last index known to match, or None if the log
        has no entry (prev_index, prev_term)."""
        if not self.match_term(prev_index, prev_term):
            return None
        new_last = prev_index + len(entries)
        if prev_index == self.last_index:  # the common case: nothing to compare
            self._extend(entries)
            self.commit_to(min(commit, new_last))
            return new_last
        for k, e in enumerate(entries):
            if self.term(e.index) != e.term:
                self._truncate_and_append(entries[k:])
                break
        self.commit_to(min(commit, new_last))
        return new_last

    def _truncate_and_append(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        if first <= self.committed:
            raise LogSafetyError(f"conflict at committed index {first} <= {self.committed}")
        if first <= self.stable:
            self.stable = first - 1
        del self._entries[first - self.offset - 1 :]
        while self._configs and self._configs[-1][0] >= first:
            self._configs.pop()
        self._extend(entries)

    def commit_to(self, index: int) -> bool:
        if index <= self.committed:
            return False
        if index > self.last_index:
            raise LogSafetyError(f"commit {index} beyond last index {self.last_index}")
        self.committed = index
        return True

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to (index, term) are durable, unless that entry was replaced since."""
        if index > self.stable and self.term(index) == term:
            self.stable = index

    def applied_to(self, index: int) -> None:
        if index > self.applied:
            self.applied = index

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        meta = snapshot.meta
        self.snapshot = self.pending_snapshot = snapshot
        self.offset, self.offset_term = meta.index, meta.term
        self._entries.clear()
        self._configs.clear()
        self._base_membership = meta.membership
        self.stable = self.committed = self.applied = meta.index

    def compact(self, snapshot: Snapshot, compact_to: int) -> None:
        """The state machine saved `snapshot` durably; drop entries up to compact_to."""
        if snapshot.meta.index > self.applied:
            raise LogSafetyError("snapshot beyond the applied index")
        if self.snapshot is None or snapshot.meta.index >= self.snapshot.meta.index:
            self.snapshot = snapshot
        compact_to = min(compact_to, snapshot.meta.index, self.stable)
        if compact_to <= self.offset:
            return
        term = self.term(compact_to)
        assert term is not None
        self._base_membership = self.membership_at(compact_to)
        del self._entries[: compact_to - self.offset]
        self._configs = [(i, m) for i, m in self._configs if i > compact_to]
        self.offset, self.offset_term = compact_to, term
