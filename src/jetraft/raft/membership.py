"""Membership changes, one server at a time, and their encoding in CONFIG entries.

A configuration takes effect on a replica as soon as its CONFIG entry is in that replica's
log (committed or not), as in the Raft dissertation (section 4.1); if the entry is
truncated the replica falls back to the previous one. The leader allows a new change only
once the previous CONFIG entry is committed and it has committed an entry of its own term,
so two configurations in force at the same time always share a majority.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import msgspec

from .types import Membership


class ChangeKind(enum.Enum):
    ADD_LEARNER = "add_learner"  # joins without a vote; receives the log
    PROMOTE = "promote"  # learner -> voter, once it has caught up
    REMOVE = "remove"  # voter or learner leaves


@dataclass(frozen=True, slots=True)
class MembershipChange:
    kind: ChangeKind
    node: str


class MembershipError(ValueError):
    """A change that is not allowed in the current configuration."""


def quorum(voters: int, size: int = 0) -> int:
    return max(voters, size) // 2 + 1


def apply_change(current: Membership, change: MembershipChange) -> Membership:
    """The configuration after `change`; raises MembershipError if it does not apply."""
    node = change.node
    voters, learners = list(current.voters), list(current.learners)
    size = current.size
    if not node:
        raise MembershipError("empty node id")
    if change.kind is ChangeKind.ADD_LEARNER:
        if node in voters or node in learners:
            raise MembershipError(f"{node} is already a member")
        learners.append(node)
    elif change.kind is ChangeKind.PROMOTE:
        if node not in learners:
            raise MembershipError(f"{node} is not a learner")
        learners.remove(node)
        voters.append(node)
    else:
        if node in voters:
            if len(voters) == 1:
                raise MembershipError("cannot remove the last voter")
            voters.remove(node)
            # A server leaving for good shrinks the cluster it was counted in.
            size = min(size, len(voters))
        elif node in learners:
            learners.remove(node)
        else:
            raise MembershipError(f"{node} is not a member")
    return Membership(tuple(sorted(voters)), tuple(sorted(learners)), size)


_encoder = msgspec.msgpack.Encoder()


def encode_membership(m: Membership) -> bytes:
    if not m.size:
        return _encoder.encode((list(m.voters), list(m.learners)))
    return _encoder.encode((list(m.voters), list(m.learners), m.size))


def decode_membership(data: bytes) -> Membership:
    raw = msgspec.msgpack.decode(data, type=list[list[str] | int])
    if len(raw) not in (2, 3) or not all(isinstance(x, list) for x in raw[:2]):
        raise msgspec.ValidationError("a membership is [voters, learners(, size)]")
    voters, learners = raw[0], raw[1]
    size = raw[2] if len(raw) == 3 else 0
    if not isinstance(voters, list) or not isinstance(learners, list) or not isinstance(size, int):
        raise msgspec.ValidationError("a membership is [voters, learners(, size)]")
    return Membership(tuple(voters), tuple(learners), size)
