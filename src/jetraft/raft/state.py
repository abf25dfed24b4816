"""What one RAFT replica knows, and how its role changes: the state RaftCore runs on.

RaftState holds the fields of a replica (term, vote, role, log, the leader's view of each
follower, the election clocks) with the queries on them and the role transitions (follower,
pre-candidate, candidate, leader). RaftCore (core.py) adds the inputs and outputs; the
modules beside it (election.py, replication.py, leader_transfer.py, reconfig.py,
snapshots.py) are functions over this state, and import this module, never core.py.

A replica whose durable log was found corrupt (`corrupt=True`) may have lost entries it
acknowledged, all of terms up to `repair_term` (its recovered term), and what it
recovered may hold entries that were replaced later (the records saying so are lost).
So it trusts only its snapshot as committed, moves to term repair_term + 1 at once
(a leader of repair_term steps down on hearing it, and messages of its previous life,
still in flight, carry older terms and are ignored), does not campaign, and votes only
for candidates whose log ends in a term above repair_term, or whose log is at least as
up to date as `acked_tail`, the end of its log before the damage as its log's
hard-state records tell (for nobody when it recovered nothing: a lost log tells no
term and no end; see election.py). It reports the damage to the
leader, which forgets what this follower acknowledged and sends its snapshot. The
replica is whole again once its log holds an entry committed in a term above
repair_term: the leader of that term held every committed entry of earlier terms,
ahead of its own (replication.py, _check_repaired).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from .log import RaftLog
from .membership import encode_membership
from .messages import Message
from .progress import Progress
from .ready import PeerStatus, RaftConfig, Ready, Role, SoftState, Status
from .spool import MemorySpool, SnapshotSpool
from .types import Entry, EntryKind, HardState, Membership, Snapshot, SnapshotBytes


class RaftState:
    """The fields of one replica, their queries and its role changes (see the module doc)."""

    def __init__(
        self,
        node_id: str,
        config: RaftConfig,
        rng: random.Random,
        *,
        peers: Sequence[str] = (),
        learners: Sequence[str] = (),
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        corrupt: bool = False,
        acked_tail: tuple[int, int] | None = None,
        bootstrap_size: int = 0,
    ) -> None:
        """`peers` (voters, including this node) and `learners` are the bootstrap
        configuration, used until a snapshot or a CONFIG entry says otherwise. A node
        joining an existing group starts with none and learns its group from the leader.
        `hard_state`, `snapshot` and `entries` are what the durable log recovered.

        `bootstrap_size` > 0 with no voters known: the group's members are not known in
        advance, only how many servers it is meant for (see `in_bootstrap`)."""
        hs = hard_state or HardState()
        self.id = node_id
        self.cfg = config
        self._rng = rng
        base = Membership(tuple(sorted(set(peers))), tuple(sorted(set(learners))))
        self.log = RaftLog(base, snapshot, entries, hs.commit)
        self.term = hs.term
        self.vote = hs.vote
        recovered_hs = HardState(hs.term, hs.vote, self.log.committed)
        self.lead = ""
        self.role = Role.FOLLOWER
        self.corrupt = corrupt
        self.repair_asked = -1  # term in which a corrupt replica asked for a snapshot
        self.verified = 0  # our log matches this term's leader up to here (AppendEntries)
        # A corrupt replica may have acknowledged entries of terms up to this one.
        self.repair_term = 0
        # A corrupt replica: (last index, last term) bounding every entry it acknowledged.
        self.acked_tail = acked_tail if corrupt else None
        if corrupt:
            self.repair_term = max(hs.term, self.log.last_term)
            self.term, self.vote = self.repair_term + 1, ""
            self.log.committed = self.log.applied = self.log.offset
        self._corrupt_reported = corrupt  # the driver still holds a corruption marker
        # What the leader's last AppendEntries or Heartbeat said: are we in its newest
        # configuration? (None: no word from a leader yet.)
        self.leader_says_member: bool | None = None
        self.bootstrap_size = bootstrap_size
        self.bootstrap_peers: tuple[str, ...] = ()
        self.ticks = 0  # ticks since start, for "last heard" reporting
        self.msgs: list[Message] = []
        self.prs: dict[str, Progress] = {}
        self.votes: dict[str, bool] = {}
        self.elapsed = 0  # ticks since we heard from a leader / since our last campaign
        self._hb_elapsed = 0
        self._timeout = self._random_timeout()
        self.transferee = ""
        # Ticks since the latest transfer request: a clock of its own, so that requests
        # repeated faster than an election period never postpone the check-quorum test.
        self.transfer_elapsed = 0
        self.bcast = False  # new entries or commit to send at the next ready()
        self._prev_hs = recovered_hs
        self._prev_ss = SoftState(self.lead, self.role, self.term)
        self._outstanding: Ready | None = None
        # Snapshots. snapshot_source() -> (index, data) gives the state machine's state at
        # an applied index, for followers, when the log's own snapshot is an external
        # marker (the state machine keeps its state durably itself); the result is kept
        # while the log still continues it. Its data may be a SnapshotData (a spool file):
        # chunks are read from it as they are sent.
        self.snapshot_source: Callable[[], tuple[int, SnapshotBytes]] | None = None
        self.snapshot_to_send: Snapshot | None = None
        # Follower: chunks of one snapshot series collected so far, keyed by
        # (leader term, snapshot index, snapshot term), in a spool that snapshot_spool()
        # makes (in memory by default; a spool file for a durable state machine's group,
        # so that a large snapshot is never whole in memory: see spool.py).
        self.snap_buf: tuple[tuple[int, int, int], SnapshotSpool] | None = None
        self.snapshot_spool: Callable[[], SnapshotSpool] = MemorySpool

    # ------------------------------------------------------------------ queries
    @property
    def membership(self) -> Membership:
        return self.log.membership()

    @property
    def leader(self) -> str:
        return self.lead

    @property
    def commit(self) -> int:
        return self.log.committed

    @property
    def applied(self) -> int:
        return self.log.applied

    def is_member(self, node: str) -> bool:
        """Is `node` in our newest configuration (what a leader tells each follower)?"""
        m = self.membership
        return node in m.voters or node in m.learners

    def promotable(self) -> bool:
        if self.corrupt:
            return False
        if self.id in self.membership.voters or self.in_bootstrap:
            return True
        # Out of our newest configuration, but it is not committed and we are a voter of
        # the committed one: we may hold the entry that removes us while the voters that
        # remain lack it (its leader failed before making it durable), and then they can
        # win no election without our vote, which goes to logs as complete as ours. We
        # campaign, finish the change as its leader, and step down (seed 1290).
        log = self.log
        return (log.last_config_index() > log.committed
                and self.id in log.membership_at(log.committed).voters)

    @property
    def in_bootstrap(self) -> bool:
        """No configuration yet, only the size the group is meant for: a candidate that
        wins the votes of a majority of that size among the peers it knows becomes the
        first leader, and its first entry makes itself and those voters the group,
        with that size kept in the configuration. Votes go only to candidates whose log
        is at least as complete, so once a majority of the size holds the configuration,
        no second group can form among the servers that do not."""
        return self.bootstrap_size > 0 and not self.membership.voters

    def set_bootstrap_peers(self, peers: Sequence[str]) -> None:
        """The servers a bootstrapping node may ask for votes (the driver learns them)."""
        self.bootstrap_peers = tuple(sorted(p for p in set(peers) if p != self.id))

    def status(self) -> Status:
        peers: list[PeerStatus] = []
        if self.role is Role.LEADER:
            for pid, pr in self.prs.items():
                ago = None if pr.last_heard_tick < 0 else self.ticks - pr.last_heard_tick
                if pid == self.id:
                    ago = 0
                lag = max(0, self.log.committed - pr.match)
                voter = pid in self.membership.voters
                peers.append(
                    PeerStatus(pid, voter, pr.match, pr.next, pr.state.value, ago, lag)
                )
        return Status(
            self.id, self.term, self.role, self.lead, self.log.committed, self.log.applied,
            self.log.last_index, self.log.first_index, self.membership, tuple(peers),
            self.corrupt,
        )

    def acked_bound(self) -> tuple[int, int] | None:
        """Damaged: (term, index) at or above the end of every log it acknowledged, before
        the damage (acked_tail) and since (its log; entries a leader replaced since were
        never committed). None: not known."""
        if self.acked_tail is None:
            return None
        return max((self.acked_tail[1], self.acked_tail[0]),
                   (self.log.last_term, self.log.last_index))

    # ------------------------------------------------------------------ role changes
    def _random_timeout(self) -> int:
        e = self.cfg.election_ticks
        return self._rng.randrange(e, 2 * e)

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = ""
            self.verified = 0
        self.lead = ""
        self.leader_says_member = None
        self.elapsed = 0
        self._hb_elapsed = 0
        self._timeout = self._random_timeout()
        self.votes = {}
        self.transferee = ""
        self.prs = {}
        self.snapshot_to_send = None  # a leader's, for its followers (snapshots.py)
        self.bcast = False

    def become_follower(self, term: int, lead: str) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

    def become_pre_candidate(self) -> None:
        # Neither term nor vote change: a pre-vote that fails leaves no trace.
        self.votes = {}
        self.lead = ""
        self.elapsed = 0
        self._timeout = self._random_timeout()
        self.role = Role.PRE_CANDIDATE

    def become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def become_leader(self) -> None:
        founders = [v for v, yes in self.votes.items() if yes] if self.in_bootstrap else []
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        if founders:
            # The group's first configuration: us and everyone who voted for us.
            first = Membership(tuple(sorted(set(founders) | {self.id})), (), self.bootstrap_size)
            self.append_entry(EntryKind.CONFIG, encode_membership(first))
        self.sync_progress()
        # A no-op of our term: committing it commits everything before (Figure 8).
        self.append_entry(EntryKind.NOOP, b"")

    def sync_progress(self) -> None:
        """Make self.prs follow the configuration in force (leader only)."""
        m = self.membership
        want = {v: False for v in m.voters} | {lid: True for lid in m.learners}
        for pid, old in list(self.prs.items()):
            if pid not in want:
                # Removed: keep sending it the log for a while, so that it learns of its
                # removal and stops (it counts for nothing: it is in no configuration).
                if pid == self.id:
                    del self.prs[pid]
                elif old.leaving_ticks < 0:
                    old.leaving_ticks = 0
        for pid, learner in want.items():
            pr = self.prs.get(pid)
            if pr is None:
                pr = self.prs[pid] = Progress(self.log.last_index + 1, learner=learner)
                if pid == self.id:
                    pr.match = self.log.last_index
                    pr.become_replicate()
            pr.learner = learner
            pr.leaving_ticks = -1
        if self.transferee and self.transferee not in m.voters:
            self.transferee = ""

    # ------------------------------------------------------------------ the leader's log
    def append_entry(self, kind: EntryKind, data: bytes) -> int:
        """Append one entry of our term to the leader's log; returns its index."""
        index = self.log.last_index + 1
        self.log.append((Entry(self.term, index, kind, data),))
        me = self.prs.get(self.id)
        if me is not None:
            me.maybe_update(index)
        self.bcast = True
        return index
