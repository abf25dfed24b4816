"""What the core hands to its driver (Ready), its configuration, status and errors.

The Ready contract (etcd's), which every driver follows in this order:
1. persist: `snapshot` (if any, durably, and restore the state machine from it), then
   `entries` (a suffix of the log: it may replace entries previously written from
   entries[0].index on) and `hard_state`; fsync when `must_sync`;
2. send `messages`: they may depend on everything persisted in step 1 (a vote, an
   acknowledgement of entries), so never before step 1 is durable;
3. apply `committed` entries to the state machine, in order (those that an earlier Ready
   made durable here may be applied before this Ready's fsync: they are committed, and
   nothing they lead to is a RAFT message; see Driver._apply_durable);
4. call `RaftCore.advance(ready)`.
Between ready() and advance() the core may still be stepped, ticked and proposed to;
ready() must not be called again before advance().
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import msgspec

from .messages import Message
from .types import Entry, HardState, Membership, Snapshot


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class SoftState(msgspec.Struct, frozen=True, gc=False):
    """Volatile state worth telling the server about when it changes."""

    leader: str  # "" when unknown
    role: Role
    term: int


class Ready(msgspec.Struct, frozen=True, gc=False):
    soft_state: SoftState | None  # set when leader, role or term changed
    hard_state: HardState | None  # set when it changed since the last Ready
    snapshot: Snapshot | None  # received from the leader: persist, then restore from it
    entries: tuple[Entry, ...]  # to append to the durable log
    messages: tuple[Message, ...]  # to send once the above is durable
    committed: tuple[Entry, ...]  # to apply, in order
    must_sync: bool  # entries, snapshot, term or vote changed: fsync before sending
    # A replica that recovered a corrupt log is whole again once this Ready is durable:
    # the driver then clears the durable corruption marker (Wal.clear_corruption).
    repaired: bool = False

    def is_empty(self) -> bool:
        return (
            self.soft_state is None
            and self.hard_state is None
            and self.snapshot is None
            and not self.entries
            and not self.messages
            and not self.committed
        )


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_ticks: int = 10  # election timeout is random in [election_ticks, 2x)
    heartbeat_ticks: int = 1
    pre_vote: bool = True  # a trial election first: a rejoining node does not bump terms
    check_quorum: bool = True  # a leader that cannot hear a quorum steps down
    max_msg_bytes: int = 1 << 20  # entry bytes per AppendEntries (at least one entry)
    max_inflight: int = 64  # pipelined AppendEntries per follower
    snapshot_retry_ticks: int = 0  # resend an unanswered snapshot chunk; 0: 2 * election
    max_snapshot_chunk_bytes: int = 256 * 1024  # snapshot data per InstallSnapshot
    catchup_slack: int = 0  # a learner is caught up when within this many entries

    def __post_init__(self) -> None:
        if self.election_ticks <= self.heartbeat_ticks or self.heartbeat_ticks < 1:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        if self.max_inflight < 1 or self.max_msg_bytes < 1 or self.max_snapshot_chunk_bytes < 1:
            raise ValueError("max_inflight, max_msg_bytes and max_snapshot_chunk_bytes must be "
                             "positive")


@dataclass(frozen=True, slots=True)
class PeerStatus:
    id: str
    voter: bool
    match: int
    next: int
    state: str  # probe / replicate / snapshot
    last_heard_ticks_ago: int | None  # None: not heard from since this leader took over
    lag: int = 0  # committed entries it does not hold yet: leader's commit - match


@dataclass(frozen=True, slots=True)
class Status:
    id: str
    term: int
    role: Role
    leader: str
    commit: int
    applied: int
    last_index: int
    first_index: int
    membership: Membership
    peers: tuple[PeerStatus, ...]  # filled on the leader only
    corrupt: bool  # refusing to vote until repaired from the leader


class RaftError(Exception):
    """Base of the errors the core raises at its API."""


class NotLeader(RaftError):
    """Only the leader accepts proposals; `leader` is the one we know of ("" if none)."""

    def __init__(self, leader: str) -> None:
        super().__init__(f"not leader (leader is {leader or 'unknown'})")
        self.leader = leader


class ProposalDropped(RaftError):
    """The leader cannot take this proposal now (transfer or change in progress)."""


class SnapshotUnavailable(RaftError):
    """The state machine could not make a snapshot for a follower now (its spool file
    could not be written: a full disk). The follower is offered one again later."""
