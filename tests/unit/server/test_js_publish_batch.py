"""A clustered stream leader batches the publishes of one loop turn into one log entry
(``StoreBatch``): the batch's PubAcks all wait for that entry's commit, and a replica that
applies the batch ends with the same stream and the same answers as one that applies the
same publishes one entry each."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.store.types import StoredMsg
from jetraft.jetstream.stream import (
    PubAck,
    StoreBatch,
    StoreMsg,
    decode_log_entry,
    encode_entry,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.client import PubBatch
from jetraft.raft.types import Entry, EntryKind
from jetraft.raft.wal import Wal
from jetraft.server.core.internal import InternalClient
from jetraft.server.js.clustered.stream_replica import MAX_BATCH_MSGS, StreamReplica
from tests.unit.server.test_js_reconcile_members import _ReplicaHost, _until

CFG = StreamConfig(name="S", subjects=("s.>",), duplicate_window=60 * 10**9)


def _hdr(**headers: str) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


# Publishes whose answers depend on the ones before them: a duplicate Nats-Msg-Id, a
# wrong and a right Nats-Expected-Last-Sequence.
MSGS = [
    StoreMsg("s.a", "r1", None, b"one", 1_000),
    StoreMsg("s.b", "r2", _hdr(**{"Nats-Msg-Id": "m1"}), b"two", 2_000),
    StoreMsg("s.a", "r3", _hdr(**{"Nats-Msg-Id": "m1"}), b"two again", 3_000),
    StoreMsg("s.c", "r4", _hdr(**{"Nats-Expected-Last-Sequence": "7"}), b"refused", 4_000),
    StoreMsg("s.c", "", _hdr(**{"Nats-Expected-Last-Sequence": "2"}), b"three", 5_000),
]


class _GatedSync:
    """The WAL, whose fsync waits for ``gate`` (on the node's I/O thread)."""

    def __init__(self, wal: Wal, gate: threading.Event) -> None:
        self._wal = wal
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wal, name)

    def sync(self) -> None:
        self._gate.wait(10)
        self._wal.sync()


def _replica(tmp_path: Path, name: str) -> StreamReplica:
    sa = StreamAssignment("$G", CFG, "S-R1F-x", ("a",), 1)
    return StreamReplica(_ReplicaHost(tmp_path / name), sa, joining=False)


def _contents(replica: StreamReplica) -> list[StoredMsg]:
    store = replica.stream.store
    out = []
    seq = 1
    while (msg := store.load_next(seq)) is not None:
        out.append(msg)
        seq = msg.seq + 1
    return out


def test_a_batch_applied_on_a_follower_equals_the_same_publishes_one_by_one(
    tmp_path: Path,
) -> None:
    one_by_one = _replica(tmp_path, "single")
    singles = [
        one_by_one.apply(Entry(1, k + 1, EntryKind.NORMAL, encode_entry(m)))
        for k, m in enumerate(MSGS)
    ]
    batched = _replica(tmp_path, "batch")  # a follower: it decodes what it applies
    results = batched.apply(Entry(1, 1, EntryKind.NORMAL, encode_entry(StoreBatch(MSGS))))
    assert results == singles
    assert all(isinstance(a, PubAck) for a in singles)
    answers = [(a.seq, a.duplicate, a.error is not None)
               for a in singles if isinstance(a, PubAck)]
    assert answers == [(1, False, False), (2, False, False), (2, True, False),
                       (0, False, True), (3, False, False)]
    assert _contents(batched) == _contents(one_by_one)
    assert batched.stream.store.state() == one_by_one.stream.store.state()
    assert batched.stream.beside_store() == one_by_one.stream.beside_store()


