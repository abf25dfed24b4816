"""Membership changes as the leader runs them: one change at a time, a learner promoted
only once it has caught up. What a change does to a configuration, and how a CONFIG entry
encodes it, is in membership.py; the leader's view of its followers follows the
configuration in force through RaftState.sync_progress.

Functions over a RaftState; RaftCore.change_membership and learner_caught_up call them.
"""

from __future__ import annotations

from .membership import ChangeKind, MembershipChange, apply_change, encode_membership
from .ready import ProposalDropped, Role
from .state import RaftState
from .types import EntryKind


def change_membership(core: RaftState, change: MembershipChange) -> int:
    """Propose one membership change (the caller checked that we may propose); returns
    the index of its CONFIG entry."""
    if core.log.last_config_index() > core.log.committed:
        raise ProposalDropped("a membership change is in progress")
    if core.log.term(core.log.committed) != core.term:
        raise ProposalDropped("the leader has not committed an entry of its term yet")
    new = apply_change(core.membership, change)
    if change.kind is ChangeKind.PROMOTE:
        pr = core.prs.get(change.node)
        if pr is None or pr.match + core.cfg.catchup_slack < core.log.last_index:
            raise ProposalDropped(f"learner {change.node} has not caught up")
    if change.kind is ChangeKind.REMOVE and change.node == core.transferee:
        core.transferee = ""
    index = core.append_entry(EntryKind.CONFIG, encode_membership(new))
    core.sync_progress()
    return index


def learner_caught_up(core: RaftState, node: str) -> bool:
    pr = core.prs.get(node)
    return (
        core.role is Role.LEADER and pr is not None
        and pr.match + core.cfg.catchup_slack >= core.log.last_index
    )
