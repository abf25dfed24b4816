"""The RAFT state machine of one replica: sans-I/O, deterministic, single-threaded.

Inputs: `tick()`, `step(message)`, `propose(data)`, `transfer_leadership(to)`,
`change_membership(change)`, `compact(snapshot, compact_to)`. Outputs: `ready()`, a
Ready holding what to persist, send and apply (see ready.py for the contract), then
`advance(ready)`. No clock, no I/O, no threads; randomness only from the injected rng.

Features: randomized election timeouts, pre-vote, check-quorum with leader leases,
batched and pipelined replication with flow control, fast back-off on rejection,
commitment of current-term entries only (Figure 8), snapshots and InstallSnapshot,
leadership transfer (TimeoutNow), one-server-at-a-time membership changes with learners,
and the repair of a replica whose durable log was found damaged.

Where each lives (read in this order): state.py, what a replica knows and its role changes
(RaftState, which RaftCore extends; also the damaged replica's rules); this module, the
inputs (ticks, messages, proposals and requests) and the outputs (Ready); election.py,
campaigns and votes; replication.py, AppendEntries, heartbeats, InstallSnapshot and the
commit rule; leader_transfer.py, leadership transfer; reconfig.py, membership changes;
snapshots.py, the snapshots kept and sent. The modules beside this one are functions over a
RaftState: they import state.py (and one another), never this module, so no import runs in
a circle.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import election, leader_transfer, reconfig, replication, snapshots
from .membership import MembershipChange
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
from .progress import ProgressState
from .ready import NotLeader, ProposalDropped, RaftError, Ready, Role, SoftState
from .state import RaftState
from .types import Entry, EntryKind, HardState, Snapshot, SnapshotBytes


class RaftCore(RaftState):
    """One replica's RAFT: feed it inputs, take its Ready, advance (see the module doc)."""

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
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.cfg.election_ticks:
                leader_transfer.give_up_leadership(self)
                return
        retry = self.cfg.snapshot_retry_ticks or 2 * self.cfg.election_ticks
        removal_done = self.log.committed >= self.log.last_config_index()
        send_snap = self.snapshot_to_send
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
            self.snapshot_to_send = None
        if self._hb_elapsed >= self.cfg.heartbeat_ticks:
            self._hb_elapsed = 0
            for pid, pr in self.prs.items():
                if pid != self.id:
                    commit = replication.heartbeat_commit(self, pr)
                    self.msgs.append(Heartbeat(self.term, self.id, pid, commit,
                                               self.is_member(pid), self.log.committed))

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
        election.campaign(self, transfer=transfer)

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
            election.handle_vote_request(self, m)
        elif isinstance(m, VoteResponse):
            expected = Role.PRE_CANDIDATE if m.pre_vote else Role.CANDIDATE
            if self.role is expected:
                election.poll(self, m.frm, m.granted)
        elif isinstance(m, TimeoutNow) and self.role is Role.FOLLOWER:
            self.campaign(transfer=True)

    # ------------------------------------------------------------------ leader API
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
        return self.append_entry(EntryKind.NORMAL, data)

    def change_membership(self, change: MembershipChange) -> int:
        """Propose one membership change; returns the index of its CONFIG entry
        (reconfig.py)."""
        self._check_can_propose()
        return reconfig.change_membership(self, change)

    def learner_caught_up(self, node: str) -> bool:
        return reconfig.learner_caught_up(self, node)

    def transfer_leadership(self, to: str | None = None) -> str:
        """Hand leadership to `to`, or to the most up-to-date voter we hear from; returns
        the target (leader_transfer.py)."""
        return leader_transfer.transfer_leadership(self, to)

    # ------------------------------------------------------------------ snapshots
    def create_snapshot(self, index: int, data: SnapshotBytes, *,
                        external: bool = False) -> Snapshot:
        """Wrap the state machine's snapshot taken at `index` (snapshots.py)."""
        return snapshots.create_snapshot(self, index, data, external=external)

    def compact(self, snapshot: Snapshot, compact_to: int) -> None:
        """`snapshot` is durable: keep it, drop the entries up to compact_to
        (snapshots.py)."""
        snapshots.compact(self, snapshot, compact_to)

    def sendable_snapshot(self, at_least: int = 0) -> Snapshot | None:
        """The snapshot to send a follower that needs compacted entries (snapshots.py)."""
        return snapshots.sendable_snapshot(self, at_least)

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
