"""Clustered file streams keep their messages in each replica's file store: the RAFT log is
compacted under a marker (no copy of the stream), and what was acknowledged survives
SIGKILL of every server, a follower far behind, and a replica whose store files were lost."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import nats
import nats.errors
import nats.js.errors

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Cluster, Node, stream_leader, wait_until

# More than the log keeps before compacting (8192 messages between checkpoints).
N = 12_000
BATCH = 400


def _body(i: int, pad: int = 0) -> bytes:
    return b"msg %d" % i + b"." * pad


async def _publish_many(nc: nats.NATS, subject: str, start: int, n: int,
                        pad: int = 0) -> dict[int, int]:
    """Publish messages start..start+n-1 (``pad`` bytes more each) with Nats-Msg-Id, BATCH
    at a time, retrying the ones without an ack (bounded); returns i -> seq."""
    js = nc.jetstream()
    acked: dict[int, int] = {}
    todo = list(range(start, start + n))
    for _ in range(30):
        if not todo:
            return acked
        failed: list[int] = []
        for k in range(0, len(todo), BATCH):
            part = todo[k : k + BATCH]
            results = await asyncio.gather(
                *(js.publish(subject, _body(i, pad), timeout=5.0,
                             headers={"Nats-Msg-Id": f"id-{i}"}) for i in part),
                return_exceptions=True)
            for i, r in zip(part, results, strict=True):
                if isinstance(r, BaseException):
                    failed.append(i)
                else:
                    acked[i] = r.seq
        todo = failed
    raise AssertionError(f"{len(todo)} messages never acknowledged")


async def _check(nc: nats.NATS, stream: str, acked: dict[int, int], pad: int = 0) -> None:
    js = nc.jetstream()
    info = await js.stream_info(stream)
    assert info.state.messages == len(acked)
    assert sorted(acked.values()) == list(range(1, len(acked) + 1))
    step = max(len(acked) // 150, 1)
    for i in [*sorted(acked)[::step], max(acked)]:
        msg = await js.get_msg(stream, acked[i])
        assert msg.data == _body(i, pad)


def _group_dirs(node: Node) -> list[Path]:
    raft = node.store_dir / "jetstream" / "_raft_"
    return [p for p in raft.iterdir() if p.name.startswith("S-")]


def _compacted(cl: Cluster) -> bool:
    """Every replica's log was compacted under a marker (a snapshot file exists) and
    every replica keeps its messages in its store's block files."""
    for node in cl.nodes:
        dirs = _group_dirs(node)
        if not dirs:
            return False
        for d in dirs:
            if not any(f.name.startswith("snap-") for f in d.iterdir()):
                return False
            if not any((d / "stream" / "msgs").glob("*.dat")):
                return False
    return True


async def test_sigkill_of_every_server_after_the_log_was_compacted(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    await nc.jetstream().add_stream(name="BIG", subjects=["big"], num_replicas=3)
    acked = await _publish_many(nc, "big", 0, N)
    await wait_until(lambda: _compacted(cl), 30, "every replica's log to be compacted")
    await nc.close()
    for n in cl.nodes:  # SIGKILL: no checkpoint at stop, the stores are cut and replayed
        n.kill()
    for n in cl.nodes:
        n.start()
    await cl.wait_mesh()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[1])
    await stream_leader(nc, "BIG")
    await _check(nc, "BIG", acked)
    await wait_until(lambda: set(cl.stream_messages("BIG").values()) == {N}, 30,
                     "every replica to hold every message")
    await nc.close()


def _status_kb(node: Node, field: str) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{node.proc.pid}/status")


def _reset_peak_rss(node: Node) -> int:
    """Reset the process's peak RSS (VmHWM) to its current RSS; returns that (kB)."""
    assert node.proc is not None
    Path(f"/proc/{node.proc.pid}/clear_refs").write_text("5")
    return _status_kb(node, "VmRSS")


PAD = 4096  # 12,000 messages of 4 kB: a 48 MB stream, some 190 snapshot chunks


async def test_a_follower_far_behind_gets_a_snapshot_and_catches_up(
    make_cluster: ClusterFactory,
) -> None:
    """It gets every message, and the replicas that may send it the snapshot do not hold
    the stream in memory to do it: their peak RSS while it catches up grows by far less
    than the stream's size (the snapshot is spooled to a file and sent a chunk at a time;
    built in memory it took about twice the stream's size)."""
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    await nc.jetstream().add_stream(name="FAR", subjects=["far"], num_replicas=3)
    acked = await _publish_many(nc, "far", 0, 100, PAD)
    leader = await stream_leader(nc, "FAR")
    victim = next(n for n in cl.nodes if n.name != leader and n is not cl.nodes[0])
    victim.kill()
    acked |= await _publish_many(nc, "far", 100, N, PAD)  # the log moves far past it
    stream_bytes = (await nc.jetstream().stream_info("FAR")).state.bytes
    assert stream_bytes > len(acked) * PAD
    senders = [n for n in cl.nodes if n is not victim]
    base_kb = {n.name: _reset_peak_rss(n) for n in senders}
    victim.start()
    await cl.wait_mesh()
    await wait_until(lambda: cl.stream_messages("FAR").get(victim.name) == len(acked), 60,
                     "the follower to catch up")
    growth_kb = {n.name: _status_kb(n, "VmHWM") - base_kb[n.name] for n in senders}
    print(f"stream {stream_bytes / 1e6:.1f} MB; peak RSS growth of the other replicas "
          f"while it caught up: {growth_kb} kB")
    assert max(growth_kb.values()) * 1024 < stream_bytes / 4, growth_kb
    # What it holds is the stream: with the leader gone it serves with the third one.
    leader = await stream_leader(nc, "FAR")
    if leader != victim.name:
        next(n for n in cl.nodes if n.name == leader).kill()
    nc2 = await cl.connect(victim)
    await stream_leader(nc2, "FAR")
    await _check(nc2, "FAR", acked, PAD)
    await nc.close()
    await nc2.close()


async def test_a_replica_whose_store_was_lost_under_a_compacted_log_is_repaired(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    await nc.jetstream().add_stream(name="GONE", subjects=["gone"], num_replicas=3)
    acked = await _publish_many(nc, "gone", 0, N)
    await wait_until(lambda: _compacted(cl), 30, "every replica's log to be compacted")
    leader = await stream_leader(nc, "GONE")
    victim = next(n for n in cl.nodes if n.name != leader and n is not cl.nodes[0])
    victim.kill()
    for d in _group_dirs(victim):  # the store goes, the log (compacted past it) stays
        shutil.rmtree(d / "stream")
    victim.start()
    await cl.wait_mesh()
    await wait_until(lambda: cl.stream_messages("GONE").get(victim.name) == N, 60,
                     "the replica without its store to be repaired")
    await _check(nc, "GONE", acked)
    await nc.close()
