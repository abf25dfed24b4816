"""Snapshot spools: the bytes of a snapshot series wait in a spool (memory or an unnamed
file) rather than a bytearray, and a leader reads the chunks it sends from a SnapshotData.
The follower's series keeps the protocol it had: a lost chunk is asked for again, a newer
series replaces an older one (and frees its spool), a restarted follower starts over."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from jetraft.raft.core import RaftCore
from jetraft.raft.driver import Driver
from jetraft.raft.messages import AppendResponse, InstallSnapshot, SnapshotResponse
from jetraft.raft.ready import RaftConfig, SnapshotUnavailable
from jetraft.raft.spool import FileSnapshotData, FileSpool, MemorySpool, SnapshotSpool
from jetraft.raft.types import Membership, Snapshot, SnapshotMeta, read_at, whole
from tests.raft.harness import Cluster
from tests.unit.raft.test_driver_apply import _Machine, _Wal

BLOB = bytes(random.Random(7).randbytes(100_000))


def _spooled(directory: Path, data: bytes, step: int) -> FileSnapshotData:
    spool = FileSpool(str(directory))
    for k in range(0, len(data), step):
        spool.append(data[k : k + step])
    assert len(spool) == len(data)
    return spool.data()


def test_file_spool_reads_back_at_any_offset_and_leaves_no_file(tmp_path: Path) -> None:
    data = _spooled(tmp_path, BLOB, 4096)
    assert os.listdir(tmp_path) == []  # unnamed: nothing to clean up after a crash
    assert len(data) == len(BLOB)
    for offset, n in [(0, 10), (4095, 2), (99_990, 100), (len(BLOB), 5), (12_345, 54_321)]:
        assert data.read(offset, n) == BLOB[offset : offset + n]
        assert read_at(data, offset, n) == BLOB[offset : offset + n]
    assert whole(data) == BLOB


def test_file_snapshot_data_is_shared_and_closed_once(tmp_path: Path) -> None:
    data = _spooled(tmp_path, BLOB, 1000)
    # Two followers read the same data at their own offsets, interleaved.
    a = [data.read(k, 7000) for k in range(0, len(BLOB), 7000)]
    b = [data.read(k, 3000) for k in range(0, len(BLOB), 3000)]
    assert b"".join(a) == b"".join(b) == BLOB
    fd = data._f.fileno()
    data.close()
    assert data.closed
    with pytest.raises(OSError):
        os.fstat(fd)  # the file is closed (and, unnamed, gone)


def test_a_dropped_spool_closes_its_file(tmp_path: Path) -> None:
    spool = FileSpool(str(tmp_path))
    spool.append(b"x" * 100)
    f = spool._f
    assert f is not None
    del spool  # a series abandoned with its core (no ResourceWarning, no leak)
    assert f.closed
    data = _spooled(tmp_path, b"abc", 1)
    f2 = data._f
    del data
    assert f2.closed


def test_a_spent_spool_refuses_more(tmp_path: Path) -> None:
    spool = FileSpool(str(tmp_path))
    spool.append(b"abc")
    assert whole(spool.data()) == b"abc"
    with pytest.raises(ValueError):
        spool.append(b"d")
    with pytest.raises(ValueError):
        spool.data()
    mem = MemorySpool()
    mem.append(b"ab")
    mem.append(b"c")
    assert len(mem) == 3 and mem.data() == b"abc"


# --------------------------------------------------------------------- follower side
class Recording:
    """Spools in tmp_path, remembered, to see which ones are freed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.made: list[FileSpool] = []

    def __call__(self) -> SnapshotSpool:
        spool = FileSpool(str(self.directory))
        self.made.append(spool)
        return spool


def follower(spools: Recording) -> RaftCore:
    core = RaftCore("c", RaftConfig(election_ticks=10), random.Random(1), peers=("a", "b", "c"))
    core.snapshot_spool = spools
    return core


