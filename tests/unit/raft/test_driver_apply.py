"""When the driver applies committed entries: those an earlier Ready made durable here are
applied before the fsync of the entries that arrived since (a leader's PubAcks do not wait
for the next batch's fsync); entries are never applied before they are committed, and
never before the Ready that writes them here is durable."""

from __future__ import annotations

import random
from collections.abc import Sequence

from jetraft.raft.driver import Applied, Driver, Outcome
from jetraft.raft.messages import Message
from jetraft.raft.ready import RaftConfig, Role
from jetraft.raft.types import Entry, HardState, Snapshot


class _Wal:
    """A LogStore that remembers what was written and when it was synced."""

    def __init__(self) -> None:
        self.written: list[int] = []
        self.synced: list[int] = []

    def append(self, entries: Sequence[Entry]) -> None:
        self.written.extend(e.index for e in entries)

    def set_hard_state(self, hs: HardState) -> None:
        pass

    def sync(self) -> None:
        self.synced = list(self.written)

    def save_snapshot(self, snap: Snapshot) -> None:
        pass

    def compact(self, upto_index: int) -> None:
        pass

    def clear_corruption(self) -> None:
        pass


class _Machine:
    def __init__(self, wal: _Wal) -> None:
        self.wal = wal
        self.applied: list[bytes] = []
        self.durable_at_apply: list[bool] = []  # was the entry synced here when applied?

    def apply(self, entry: Entry) -> object:
        self.applied.append(entry.data)
        self.durable_at_apply.append(entry.index in self.wal.synced)
        return entry.data

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


class _Node:
    def __init__(self, name: str, peers: tuple[str, ...]) -> None:
        self.wal = _Wal()
        self.sm = _Machine(self.wal)
        self.outbox: list[Message] = []
        self.done: list[tuple[object, Outcome]] = []
        self.driver = Driver(
            name, peers, RaftConfig(pre_vote=False), self.wal, self.sm, self.outbox.append,
            lambda token, outcome: self.done.append((token, outcome)), random.Random(1),
        )
        # At each fsync: the data applied so far (what a PubAck could have answered).
        self.applied_at_sync: list[list[bytes]] = []

    def process(self) -> None:
        gen = self.driver.process()
        reply: object = None
        while True:
            try:
                job = gen.send(reply)
            except StopIteration:
                return
            self.applied_at_sync.append(list(self.sm.applied))
            reply = job()


def _exchange(nodes: dict[str, _Node]) -> None:
    """Deliver every queued message and process, until nothing moves."""
    for _ in range(20):
        moved = False
        for node in nodes.values():
            out, node.outbox[:] = list(node.outbox), []
            for m in out:
                nodes[m.to].driver.receive(m)
                moved = True
        for node in nodes.values():
            if node.driver.has_work():
                node.process()
        if not moved:
            return


def test_committed_entries_are_applied_before_the_fsync_of_the_next_batch() -> None:
    nodes = {n: _Node(n, ("a", "b")) for n in ("a", "b")}
    a, b = nodes["a"], nodes["b"]
    a.driver.core.campaign()
    a.process()
    _exchange(nodes)
    assert a.driver.core.role is Role.LEADER
    _exchange(nodes)  # the leader's first entry is committed everywhere
    a.driver.propose(b"x", "x")
    a.process()  # x is written and its fsync done; b has not answered: not committed
    assert b"x" not in a.sm.applied
    out, a.outbox[:] = list(a.outbox), []
    for m in out:
        b.driver.receive(m)
    b.process()  # b writes x, syncs it and answers
    for m in b.outbox:
        a.driver.receive(m)
    b.outbox.clear()
    a.driver.propose(b"y", "y")
    a.applied_at_sync.clear()
    a.process()  # steps b's answer (x committed) and writes y
    # x was applied before the fsync of y, and y (not committed) was not.
    assert a.applied_at_sync and b"x" in a.applied_at_sync[0]
    assert b"y" not in a.applied_at_sync[0]
    assert ("x", Applied(a.wal.written[-2], b"x")) in a.done
    _exchange(nodes)
    assert a.sm.applied[-2:] == [b"x", b"y"] and b.sm.applied[-2:] == [b"x", b"y"]


def test_an_entry_is_applied_only_once_durable_here() -> None:
    nodes = {n: _Node(n, ("a", "b")) for n in ("a", "b")}
    a, b = nodes["a"], nodes["b"]
    a.driver.core.campaign()
    a.process()
    for k in range(5):
        _exchange(nodes)
        a.driver.propose(b"m%d" % k, k)
        a.driver.propose(b"n%d" % k, k)
        a.process()
    _exchange(nodes)
    for node in (a, b):
        assert [d for d in node.sm.applied if d] == [
            b"%s%d" % (c, k) for k in range(5) for c in (b"m", b"n")]
        assert all(node.sm.durable_at_apply)
