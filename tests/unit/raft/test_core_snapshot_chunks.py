"""Chunked InstallSnapshot: a snapshot travels in chunks of at most
max_snapshot_chunk_bytes; the follower assembles them; a lost chunk is sent again; a
stale series is discarded."""

from __future__ import annotations

import random

from jetraft.raft.core import RaftCore
from jetraft.raft.messages import AppendResponse, InstallSnapshot, SnapshotResponse
from jetraft.raft.ready import RaftConfig
from jetraft.raft.types import Membership, SnapshotMeta
from tests.raft.harness import Cluster

CHUNK = 4


def lagging_cluster() -> Cluster:
    """a leads; c missed 12 entries that a compacted away (its snapshot is ~30 bytes)."""
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, max_snapshot_chunk_bytes=CHUNK)
    c = Cluster("abc", cfg)
    c.elect("a")
    c.crash("c")
    for i in range(12):
        c.propose("a", f"v{i}")
    c.stabilize()
    snap = c.snapshot("a")
    assert len(snap.data) > 5 * CHUNK
    c.restart("c")
    return c


def test_a_snapshot_travels_in_chunks_and_is_assembled() -> None:
    c = lagging_cluster()
    chunks: list[InstallSnapshot] = []
    c.tick("a")
    for _ in range(500):
        if not c.queue:
            break
        m = c.queue[0]
        if isinstance(m, InstallSnapshot) and m.to == "c":
            chunks.append(m)
        c.deliver(1)
    assert len(chunks) >= 5 and all(len(m.data) <= CHUNK for m in chunks)
    assert [m.offset for m in chunks] == [CHUNK * k for k in range(len(chunks))]
    assert chunks[-1].done and not any(m.done for m in chunks[:-1])
    assert c.nodes["c"].data() == c.nodes["a"].data()


def test_a_lost_chunk_is_sent_again() -> None:
    c = lagging_cluster()
    c.tick("a")
    lost = 0
    for _ in range(200):
        if not c.queue:
            break
        m = c.queue[0]
        if isinstance(m, InstallSnapshot) and m.offset == 2 * CHUNK and not lost:
            c.queue.pop(0)  # the network loses the third chunk
            lost += 1
            continue
        c.deliver(1)
    assert lost == 1 and c.nodes["c"].data() != c.nodes["a"].data()
    for _ in range(30):  # the leader's retry timer sends it again
        c.tick("a")
        c.stabilize()
    assert c.nodes["c"].data() == c.nodes["a"].data()


def follower() -> RaftCore:
    return RaftCore("c", RaftConfig(election_ticks=10), random.Random(1), peers=("a", "b", "c"))


def meta(index: int) -> SnapshotMeta:
    return SnapshotMeta(index, 1, Membership(("a", "b", "c")))


def test_a_stale_series_is_discarded() -> None:
    core = follower()
    core.step(InstallSnapshot(1, "a", "c", meta(5), 0, b"old-", False))
    core.step(InstallSnapshot(1, "a", "c", meta(8), 0, b"new-", False))  # a newer snapshot
    core.step(InstallSnapshot(1, "a", "c", meta(5), 4, b"tail", True))  # late, old series
    core.step(InstallSnapshot(1, "a", "c", meta(5), 0, b"old-", False))  # late start, old
    core.step(InstallSnapshot(1, "a", "c", meta(8), 4, b"data", True))
    rd = core.ready()
    assert rd.snapshot is not None and rd.snapshot.meta.index == 8
    assert rd.snapshot.data == b"new-data"
    replies = [m for m in rd.messages if isinstance(m, SnapshotResponse)]
    assert SnapshotResponse(1, "c", "a", 5, 0) in replies  # "start again" for the old one
    assert AppendResponse(1, "c", "a", 8) in rd.messages
    core.advance(rd)


def test_a_chunk_out_of_order_is_answered_with_what_is_held() -> None:
    core = follower()
    core.step(InstallSnapshot(1, "a", "c", meta(5), 0, b"abcd", False))
    core.step(InstallSnapshot(1, "a", "c", meta(5), 8, b"ijkl", True))  # 4..8 was lost
    rd = core.ready()
    assert rd.snapshot is None
    assert rd.messages[-1] == SnapshotResponse(1, "c", "a", 5, 4)
    core.advance(rd)
