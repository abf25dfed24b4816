"""Bringing a RAFT group's membership in line with its assignment: a pure decision.

A stream's or consumer's assignment (meta group) names the servers that should hold the
group; its RAFT configuration says who does. The group's leader closes the gap one step at
a time, each step one membership change (RAFT allows one at a time), and asks again after
each: ``next_step`` says what to do next from what the leader sees now. The server's
asyncio glue and the simulator both carry out its answers, so they follow the same rules:

1. a wanted learner that has caught up is promoted (redundancy first);
2. a wanted learner still catching up is waited for (``CATCH_UP``), so that no replica
   leaves while its replacement cannot vote yet;
3. a wanted server that is not a member joins as a learner;
4. an unwanted learner, then an unwanted voter other than the leader, is removed;
5. when the leader itself is unwanted, it hands leadership to a wanted voter (the new
   leader removes it); without a wanted voter yet it waits, as rule 1 makes one.

Adding before removing keeps a group's fault tolerance while it is reshaped: replacing one
of three replicas goes through four voters, never two.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from jetraft.raft.membership import ChangeKind, MembershipChange


class StepKind(enum.Enum):
    ADD_LEARNER = "add_learner"
    PROMOTE = "promote"
    REMOVE = "remove"
    TRANSFER = "transfer"  # hand leadership to `peer` (this leader is not wanted)
    CATCH_UP = "catch_up"  # wait until learner `peer` has caught up, then ask again


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    peer: str

    def change(self) -> MembershipChange | None:
        """The membership change this step proposes (None for TRANSFER and CATCH_UP)."""
        kind = _CHANGES.get(self.kind)
        return MembershipChange(kind, self.peer) if kind is not None else None


_CHANGES = {
    StepKind.ADD_LEARNER: ChangeKind.ADD_LEARNER,
    StepKind.PROMOTE: ChangeKind.PROMOTE,
    StepKind.REMOVE: ChangeKind.REMOVE,
}


def next_step(
    want: Sequence[str],
    voters: Sequence[str],
    learners: Sequence[str],
    me: str,
    caught_up: Collection[str] = (),
) -> Step | None:
    """The leader ``me``'s next step towards membership ``want`` from the configuration
    (``voters``, ``learners``) in force; ``caught_up``: learners the leader counts as
    caught up. None: nothing to do (the group matches its assignment)."""
    wanted = set(want)
    have = set(voters) | set(learners)
    waiting = sorted(p for p in learners if p in wanted)
    for peer in waiting:
        if peer in caught_up:
            return Step(StepKind.PROMOTE, peer)
    if waiting:
        return Step(StepKind.CATCH_UP, waiting[0])
    for peer in sorted(wanted - have):
        return Step(StepKind.ADD_LEARNER, peer)
    for peer in sorted(p for p in learners if p not in wanted):
        return Step(StepKind.REMOVE, peer)
    for peer in sorted(p for p in voters if p not in wanted and p != me):
        return Step(StepKind.REMOVE, peer)
    if me not in wanted and me in have:
        target = next((p for p in sorted(wanted) if p in voters), None)
        if target is not None:
            return Step(StepKind.TRANSFER, target)
    return None
