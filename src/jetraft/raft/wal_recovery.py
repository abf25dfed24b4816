"""Reading a RAFT log directory back: what survived, what is damaged, what to repair.

``scan`` only reads. It returns the recovered state and a plan (torn tail to cut, files to
move aside, a TRUNCATE record to write) that ``Wal.open`` carries out.

How records replay (the same rules the writer follows):

* an ENTRY with index ``i`` at or below the current end of the log first cuts the log back to
  ``i - 1`` (a raft conflict: the writer never rewrites bytes, it appends the new entry);
* a TRUNCATE record cuts the log back to its index;
* HARD_STATE records: the last one wins;
* entries at or below the snapshot index are covered by the snapshot and dropped. If the log
  holds the snapshot index with another term than the snapshot, everything after it belongs
  to a history the snapshot replaced (a follower installed its leader's snapshot and crashed
  before the log said so) and is dropped too.

Damage: a bad record in the last segment with nothing valid after it is a torn write (the
file is cut back to the last good record, logged at debug). Anything else -- a bad record with
valid records after it, a bad record in an earlier segment, entries missing above the
snapshot -- is corruption: reported, with every entry before it kept. Hard-state records are
still read from behind the damage (each is checksummed on its own; losing a vote or term is
what breaks raft's safety), but entries there are not trusted.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass, field

from jetraft.raft.disk import Disk
from jetraft.raft.types import Entry, HardState, Snapshot
from jetraft.raft.wal_format import (
    REC_ENTRY,
    REC_HARD_STATE,
    HardStateRecord,
    Record,
    decode_at,
    decode_snapshot,
    find_next_valid,
)

log = logging.getLogger(__name__)

CORRUPT_MARKER = "CORRUPT"
QUARANTINE_SUFFIX = ".corrupt"
_SEG_RE = re.compile(r"^seg-([0-9a-f]{16})\.wal")
_SNAP_RE = re.compile(r"^snap-([0-9]{20})\.snap$")


def segment_name(seq: int) -> str:
    return f"seg-{seq:016x}.wal"


def snapshot_name(index: int) -> str:
    return f"snap-{index:020d}.snap"


def is_segment(name: str) -> bool:
    m = _SEG_RE.match(name)
    return m is not None and m.end() == len(name)


def is_snapshot(name: str) -> bool:
    return _SNAP_RE.match(name) is not None


@dataclass(slots=True)
class Segment:
    """Bookkeeping for one segment file: its live entries are ``lo..hi`` (None: none)."""

    seq: int
    name: str
    size: int
    lo: int | None = None
    hi: int | None = None


def truncate_segments(segments: list[Segment], last: int) -> None:
    """Record that entries above ``last`` are gone, whichever segment holds them."""
    for seg in segments:
        if seg.hi is not None and seg.hi > last:
            if seg.lo is not None and seg.lo > last:
                seg.lo = seg.hi = None
            else:
                seg.hi = last


@dataclass(slots=True)
class Scan:
    hard_state: HardState
    snapshot: Snapshot | None
    entries: list[Entry]
    problems: list[str]  # corruption found now
    # The end of the log, (last index, last term), that the newest hard-state record
    # names; with damage, the furthest end any valid record names, read from behind the
    # damage too (None: no record names one).
    tail: tuple[int, int] | None
    prior_problems: str  # the content of an existing CORRUPT marker ("" if none)
    segments: list[Segment]  # segments that stay, oldest first (ranges as recovered)
    next_seq: int
    last_written: int  # end of the log as the records say (before the checks above)
    diverged: bool = False  # the log holds the snapshot index under another term
    torn: tuple[Segment, int] | None = None  # last segment and the size to cut it to
    bad_segment: Segment | None = None  # segment holding the first bad record ...
    bad_offset: int = 0  # ... and where: bytes before it are good
    move_aside: list[str] = field(default_factory=list)  # segments/snapshots to quarantine
    stale: list[str] = field(default_factory=list)  # superseded snapshots, temp files

    @property
    def view_last(self) -> int:
        if self.entries:
            return self.entries[-1].index
        return self.snapshot.meta.index if self.snapshot else 0


class _Replay:
    """The log as the records describe it, entries above the snapshot index kept."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.kept: list[Entry] = []
        self.last = 0
        self.base_term: int | None = None  # term of the entry at index `base`, if present
        self.hard_state = HardState()
        self.tail: tuple[int, int] | None = None
        self.segments: list[Segment] = []

    def apply(self, rec: Record, seg: Segment) -> None:
        value = rec.value
        if rec.rtype == REC_ENTRY:
            assert isinstance(value, Entry)
            i = value.index
            if i <= self.last:
                self.cut(i - 1)
            self.last = i
            if i == self.base:
                self.base_term = value.term
            elif i > self.base:
                self.kept.append(value)
            if seg.lo is None:
                seg.lo = i
            seg.hi = i
        elif rec.rtype == REC_HARD_STATE:
            assert isinstance(value, HardStateRecord)
            self.hard_state, self.tail = value
        else:
            assert isinstance(value, int)
            if value < self.last:
                self.cut(value)
                self.last = value

    def cut(self, last: int) -> None:
        if last < self.base:
            self.base_term = None
        del self.kept[bisect.bisect_right(self.kept, last, key=_index) :]
        truncate_segments(self.segments, last)


