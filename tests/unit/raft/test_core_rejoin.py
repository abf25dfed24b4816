"""Rules the cluster simulator found missing: lost logs and stale configurations do not
vote, a leader commits its own entries once durable, and a server removed from a group
and added again starts from a snapshot, told by its leader that it is a member."""

from __future__ import annotations

import random

from jetraft.raft.core import RaftCore
from jetraft.raft.membership import ChangeKind, MembershipChange
from jetraft.raft.messages import (
    AppendEntries,
    Heartbeat,
    InstallSnapshot,
    VoteRequest,
    VoteResponse,
    decode_message,
    encode_message,
)
from jetraft.raft.ready import RaftConfig, Role
from tests.raft.harness import Cluster, Store


def votes(core: RaftCore) -> list[tuple[str, bool]]:
    rd = core.ready()
    out = [(m.to, m.granted) for m in rd.messages if isinstance(m, VoteResponse)]
    core.advance(rd)
    return out


def test_a_replica_that_lost_its_log_votes_for_nobody_until_repaired() -> None:
    """Seed 6: it cannot tell which terms it acknowledged entries in; a candidate whose
    log ends in an old term could win with its vote and lose committed entries."""
    core = RaftCore("c", RaftConfig(), random.Random(1), peers=("a", "b", "c"),
                    corrupt=True)
    assert core.repair_term == 0
    core.step(VoteRequest(3, "b", "c", 40, 2))
    assert votes(core) == [("b", False)]


def test_a_replica_that_knows_no_configuration_does_not_vote() -> None:
    """Seed 6: a server removed from a group and joining it again (empty log, no peers)
    would count as the voter it was in a removed replica's stale configuration."""
    core = RaftCore("c", RaftConfig(), random.Random(1))
    core.step(VoteRequest(2, "a", "c", 5, 1))
    core.step(VoteRequest(3, "b", "c", 5, 1, pre_vote=True))
    assert votes(core) == [("a", False), ("b", False)]


def test_a_single_voter_commits_its_entries_once_they_are_durable() -> None:
    """Seed 361: a leader alone in its configuration committed at append and sent the
    commit index to a learner with the AppendEntries that overlap its own fsync."""
    a = RaftCore("a", RaftConfig(), random.Random(1), peers=("a",), learners=("b",))
    a.campaign()
    while a.has_ready():
        a.advance(a.ready())
    assert a.role is Role.LEADER
    index = a.propose(b"x")
    rd = a.ready()
    assert index not in [e.index for e in rd.committed]
    told = [m.commit for m in rd.messages if isinstance(m, AppendEntries | Heartbeat)]
    assert all(commit < index for commit in told)
    a.advance(rd)  # the driver persisted it
    assert a.has_ready()
    rd = a.ready()
    assert [e.index for e in rd.committed] == [index]


def test_the_leader_tells_each_follower_whether_it_is_a_member() -> None:
    c = Cluster("abc")
    c.elect("a")
    a = c.nodes["a"].core
    a.change_membership(MembershipChange(ChangeKind.REMOVE, "c"))
    c.process("a")
    c.tick("a")
    sent = [m for m in c.queue if isinstance(m, AppendEntries | Heartbeat)]
    assert {(m.to, m.member) for m in sent} >= {("b", True), ("c", False)}
    c.stabilize()
    assert c.nodes["b"].core.leader_says_member is True
    for m in sent:  # the flag travels
        assert decode_message(encode_message(m)) == m


def test_a_server_removed_and_added_again_starts_from_a_snapshot() -> None:
    """Seed 59: sent the history, it took a configuration of its previous life (in
    which it was the only voter) for its own and could elect itself."""
    c = Cluster("abc")
    c.elect("a")
    a = c.nodes["a"].core
    a.snapshot_source = lambda: (a.applied, b"state")
    for change in (MembershipChange(ChangeKind.REMOVE, "c"),):
        a.change_membership(change)
        c.process("a")
        c.stabilize()
    c.propose("a", "x")
    c.stabilize()
    removed_at = a.log.last_config_index()
    c.crash("c")
    c.nodes["c"] = c._new_node("c", Store())  # its log removed; it joins again, empty
    a.change_membership(MembershipChange(ChangeKind.ADD_LEARNER, "c"))
    c.process("a")
    c.stabilize()
    first = [m for m in c.queue if m.to == "c"]
    c.tick("a")
    to_c = [m for m in c.queue if m.to == "c"] or first
    snaps = [m for m in to_c if isinstance(m, InstallSnapshot)]
    c.stabilize()
    got = c.nodes["c"].core
    assert got.log.offset >= removed_at or snaps
    assert all(m.meta.index >= removed_at for m in snaps)
    assert "c" in got.membership.learners and "c" not in got.membership.voters
