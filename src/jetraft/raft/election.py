"""Elections: who votes, campaigning (pre-vote first), counting votes, and answering a
candidate, with the rule for a damaged replica's vote (see state.py on damage).

Functions over a RaftState; RaftCore.tick, campaign and step call them. What comes before a
vote request is answered at all (a committed removal, the leader lease, the terms) is in
RaftCore.step.
"""

from __future__ import annotations

from .messages import VoteRequest, VoteResponse
from .ready import Role
from .state import RaftState


def electorate(core: RaftState) -> tuple[tuple[str, ...], int]:
    """Who may vote in an election of ours, and how many yes votes win it."""
    if core.in_bootstrap:
        return (core.id, *core.bootstrap_peers), core.bootstrap_size // 2 + 1
    m = core.membership
    return m.voters, m.quorum()


def campaign(core: RaftState, *, transfer: bool = False) -> None:
    """Start an election now (pre-vote first unless this is a transfer)."""
    if not core.promotable() or core.role is Role.LEADER:
        return
    run_election(core, pre=core.cfg.pre_vote and not transfer, transfer=transfer)


def run_election(core: RaftState, *, pre: bool, transfer: bool) -> None:
    if pre:
        core.become_pre_candidate()
        term = core.term + 1
    else:
        core.become_candidate()
        term = core.term
    if poll(core, core.id, True):
        return
    for v in electorate(core)[0]:
        if v != core.id:
            core.msgs.append(
                VoteRequest(term, core.id, v, core.log.last_index, core.log.last_term,
                            pre, transfer)
            )


def poll(core: RaftState, frm: str, granted: bool) -> bool:
    """Count a vote; act on the outcome. True if the election is decided."""
    core.votes.setdefault(frm, granted)
    voters, q = electorate(core)
    yes = sum(1 for v in voters if core.votes.get(v) is True)
    no = sum(1 for v in voters if core.votes.get(v) is False)
    if yes >= q:
        if core.role is Role.PRE_CANDIDATE:
            run_election(core, pre=False, transfer=False)
        else:
            core.become_leader()
        return True
    if no > len(voters) - q:
        core.become_follower(core.term, "")
        return True
    return False


def handle_vote_request(core: RaftState, m: VoteRequest) -> None:
    can_vote = (
        core.vote == m.frm
        or (core.vote == "" and core.lead == "")
        or (m.pre_vote and m.term > core.term)
    )
    safe = safe_for_damaged(core, m)
    # A replica that knows no configuration yet (it joined an existing group with an
    # empty log and waits for the leader to send the log) does not vote: a server
    # once removed from the group and now joining again would otherwise count as the
    # voter it was in the stale configuration of a removed replica asking for votes.
    knows = bool(core.membership.voters) or core.in_bootstrap
    if can_vote and safe and knows and core.log.is_up_to_date(m.last_index, m.last_term):
        core.msgs.append(VoteResponse(m.term, core.id, m.frm, True, m.pre_vote))
        if not m.pre_vote:
            core.vote = m.frm
            core.elapsed = 0
    else:
        core.msgs.append(VoteResponse(core.term, core.id, m.frm, False, m.pre_vote))


def safe_for_damaged(core: RaftState, m: VoteRequest) -> bool:
    """Whether our vote for this candidate is safe, given our damage (always, undamaged).

    A damaged replica may have lost entries it acknowledged, all of terms up to
    repair_term; a candidate whose log ends in a later term holds every such entry
    that was committed (see replication._check_repaired), so only such a candidate is
    safe. One that recovered nothing at all (repair_term 0: a lost log, its hard state
    with it) cannot tell which terms it acknowledged entries in: it votes for nobody
    until repaired (else a candidate whose log ends in an old term could win with
    its vote and lose what was committed with its lost acknowledgements).
    Or one at least as up to date as every log we acknowledged (acked_bound): it
    holds all we acknowledged that was committed, by Raft's own vote argument (a
    two-voter group with a damaged voter elects again: cluster sim seed 2806)."""
    bound = core.acked_bound()
    return (not core.corrupt or 0 < core.repair_term < m.last_term
            or (bound is not None and (m.last_term, m.last_index) >= bound))