def meta(index: int) -> SnapshotMeta:
    return SnapshotMeta(index, 1, Membership(("a", "b", "c")))


def chunk(index: int, offset: int, data: bytes, done: bool) -> InstallSnapshot:
    return InstallSnapshot(1, "a", "c", meta(index), offset, data, done)


def test_a_series_is_collected_in_a_file_and_handed_over_as_data(tmp_path: Path) -> None:
    spools = Recording(tmp_path)
    core = follower(spools)
    parts = [BLOB[k : k + 30_000] for k in range(0, len(BLOB), 30_000)]
    offset = 0
    for k, part in enumerate(parts):
        core.step(chunk(9, offset, part, k == len(parts) - 1))
        offset += len(part)
    rd = core.ready()
    assert rd.snapshot is not None and rd.snapshot.meta.index == 9
    data = rd.snapshot.data
    assert isinstance(data, FileSnapshotData)  # not bytes: never whole in memory
    assert whole(data) == BLOB
    assert len(spools.made) == 1
    acks = [m.offset for m in rd.messages if isinstance(m, SnapshotResponse)]
    assert acks == [30_000, 60_000, 90_000]
    assert AppendResponse(1, "c", "a", 9) in rd.messages
    core.advance(rd)


def test_a_lost_chunk_is_asked_for_again_and_the_spool_continues(tmp_path: Path) -> None:
    spools = Recording(tmp_path)
    core = follower(spools)
    core.step(chunk(5, 0, b"abcd", False))
    core.step(chunk(5, 8, b"ijkl", False))  # 4..8 was lost
    core.step(chunk(5, 4, b"efgh", False))  # the leader's retry
    core.step(chunk(5, 8, b"ijkl", True))
    rd = core.ready()
    replies = [m.offset for m in rd.messages if isinstance(m, SnapshotResponse)]
    assert replies == [4, 4, 8]
    assert rd.snapshot is not None and whole(rd.snapshot.data) == b"abcdefghijkl"
    assert len(spools.made) == 1
    core.advance(rd)


def test_a_newer_series_replaces_the_older_and_frees_its_spool(tmp_path: Path) -> None:
    spools = Recording(tmp_path)
    core = follower(spools)
    core.step(chunk(5, 0, b"old-", False))
    core.step(chunk(8, 0, b"new-", False))  # a newer snapshot
    old = spools.made[0]
    assert old._f is None and not old._closer.alive  # its file is closed
    core.step(chunk(5, 4, b"tail", True))  # late, old series: "start again"
    core.step(chunk(8, 4, b"data", True))
    rd = core.ready()
    assert rd.snapshot is not None and whole(rd.snapshot.data) == b"new-data"
    assert SnapshotResponse(1, "c", "a", 5, 0) in rd.messages
    core.advance(rd)


def test_a_restarted_follower_answers_zero_and_the_series_starts_over(tmp_path: Path) -> None:
    spools = Recording(tmp_path)
    core = follower(spools)
    core.step(chunk(5, 0, b"abcd", False))
    core.step(chunk(5, 4, b"efgh", False))
    del core  # the process dies: its spool (an unnamed file) goes with it
    assert os.listdir(tmp_path) == []
    again = follower(spools)
    again.step(chunk(5, 8, b"ijkl", True))
    rd = again.ready()
    assert rd.snapshot is None and rd.messages[-1] == SnapshotResponse(1, "c", "a", 5, 0)
    again.advance(rd)
    for k, part in enumerate((b"abcd", b"efgh", b"ijkl")):
        again.step(chunk(5, 4 * k, part, k == 2))
    rd = again.ready()
    assert rd.snapshot is not None and whole(rd.snapshot.data) == b"abcdefghijkl"
    again.advance(rd)
    assert os.listdir(tmp_path) == []


