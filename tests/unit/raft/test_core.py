"""RaftCore: elections, replication, flow control and the Ready contract."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jetraft.raft.core import RaftCore
from jetraft.raft.messages import AppendEntries, AppendResponse, VoteRequest, VoteResponse
from jetraft.raft.ready import NotLeader, ProposalDropped, RaftConfig, RaftError, Role
from jetraft.raft.types import Entry, EntryKind, HardState
from tests.raft.harness import Cluster, Store
from tests.raft.scenario import Runner, parse


def three(**kw: object) -> Cluster:
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=1, **kw)  # type: ignore[arg-type]
    c = Cluster("abc", cfg)
    c.elect("a")
    return c


def test_single_node_elects_itself_and_commits_at_once() -> None:
    c = Cluster("a")
    c.tick("a", 20)
    assert c.nodes["a"].core.role is Role.LEADER
    c.propose("a", "x")
    assert c.nodes["a"].data() == ["x"]


def test_first_election_and_replication() -> None:
    c = Cluster("abc")
    for _ in range(30):
        c.tick_all()
        c.stabilize()
    leader = c.leader()
    assert leader is not None
    terms = {n.core.term for n in c.nodes.values()}
    assert len(terms) == 1
    c.propose(leader, "x")
    c.stabilize()
    c.tick(leader)
    c.stabilize()
    assert all(n.data() == ["x"] for n in c.nodes.values())


def test_election_timeout_is_randomized_in_range() -> None:
    cfg = RaftConfig(election_ticks=10)
    seen = set()
    for seed in range(40):
        core = RaftCore("a", cfg, random.Random(seed), peers=("a", "b", "c"))
        for t in range(1, 40):
            core.tick()
            if core.role is not Role.FOLLOWER:
                seen.add(t)
                break
    assert min(seen) >= 10 and max(seen) < 20 and len(seen) > 3


def test_proposal_on_follower_names_the_leader() -> None:
    c = three()
    with pytest.raises(NotLeader) as exc:
        c.nodes["b"].core.propose(b"x")
    assert exc.value.leader == "a"
    fresh = Cluster("xyz")
    with pytest.raises(NotLeader) as exc:
        fresh.nodes["x"].core.propose(b"x")
    assert exc.value.leader == ""


def test_proposals_between_readys_leave_in_one_append_per_follower() -> None:
    c = three()
    core = c.nodes["a"].core
    for i in range(50):
        core.propose(f"m{i}".encode())
    rd = core.ready()
    apps = [m for m in rd.messages if isinstance(m, AppendEntries)]
    assert sorted(m.to for m in apps) == ["b", "c"]
    assert all(len(m.entries) == 50 for m in apps)
    assert len(rd.entries) == 50  # and the leader persists them in the same Ready
    core.advance(rd)


def test_max_msg_bytes_splits_and_max_inflight_pipelines() -> None:
    c = three(max_msg_bytes=150, max_inflight=3)
    core = c.nodes["a"].core
    for i in range(20):
        core.propose(bytes(40) + str(i).encode())
    rd = core.ready()
    to_b = [m for m in rd.messages if isinstance(m, AppendEntries) and m.to == "b"]
    # 64-odd accounted bytes an entry, 150-byte messages: 2 entries each, 3 in flight, then paused.
    assert [len(m.entries) for m in to_b] == [2, 2, 2]
    core.advance(rd)
    c.queue.extend(rd.messages)
    c.stabilize()
    assert c.nodes["b"].core.log.last_index == core.log.last_index


def _log(*runs: tuple[int, int]) -> list[Entry]:
    """Entries from (count, term) runs."""
    out: list[Entry] = []
    for count, term in runs:
        for _ in range(count):
            out.append(Entry(term, len(out) + 1, EntryKind.NORMAL, b"e%d" % (len(out) + 1)))
    return out


@pytest.mark.parametrize(
    ("leader_log", "follower_log"),
    [
        ([(100, 1), (100, 3)], [(100, 1), (100, 2)]),  # divergent suffix of another term
        ([(300, 1)], [(5, 1)]),  # far behind
        ([(50, 1), (50, 2), (50, 4)], [(50, 1), (150, 3)]),  # longer divergent suffix
    ],
)
def test_fast_backoff_needs_few_round_trips(
    leader_log: list[tuple[int, int]], follower_log: list[tuple[int, int]]
) -> None:
    c = Cluster("ab")
    c.nodes["a"].store = Store(HardState(5, "a", 50), None, _log(*leader_log))
    c.nodes["b"].store = Store(HardState(5, "a", 50), None, _log(*follower_log))
    c.restart("a")
    c.restart("b")
    lines: list[str] = []
    c.trace = lines.append
    a = c.nodes["a"].core
    a.campaign()
    c.process("a")
    c.stabilize()
    assert a.role is Role.LEADER
    rejects = [x for x in lines if "b->a AppResp" in x and "reject" in x]
    assert len(rejects) <= 2, rejects
    b = c.nodes["b"].core
    assert b.log.last_index == a.log.last_index
    assert all(b.log.term(i) == a.log.term(i) for i in range(1, a.log.last_index + 1))


def test_vote_is_durable_before_the_response_leaves() -> None:
    core = RaftCore("b", RaftConfig(), random.Random(1), peers=("a", "b", "c"))
    core.step(VoteRequest(1, "a", "b", 0, 0))
    rd = core.ready()
    assert rd.hard_state == HardState(1, "a", 0)
    assert rd.must_sync
    assert rd.messages == (VoteResponse(1, "b", "a", True),)


def test_entries_are_persisted_in_the_ready_that_acknowledges_them() -> None:
    core = RaftCore("b", RaftConfig(), random.Random(1), peers=("a", "b", "c"))
    ents = tuple(Entry(1, i, EntryKind.NORMAL, b"x") for i in (1, 2))
    core.step(AppendEntries(1, "a", "b", 0, 0, ents, 0))
    rd = core.ready()
    assert rd.entries == ents and rd.must_sync
    assert rd.messages == (AppendResponse(1, "b", "a", 2),)
    core.advance(rd)
    # A commit-only change needs no fsync.
    core.step(AppendEntries(1, "a", "b", 2, 1, (), 2))
    rd = core.ready()
    assert rd.hard_state == HardState(1, "", 2) and not rd.must_sync
    assert [e.index for e in rd.committed] == [1, 2]


def test_ready_twice_without_advance_is_refused() -> None:
    core = RaftCore("a", RaftConfig(), random.Random(1), peers=("a",))
    core.campaign()
    core.ready()
    with pytest.raises(RaftError):
        core.ready()


def test_pre_vote_does_not_bump_terms_of_a_partitioned_node() -> None:
    c = three()
    c.partition(["a", "b"], ["c"])
    for _ in range(50):
        c.tick_all()
        c.deliver()
    assert c.nodes["c"].core.term == 1
    c.heal()
    for _ in range(3):
        c.tick_all()
        c.stabilize()
    assert c.leader() == "a" and c.nodes["a"].core.term == 1


def test_without_pre_vote_a_rejoining_node_is_ignored_during_the_lease() -> None:
    c = three(pre_vote=False)
    c.partition(["a", "b"], ["c"])
    c.propose("a", "x")
    for _ in range(30):
        c.tick_all()
        c.deliver()
    assert c.nodes["c"].core.term > 1
    c.heal()
    c.tick_all()
    c.stabilize()
    # c's higher term reaches a through responses and forces a new election, which c
    # cannot win: its log lacks "x".
    for _ in range(40):
        c.tick_all()
        c.stabilize()
    assert c.leader() in ("a", "b")


def test_check_quorum_leader_steps_down_when_isolated() -> None:
    c = three()
    c.partition(["a"], ["b", "c"])
    for _ in range(25):
        c.tick("a")
        c.deliver()
    assert c.nodes["a"].core.role is Role.FOLLOWER


def test_leader_without_check_quorum_stays() -> None:
    c = three(check_quorum=False)
    c.partition(["a"], ["b", "c"])
    for _ in range(25):
        c.tick("a")
        c.deliver()
    assert c.nodes["a"].core.role is Role.LEADER


def test_transfer_leadership_to_a_current_follower() -> None:
    c = three()
    c.propose("a", "x")
    c.stabilize()
    assert c.nodes["a"].core.transfer_leadership("c") == "c"
    c.process("a")
    hops = 0
    while c.queue and hops < 10:
        hops += 1
        batch = len(c.queue)
        c.deliver(batch)
        if c.nodes["c"].core.role is Role.LEADER:
            break
    assert c.nodes["c"].core.role is Role.LEADER
    assert hops <= 3  # TimeoutNow, Vote, VoteResp
    with pytest.raises(NotLeader) as exc:
        c.nodes["a"].core.propose(b"y")
    assert exc.value.leader in ("", "c")


def test_transfer_to_most_up_to_date_and_proposals_refused_meanwhile() -> None:
    c = three()
    c.partition(["a", "b"], ["c"])
    c.propose("a", "x")
    c.stabilize()
    target = c.nodes["a"].core.transfer_leadership()
    assert target == "b"
    with pytest.raises(ProposalDropped):
        c.nodes["a"].core.propose(b"y")
    c.process("a")
    c.stabilize()
    assert c.nodes["b"].core.role is Role.LEADER


def test_a_step_down_without_target_goes_to_a_voter_that_answers() -> None:
    """b and c hold the whole log, c has stopped answering (a paused process): the
    transfer goes to b, although c comes first among equals, and b takes over."""
    c = three()
    c.propose("a", "x")
    c.stabilize()
    a = c.nodes["a"].core
    assert a.prs["b"].match == a.prs["c"].match == a.log.last_index
    c.partition(["a", "b"], ["c"])
    for _ in range(10):  # an election period without word from c
        c.tick("a")
        c.stabilize()
    assert a.role is Role.LEADER
    assert a.transfer_leadership() == "b"
    c.process("a")
    c.stabilize()
    assert c.nodes["b"].core.role is Role.LEADER


def test_transfer_to_lagging_target_catches_it_up_first() -> None:
    c = three()
    c.partition(["a", "b"], ["c"])
    for i in range(5):
        c.propose("a", f"x{i}")
    c.stabilize()
    c.heal()
    c.nodes["a"].core.transfer_leadership("c")
    c.process("a")
    c.stabilize()
    assert c.nodes["c"].core.role is Role.LEADER
    assert c.nodes["c"].core.log.last_index >= 6


def test_a_transfer_that_does_not_finish_still_ends_the_leadership() -> None:
    """Its target is cut off: after an election period the leader steps down anyway (a
    step-down must give up leadership, as nats-server's does), and holds back its own
    campaign so that the other voter that can win is elected."""
    c = three()
    c.partition(["a", "b"], ["c"])
    a = c.nodes["a"].core
    a.transfer_leadership("c")
    for _ in range(9):
        c.tick("a")
        c.deliver()
    assert a.role is Role.LEADER and a.transferee == "c"  # still within the period
    c.tick("a")
    c.deliver()
    assert a.transferee == "" and a.role is Role.FOLLOWER and a.lead == ""
    with pytest.raises(NotLeader):
        a.propose(b"y")
    for _ in range(40):
        c.tick_all()
        c.stabilize()
        if c.leader() is not None:
            break
    assert c.leader() == "b"


def test_a_transfer_asked_for_again_lasts_a_period_from_the_latest_request() -> None:
    """A replica leaving its group asks again and again while its successor catches up
    (a snapshot, a repair): the leader waits for it instead of stepping down to another
    replica; once nobody asks, the transfer ends in a step-down an election period after
    the latest request (cluster simulator seed 285 of 5 servers ping-ponged otherwise)."""
    c = three()
    c.partition(["a", "b"], ["c"])
    a = c.nodes["a"].core
    for t in range(25):
        if t % 5 == 0:
            assert a.transfer_leadership("c") == "c"
        c.tick("a")
        c.deliver()
        assert a.role is Role.LEADER and a.transferee == "c"
    # The latest request was at t=20, five ticks ago: five more end the leadership.
    c.tick("a", 4)
    assert a.role is Role.LEADER
    c.tick("a")
    assert a.role is Role.FOLLOWER and a.transferee == ""


def test_transfer_requests_repeated_do_not_postpone_the_check_quorum() -> None:
    """A leader cut off from every other voter steps down within two election periods
    (check quorum) even while someone keeps asking it to transfer leadership faster than
    that: the transfer has a clock of its own (with one clock, each request restarted the
    check-quorum period, and the cut-off leader stayed leader as long as requests came)."""
    c = three()
    c.partition(["a"], ["b", "c"])
    a = c.nodes["a"].core
    for t in range(25):
        if a.role is not Role.LEADER:
            break
        if t % 5 == 0:
            a.transfer_leadership("b")
        c.tick("a")
        c.deliver()
    assert a.role is Role.FOLLOWER
    with pytest.raises(NotLeader):
        a.propose(b"y")


def test_a_transfer_that_finishes_leaves_no_step_down_behind() -> None:
    """The target took over within the period: the old leader follows it, and nothing
    of the transfer's deadline remains to disturb the new term."""
    c = three()
    c.propose("a", "x")
    c.stabilize()
    c.nodes["a"].core.transfer_leadership("b")
    c.process("a")
    c.stabilize()
    assert c.leader() == "b"
    for _ in range(30):
        c.tick_all()
        c.stabilize()
    assert c.leader() == "b" and c.nodes["a"].core.lead == "b"
    c.propose("b", "y")
    c.stabilize()
    c.tick("b")
    c.stabilize()
    assert all(n.data() == ["x", "y"] for n in c.nodes.values())


def test_a_leader_that_stepped_down_is_elected_again_when_no_one_else_can_win() -> None:
    c = three()
    c.partition(["a", "b"], ["c"])
    c.crash("b")
    c.propose("a", "x")  # only a holds it: b is down, c cut off
    c.nodes["a"].core.transfer_leadership("c")
    for _ in range(10):
        c.tick("a")
        c.deliver()
    assert c.nodes["a"].core.role is Role.FOLLOWER
    c.restart("b")  # b campaigns first, but its log is older than a's: a refuses it
    for _ in range(80):
        c.tick_all()
        c.stabilize()
        if c.leader() is not None:
            break
    assert c.leader() == "a"


def test_restart_recovers_log_and_reapplies() -> None:
    c = three()
    for i in range(3):
        c.propose("a", f"x{i}")
    c.stabilize()
    c.tick("a")
    c.stabilize()
    c.crash("b")
    c.restart("b")
    assert c.nodes["b"].data() == ["x0", "x1", "x2"]
    assert c.nodes["b"].core.term == c.nodes["a"].core.term


def test_figure8_old_term_entry_not_committed_by_counting() -> None:
    """The steps of tests/raft/scenarios/figure8.txt, with the facts asserted."""
    r = Runner()
    script = Path(__file__).parents[2] / "raft" / "scenarios" / "figure8.txt"
    blocks, _ = parse(script.read_text())
    commands = [cmd for b in blocks for cmd in b.commands]
    cut = commands.index("status a")
    r.run_block(commands[:cut])
    a = r.c.nodes["a"].core
    assert a.role is Role.LEADER and a.term == 3
    holders = [n for n in "abc" if r.c.nodes[n].core.log.term(2) == 1]
    assert holders == ["a", "b", "c"]  # "old" (2/1) is on a majority of five ...
    assert a.commit == 1  # ... and not committed: it is not of a's term
    r.run_block(commands[cut:])
    for n in "bcde":
        assert r.c.nodes[n].core.log.term(2) == 2  # e overwrote it, legitimately
    assert all(e.data != b"old" for node in r.c.nodes.values() for e in node.applied)


def test_damaged_replica_with_an_empty_log_is_repaired_without_a_snapshot() -> None:
    """Found by the simulator (seed 193): a leader without a snapshot answered the damage
    report of a replica whose log it probed at index 0 with a probe before index 1, which
    it could not send; the replica never caught up."""
    c = Cluster("abc")
    c.crash("c")
    c.nodes["c"].store.hard_state = HardState(3, "", 0)  # terms passed, no entry kept
    c.restart("c", corrupt=True)
    for nid in "ab":
        c.nodes[nid].core.term = 3
    c.elect("a")
    c.propose("a", "x")
    c.stabilize()
    c.tick("a")
    c.stabilize()
    assert c.nodes["a"].core.log.snapshot is None
    assert c.nodes["c"].data() == ["x"] and not c.nodes["c"].core.corrupt