async def test_publishes_of_one_loop_turn_are_one_entry_acked_only_once_committed(
    tmp_path: Path,
) -> None:
    replica = _replica(tmp_path, "leader")
    acks: list[tuple[str, bytes]] = []
    # What the publishers' inboxes receive, through the router as any subscriber would.
    listener = InternalClient(replica.host.router, replica.account, "inboxes")
    for inbox in ("r1", "r2", "r3", "r4"):
        listener.subscribe(inbox, lambda subject, _r, _h, data: acks.append((subject, data)))
    await replica.start()
    try:
        node = replica.group.node
        wal = replica.group.wal
        assert node is not None and wal is not None
        await _until(lambda: replica.is_leader, "leadership")
        await node.wait_for(lambda: node.core.log.committed == node.core.log.last_index, 5.0)
        first = node.core.log.last_index + 1
        # The leader's fsync waits at a gate: nothing is committed until it opens.
        gate = threading.Event()
        node.driver.wal = _GatedSync(wal, gate)
        for m in MSGS:
            replica._on_publish(m.subject, m.reply or None, m.hdr, m.data)
        await _until(lambda: node.core.log.last_index >= first, "the batch in the log")
        assert node.core.log.last_index == first  # one entry for the whole turn
        batch = decode_log_entry(node.core.log.entry(first).data)
        assert isinstance(batch, StoreBatch)
        assert [(m.subject, m.data) for m in batch.msgs] == [(m.subject, m.data) for m in MSGS]
        await asyncio.sleep(0.1)  # a bounded negative wait: the fsync is held
        assert acks == [] and node.core.log.committed < first
        gate.set()
        await _until(lambda: len(acks) == 4, "the PubAcks")
        assert node.core.log.committed >= first
        # Every publish that asked for an answer got its own, in order; the one without
        # a reply subject got none.
        assert [s for s, _ in acks] == ["r1", "r2", "r3", "r4"]
        assert acks[0][1] == PubAck("r1", "S", 1).body()
        assert b'"duplicate":true' in acks[2][1] and b'"error"' in acks[3][1]
        assert replica.stream.store.state().msgs == 3
    finally:
        gate.set()
        await replica.stop()


async def test_snapshots_and_the_log_kept_after_them_are_paced_by_messages(
    tmp_path: Path,
) -> None:
    # Batches of 128 messages: a snapshot every max(8192, stored) messages is every 64
    # entries, and the 1024 messages kept after it are 8 entries (at least 16 are kept).
    replica = _replica(tmp_path, "paced")
    await replica.start()
    try:
        node = replica.group.node
        assert node is not None
        batch = StoreBatch([StoreMsg("s.a", "", None, b"x", 1)] * 128)
        for k in range(8):
            replica.apply(Entry(1, 100 + k, EntryKind.NORMAL, encode_entry(batch)))
        assert replica.stream.store.state().msgs == 1024
        assert node.driver.snapshot_entries == 8192 // 128
        assert node.driver.keep_entries == 16
    finally:
        await replica.stop()


async def test_the_publishes_of_one_read_join_the_batch_as_one_by_one(tmp_path: Path) -> None:
    """A read of client publishes reaches the leader as runs (``PubBatch``): each publish
    joins the turn's batch as it would alone, and a full batch is proposed at once."""
    replica = _replica(tmp_path, "leader")
    await replica.start()
    try:
        node = replica.group.node
        assert node is not None
        await _until(lambda: replica.is_leader, "leadership")
        await node.wait_for(lambda: node.core.log.committed == node.core.log.last_index, 5.0)
        first = node.core.log.last_index + 1
        hdr = _hdr(**{"Nats-Msg-Id": "m1"})
        plain = [b"p%d" % i for i in range(MAX_BATCH_MSGS)]
        pubs = PubBatch(
            [("s.a", "r1", 2, -1, b""), ("s.b", None, len(hdr) + 3, len(hdr), b""),
             ("s.c", "r3", 2, -1, b"")],
            [0, 2, 3, 3 + len(plain)],
            [b"p1", b"p2", hdr + b"two", *plain],
        )
        assert replica._on_publish_run(pubs, 0, 3) == 3 + len(plain)
        want = [("s.a", "r1", None, b"p1"), ("s.a", "r1", None, b"p2"), ("s.b", "", hdr, b"two")]
        want += [("s.c", "r3", None, p) for p in plain]
        # The first MAX_BATCH_MSGS are one entry already, the rest wait for the turn's end.
        proposed = replica._own
        assert len(proposed) == 1
        (_, entry), = proposed.values()
        assert isinstance(entry, StoreBatch)
        got = [(m.subject, m.reply, m.hdr, m.data) for m in [*entry.msgs, *replica._batch]]
        assert got == want
        await _until(lambda: node.core.log.last_index == first + 1, "the rest proposed")
        await _until(lambda: replica.stream.store.state().msgs == len(want), "applied")
    finally:
        await replica.stop()
