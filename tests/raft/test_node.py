"""RaftNode, the asyncio driver: real Wal over MemDisk, InMemoryHub between nodes."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

import pytest

from jetraft.raft.disk import MemDisk
from jetraft.raft.membership import ChangeKind, MembershipChange
from jetraft.raft.messages import AppendEntries, AppendResponse, VoteResponse
from jetraft.raft.node import Applied, NodeStopped, RaftNode
from jetraft.raft.ready import NotLeader, RaftConfig, Role
from jetraft.raft.transport import InMemoryHub
from jetraft.raft.types import Entry
from jetraft.raft.wal import Wal

TICK_S = 0.005
CFG = RaftConfig(election_ticks=10, heartbeat_ticks=1)


class KV:
    """A tiny state machine: applies `key=value`, returns the number of keys."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.applied: list[int] = []

    def apply(self, entry: Entry) -> object:
        k, _, v = entry.data.decode().partition("=")
        self.data[k] = v
        self.applied.append(entry.index)
        return len(self.data)

    def snapshot(self) -> bytes:
        return "\n".join(f"{k}={v}" for k, v in sorted(self.data.items())).encode()

    def restore(self, data: bytes) -> None:
        self.data = dict(
            line.partition("=")[::2] for line in data.decode().splitlines() if line
        )
        self.applied = []


class Group:
    def __init__(self, ids: list[str], *, encode: bool = False, snapshot_entries: int = 8192):
        self.ids = ids
        self.hub = InMemoryHub(encode=encode)
        self.disks = {i: MemDisk() for i in ids}
        self.sms: dict[str, KV] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.snapshot_entries = snapshot_entries
        self.cfg = CFG
        self.make_sm: Callable[[str], KV] = lambda nid: KV()

    async def start(self, nid: str, peers: list[str] | None = None) -> RaftNode:
        disk = self.disks.setdefault(nid, MemDisk())
        wal, rec = Wal.open(disk, f"/{nid}")
        sm = self.sms[nid] = self.make_sm(nid)
        node = RaftNode(
            nid, self.ids if peers is None else peers, self.cfg, wal, self.hub.endpoint(nid), sm,
            TICK_S, random.Random(nid), recovered=rec,
            snapshot_entries=self.snapshot_entries, keep_entries=2,
        )
        self.nodes[nid] = node
        self.hub.register(nid, node.receive)
        await node.start()
        return node

    async def stop(self, nid: str) -> None:
        self.hub.unregister(nid)
        node = self.nodes.pop(nid)
        await node.stop()
        assert isinstance(node.wal, Wal)
        node.wal.close()

    async def leader(self, timeout_s: float = 5.0) -> RaftNode:
        async with asyncio.timeout(timeout_s):
            while True:
                leaders = [n for n in self.nodes.values() if n.is_leader]
                if leaders:
                    return max(leaders, key=lambda n: n.core.term)
                await asyncio.sleep(TICK_S)

    async def converge(self, timeout_s: float = 5.0) -> None:
        """Wait until every running node applied everything the leader committed."""
        lead = await self.leader(timeout_s)
        for node in self.nodes.values():
            await node.wait_for(lambda n=node: n.core.applied >= lead.core.commit, timeout_s)


@pytest.fixture
async def group() -> AsyncIterator[Group]:
    g = Group(["a", "b", "c"])
    for nid in g.ids:
        await g.start(nid)
    yield g
    for nid in list(g.nodes):
        await g.stop(nid)


async def test_elects_a_leader_and_applies_on_every_node(group: Group) -> None:
    lead = await group.leader()
    res = await lead.propose(b"x=1")
    assert isinstance(res, Applied) and res.result == 1
    res = await lead.propose(b"y=2")
    assert res.result == 2
    await group.converge()
    assert all(sm.data == {"x": "1", "y": "2"} for sm in group.sms.values())


async def test_follower_refuses_and_names_the_leader(group: Group) -> None:
    lead = await group.leader()
    follower = next(n for n in group.nodes.values() if n is not lead)
    await follower.wait_for_leader(5.0)
    with pytest.raises(NotLeader) as exc:
        await follower.propose(b"x=1")
    assert exc.value.leader == lead.id


async def test_group_commit_one_fsync_for_many_proposals(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"warm=1")
    before = lead.fsyncs
    futs = [lead.propose_nowait(b"k%d=v" % i) for i in range(300)]
    results = await asyncio.gather(*futs)
    assert [r.result for r in results] == list(range(2, 302))
    assert lead.fsyncs - before < 30, lead.fsyncs - before


async def test_leader_partitioned_away_is_replaced(group: Group) -> None:
    old = await group.leader()
    await old.propose(b"x=1")
    group.hub.isolate(old.id)
    others = [n for n in group.nodes.values() if n is not old]
    async with asyncio.timeout(5):
        while not any(n.is_leader for n in others):
            await asyncio.sleep(TICK_S)
    new = next(n for n in others if n.is_leader)
    await new.propose(b"y=2")
    # check-quorum: the isolated leader steps down by itself
    await old.wait_for(lambda: not old.is_leader, 5.0)
    group.hub.heal()
    await group.converge()
    assert group.sms[old.id].data == {"x": "1", "y": "2"}


async def test_restart_recovers_from_disk(group: Group) -> None:
    lead = await group.leader()
    for i in range(20):
        await lead.propose(b"k%d=%d" % (i, i))
    await group.converge()
    victim = next(n for n in group.ids if n != lead.id)
    await group.stop(victim)
    group.disks[victim].crash(random.Random(1))
    await lead.propose(b"late=1")
    await group.start(victim)
    await group.converge()
    assert group.sms[victim].data == group.sms[lead.id].data
    assert len(group.sms[victim].data) == 21


