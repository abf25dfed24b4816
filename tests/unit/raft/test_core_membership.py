"""Membership changes, learners, snapshots and damaged replicas in the core."""

from __future__ import annotations

import random

import pytest

from jetraft.raft.core import RaftCore
from jetraft.raft.membership import (
    ChangeKind,
    MembershipChange,
    MembershipError,
    apply_change,
    decode_membership,
    encode_membership,
)
from jetraft.raft.messages import AppendEntries, VoteRequest, VoteResponse
from jetraft.raft.ready import ProposalDropped, RaftConfig, Role
from jetraft.raft.types import Entry, EntryKind, HardState, Membership
from tests.raft.harness import Cluster


def change(kind: ChangeKind, node: str) -> MembershipChange:
    return MembershipChange(kind, node)


def test_apply_change_rules() -> None:
    m = Membership(("a", "b", "c"))
    m2 = apply_change(m, change(ChangeKind.ADD_LEARNER, "d"))
    assert m2 == Membership(("a", "b", "c"), ("d",))
    assert apply_change(m2, change(ChangeKind.PROMOTE, "d")).voters == ("a", "b", "c", "d")
    assert apply_change(m, change(ChangeKind.REMOVE, "b")).voters == ("a", "c")
    for bad in (change(ChangeKind.ADD_LEARNER, "a"), change(ChangeKind.PROMOTE, "a"),
                change(ChangeKind.REMOVE, "z")):
        with pytest.raises(MembershipError):
            apply_change(m, bad)
    with pytest.raises(MembershipError):
        apply_change(Membership(("a",)), change(ChangeKind.REMOVE, "a"))
    assert decode_membership(encode_membership(m2)) == m2


def test_one_change_at_a_time_and_promote_needs_catch_up() -> None:
    c = Cluster("abc")
    c.elect("a")
    a = c.nodes["a"].core
    c.add_node("d")
    c.partition(["a"], ["b", "c", "d"])
    a.change_membership(change(ChangeKind.ADD_LEARNER, "d"))
    with pytest.raises(ProposalDropped):
        a.change_membership(change(ChangeKind.REMOVE, "b"))
    c.heal()
    c.process("a")
    c.stabilize()
    assert a.membership.learners == ("d",)
    c.partition(["a", "b", "c"], ["d"])
    c.propose("a", "x")
    c.stabilize()
    with pytest.raises(ProposalDropped):  # d has not caught up
        a.change_membership(change(ChangeKind.PROMOTE, "d"))
    c.heal()
    c.tick("a")
    c.stabilize()
    assert a.learner_caught_up("d")
    a.change_membership(change(ChangeKind.PROMOTE, "d"))
    c.process("a")
    c.stabilize()
    assert all(n.core.membership.voters == ("a", "b", "c", "d") for n in c.nodes.values())


def test_a_learner_neither_campaigns_nor_counts() -> None:
    c = Cluster("ab")
    c.elect("a")
    c.add_node("l")
    c.nodes["a"].core.change_membership(change(ChangeKind.ADD_LEARNER, "l"))
    c.process("a")
    c.stabilize()
    learner = c.nodes["l"].core
    assert learner.membership.learners == ("l",)
    for _ in range(50):
        c.tick("l")
    assert learner.role is Role.FOLLOWER and learner.term == c.nodes["a"].core.term
    c.crash("b")  # quorum of two voters is gone: the learner does not make up for it
    c.propose("a", "x")
    c.stabilize()
    assert c.nodes["a"].core.commit < c.nodes["a"].core.log.last_index


def test_configuration_takes_effect_when_appended_and_reverts_on_truncation() -> None:
    core = RaftCore("b", RaftConfig(), random.Random(1), peers=("a", "b", "c"))
    conf = Entry(1, 1, EntryKind.CONFIG, encode_membership(Membership(("a", "b"))))
    core.step(AppendEntries(1, "a", "b", 0, 0, (conf,), 0))
    assert core.membership.voters == ("a", "b")
    other = Entry(2, 1, EntryKind.NORMAL, b"x")
    core.step(AppendEntries(2, "c", "b", 0, 0, (other,), 0))
    assert core.membership.voters == ("a", "b", "c")


def test_compaction_keeps_membership_and_recovers() -> None:
    c = Cluster("abc")
    c.elect("a")
    c.add_node("d")
    c.nodes["a"].core.change_membership(change(ChangeKind.ADD_LEARNER, "d"))
    c.process("a")
    for i in range(5):
        c.propose("a", f"x{i}")
    c.stabilize()
    c.tick("a")
    c.stabilize()
    snap = c.snapshot("b")
    assert snap.meta.membership == Membership(("a", "b", "c"), ("d",))
    c.crash("b")
    c.restart("b")
    b = c.nodes["b"].core
    assert b.log.first_index == snap.meta.index + 1
    assert b.membership == Membership(("a", "b", "c"), ("d",))
    assert c.nodes["b"].data() == [f"x{i}" for i in range(5)]