def test_a_one_chunk_series_replacing_a_partial_one_frees_it(tmp_path: Path) -> None:
    spools = Recording(tmp_path)
    core = follower(spools)
    core.step(chunk(5, 0, b"abcd", False))
    core.step(chunk(8, 0, b"whole", True))  # a newer snapshot, in one chunk
    assert core.snap_buf is None and not spools.made[0]._closer.alive
    rd = core.ready()
    assert rd.snapshot is not None and rd.snapshot.data == b"whole"
    core.advance(rd)


# --------------------------------------------------------------------- leader side
class Counted:
    """A SnapshotData that records the reads made of it."""

    def __init__(self, inner: FileSnapshotData) -> None:
        self.inner = inner
        self.reads: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.inner)

    def read(self, offset: int, n: int) -> bytes:
        self.reads.append((offset, n))
        return self.inner.read(offset, n)


def test_a_leader_sends_chunks_read_from_snapshot_data(tmp_path: Path) -> None:
    """The leader's snapshot source gives a SnapshotData: the follower assembles exactly
    its bytes from chunks read one at a time."""
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, max_snapshot_chunk_bytes=4)
    c = Cluster("abc", cfg)
    c.elect("a")
    c.crash("c")
    for i in range(12):
        c.propose("a", f"v{i}")
    c.stabilize()
    snap = c.snapshot("a")
    data = Counted(_spooled(tmp_path, whole(snap.data), 3))
    core = c.nodes["a"].core
    # The log holds a marker only (a durable state machine's): the source is asked.
    core.log.snapshot = Snapshot(snap.meta, b"", external=True)
    core.snapshot_source = lambda: (snap.meta.index, data)
    core.snapshot_to_send = None
    c.nodes["a"].store.snapshot = None
    c.restart("c")
    c.tick("a")
    c.stabilize()
    assert data.reads and all(n == 4 for _, n in data.reads)
    assert c.nodes["c"].data() == c.nodes["a"].data()
    # Sent: the leader lets its snapshot (a spool file) go at its next tick.
    assert core.snapshot_to_send is not None
    c.tick("a")
    assert core.snapshot_to_send is None


def test_a_snapshot_that_cannot_be_made_now_is_offered_again_later() -> None:
    """A spool that cannot be written (a full disk) costs the follower a wait, not the
    leader its group: it is offered a snapshot again at its next answer."""
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, max_snapshot_chunk_bytes=4)
    c = Cluster("abc", cfg)
    c.elect("a")
    c.crash("c")
    for i in range(12):
        c.propose("a", f"v{i}")
    c.stabilize()
    snap = c.snapshot("a")
    core = c.nodes["a"].core
    core.log.snapshot = Snapshot(snap.meta, b"", external=True)
    core.snapshot_to_send = None
    c.nodes["a"].store.snapshot = None
    full_disk = [True]

    def source() -> tuple[int, bytes]:
        if full_disk[0]:
            raise SnapshotUnavailable("No space left on device")
        return snap.meta.index, whole(snap.data)

    core.snapshot_source = source
    c.restart("c")
    for _ in range(5):
        c.tick("a")
        c.stabilize()
    assert not any(isinstance(m, InstallSnapshot) for m in c.queue)
    assert c.nodes["c"].data() != c.nodes["a"].data()
    full_disk[0] = False
    for _ in range(5):
        c.tick("a")
        c.stabilize()
    assert c.nodes["c"].data() == c.nodes["a"].data()
    assert core.role.value == "leader"


def test_the_driver_turns_a_spool_write_error_into_no_snapshot_now() -> None:
    class FullDisk(_Machine):
        def durable_index(self) -> int:
            return 0

        def snapshot(self) -> bytes:
            raise OSError(28, "No space left on device")

    wal = _Wal()
    driver = Driver("a", ("a",), RaftConfig(), wal, FullDisk(wal), lambda m: None,
                    lambda t, o: None, random.Random(1))
    assert driver.core.snapshot_source is not None
    with pytest.raises(SnapshotUnavailable):
        driver.core.snapshot_source()
    assert driver.running