async def test_lagging_node_catches_up_by_snapshot() -> None:
    g = Group(["a", "b", "c"], snapshot_entries=10)
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        victim = next(n for n in g.ids if n != lead.id)
        await g.stop(victim)
        for i in range(60):
            await lead.propose(b"k%d=%d" % (i, i))
        assert lead.core.log.first_index > 10  # compacted
        await g.start(victim)
        await g.converge()
        assert g.sms[victim].data == g.sms[lead.id].data
        assert g.nodes[victim].core.log.snapshot is not None
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_transfer_leadership(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    target = next(n for n in group.ids if n != lead.id)
    assert lead.transfer_leadership(target) == target
    new = group.nodes[target]
    await new.wait_for(lambda: new.is_leader, 5.0)
    assert (await new.propose(b"y=2")).result == 2


async def test_add_and_remove_members(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.start("d", peers=[])  # a fresh node knows no group
    await lead.add_member("d", timeout_s=5.0)
    assert lead.core.membership.voters == ("a", "b", "c", "d")
    await group.converge()
    assert group.sms["d"].data == {"x": "1"}
    victim = next(n for n in ("a", "b", "c") if n != lead.id)
    await lead.remove_member(victim)
    assert victim not in lead.core.membership.voters
    assert (await lead.propose(b"y=2")).result == 2
    with pytest.raises(Exception) as exc:
        await lead.change_membership(MembershipChange(ChangeKind.PROMOTE, "zz"))
    assert "not a learner" in str(exc.value)


async def test_messages_survive_the_codec() -> None:
    g = Group(["a", "b", "c"], encode=True)
    for nid in g.ids:
        await g.start(nid)
    try:
        lead = await g.leader()
        assert (await lead.propose(b"x=1")).result == 1
        await g.converge()
        assert g.hub.delivered > 0
    finally:
        for nid in list(g.nodes):
            await g.stop(nid)


async def test_status_reports_peers_on_the_leader(group: Group) -> None:
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    st = lead.status()
    assert st.role is Role.LEADER and st.commit >= 2
    peers = {p.id: p for p in st.peers}
    assert set(peers) == {"a", "b", "c"}
    await lead.wait_for(lambda: all(p.match == lead.core.log.last_index
                                    for p in lead.status().peers), 5.0)
    assert all(p.last_heard_ticks_ago is not None for p in lead.status().peers)


async def test_stop_fails_queued_proposals() -> None:
    g = Group(["a"])
    node = await g.start("a")
    await node.wait_for(lambda: node.is_leader, 5.0)
    fut = node.propose_nowait(b"x=1")
    await g.stop("a")
    assert fut.done()  # applied before the stop, or failed by it: never left hanging
    assert isinstance(fut.exception(), NodeStopped) or isinstance(fut.result(), Applied)
    with pytest.raises(NodeStopped):
        node.propose_nowait(b"y=1")


async def test_driver_asserts_the_persistence_contract(group: Group) -> None:
    node = group.nodes["a"]
    term = node.core.term
    with pytest.raises(AssertionError):
        node.driver.check_durable(VoteResponse(term + 5, "a", "b", True))
    with pytest.raises(AssertionError):
        node.driver.check_durable(AppendResponse(term, "a", "b", node.core.log.last_index + 10))


async def test_a_follower_is_caught_up_only_once_it_applied_the_commits_it_heard_of(
    group: Group,
) -> None:
    """Followers serve reads (direct gets) once caught_up(): every commit a leader told them
    of is applied, even when the entries themselves are still missing."""
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    f = next(n for n in group.nodes.values() if n is not lead)
    group.hub.isolate(f.id)
    res = await lead.propose(b"x=2")
    assert f.caught_up()  # it heard of nothing newer than what it applied
    news = AppendEntries(lead.core.term, lead.id, f.id, res.index, lead.core.term, (), res.index)
    f.receive(news)  # the commit news arrives before the entry (which it cannot place)
    assert not f.caught_up() and group.sms[f.id].data["x"] == "1"
    group.hub.heal()
    await f.wait_for(f.caught_up, 5.0)
    assert group.sms[f.id].data["x"] == "2"


async def test_a_replica_is_current_only_once_a_leader_spoke_and_it_applied_its_commit(
    group: Group,
) -> None:
    """A replica that restarts has applied everything it heard of (nothing yet), but may
    lack writes committed while it was away: it serves reads (direct gets) only once a
    leader has told it the commit index and it applied up to there. An idle leader says so
    in its heartbeats, so an idle replica does not wait for the next write."""
    lead = await group.leader()
    await lead.propose(b"x=1")
    await group.converge()
    f_id = next(nid for nid in group.nodes if nid != lead.id)
    group.hub.isolate(f_id)
    await lead.propose(b"x=2")  # committed by the other two
    await group.stop(f_id)
    f = await group.start(f_id)
    await f.wait_for(lambda: group.sms[f_id].data.get("x") == "1", 5.0)  # its own log, replayed
    assert f.caught_up() and not f.current()
    group.hub.heal()
    await f.wait_for(f.current, 5.0)
    assert group.sms[f_id].data["x"] == "2"
    # Back with everything: the heartbeats of an idle leader make it current again.
    await group.stop(f_id)
    f = await group.start(f_id)
    await f.wait_for(f.current, 5.0)
    assert group.sms[f_id].data["x"] == "2"
