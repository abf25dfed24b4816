"""The durable RAFT log: round trips, conflicts, rotation, snapshots, compaction.

Every test taking ``env`` runs against real files (OsDisk in tmp_path) and MemDisk.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from jetraft.raft.disk import Disk, MemDisk, OsDisk
from jetraft.raft.types import Entry, EntryKind, HardState, Membership, Snapshot, SnapshotMeta
from jetraft.raft.wal import Recovered, Wal, WalError


class Env:
    """A disk, the group directory, and the byte-level tampering tests need."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.disk: Disk = MemDisk() if kind == "mem" else OsDisk()
        self.dir = "g1" if kind == "mem" else str(tmp_path / "g1")

    def open(self, segment_bytes: int = 8 * 1024 * 1024) -> tuple[Wal, Recovered]:
        return Wal.open(self.disk, self.dir, segment_bytes=segment_bytes)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def files(self, suffix: str = "") -> list[str]:
        return [n for n in self.disk.list(self.dir) if n.endswith(suffix)]

    def segments(self) -> list[str]:
        return self.files(".wal")

    def flip(self, name: str, offset: int) -> None:
        """Media corruption: flip one byte of a file, durably."""
        if isinstance(self.disk, MemDisk):
            self.disk.corrupt(self.path(name), offset)
            return
        with open(self.path(name), "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0xFF]))

    def append_raw(self, name: str, data: bytes) -> None:
        f = self.disk.open_append(self.path(name))
        f.write(data)
        f.sync()
        f.close()


@pytest.fixture(params=["mem", "os"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Env:
    return Env(request.param, tmp_path)


def ents(first: int, last: int, term: int = 1, size: int = 20) -> list[Entry]:
    return [
        Entry(term, i, EntryKind.NORMAL, bytes((i + j) % 256 for j in range(size)))
        for i in range(first, last + 1)
    ]


def snap(index: int, term: int, data: bytes = b"state") -> Snapshot:
    return Snapshot(SnapshotMeta(index, term, Membership(("a", "b", "c"), ("d",))), data)


def reopen(env: Env, wal: Wal, segment_bytes: int = 8 * 1024 * 1024) -> tuple[Wal, Recovered]:
    wal.close()
    return env.open(segment_bytes)


def test_empty_directory(env: Env) -> None:
    wal, rec = env.open()
    assert rec == Recovered(HardState(), None, [], None)
    assert (wal.first_index, wal.last_index) == (1, 0)
    wal.close()
    _wal, rec = env.open()
    assert rec.entries == [] and rec.corrupt is None


def test_round_trip(env: Env) -> None:
    wal, _ = env.open()
    batch = [
        *ents(1, 50),
        Entry(2, 51, EntryKind.CONFIG, b"cfg"),
        Entry(2, 52, EntryKind.NOOP, b""),
    ]
    wal.append(batch[:10])
    wal.append(batch[10:])
    wal.set_hard_state(HardState(term=2, vote="node-é", commit=40))
    wal.sync()
    wal, rec = reopen(env, wal)
    assert rec.entries == batch
    assert rec.hard_state == HardState(term=2, vote="node-é", commit=40)
    assert rec.corrupt is None and rec.snapshot is None
    assert (wal.first_index, wal.last_index) == (1, 52)
    wal.append(ents(53, 60, term=2))
    wal.sync()
    _wal, rec = reopen(env, wal)
    assert [e.index for e in rec.entries] == list(range(1, 61))


def test_group_commit_is_one_fsync() -> None:
    disk = MemDisk()
    wal, _ = Wal.open(disk, "g")
    wal.append(ents(1, 3))
    wal.sync()  # the first sync creates the segment: file fsync + directory fsync
    before = (disk.fsyncs, disk.dir_syncs, disk.bytes_written)
    wal.append(ents(4, 10))
    wal.append(ents(11, 20))
    wal.set_hard_state(HardState(1, "a", 9))
    wal.sync()
    assert (disk.fsyncs - before[0], disk.dir_syncs - before[1]) == (1, 0)
    wal.sync()  # nothing new: no write, no fsync
    wal.set_hard_state(HardState(1, "a", 9))  # unchanged: nothing to write
    wal.sync()
    assert disk.fsyncs - before[0] == 1
    wal.set_hard_state(HardState(1, "a", 20))  # a hard state alone is one small record
    wal.sync()
    assert disk.fsyncs - before[0] == 2
    assert disk.open_handles == 1


def test_unsynced_work_is_not_durable_but_close_syncs() -> None:
    disk = MemDisk()
    wal, _ = Wal.open(disk, "g")
    wal.append(ents(1, 5))
    wal.sync()
    wal.append(ents(6, 9))
    wal.set_hard_state(HardState(3, "x", 5))
    disk.crash(random.Random(0))
    wal, rec = Wal.open(disk, "g")
    assert [e.index for e in rec.entries] == [1, 2, 3, 4, 5]
    assert rec.hard_state == HardState()
    wal.append(ents(6, 9))
    wal.close()
    _wal, rec = Wal.open(disk, "g")
    assert [e.index for e in rec.entries] == list(range(1, 10))


def test_conflict_truncation(env: Env) -> None:
    wal, _ = env.open(segment_bytes=400)
    wal.append(ents(1, 30, term=1))
    wal.sync()
    # A new leader overwrites 21.. (durable, spread over several segments).
    wal.append(ents(21, 25, term=2))
    assert wal.last_index == 25
    wal.sync()
    wal, rec = reopen(env, wal, 400)
    assert [(e.index, e.term) for e in rec.entries] == [(i, 1) for i in range(1, 21)] + [
        (i, 2) for i in range(21, 26)
    ]
    # Conflicts inside the unsynced buffer, then below durable entries again.
    wal.append(ents(26, 35, term=2))
    wal.append(ents(30, 31, term=3))
    wal.append(ents(12, 14, term=4))
    wal.append(ents(15, 16, term=4))
    wal.sync()
    _wal, rec = reopen(env, wal, 400)
    assert [(e.index, e.term) for e in rec.entries] == [(i, 1) for i in range(1, 12)] + [
        (i, 4) for i in range(12, 17)
    ]
    assert rec.entries == ents(1, 11, term=1) + ents(12, 16, term=4)


def test_segment_rotation(env: Env) -> None:
    wal, _ = env.open(segment_bytes=1000)
    for i in range(1, 201, 10):
        wal.append(ents(i, i + 9, size=40))
        wal.set_hard_state(HardState(1, "", i))
        wal.sync()
    assert len(env.segments()) >= 10
    if isinstance(env.disk, MemDisk):
        assert env.disk.open_handles == 1  # one handle per group, whatever the segment count
    wal, rec = reopen(env, wal, 1000)
    assert rec.entries == ents(1, 200, size=40)
    assert rec.hard_state.commit == 191
    # A batch larger than a segment is written whole (one write, one fsync).
    wal.append(ents(201, 260, size=100))
    wal.sync()
    _wal, rec = reopen(env, wal, 1000)
    assert rec.entries[-1].index == 260


def test_snapshot_and_compaction(env: Env) -> None:
    wal, _ = env.open(segment_bytes=600)
    for i in range(1, 101, 10):
        wal.append(ents(i, i + 9, term=1))
        wal.sync()
    wal.append(ents(101, 120, term=2))
    wal.set_hard_state(HardState(2, "b", 110))
    wal.sync()
    segs_before = len(env.segments())
    wal.save_snapshot(snap(90, 1, b"first"))
    assert (wal.first_index, wal.last_index) == (91, 120)
    assert len(env.segments()) < segs_before
    wal.save_snapshot(snap(105, 2, b"second"))
    assert env.files(".snap") == ["snap-00000000000000000105.snap"]
    wal, rec = reopen(env, wal, 600)
    assert rec.snapshot == snap(105, 2, b"second")
    assert rec.entries == ents(106, 120, term=2)
    assert rec.hard_state == HardState(2, "b", 110)
    assert (wal.first_index, wal.last_index) == (106, 120)
    # The snapshot covers everything: the log may be compacted to its active segment only.
    wal.save_snapshot(snap(120, 2))
    assert (wal.first_index, wal.last_index) == (121, 120)
    wal.append(ents(121, 125, term=3))
    wal.sync()
    wal, rec = reopen(env, wal, 600)
    assert rec.entries == ents(121, 125, term=3)
    assert rec.hard_state == HardState(2, "b", 110)
    wal.compact(100)  # nothing left to remove: harmless
    with pytest.raises(ValueError):
        wal.compact(121)  # no snapshot covers it
    with pytest.raises(ValueError):
        wal.append(ents(120, 120, term=3))  # the snapshot covers it
    with pytest.raises(ValueError):
        wal.save_snapshot(snap(119, 2))  # older than the current one


def test_snapshot_ahead_of_the_log(env: Env) -> None:
    wal, _ = env.open(segment_bytes=500)
    wal.append(ents(1, 40))
    wal.sync()
    wal.save_snapshot(snap(1000, 7))  # a lagging follower installs its leader's snapshot
    assert (wal.first_index, wal.last_index) == (1001, 1000)
    assert len(env.segments()) == 1
    wal, rec = reopen(env, wal, 500)
    assert rec.snapshot == snap(1000, 7) and rec.entries == []
    wal.append(ents(1001, 1003, term=7))
    wal.sync()
    _wal, rec = reopen(env, wal, 500)
    assert rec.entries == ents(1001, 1003, term=7)


def test_snapshot_replacing_a_diverged_log(env: Env) -> None:
    wal, _ = env.open(segment_bytes=500)
    wal.append(ents(1, 60, term=2))
    wal.sync()
    # The leader's snapshot says index 50 has term 3: our 50..60 are another history.
    wal.save_snapshot(snap(50, 3))
    assert (wal.first_index, wal.last_index) == (51, 50)
    wal, rec = reopen(env, wal, 500)
    assert rec.entries == [] and rec.snapshot == snap(50, 3)
    wal.append(ents(51, 52, term=3))
    wal.sync()
    _wal, rec = reopen(env, wal, 500)
    assert rec.entries == ents(51, 52, term=3)


def test_diverged_log_found_at_recovery_is_cut() -> None:
    """Crash after the snapshot file was written but before the log was cut."""
    for seed in range(30):
        disk = MemDisk()
        wal, _ = Wal.open(disk, "g", segment_bytes=500)
        wal.append(ents(1, 30, term=2))
        wal.sync()
        disk.arm_crash(random.Random(seed).randint(4, 9))
        try:
            wal.save_snapshot(snap(30, 3))
        except Exception:
            disk.crash(random.Random(seed))
        wal, rec = Wal.open(disk, "g", segment_bytes=500)
        assert rec.corrupt is None
        if rec.snapshot is None:
            assert rec.entries == ents(1, 30, term=2)
            continue
        assert rec.snapshot == snap(30, 3) and rec.entries == []
        wal.append(ents(31, 33, term=3))  # entries after the snapshot must now stick
        wal.sync()
        _wal, rec = Wal.open(disk, "g", segment_bytes=500)
        assert rec.entries == ents(31, 33, term=3)


def test_append_validation(env: Env) -> None:
    wal, _ = env.open()
    wal.append(ents(1, 5, term=2))
    with pytest.raises(ValueError, match="gap"):
        wal.append(ents(7, 8, term=2))
    with pytest.raises(ValueError, match="contiguous"):
        wal.append([*ents(6, 6, term=2), *ents(8, 8, term=2)])
    with pytest.raises(ValueError, match="term"):
        wal.append(ents(6, 6, term=1))
    wal.append([])
    assert wal.last_index == 5
    wal.close()
    with pytest.raises(WalError):
        wal.append(ents(6, 6, term=2))


def test_many_groups_share_a_disk() -> None:
    disk = MemDisk()
    wals = [Wal.open(disk, f"groups/g{i}", segment_bytes=300)[0] for i in range(50)]
    for i, wal in enumerate(wals):
        wal.append(ents(1, 10 + i))
        wal.sync()
    assert disk.open_handles == 50
    for wal in wals:
        wal.close()
    assert disk.open_handles == 0
    for i in range(50):
        _wal, rec = Wal.open(disk, f"groups/g{i}", segment_bytes=300)
        assert len(rec.entries) == 10 + i


def test_a_lost_log_marked_corrupt_stays_reported_until_repaired(env: Env) -> None:
    """Seed 39: a replica declared to have lost its log persisted its new term; told only
    in memory, the next restart found a non-empty log and took it for a healthy one."""
    wal, rec = env.open()
    assert rec.corrupt is None
    wal.mark_corrupt("log lost")
    wal.set_hard_state(HardState(3, "", 0))
    wal.sync()
    wal.close()
    wal, rec = env.open()
    assert rec.corrupt == "log lost" and rec.hard_state.term == 3
    wal.clear_corruption()
    wal.close()
    assert env.open()[1].corrupt is None


def test_how_a_replica_started_is_recorded(env: Env) -> None:
    """Seed 14: every restart starts a replica as it started (first voters, or joining),
    whatever assignment its host replays."""
    wal, rec = env.open()
    assert rec.bootstrap is None
    wal.set_bootstrap(("a", "b", "c"))
    wal.close()
    wal, rec = env.open()
    assert rec.bootstrap == ("a", "b", "c")
    wal.set_bootstrap(())
    wal.close()
    assert env.open()[1].bootstrap == ()