def test_damaged_replica_moves_to_a_new_term_and_votes_carefully() -> None:
    ents = [Entry(2, i, EntryKind.NORMAL, b"x") for i in range(1, 4)]
    core = RaftCore("c", RaftConfig(), random.Random(1), peers=("a", "b", "c"),
                    hard_state=HardState(2, "a", 3), entries=ents, corrupt=True)
    assert core.term == 3 and core.vote == "" and core.commit == 0
    assert core.repair_term == 2
    for _ in range(100):
        core.tick()
    assert core.role is Role.FOLLOWER  # never campaigns
    core.step(VoteRequest(4, "b", "c", 10, 2))  # ends in term 2: may lack what c lost
    core.step(VoteRequest(5, "a", "c", 3, 3))  # ends in term 3: holds all of term <= 2
    rd = core.ready()
    votes = [m for m in rd.messages if isinstance(m, VoteResponse)]
    assert [(v.to, v.granted) for v in votes] == [("b", False), ("a", True)]
    assert rd.hard_state == HardState(5, "a", 0)


def test_damaged_replica_votes_for_logs_as_up_to_date_as_what_it_acknowledged() -> None:
    """Cluster simulator seed 2806: c (hard state of term 2) lost entries 67 onwards, all
    of term 1; its log's hard-state records say it ended at 85, term 1, when damaged. In
    a two-voter configuration {a, c} it must elect a, whose log ends at 85 in term 1
    too, or no one is ever elected. A shorter log may lack what c acknowledged."""
    ents = [Entry(1, i, EntryKind.NORMAL, b"x") for i in range(1, 67)]
    core = RaftCore("c", RaftConfig(), random.Random(1), peers=("a", "c"),
                    hard_state=HardState(2, "", 60), entries=ents, corrupt=True,
                    acked_tail=(85, 1))
    assert core.repair_term == 2 and core.term == 3
    core.step(VoteRequest(4, "b", "c", 84, 1))  # one short of what c acknowledged
    core.step(VoteRequest(5, "a", "c", 85, 1))
    rd = core.ready()
    votes = [m for m in rd.messages if isinstance(m, VoteResponse)]
    assert [(v.to, v.granted) for v in votes] == [("b", False), ("a", True)]
    assert rd.hard_state == HardState(5, "a", 0)
    assert core.role is Role.FOLLOWER  # it still never campaigns


def test_damaged_replica_counts_what_it_acknowledged_since_the_damage() -> None:
    """Its log grew past the end it had before the damage (entries it acknowledged as
    the leader repaired it): candidates must hold those too (cluster simulator seed
    20: its checker saw a replica lacking a committed entry that could be elected)."""
    ents = [Entry(1, i, EntryKind.NORMAL, b"x") for i in range(1, 7)]
    ents.append(Entry(2, 7, EntryKind.NOOP, b""))
    core = RaftCore("c", RaftConfig(), random.Random(1), peers=("a", "b", "c"),
                    hard_state=HardState(2, "", 0), entries=ents, corrupt=True,
                    acked_tail=(6, 1))
    core.step(VoteRequest(4, "a", "c", 6, 1))
    core.step(VoteRequest(5, "b", "c", 7, 2))
    votes = [m for m in core.ready().messages if isinstance(m, VoteResponse)]
    assert [(v.to, v.granted) for v in votes] == [("a", False), ("b", True)]


def test_a_voter_with_a_stale_configuration_still_hears_new_voters() -> None:
    """Found by the simulator (seed 70000818): c missed the entries that added and
    promoted d; with the leader gone, d (holding the newest log) must get c's vote."""
    c = RaftCore("c", RaftConfig(election_ticks=10), random.Random(1), peers=("a", "b", "c"))
    c.step(VoteRequest(2, "d", "c", 5, 1, pre_vote=True))
    rd = c.ready()
    assert VoteResponse(2, "c", "d", True, True) in rd.messages
    c.advance(rd)


def test_a_replica_removed_by_a_committed_configuration_is_not_answered() -> None:
    c = Cluster("abc")
    c.elect("a")
    c.nodes["a"].core.change_membership(MembershipChange(ChangeKind.REMOVE, "c"))
    c.process("a")
    c.stabilize()
    c.tick("a")
    c.stabilize()
    b = c.nodes["b"].core
    assert b.log.removed_member("c") and not b.log.removed_member("a")
    b.elapsed = 100  # no lease: only the removal keeps c from being answered
    b.step(VoteRequest(b.term + 1, "c", "b", 100, b.term, pre_vote=True))
    assert not [m for m in b.msgs if m.to == "c"]


def test_a_learner_answers_candidates_once_its_leader_is_silent() -> None:
    """Cluster simulator seed 111: a single voter promoted its learner by an entry the
    learner never received, then restarted: a two-voter group on the voter's log, a
    learner on the learner's. The learner cannot campaign; it must answer the voter's
    candidacy, so once its leader is silent for an election period the lease is over for
    good (it used to start again with every timeout of the learner's own clock)."""
    c = Cluster("a")
    c.elect("a")
    a = c.nodes["a"].core
    c.add_node("l")
    a.change_membership(change(ChangeKind.ADD_LEARNER, "l"))
    c.process("a")
    c.stabilize()
    learner = c.nodes["l"].core
    assert learner.membership.learners == ("l",) and learner.lead == "a"
    c.crash("a")
    last, term = learner.log.last_index, learner.log.last_term
    for _ in range(2 * c.cfg.election_ticks):  # silence: the lease runs out
        c.tick("l")
    for k in range(4 * c.cfg.election_ticks):  # and stays out, tick after tick
        c.tick("l")
        learner.msgs.clear()
        learner.step(VoteRequest(term + 1, "a", "l", last + 1, term, pre_vote=True))
        granted = [m for m in learner.msgs if isinstance(m, VoteResponse) and m.granted]
        assert granted, f"pre-vote not answered {k} ticks on"