def _index(e: Entry) -> int:
    return e.index


def scan(disk: Disk, dirname: str) -> Scan:
    names = disk.list(dirname)
    prior = ""
    if CORRUPT_MARKER in names:
        prior = disk.read(os.path.join(dirname, CORRUPT_MARKER)).decode(errors="replace")
    problems: list[str] = []
    snapshot, move_aside, stale = _load_snapshot(disk, dirname, names, problems)
    stale.extend(n for n in names if n.endswith(".tmp"))
    seqs = []
    for name in names:
        m = _SEG_RE.match(name)
        if m is not None:
            seqs.append((int(m.group(1), 16), name))
    next_seq = max((s for s, _ in seqs), default=0) + 1
    seg_names = sorted((s, n) for s, n in seqs if is_segment(n))
    replay = _Replay(snapshot.meta.index if snapshot else 0)
    result = Scan(
        hard_state=HardState(),
        snapshot=snapshot,
        entries=[],
        problems=problems,
        tail=None,
        prior_problems=prior,
        segments=replay.segments,
        next_seq=next_seq,
        last_written=0,
        move_aside=move_aside,
        stale=stale,
    )
    for k, (seq, name) in enumerate(seg_names):
        data = disk.read(os.path.join(dirname, name))
        seg = Segment(seq, name, len(data))
        replay.segments.append(seg)
        if not _replay_segment(replay, seg, data, k == len(seg_names) - 1, result):
            # Damage: keep what came before; still take hard states from behind it, and
            # the furthest log end any record there names (see _Evidence).
            assert result.bad_segment is seg
            found = _Evidence(replay.tail)
            if replay.kept:
                found.raise_to((replay.kept[-1].index, replay.kept[-1].term))
            found.read(data, result.bad_offset + 1)
            for _, later in seg_names[k + 1 :]:
                found.read(disk.read(os.path.join(dirname, later)), 0)
            if found.hard_state is not None:
                replay.hard_state = found.hard_state
            replay.tail = found.furthest
            result.move_aside.extend(n for _, n in seg_names[k:])
            del replay.segments[k:]
            break
    result.hard_state, result.tail = replay.hard_state, replay.tail
    result.last_written = replay.last
    result.entries, result.diverged = _final_entries(replay, snapshot, problems)
    return result


