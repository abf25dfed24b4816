"""The durable RAFT log of one group: segmented, checksummed, append-only, with snapshots.

Files in the group's directory:

* ``seg-<seq hex>.wal``: log segments, written only at their end. Entries, hard states and
  truncation markers share them (formats in ``wal_format``), so the common Ready -- new
  entries plus a new hard state -- becomes durable with ONE write and ONE fsync. A separate
  hard-state file would cost a second fsync (and a rename plus a directory fsync) per sync.
  The hard state goes after the entries of its batch, twice: a torn write can keep entries
  without the hard state, never a commit index or vote with entries that were lost under
  it; and the newest record is always a copy of the hard state, so when it is found bad
  (torn, or damaged after it was durable: the two look alike) nothing is lost with it.
  Damage to any other record has valid records after it and is reported as corruption.
* ``snap-<index>.snap``: the latest snapshot, checksummed, written atomically.
* ``CORRUPT``: present once corruption was found, with its description; every later open
  reports it again until ``clear_corruption()``, so a restart cannot forget that this
  replica may have lost entries it acknowledged.
* ``ACKED``: with ``CORRUPT``, the furthest end of the log (last index and term) that a
  valid record names, hard states and entries, read from behind the damage too
  (``Recovered.acked_tail``; an entry counts because the damage may have taken both
  hard-state copies after its batch): it
  bounds what this replica acknowledged before the damage and since. Kept as the
  largest seen, until ``clear_corruption()``: the log written after a repair ends lower.
* ``*.corrupt``: damaged files moved aside, never deleted.

Nothing is rewritten in place: a raft conflict is an entry record whose index is at or below
the end of the log (replay cuts the log there), so a crash can only tear the end of the last
segment. Each new segment starts with the last durable hard state, so removing old segments
never loses it. Recovery rules are in ``wal_recovery``.

Not thread-safe: one owner (the raft node's driver) calls it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass

from jetraft.raft.disk import AppendFile, Disk
from jetraft.raft.types import Entry, HardState, Snapshot
from jetraft.raft.wal_format import (
    encode_entry_parts,
    encode_hard_state,
    encode_snapshot,
    encode_truncate,
)
from jetraft.raft.wal_recovery import (
    CORRUPT_MARKER,
    QUARANTINE_SUFFIX,
    Scan,
    Segment,
    scan,
    segment_name,
    snapshot_name,
    truncate_segments,
)

__all__ = ["Recovered", "Wal", "WalError"]

_PARTS_PER_ENTRY = 3  # encode_entry_parts appends exactly this many parts


class WalError(RuntimeError):
    """The WAL can no longer be used: a disk call failed part-way (never retried: after a
    failed fsync the kernel may have dropped the dirty pages), or it was closed."""


@dataclass(frozen=True, slots=True)
class Recovered:
    hard_state: HardState  # HardState() if none stored
    snapshot: Snapshot | None  # latest durable snapshot
    entries: list[Entry]  # entries after the snapshot, contiguous, in order
    corrupt: str | None  # None, or a description of mid-log corruption (file, offset, reason)
    # With `corrupt`: (last index, last term) bounding every entry this replica ever
    # acknowledged (see ACKED), or None when no record tells.
    acked_tail: tuple[int, int] | None = None
    # How this replica started (set_bootstrap): the group's first voters, () for a replica
    # that joined an existing group; None if never recorded.
    bootstrap: tuple[str, ...] | None = None


BOOTSTRAP_FILE = "BOOTSTRAP"
ACKED_FILE = "ACKED"


class Wal:
    __slots__ = (
        "_active",
        "_base",
        "_base_term",
        "_dir",
        "_disk",
        "_failed",
        "_hs",
        "_hs_written",
        "_last",
        "_marks",
        "_next_seq",
        "_parts",
        "_runs",
        "_segment_bytes",
        "_segments",
        "_snap_names",
        "_tail_written",
    )

    def __init__(self, disk: Disk, dirname: str, segment_bytes: int) -> None:
        """Use ``Wal.open``."""
        if segment_bytes <= 0:
            raise ValueError("segment_bytes must be positive")
        self._disk = disk
        self._dir = dirname
        self._segment_bytes = segment_bytes
        self._segments: list[Segment] = []  # oldest first; the last one is the active one
        self._active: AppendFile | None = None  # the only open handle
        self._next_seq = 1
        self._parts: list[bytes] = []  # records given since the last sync, unwritten
        self._marks: list[tuple[int, int]] = []  # (first index, position in _parts) per append
        self._base = 0  # snapshot index (0: none)
        self._base_term = 0
        self._last = 0
        self._runs: list[tuple[int, int]] = []  # (first index, term) of each term in (base, last]
        self._hs = HardState()
        self._hs_written = HardState()
        self._tail_written = (0, 0)  # (last index, last term) of the log as durable
        self._snap_names: list[str] = []
        self._failed: str | None = None

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, disk: Disk, dirname: str, *, segment_bytes: int = 8 * 1024 * 1024
    ) -> tuple[Wal, Recovered]:
        """Recover the log in ``dirname`` (created if absent) and open it for appending.

        Repairs what recovery found before returning: a torn tail is cut off; damaged files
        are moved aside (``*.corrupt``) after the good part of a damaged segment was copied to
        a new one; a log that runs past what is returned gets a TRUNCATE record; the
        ``CORRUPT`` marker is written. So the files match ``Recovered`` and appends continue it.
        """
        wal = cls(disk, dirname, segment_bytes)
        disk.makedirs(dirname)
        found = scan(disk, dirname)
        try:
            acked = wal._install(found)
        except BaseException:
            wal._drop_handle()
            raise
        problems = found.prior_problems.splitlines()
        problems += [p for p in found.problems if p not in problems]
        return wal, Recovered(
            hard_state=found.hard_state,
            snapshot=found.snapshot,
            entries=found.entries,
            corrupt="; ".join(problems) if problems else None,
            acked_tail=acked,
            bootstrap=wal._read_bootstrap(),
        )

    def _keep_acked_tail(
        self, tail: tuple[int, int] | None, earlier: bool
    ) -> tuple[int, int] | None:
        """The ACKED tail, raised to `tail` (the newest hard-state record's) if higher in
        raft's order (term first). Damage found earlier with no ACKED kept then (a log
        written before ACKED existed): the records since name only the repaired log's
        end, which may be lower than what was acknowledged, so nothing is known."""
        path = self._path(ACKED_FILE)
        kept: tuple[int, int] | None = None
        if self._disk.exists(path):
            index, term = self._disk.read(path).decode().split()
            kept = (int(index), int(term))
        elif earlier:
            return None
        if tail is not None and (kept is None or (tail[1], tail[0]) > (kept[1], kept[0])):
            self._disk.write_atomic(path, f"{tail[0]} {tail[1]}".encode())
            kept = tail
        return kept

    def set_bootstrap(self, voters: tuple[str, ...]) -> None:
        """Record durably how this replica starts, before it takes part in anything: as
        one of a new group's first `voters`, or (empty) joining an existing group. Its
        first configuration is never a log entry, so every restart must start it the
        same way (Recovered.bootstrap), whatever assignment the host replays."""
        self._check_usable()
        self._disk.write_atomic(self._path(BOOTSTRAP_FILE), ",".join(voters).encode())

    def _read_bootstrap(self) -> tuple[str, ...] | None:
        path = self._path(BOOTSTRAP_FILE)
        if not self._disk.exists(path):
            return None
        text = self._disk.read(path).decode()
        return tuple(v for v in text.split(",") if v)

    def _install(self, found: Scan) -> tuple[int, int] | None:
        """Carry out the plan of ``found``; returns the acknowledged tail (see ACKED)."""
        disk, d = self._disk, self._dir
        for name in found.stale:
            disk.remove(self._path(name))
        known = found.prior_problems.splitlines()
        fresh = [p for p in found.problems if p not in known]
        acked = None
        if known or fresh:  # before any repair, whose records name a lower end
            acked = self._keep_acked_tail(found.tail, bool(known))
        if fresh:  # before any repair: a crash during the repair must not forget the damage
            disk.write_atomic(self._path(CORRUPT_MARKER), "\n".join(known + fresh).encode())
        self._segments = found.segments
        self._next_seq = found.next_seq
        self._hs = self._hs_written = found.hard_state
        snap = found.snapshot
        if found.entries:
            self._tail_written = (found.entries[-1].index, found.entries[-1].term)
        elif snap is not None:
            self._tail_written = (snap.meta.index, snap.meta.term)
        if found.bad_segment is not None:
            self._replace_damaged(found.bad_segment, found.bad_offset)
        if found.move_aside:
            # Newest first: while the damaged segment itself is still there, the next open
            # finds the damage again and redoes this repair.
            for name in reversed(found.move_aside):
                disk.rename(self._path(name), self._path(self._aside_name(name)))
            disk.sync_dir(d)
        if self._segments and self._active is None:
            self._active = disk.open_append(self._path(self._segments[-1].name))
        if found.torn is not None and found.bad_segment is None:
            seg, size = found.torn
            assert self._active is not None and seg is self._segments[-1]
            self._active.truncate(size)
        if self._active is not None:
            # A segment created by a process that died before its first write must begin
            # with the hard state (compacting older segments would lose it); and the log
            # must end with its two copies again after a torn tail was cut (see sync).
            hs = encode_hard_state(self._hs, self._tail_written)
            self._active.write(hs + hs)
            # What we just read may sit only in the page cache (the previous process died
            # between write and fsync, or between a rename and its directory fsync): make it
            # durable before anyone acts on it. Earlier segments were synced before the next
            # one was created.
            self._active.sync()
        disk.sync_dir(d)
        if snap is not None:
            self._base, self._base_term = snap.meta.index, snap.meta.term
            self._snap_names = [snapshot_name(snap.meta.index)]
        self._last = found.view_last
        for e in found.entries:
            if not self._runs or self._runs[-1][1] != e.term:
                self._runs.append((e.index, e.term))
        if found.diverged or found.last_written > self._last:
            # The records run past what recovery returned (a gap, or a history the snapshot
            # replaced): say durably where the log ends, so the next append continues it.
            # A replaced history is cut below the snapshot index, or replay would keep
            # finding the old term there and drop the entries appended after this.
            cut = snap.meta.index - 1 if found.diverged and snap is not None else self._last
            truncate_segments(self._segments, cut)
            self._parts.append(encode_truncate(cut))
            self.sync()
        return acked

    def _replace_damaged(self, bad: Segment, good_bytes: int) -> None:
        """Copy the good prefix of a damaged segment into a new last segment (the damaged
        one and every later one are then moved aside by the caller)."""
        good = self._disk.read(self._path(bad.name))[:good_bytes]
        seg = Segment(self._next_seq, segment_name(self._next_seq), 0, bad.lo, bad.hi)
        self._next_seq += 1
        f = self._disk.open_append(self._path(seg.name))
        self._active = f
        hs = encode_hard_state(self._hs, self._tail_written)
        f.write(good + hs + hs)
        f.sync()
        self._disk.sync_dir(self._dir)
        seg.size = f.tell()
        self._segments.append(seg)

    def _aside_name(self, name: str) -> str:
        existing = set(self._disk.list(self._dir))
        candidate, n = name + QUARANTINE_SUFFIX, 1
        while candidate in existing:
            candidate, n = f"{name}{QUARANTINE_SUFFIX}.{n}", n + 1
        return candidate

    # -- the log ------------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        """Index of the first entry after the snapshot (``last_index + 1`` if there is none)."""
        return self._base + 1

    @property
    def last_index(self) -> int:
        """Index of the last entry given, or the snapshot index when the log is empty."""
        return self._last

    def append(self, entries: Sequence[Entry]) -> None:
        """Buffer ``entries`` (contiguous, terms not decreasing). If the first one is at or
        below ``last_index`` the log is first cut so that it ends just before it (a raft
        conflict). Raises ValueError for a gap, an index the snapshot covers, or a term
        lower than the entry before. Not durable until ``sync()``."""
        if not entries:
            return
        self._check_usable()
        first = entries[0].index
        if first <= self._base:
            raise ValueError(f"entry {first} is covered by the snapshot at {self._base}")
        if first > self._last + 1:
            raise ValueError(f"entry {first} leaves a gap after the last entry {self._last}")
        term = self._term_at(first - 1)
        expect = first
        for e in entries:
            if e.index != expect:
                raise ValueError(f"entries are not contiguous: {e.index} after {expect - 1}")
            if e.term < term:
                raise ValueError(f"entry {e.index} has term {e.term} below {term} before it")
            term = e.term
            expect += 1
        if first <= self._last:
            self._cut(first - 1)
        parts, runs = self._parts, self._runs
        self._marks.append((first, len(parts)))
        for e in entries:
            encode_entry_parts(e, parts)
            if not runs or runs[-1][1] != e.term:
                runs.append((e.index, e.term))
        self._last = expect - 1

    def set_hard_state(self, hs: HardState) -> None:
        """Remember ``hs``; it is written with the next ``sync()`` if it changed."""
        self._check_usable()
        self._hs = hs

    def sync(self) -> None:
        """Make everything given so far durable: one write and one fsync of the active
        segment (plus a directory fsync when a new segment had to be started)."""
        self._check_usable()
        hs_changed = self._hs != self._hs_written
        if not self._parts and not hs_changed:
            return
        try:
            f = self._active
            rotated = f is None or f.tell() >= self._segment_bytes
            if rotated:
                f = self._rotate()
                # Every segment begins with the last durable hard state, so removing older
                # segments never loses it; the new one (if any) follows the entries below.
                self._parts.insert(0, encode_hard_state(self._hs_written, self._tail_written))
            assert f is not None
            # Every batch ends with the hard state, twice: the newest record of the log
            # is then always a copy of it, so a bad newest record (a torn write, or a
            # durable one damaged later) loses neither an entry nor the vote.
            tail = (self._last, self._term_at(self._last))
            hs = encode_hard_state(self._hs, tail)
            self._parts.append(hs)
            self._parts.append(hs)
            f.write(b"".join(self._parts))
            f.sync()
            if rotated:
                self._disk.sync_dir(self._dir)
        except BaseException as exc:
            self._fail(exc)
            raise
        seg = self._segments[-1]
        seg.size = f.tell()
        if self._marks:
            first = self._marks[0][0]
            seg.lo = first if seg.lo is None else min(seg.lo, first)
            seg.hi = self._last
        self._parts.clear()
        self._marks.clear()
        self._hs_written = self._hs
        self._tail_written = tail

    def _rotate(self) -> AppendFile:
        if self._active is not None:
            self._active.close()  # its content was synced by the sync that wrote it
            self._active = None
        seg = Segment(self._next_seq, segment_name(self._next_seq), 0)
        self._next_seq += 1
        self._active = self._disk.open_append(self._path(seg.name))
        self._segments.append(seg)
        return self._active

    def _cut(self, last: int) -> None:
        """Forget entries above ``last`` in memory: unwritten ones leave the buffer, written
        ones are overridden on disk by the next entry record (or a TRUNCATE record)."""
        marks, parts = self._marks, self._parts
        while marks and marks[-1][0] > last:
            del parts[marks.pop()[1] :]
        if marks:
            first, pos = marks[-1]
            del parts[pos + _PARTS_PER_ENTRY * (last + 1 - first) :]
        runs = self._runs
        while runs and runs[-1][0] > last:
            runs.pop()
        truncate_segments(self._segments, last)
        self._last = last

    def _term_at(self, index: int) -> int:
        if index == self._base:
            return self._base_term
        if not self._base < index <= self._last:
            raise ValueError(f"no term known for index {index}")
        k = bisect.bisect_right(self._runs, index, key=_run_start) - 1
        return self._runs[k][1]

    # -- snapshots and compaction -------------------------------------------------------------

    def save_snapshot(self, snap: Snapshot) -> None:
        """Durably store ``snap`` (atomic write) and drop what it covers.

        Entries after the snapshot stay when the log agrees with it (it holds the snapshot
        index with the snapshot's term). Otherwise -- the snapshot is ahead of the log, or
        the log diverges there (a follower installing its leader's snapshot) -- the log
        becomes empty: ``last_index == first_index - 1 == snap.meta.index``. Segments whose
        entries all lie at or below the snapshot are removed."""
        self._check_usable()
        index, term = snap.meta.index, snap.meta.term
        if index < self._base:
            raise ValueError(f"snapshot {index} is older than the current one at {self._base}")
        self.sync()
        keep_log = index <= self._last and self._term_at(index) == term
        name = snapshot_name(index)
        try:
            self._disk.write_atomic(self._path(name), encode_snapshot(snap))
            for old in self._snap_names:
                if old != name:
                    self._disk.remove(self._path(old))
            self._snap_names = [name]
            if not keep_log and index <= self._last:
                # The log holds `index` under another term: end it below the snapshot so
                # that no entry of the replaced history survives a restart.
                self._cut(index - 1)
                self._parts.append(encode_truncate(index - 1))
                self.sync()
        except BaseException as exc:
            self._fail(exc)
            raise
        if keep_log:
            runs = self._runs
            while len(runs) > 1 and runs[1][0] <= index + 1:
                runs.pop(0)
        else:
            self._runs = []
            self._last = index
        self._base, self._base_term = index, term
        self.compact(index)

    def compact(self, upto_index: int) -> None:
        """Remove the oldest segments whose entries all lie at or below ``upto_index``,
        which a durable snapshot must cover. The active segment always stays."""
        self._check_usable()
        if upto_index > self._base:
            raise ValueError(f"compact({upto_index}) beyond the snapshot at {self._base}")
        self.sync()  # segment bookkeeping then matches the disk exactly
        doomed = 0
        for seg in self._segments[:-1]:
            if seg.hi is not None and seg.hi > upto_index:
                break
            doomed += 1
        if not doomed:
            return
        try:
            for seg in self._segments[:doomed]:
                self._disk.remove(self._path(seg.name))
            self._disk.sync_dir(self._dir)
        except BaseException as exc:
            self._fail(exc)
            raise
        del self._segments[:doomed]

    # -- the rest -----------------------------------------------------------------------------

    def mark_corrupt(self, reason: str) -> None:
        """Record damage found outside the log (its owner knows the group existed, but
        the log is gone: "log lost"): durably, so that every later open reports it too
        until ``clear_corruption()``, as for damage found in the records."""
        self._check_usable()
        path = self._path(CORRUPT_MARKER)
        known = self._disk.read(path).decode().splitlines() if self._disk.exists(path) else []
        if reason not in known:
            self._disk.write_atomic(path, "\n".join([*known, reason]).encode())

    def clear_corruption(self) -> None:
        """Forget reported corruption (the node repaired its log from its peers): later opens
        no longer report it. Damaged files stay moved aside."""
        self._check_usable()
        path = self._path(CORRUPT_MARKER)
        if self._disk.exists(path):
            self._disk.remove(path)
            self._disk.sync_dir(self._dir)
        acked = self._path(ACKED_FILE)
        if self._disk.exists(acked):  # after the marker: ACKED alone means nothing
            self._disk.remove(acked)
            self._disk.sync_dir(self._dir)

    def close(self) -> None:
        """Sync what was given (harmless: persisting more is always safe), release the file."""
        try:
            if self._failed is None:
                self.sync()
        finally:
            self._drop_handle()
            if self._failed is None:
                self._failed = "closed"

    def _drop_handle(self) -> None:
        if self._active is not None:
            self._active.close()
            self._active = None

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise WalError(f"WAL in {self._dir} is unusable: {self._failed}")

    def _fail(self, exc: BaseException) -> None:
        self._failed = f"a disk operation failed: {exc!r}"
        self._drop_handle()

    def _path(self, name: str) -> str:
        return os.path.join(self._dir, name)


def _run_start(run: tuple[int, int]) -> int:
    return run[0]
