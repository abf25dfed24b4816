"""RaftNode features for a server hosting many groups: the shared Ticker, proposal
deadlines, removal, self-durable state machines, storage errors, peer status."""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import AsyncIterator

import pytest

from jetraft.raft.disk import MemDisk
from jetraft.raft.driver import State
from jetraft.raft.node import (
    NodeFailed,
    NodeRemoved,
    ProposalTimeout,
    RaftNode,
    Ticker,
)
from jetraft.raft.ready import NotLeader, PeerStatus, ProposalDropped, RaftConfig
from jetraft.raft.transport import InMemoryHub
from jetraft.raft.types import Entry
from jetraft.raft.wal import Wal
from jetraft.raft.wal_recovery import snapshot_name
from tests.raft.test_node import KV, TICK_S, Group

CFG = RaftConfig(election_ticks=10, heartbeat_ticks=1)


async def test_shared_ticker_runs_many_groups_with_one_timer() -> None:
    ticker = Ticker(TICK_S)
    hub = InMemoryHub()
    groups: list[list[RaftNode]] = []
    for g in range(5):
        ids = [f"g{g}-{i}" for i in range(3)]
        nodes = []
        for nid in ids:
            wal, rec = Wal.open(MemDisk(), f"/{nid}")
            node = RaftNode(nid, ids, CFG, wal, hub.endpoint(nid), KV(), rng=random.Random(nid),
                            recovered=rec, ticker=ticker)
            hub.register(nid, node.receive)
            await node.start()
            nodes.append(node)
        groups.append(nodes)
    try:
        assert len(ticker) == 15
        assert all(n._timer is None for nodes in groups for n in nodes)
        for nodes in groups:
            await nodes[0].wait_for_leader(5.0)
            lead = next(n for n in nodes if n.id == nodes[0].leader)
            assert (await lead.propose(b"x=1", timeout_s=5.0)).result == 1
    finally:
        for nodes in groups:
            for n in nodes:
                await n.stop()
    assert len(ticker) == 0 and ticker._timer is None  # the last node took the timer away


