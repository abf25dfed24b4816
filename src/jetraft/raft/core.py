"""The RAFT state machine of one replica: sans-I/O, deterministic, single-threaded.

Inputs: `tick()`, `step(message)`, `propose(data)`, `transfer_leadership(to)`,
`change_membership(change)`, `compact(snapshot, compact_to)`. Outputs: `ready()`, a
Ready holding what to persist, send and apply (see ready.py for the contract), then
`advance(ready)`. No clock, no I/O, no threads; randomness only from the injected rng.

Features: randomized election timeouts, pre-vote, check-quorum with leader leases,
batched and pipelined replication with flow control, fast back-off on rejection,
commitment of current-term entries only (Figure 8), snapshots and InstallSnapshot,
leadership transfer (TimeoutNow), one-server-at-a-time membership changes with learners.

A replica whose durable log was found corrupt (`corrupt=True`) may have lost entries it
acknowledged, all of terms up to `repair_term` (its recovered term), and what it
recovered may hold entries that were replaced later (the records saying so are lost).
So it trusts only its snapshot as committed, moves to term repair_term + 1 at once
(a leader of repair_term steps down on hearing it, and messages of its previous life,
still in flight, carry older terms and are ignored), does not campaign, and votes only
for candidates whose log ends in a term above repair_term, or whose log is at least as
up to date as `acked_tail`, the end of its log before the damage as its log's
hard-state records tell (for nobody when it recovered nothing: a lost log tells no
term and no end). It reports the damage to the
leader, which forgets what this follower acknowledged and sends its snapshot. The
replica is whole again once its log holds an entry committed in a term above
repair_term: the leader of that term held every committed entry of earlier terms,
ahead of its own.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from . import replication
from .log import RaftLog
from .membership import (
    ChangeKind,
    MembershipChange,
    MembershipError,
    apply_change,
    encode_membership,
)
from .messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from .progress import Progress, ProgressState
from .ready import (
    NotLeader,
    PeerStatus,
    ProposalDropped,
    RaftConfig,
    RaftError,
    Ready,
    Role,
    SnapshotUnavailable,
    SoftState,
    Status,
)
from .spool import MemorySpool, SnapshotSpool
from .types import Entry, EntryKind, HardState, Membership, Snapshot, SnapshotBytes, SnapshotMeta


class RaftCore:
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
        self._votes: dict[str, bool] = {}
        self.elapsed = 0  # ticks since we heard from a leader / since our last campaign
        self._hb_elapsed = 0
        self._timeout = self._random_timeout()
        self.transferee = ""
        # Ticks since the latest transfer request: a clock of its own, so that requests
        # repeated faster than an election period never postpone the check-quorum test.
        self._transfer_elapsed = 0
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
        self._send_snap: Snapshot | None = None
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

    def _electorate(self) -> tuple[tuple[str, ...], int]:
        """Who may vote in an election of ours, and how many yes votes win it."""
        if self.in_bootstrap:
            return (self.id, *self.bootstrap_peers), self.bootstrap_size // 2 + 1
        m = self.membership
        return m.voters, m.quorum()

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
        self._votes = {}
        self.transferee = ""
        self.prs = {}
        self._send_snap = None  # a leader's, for its followers (see sendable_snapshot)
        self.bcast = False

    def become_follower(self, term: int, lead: str) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

    def _become_pre_candidate(self) -> None:
        # Neither term nor vote change: a pre-vote that fails leaves no trace.
        self._votes = {}
        self.lead = ""
        self.elapsed = 0
        self._timeout = self._random_timeout()
        self.role = Role.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        founders = [v for v, yes in self._votes.items() if yes] if self.in_bootstrap else []
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        if founders:
            # The group's first configuration: us and everyone who voted for us.
            first = Membership(tuple(sorted(set(founders) | {self.id})), (), self.bootstrap_size)
            self._append(EntryKind.CONFIG, encode_membership(first))
        self._sync_progress()
        # A no-op of our term: committing it commits everything before (Figure 8).
        self._append(EntryKind.NOOP, b"")

    def _sync_progress(self) -> None:
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

    # ------------------------------------------------------------------ inputs
    def tick(self) -> None:
        self.ticks += 1
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        self.elapsed += 1
        # Only a replica that may campaign restarts its clock: one that may not (a learner,
        # a damaged replica) keeps counting, so once its leader is silent for an election
        # timeout it is out of the leader's lease for good and answers candidates. A learner
        # promoted by an entry it never received must vote for the voter that holds that
        # entry, or a two-voter group whose leader restarted elects nobody (cluster
        # simulator seed 111); restarting the clock renewed the lease every timeout.
        if self.elapsed >= self._timeout and self.promotable():
            self.elapsed = 0
            self.campaign()

    def _tick_leader(self) -> None:
        self.elapsed += 1
        self._hb_elapsed += 1
        if self.elapsed >= self.cfg.election_ticks:
            self.elapsed = 0
            if self.cfg.check_quorum and not self._quorum_active():
                self.become_follower(self.term, "")
                return
        if self.transferee:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= self.cfg.election_ticks:
                self._give_up_leadership()
                return
        retry = self.cfg.snapshot_retry_ticks or 2 * self.cfg.election_ticks
        removal_done = self.log.committed >= self.log.last_config_index()
        send_snap = self._send_snap
        in_use = False
        for pid, pr in list(self.prs.items()):
            if pr.leaving_ticks >= 0 and removal_done:
                pr.leaving_ticks += 1
                if pr.leaving_ticks >= 2 * self.cfg.election_ticks:
                    del self.prs[pid]
                    continue
            if pr.state is ProgressState.SNAPSHOT:
                in_use = in_use or pr.snap is send_snap
                pr.snapshot_wait_ticks += 1
                if pr.snapshot_wait_ticks >= retry:
                    # A chunk or its answer was lost: send it again. The answer also tells
                    # us if the follower has installed the snapshot in the meantime.
                    replication.send_snapshot_chunk(self, pid, pr)
        if send_snap is not None and not in_use:
            # No follower is sent the state machine's snapshot any more: let it go (its
            # data may be a spool file as large as the stream) rather than keep it until
            # the log is compacted past it, which an idle group may never do.
            self._send_snap = None
        if self._hb_elapsed >= self.cfg.heartbeat_ticks:
            self._hb_elapsed = 0
            for pid, pr in self.prs.items():
                if pid != self.id:
                    commit = replication.heartbeat_commit(self, pr)
                    self.msgs.append(Heartbeat(self.term, self.id, pid, commit,
                                               self.is_member(pid)))

    def _give_up_leadership(self) -> None:
        """A transfer did not finish within an election period (its target down, slow, or
        cut off): step down anyway, as a step-down asks (nats-server's always gives up
        leadership). Staying leader would leave a step-down without effect. Our own
        campaign waits one more election period, so that any other voter able to win
        goes first; if none can, we are elected again."""
        self.become_follower(self.term, "")
        self.elapsed = -self.cfg.election_ticks

    def _quorum_active(self) -> bool:
        voters = self.membership.voters
        active = 0
        for pid, pr in self.prs.items():
            if pid == self.id or pr.recent_active:
                active += pid in voters
            if pid != self.id:
                pr.recent_active = False
        return active >= self.membership.quorum()

    def campaign(self, *, transfer: bool = False) -> None:
        """Start an election now (pre-vote first unless this is a transfer)."""
        if not self.promotable() or self.role is Role.LEADER:
            return
        self._run_election(pre=self.cfg.pre_vote and not transfer, transfer=transfer)

    def _run_election(self, *, pre: bool, transfer: bool) -> None:
        if pre:
            self._become_pre_candidate()
            term = self.term + 1
        else:
            self._become_candidate()
            term = self.term
        if self._poll(self.id, True):
            return
        for v in self._electorate()[0]:
            if v != self.id:
                self.msgs.append(
                    VoteRequest(term, self.id, v, self.log.last_index, self.log.last_term,
                                pre, transfer)
                )

    def _poll(self, frm: str, granted: bool) -> bool:
        """Count a vote; act on the outcome. True if the election is decided."""
        self._votes.setdefault(frm, granted)
        voters, q = self._electorate()
        yes = sum(1 for v in voters if self._votes.get(v) is True)
        no = sum(1 for v in voters if self._votes.get(v) is False)
        if yes >= q:
            if self.role is Role.PRE_CANDIDATE:
                self._run_election(pre=False, transfer=False)
            else:
                self._become_leader()
            return True
        if no > len(voters) - q:
            self.become_follower(self.term, "")
            return True
        return False

    def step(self, m: Message) -> None:
        if isinstance(m, VoteRequest) and self.log.removed_member(m.frm):
            # A committed configuration removed it: a replica that has not heard of its
            # removal must not disrupt the group (not answering is always safe). Only
            # for removals we know are committed: a replica whose configuration is merely
            # stale must still hear candidates it does not know yet, or a group whose
            # newest voters hold the newest log could not elect anyone.
            return
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                in_lease = (
                    self.cfg.check_quorum and self.lead != ""
                    and self.elapsed < self.cfg.election_ticks
                )
                if in_lease and not m.transfer:
                    return  # we heard from a live leader recently: not disrupted
                if not m.pre_vote:
                    self.become_follower(m.term, "")
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                pass  # a granted pre-vote carries the term we would campaign at
            else:
                leader_msg = isinstance(m, AppendEntries | Heartbeat | InstallSnapshot)
                self.become_follower(m.term, m.frm if leader_msg else "")
        elif m.term < self.term:
            if isinstance(m, AppendEntries | Heartbeat):
                # A stale leader: tell it our term so it steps down.
                self.msgs.append(HeartbeatResponse(self.term, self.id, m.frm))
            elif isinstance(m, VoteRequest) and m.pre_vote:
                self.msgs.append(VoteResponse(self.term, self.id, m.frm, False, True))
            return
        self._dispatch(m)

    def _dispatch(self, m: Message) -> None:
        if isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
            if self.role is not Role.FOLLOWER:
                self.become_follower(m.term, m.frm)
            self.lead = m.frm
            self.elapsed = 0
            if not isinstance(m, InstallSnapshot):
                self.leader_says_member = m.member
            if isinstance(m, AppendEntries):
                replication.handle_append(self, m)
            elif isinstance(m, Heartbeat):
                replication.handle_heartbeat(self, m)
            else:
                replication.handle_snapshot(self, m)
        elif isinstance(m, AppendResponse):
            if self.role is Role.LEADER:
                replication.handle_append_response(self, m)
        elif isinstance(m, HeartbeatResponse):
            if self.role is Role.LEADER:
                replication.handle_heartbeat_response(self, m)
        elif isinstance(m, SnapshotResponse):
            if self.role is Role.LEADER:
                replication.handle_snapshot_response(self, m)
        elif isinstance(m, VoteRequest):
            self._handle_vote_request(m)
        elif isinstance(m, VoteResponse):
            expected = Role.PRE_CANDIDATE if m.pre_vote else Role.CANDIDATE
            if self.role is expected:
                self._poll(m.frm, m.granted)
        elif isinstance(m, TimeoutNow) and self.role is Role.FOLLOWER:
            self.campaign(transfer=True)

    def _handle_vote_request(self, m: VoteRequest) -> None:
        can_vote = (
            self.vote == m.frm
            or (self.vote == "" and self.lead == "")
            or (m.pre_vote and m.term > self.term)
        )
        # A damaged replica may have lost entries it acknowledged, all of terms up to
        # repair_term; a candidate whose log ends in a later term holds every such entry
        # that was committed (see _check_repaired), so only such a candidate is safe. One
        # that recovered nothing at all (repair_term 0: a lost log, its hard state with
        # it) cannot tell which terms it acknowledged entries in: it votes for nobody
        # until repaired (else a candidate whose log ends in an old term could win with
        # its vote and lose what was committed with its lost acknowledgements).
        # Or one at least as up to date as every log we acknowledged (acked_bound): it
        # holds all we acknowledged that was committed, by Raft's own vote argument (a
        # two-voter group with a damaged voter elects again: cluster sim seed 2806).
        bound = self.acked_bound()
        safe = (not self.corrupt or 0 < self.repair_term < m.last_term
                or (bound is not None and (m.last_term, m.last_index) >= bound))
        # A replica that knows no configuration yet (it joined an existing group with an
        # empty log and waits for the leader to send the log) does not vote: a server
        # once removed from the group and now joining again would otherwise count as the
        # voter it was in the stale configuration of a removed replica asking for votes.
        knows = bool(self.membership.voters) or self.in_bootstrap
        if can_vote and safe and knows and self.log.is_up_to_date(m.last_index, m.last_term):
            self.msgs.append(VoteResponse(m.term, self.id, m.frm, True, m.pre_vote))
            if not m.pre_vote:
                self.vote = m.frm
                self.elapsed = 0
        else:
            self.msgs.append(VoteResponse(self.term, self.id, m.frm, False, m.pre_vote))

    def acked_bound(self) -> tuple[int, int] | None:
        """Damaged: (term, index) at or above the end of every log it acknowledged, before
        the damage (acked_tail) and since (its log; entries a leader replaced since were
        never committed). None: not known."""
        if self.acked_tail is None:
            return None
        return max((self.acked_tail[1], self.acked_tail[0]),
                   (self.log.last_term, self.log.last_index))

    # ------------------------------------------------------------------ leader API
    def _append(self, kind: EntryKind, data: bytes) -> int:
        index = self.log.last_index + 1
        self.log.append((Entry(self.term, index, kind, data),))
        me = self.prs.get(self.id)
        if me is not None:
            me.maybe_update(index)
        self.bcast = True
        return index

    def propose_batch(self, datas: Sequence[bytes]) -> int:
        """propose() for many payloads at once; returns the index of the first."""
        self._check_can_propose()
        first = self.log.last_index + 1
        term, normal = self.term, EntryKind.NORMAL
        self.log.append([Entry(term, first + k, normal, d) for k, d in enumerate(datas)])
        me = self.prs.get(self.id)
        if me is not None:
            me.maybe_update(self.log.last_index)
        self.bcast = True
        return first

    def _check_can_propose(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.lead)
        if self.transferee:
            raise ProposalDropped(f"leadership transfer to {self.transferee} in progress")

    def propose(self, data: bytes) -> int:
        """Append data to the leader's log; returns its index. Entries proposed before
        the next ready() leave in one AppendEntries per follower."""
        self._check_can_propose()
        return self._append(EntryKind.NORMAL, data)

    def change_membership(self, change: MembershipChange) -> int:
        """Propose one membership change; returns the index of its CONFIG entry."""
        self._check_can_propose()
        if self.log.last_config_index() > self.log.committed:
            raise ProposalDropped("a membership change is in progress")
        if self.log.term(self.log.committed) != self.term:
            raise ProposalDropped("the leader has not committed an entry of its term yet")
        new = apply_change(self.membership, change)
        if change.kind is ChangeKind.PROMOTE:
            pr = self.prs.get(change.node)
            if pr is None or pr.match + self.cfg.catchup_slack < self.log.last_index:
                raise ProposalDropped(f"learner {change.node} has not caught up")
        if change.kind is ChangeKind.REMOVE and change.node == self.transferee:
            self.transferee = ""
        index = self._append(EntryKind.CONFIG, encode_membership(new))
        self._sync_progress()
        return index

    def learner_caught_up(self, node: str) -> bool:
        pr = self.prs.get(node)
        return (
            self.role is Role.LEADER and pr is not None
            and pr.match + self.cfg.catchup_slack >= self.log.last_index
        )

    def transfer_leadership(self, to: str | None = None) -> str:
        """Hand leadership to `to`, or to the most up-to-date voter we hear from; returns
        the target. Proposals are refused until the transfer ends: if the target has not
        taken over an election period after the latest request, we step down anyway. A
        caller that keeps asking keeps the transfer going: a replica leaving its group
        does, while its successor catches up (a snapshot, a repair); stepping down then
        would hand leadership to another leaving replica, over and over (cluster
        simulator seed 285 of 5 servers)."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.lead)
        others = [v for v in self.membership.voters if v != self.id]
        if to is None:
            if not others:
                raise RaftError("no other voter to transfer leadership to")
            # The most up-to-date voter may be paused or cut off: a transfer to it would
            # only end when it expires (nats-server too hands over to a peer it hears).
            heard = [v for v in others if self._heard_recently(v)] or others
            to = max(heard, key=lambda v: (self.prs[v].match, v))
        elif to == self.id:
            return to
        elif to not in others:
            raise MembershipError(f"{to} is not a voter")
        self.transferee = to
        self._transfer_elapsed = 0
        if self.prs[to].match == self.log.last_index:
            self.msgs.append(TimeoutNow(self.term, self.id, to))
        else:
            replication.send_append(self, to)
        return to

    def _heard_recently(self, peer: str) -> bool:
        heard = self.prs[peer].last_heard_tick
        return heard >= 0 and self.ticks - heard < self.cfg.election_ticks

    # ------------------------------------------------------------------ snapshots
    def create_snapshot(self, index: int, data: SnapshotBytes, *,
                        external: bool = False) -> Snapshot:
        """Wrap the state machine's snapshot taken at `index` (<= applied); `external`
        makes a marker without data (the state machine holds that state durably)."""
        if index > self.log.applied or index < self.log.offset:
            raise RaftError(f"snapshot index {index} outside [{self.log.offset}, applied]")
        term = self.log.term(index)
        assert term is not None
        meta = SnapshotMeta(index, term, self.log.membership_at(index))
        return Snapshot(meta, b"" if external else data, external)

    def compact(self, snapshot: Snapshot, compact_to: int) -> None:
        """`snapshot` is durable: keep it for lagging followers and drop the entries up
        to compact_to (entries after it stay, so followers a little behind need none).
        A leader keeps the entries after any snapshot it is still sending: the follower
        continues from there, and a transfer slower than our compactions would otherwise
        need another snapshot each time it ends."""
        live = self.ticks - 2 * self.cfg.election_ticks  # not for a follower gone quiet
        for pr in self.prs.values():
            if pr.state is ProgressState.SNAPSHOT and pr.last_heard_tick >= live:
                compact_to = min(compact_to, pr.pending_snapshot)
        self.log.compact(snapshot, compact_to)
        if self._send_snap is not None and self._send_snap.meta.index < self.log.offset:
            self._send_snap = None

    def sendable_snapshot(self, at_least: int = 0) -> Snapshot | None:
        """The snapshot to send a follower that needs compacted entries: the log's own,
        or, when that is an external marker, the state machine's current state (from
        snapshot_source). With `at_least`, one at or after that index (the state
        machine's current state when the log's own is older). None if there is none to
        send now."""
        log = self.log
        snap = log.snapshot
        own = snap is not None and snap.meta.index >= at_least
        if (snap is None and not at_least) or (own and snap is not None and not snap.external):
            return snap
        cached = self._send_snap
        if cached is not None and cached.meta.index >= max(log.offset, at_least):
            return cached
        if self.snapshot_source is None:
            return None
        # The state machine holds only committed entries, possibly more than our commit
        # index says (a self-durable one, after a restart). Only a leader sends
        # snapshots, and a leader's log holds every committed entry: the term at that
        # index in our log is the right one.
        try:
            index, data = self.snapshot_source()
        except SnapshotUnavailable:
            return None  # tried again at the follower's next answer
        term = log.term(index)
        if term is None or self.role is not Role.LEADER or index < at_least:
            return None
        self._send_snap = Snapshot(SnapshotMeta(index, term, log.membership_at(index)), data)
        return self._send_snap

    # ------------------------------------------------------------------ outputs
    def _flush(self) -> None:
        if self.role is not Role.LEADER:
            return
        if replication.maybe_commit(self):
            self.bcast = True  # our own entries became durable: tell the followers
        if self.bcast and self.role is Role.LEADER:
            self.bcast = False
            for pid in self.prs:
                if pid != self.id and replication.send_append(self, pid, send_empty=True):
                    while replication.send_append(self, pid, send_empty=False):
                        pass

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def has_ready(self) -> bool:
        self._flush()
        return bool(self.msgs) or self._state_pending()

    def _state_pending(self) -> bool:
        """Anything besides messages for a Ready: to persist, apply or report. Called on
        every tick of every group of a server: compares fields rather than building the
        HardState and SoftState that ready() would."""
        log = self.log
        if (log.pending_snapshot is not None or log.stable < log.last_index
                or log.applied < log.committed):
            return True
        hs, ss = self._prev_hs, self._prev_ss
        return (
            self.term != hs.term or self.vote != hs.vote or log.committed != hs.commit
            or self.lead != ss.leader or self.role is not ss.role or self.term != ss.term
            or (self._corrupt_reported and not self.corrupt)
        )

    def take_messages(self) -> list[Message]:
        """The messages to send, without a Ready, when they are all there is: nothing to
        persist, apply or report and no Ready outstanding, so everything they may depend
        on is durable already (a heartbeat and its answer, a resend of stable entries).
        Empty otherwise: ready() hands them out in order with the rest."""
        if not self.msgs or self._outstanding is not None:
            return []
        self._flush()
        if self._state_pending():
            return []
        msgs, self.msgs = self.msgs, []
        return msgs

    def ready(self) -> Ready:
        if self._outstanding is not None:
            raise RaftError("ready() called again before advance()")
        self._flush()
        hs = self._hard_state()
        ss = SoftState(self.lead, self.role, self.term)
        log = self.log
        snap = log.pending_snapshot
        entries = tuple(log.unstable())
        prev = self._prev_hs
        rd = Ready(
            soft_state=ss if ss != self._prev_ss else None,
            hard_state=hs if hs != prev else None,
            snapshot=snap,
            entries=entries,
            messages=tuple(self.msgs),
            committed=tuple(log.committed_to_apply()),
            must_sync=bool(entries) or snap is not None
            or hs.term != prev.term or hs.vote != prev.vote,
            repaired=self._corrupt_reported and not self.corrupt,
        )
        if rd.repaired:
            self._corrupt_reported = False
        self.msgs = []
        self._prev_hs, self._prev_ss = hs, ss
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver persisted, sent and applied `rd`."""
        if rd is not self._outstanding:
            raise RaftError("advance() of a Ready that is not the outstanding one")
        self._outstanding = None
        log = self.log
        if rd.snapshot is not None and log.pending_snapshot is rd.snapshot:
            log.pending_snapshot = None
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
        if rd.committed:
            log.applied_to(rd.committed[-1].index)
