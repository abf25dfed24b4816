"""A group that starts knowing only its intended size (the JetStream meta group): the first
leader needs a majority of that size, and its configuration holds off any second group."""

from __future__ import annotations

import random

from jetraft.raft.core import RaftCore
from jetraft.raft.ready import RaftConfig, Role
from tests.raft.harness import Cluster, Store
from tests.raft.harness import TestNode as Member

CFG = RaftConfig(election_ticks=10, heartbeat_ticks=1)


def bootstrapping(ids: str, size: int, known: dict[str, str] | None = None) -> Cluster:
    """Nodes with no configuration; ``known[n]`` lists the peers node n can reach."""
    c = Cluster(ids, CFG)
    for nid in ids:
        core = RaftCore(nid, CFG, random.Random(nid), bootstrap_size=size)
        core.set_bootstrap_peers(list((known or {}).get(nid, ids)))
        c.nodes[nid] = Member(nid, core, Store())
    return c


def run(c: Cluster, rounds: int = 60) -> None:
    for _ in range(rounds):
        c.tick_all()
        c.stabilize()


def test_two_of_three_form_the_group_and_the_third_joins_later() -> None:
    c = bootstrapping("abc", 3, {"a": "b", "b": "a", "c": ""})
    c.nodes["c"].up = False  # the third server is not started yet
    run(c)
    leader = c.leader()
    assert leader in ("a", "b")
    m = c.nodes[leader].core.membership
    assert m.voters == ("a", "b") and m.size == 3
    c.propose(leader, "x")
    c.stabilize()
    assert c.nodes["a"].data() == ["x"] or c.nodes["b"].data() == ["x"]


def test_a_lone_server_of_three_never_leads() -> None:
    c = bootstrapping("a", 3, {"a": "bc"})
    run(c)
    assert c.nodes["a"].core.role is not Role.LEADER
    assert not c.nodes["a"].core.membership.voters


def test_no_second_group_among_servers_that_missed_the_first() -> None:
    """Five servers meant for a group of four (the seeds' style: each lists its four
    routes). a, b, c form the group; its configuration must reach a majority of four, so
    it is held by all three; d and e, who can only reach each other (and c), cannot win
    a majority of four votes: they never lead."""
    known = {"a": "bc", "b": "ac", "c": "abde", "d": "ce", "e": "cd"}
    c = bootstrapping("abcde", 4, known)
    for nid in "de":
        c.nodes[nid].up = False
    run(c)
    leader = c.leader()
    assert leader in ("a", "b", "c")
    assert c.nodes[leader].core.membership.voters == ("a", "b", "c")
    c.propose(leader, "x")
    c.stabilize()
    c.tick(leader)
    c.stabilize()
    # Committed only once all three hold it: a quorum of four is three.
    assert all(c.nodes[n].data() == ["x"] for n in "abc")
    for nid in "de":
        c.nodes[nid].up = True
    run(c, 80)
    assert c.nodes["d"].core.role is not Role.LEADER
    assert c.nodes["e"].core.role is not Role.LEADER
    assert not c.nodes["d"].core.membership.voters and not c.nodes["e"].core.membership.voters
    assert c.leader() == leader or c.leader() in ("a", "b", "c")
