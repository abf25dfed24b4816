"""Leadership transfer: the leader brings a voter up to date and tells it to campaign at
once (TimeoutNow); proposals wait until the transfer ends, and a transfer that does not end
within an election period makes the leader step down anyway.

Functions over a RaftState; RaftCore.transfer_leadership and the leader's tick call them.
The target's side is an election with `transfer` set (election.py), which neither pre-votes
nor respects the leader lease.
"""

from __future__ import annotations

from . import replication
from .membership import MembershipError
from .messages import TimeoutNow
from .ready import NotLeader, RaftError, Role
from .state import RaftState


def transfer_leadership(core: RaftState, to: str | None = None) -> str:
    """Hand leadership to `to`, or to the most up-to-date voter we hear from; returns
    the target. Proposals are refused until the transfer ends: if the target has not
    taken over an election period after the latest request, we step down anyway. A
    caller that keeps asking keeps the transfer going: a replica leaving its group
    does, while its successor catches up (a snapshot, a repair); stepping down then
    would hand leadership to another leaving replica, over and over (cluster
    simulator seed 285 of 5 servers)."""
    if core.role is not Role.LEADER:
        raise NotLeader(core.lead)
    others = [v for v in core.membership.voters if v != core.id]
    if to is None:
        if not others:
            raise RaftError("no other voter to transfer leadership to")
        # The most up-to-date voter may be paused or cut off: a transfer to it would
        # only end when it expires (nats-server too hands over to a peer it hears).
        heard = [v for v in others if _heard_recently(core, v)] or others
        to = max(heard, key=lambda v: (core.prs[v].match, v))
    elif to == core.id:
        return to
    elif to not in others:
        raise MembershipError(f"{to} is not a voter")
    core.transferee = to
    core.transfer_elapsed = 0
    if core.prs[to].match == core.log.last_index:
        core.msgs.append(TimeoutNow(core.term, core.id, to))
    else:
        replication.send_append(core, to)
    return to


def _heard_recently(core: RaftState, peer: str) -> bool:
    heard = core.prs[peer].last_heard_tick
    return heard >= 0 and core.ticks - heard < core.cfg.election_ticks


def give_up_leadership(core: RaftState) -> None:
    """A transfer did not finish within an election period (its target down, slow, or
    cut off): step down anyway, as a step-down asks (nats-server's always gives up
    leadership). Staying leader would leave a step-down without effect. Our own
    campaign waits one more election period, so that any other voter able to win
    goes first; if none can, we are elected again."""
    core.become_follower(core.term, "")
    core.elapsed = -core.cfg.election_ticks