def _replay_segment(replay: _Replay, seg: Segment, data: bytes, last: bool, out: Scan) -> bool:
    """Replay one segment; False if it holds corruption (``out`` then says where)."""
    pos = 0
    end = len(data)
    view = memoryview(data)
    while pos < end:
        rec = decode_at(data, pos, view)
        if isinstance(rec, Record):
            replay.apply(rec, seg)
            pos = rec.end
            continue
        follows = find_next_valid(data, pos + 1)
        if follows is None and last:
            log.debug("%s: torn tail at offset %d (%s), cutting it", seg.name, pos, rec)
            out.torn = (seg, pos)
            seg.size = pos
            return True
        where = "valid records follow" if follows is not None else "not the last segment"
        out.problems.append(f"segment {seg.name} offset {pos}: {rec} ({where})")
        out.bad_segment = seg
        out.bad_offset = pos
        return False
    return True


class _Evidence:
    """What the valid records behind damage still tell: the last hard state, and the
    furthest end of the log (raft's order: term, then index) that any of them names.

    The tail a hard-state record names bounds what the replica acknowledged, but the
    damage may have taken every hard-state record after the last batch (both copies):
    the batch's entry records are evidence too, since a log once ended at each of them
    (cluster simulator seed 554604212: entry 68 survived, both copies after it did not,
    and the replica voted for a log ending at 67)."""

    def __init__(self, tail: tuple[int, int] | None) -> None:
        self.hard_state: HardState | None = None
        self.furthest = tail

    def raise_to(self, tail: tuple[int, int]) -> None:
        if self.furthest is None or (tail[1], tail[0]) > (self.furthest[1], self.furthest[0]):
            self.furthest = tail

    def read(self, data: bytes, pos: int) -> None:
        """Take the valid records at or after ``pos``, skipping over bad bytes."""
        while True:
            rec = decode_at(data, pos)
            if isinstance(rec, str):
                nxt = find_next_valid(data, pos + 1)
                if nxt is None:
                    return
                pos = nxt
                continue
            value = rec.value
            if rec.rtype == REC_HARD_STATE:
                assert isinstance(value, HardStateRecord)
                self.hard_state = value.hs
                if value.tail is not None:
                    self.raise_to(value.tail)
            elif rec.rtype == REC_ENTRY:
                assert isinstance(value, Entry)
                self.raise_to((value.index, value.term))
            pos = rec.end


def _final_entries(
    replay: _Replay, snapshot: Snapshot | None, problems: list[str]
) -> tuple[list[Entry], bool]:
    """The entries to return, and whether the log diverges from the snapshot."""
    if snapshot is not None and replay.base_term not in (None, snapshot.meta.term):
        log.debug(
            "log holds index %d with term %s, snapshot says %d: dropping the log after it",
            snapshot.meta.index,
            replay.base_term,
            snapshot.meta.term,
        )
        return [], True
    entries = replay.kept
    expected = replay.base + 1
    for i, e in enumerate(entries):
        if e.index != expected:
            problems.append(
                f"entries {expected}..{e.index - 1} are missing and no snapshot covers them"
            )
            return entries[:i], False
        expected += 1
    return entries, False


def _load_snapshot(
    disk: Disk, dirname: str, names: list[str], problems: list[str]
) -> tuple[Snapshot | None, list[str], list[str]]:
    """The newest valid snapshot; corrupt newer ones to move aside; older ones to remove."""
    snaps = sorted((int(n[5:25]), n) for n in names if is_snapshot(n))
    bad: list[str] = []
    for pos in range(len(snaps) - 1, -1, -1):
        index, name = snaps[pos]
        decoded = decode_snapshot(disk.read(os.path.join(dirname, name)))
        if isinstance(decoded, Snapshot) and decoded.meta.index != index:
            decoded = f"holds index {decoded.meta.index}, not {index}"
        if isinstance(decoded, str):
            problems.append(f"snapshot {name}: {decoded}")
            bad.append(name)
            continue
        return decoded, bad, [n for _, n in snaps[:pos]]
    return None, bad, []