async def test_a_proposal_that_cannot_commit_times_out() -> None:
    g = Group(["a", "b", "c"])
    g.cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, check_quorum=False)
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        await lead.propose(b"x=1")
        g.hub.isolate(lead.id)  # without check-quorum it stays leader, and cannot commit
        with pytest.raises(ProposalTimeout):
            await lead.propose(b"y=2", timeout_s=0.1)
        fut = lead.propose_nowait(b"z=3", timeout_s=0.1)
        with pytest.raises(ProposalTimeout) as exc:
            await fut
        assert "may still be committed" in str(exc.value)
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_proposals_fail_promptly_when_leadership_is_lost() -> None:
    g = Group(["a", "b", "c"])
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        await lead.propose(b"x=1")
        g.hub.isolate(lead.id)
        fut = lead.propose_nowait(b"y=2")  # no deadline: only the step-down can end it
        # check-quorum: the isolated leader steps down after an election period or two
        with pytest.raises((ProposalDropped, NotLeader)):
            await asyncio.wait_for(fut, 5.0)
        assert not lead.is_leader
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_a_removed_replica_stops_and_says_so(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    victim_id = next(n for n in group.ids if n != lead.id)
    victim = group.nodes[victim_id]
    told: list[str] = []
    victim.on_removed = lambda: told.append(victim_id)
    await lead.remove_member(victim_id)
    await victim.wait_for(lambda: victim.state is State.REMOVED, 5.0)
    assert told == [victim_id]
    with pytest.raises(NodeRemoved):
        victim.propose_nowait(b"z=1")
    # The group goes on without it, in the same term: the removed replica does not
    # campaign (it stopped ticking) and would be ignored if it did.
    term = lead.core.term
    for _ in range(5):
        assert (await lead.propose(b"y=2", timeout_s=5.0)).index > 0
    await asyncio.sleep(30 * TICK_S)  # a bounded negative wait: several election periods
    assert lead.is_leader and lead.core.term == term


async def test_a_removed_replica_that_missed_its_removal_does_not_disturb(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    victim_id = next(n for n in group.ids if n != lead.id)
    group.hub.isolate(victim_id)
    await lead.remove_member(victim_id)
    term = lead.core.term
    victim = group.nodes[victim_id]
    # Cut off, it never hears of its removal: it times out and campaigns...
    await victim.wait_for(lambda: victim.core.role.value != "follower", 5.0)
    group.hub.heal()
    await asyncio.sleep(40 * TICK_S)  # a bounded negative wait: it keeps trying
    # ...but the remaining voters ignore a non-member's vote requests.
    assert lead.is_leader and lead.core.term == term
    assert (await lead.propose(b"y=2", timeout_s=5.0)).index > 0


@pytest.fixture
async def group() -> AsyncIterator[Group]:
    g = Group(["a", "b", "c"])
    for nid in g.ids:
        await g.start(nid)
    yield g
    for nid in list(g.nodes):
        await g.stop(nid)


class DurableKV(KV):
    """A state machine with its own durable storage (like a stream store): `stored`
    survives restarts (the test keeps it), `durable_index` is what it holds."""

    def __init__(self, stored: dict[str, str], index: list[int]) -> None:
        super().__init__()
        self.data = stored
        self._index = index  # [last applied index], shared with the test
        self.restores = 0
        self.skipped = 0

    def apply(self, entry: Entry) -> object:
        if entry.index <= self._index[0]:
            self.skipped += 1  # already held: replayed after a restart
            return len(self.data)
        self._index[0] = entry.index
        return super().apply(entry)

    def durable_index(self) -> int:
        return self._index[0]

    def snapshot(self) -> bytes:
        return self._index[0].to_bytes(8, "big") + super().snapshot()

    def restore(self, data: bytes) -> None:
        self.restores += 1
        self._index[0] = int.from_bytes(data[:8], "big")
        self.data.clear()
        self.data.update(line.partition("=")[::2] for line in data[8:].decode().splitlines()
                         if line)


class DurableGroup(Group):
    def __init__(self, ids: list[str]) -> None:
        super().__init__(ids, snapshot_entries=10)
        self.cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, max_snapshot_chunk_bytes=16)
        self.stored: dict[str, dict[str, str]] = {i: {} for i in ids}
        self.index: dict[str, list[int]] = {i: [0] for i in ids}
        self.make_sm = lambda nid: DurableKV(self.stored[nid], self.index[nid])


async def test_self_durable_state_machine_compacts_without_snapshot_bytes() -> None:
    g = DurableGroup(["a", "b", "c"])
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        lagging = next(n for n in g.ids if n != lead.id)
        await g.stop(lagging)
        for i in range(40):
            await lead.propose(b"k%d=%d" % (i, i))
        snap = lead.core.log.snapshot
        assert snap is not None and snap.external and lead.core.log.first_index > 10
        # On disk: a marker, not the state.
        name = snapshot_name(snap.meta.index)
        raw = g.disks[lead.id].read(f"/{lead.id}/{name}")
        assert b"k1=1" not in raw
        # The lagging replica lost its state and its log: the leader sends the state
        # machine's current state, in chunks of at most 16 bytes.
        g.disks[lagging] = MemDisk()
        g.stored[lagging].clear()
        g.index[lagging][0] = 0
        await g.start(lagging)
        await g.converge()
        sm = g.sms[lagging]
        assert isinstance(sm, DurableKV) and sm.restores == 1
        assert sm.data == g.sms[lead.id].data and len(sm.data) == 40
        # A restart replays the entries after the marker; the state machine skips
        # those it holds, and is never restored from the marker.
        await g.stop(lead.id)
        node = await g.start(lead.id)
        await g.converge()
        sm = g.sms[lead.id]
        assert isinstance(sm, DurableKV) and sm.restores == 0 and sm.skipped > 0
        assert sm.data == g.sms[lagging].data
        assert node.core.log.snapshot is not None and node.core.log.snapshot.external
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_a_failed_fsync_stops_the_node_and_acknowledges_nothing() -> None:
    g = Group(["a", "b", "c"])
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        await lead.propose(b"x=1")
        errors: list[BaseException] = []
        lead.on_error = errors.append
        g.disks[lead.id].arm_error(0, OSError(errno.EIO, "Input/output error"))
        with pytest.raises(NodeFailed) as exc:
            await lead.propose(b"y=2", timeout_s=5.0)
        assert isinstance(exc.value.cause, OSError) and exc.value.cause.errno == errno.EIO
        assert lead.state is State.FAILED and len(errors) == 1
        with pytest.raises(NodeFailed):
            lead.propose_nowait(b"z=3")
        # The others elect a new leader and go on; the failed node is never asked to
        # retry its fsync: its owner restarts it from what is on disk.
        others = [n for n in g.nodes.values() if n is not lead]
        async with asyncio.timeout(5):
            while not any(n.is_leader for n in others):
                await asyncio.sleep(TICK_S)
        new = next(n for n in others if n.is_leader)
        assert (await new.propose(b"w=4", timeout_s=5.0)).index > 0
        await g.stop(lead.id)
        g.disks[lead.id].crash(random.Random(3))  # the failed pages may be gone
        await g.start(lead.id)
        await g.converge()
        assert g.sms[lead.id].data.get("w") == "4"
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_a_follower_whose_fsync_fails_does_not_acknowledge(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    victim_id = next(n for n in group.ids if n != lead.id)
    victim = group.nodes[victim_id]
    group.disks[victim_id].arm_error(0, OSError(errno.ENOSPC, "No space left on device"))
    await lead.propose(b"y=2", timeout_s=5.0)  # committed with the other follower
    await victim.wait_for(lambda: victim.state is State.FAILED, 5.0)
    peer = next(p for p in lead.status().peers if p.id == victim_id)
    assert peer.match < lead.core.log.last_index  # it never claimed the entry


async def test_status_reports_lag_and_last_heard_on_the_leader(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    victim = next(n for n in group.ids if n != lead.id)
    await group.stop(victim)
    for i in range(5):
        await lead.propose(b"k%d=1" % i)
    await lead.wait_for(lambda: (_peer(lead, victim).last_heard_ticks_ago or 0) > 3, 5.0)
    st = lead.status()
    gone = _peer(lead, victim)
    assert gone.lag >= 5 and gone.match + gone.lag == st.commit
    others = [p for p in st.peers if p.id != victim]
    assert all(p.lag == 0 for p in others)
    assert (gone.last_heard_ticks_ago or 0) > 3


def _peer(node: RaftNode, pid: str) -> PeerStatus:
    return next(p for p in node.status().peers if p.id == pid)
