"""Log replication: what the leader sends and how both sides handle it.

Functions over a RaftState (state.py); RaftCore (core.py) dispatches to them. Leader side:
`send_append` (batched up to max_msg_bytes, pipelined up to max_inflight per follower, or
an InstallSnapshot when the follower needs compacted entries), responses, and
`maybe_commit` (a quorum's match index, and only for an entry of the leader's term:
Figure 8 of the Raft paper). Follower side: AppendEntries with the fast back-off hint,
heartbeats and InstallSnapshot.
"""

from __future__ import annotations

from . import snapshots
from .messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    SnapshotResponse,
    TimeoutNow,
)
from .progress import Progress, ProgressState
from .ready import Role
from .state import RaftState
from .types import Snapshot, SnapshotBytes, read_at


# ---------------------------------------------------------------------- leader side
def send_append(core: RaftState, to: str, *, send_empty: bool = True) -> bool:
    """Send `to` what it misses, if flow control allows. An empty AppendEntries (a probe,
    or news of the commit index) goes out only with send_empty. True if sent."""
    pr = core.prs.get(to)
    if pr is None or pr.is_paused(core.cfg.max_inflight):
        return False
    log = core.log
    prev = pr.next - 1
    gap = log.rejoined_at(to) if pr.match == 0 else 0
    if gap and prev < gap:
        # A server removed once and back: the log (and a snapshot) before its return
        # holds configurations of its previous life (as the only voter, perhaps), which
        # it would take for its own. It starts from a snapshot taken after them instead.
        return _send_snapshot(core, to, pr, fresh_from=gap)
    prev_term = log.term(prev)
    if prev_term is None:
        return _send_snapshot(core, to, pr)
    entries = (
        log.slice(pr.next, log.last_index + 1, core.cfg.max_msg_bytes)
        if pr.next <= log.last_index
        else []
    )
    if not entries and not send_empty:
        return False
    core.msgs.append(
        AppendEntries(core.term, core.id, to, prev, prev_term, tuple(entries), log.committed,
                      core.is_member(to))
    )
    pr.sent(entries[-1].index if entries else prev, bool(entries))
    return True


def _send_empty_probe(core: RaftState, to: str, pr: Progress) -> None:
    """Outside flow control: an empty AppendEntries at next - 1. Either the follower has
    everything in flight (its answer frees the pipeline) or it rejects and we probe."""
    prev = pr.next - 1
    prev_term = core.log.term(prev)
    if prev_term is not None:
        core.msgs.append(
            AppendEntries(core.term, core.id, to, prev, prev_term, (), core.log.committed,
                          core.is_member(to))
        )


def _send_snapshot(core: RaftState, to: str, pr: Progress, fresh_from: int = 0) -> bool:
    snap = snapshots.sendable_snapshot(core, at_least=fresh_from)
    if snap is None:  # none to send yet (the state machine's is being made): retry later
        return False
    pr.become_snapshot(snap)
    send_snapshot_chunk(core, to, pr)
    return True


def send_snapshot_chunk(core: RaftState, to: str, pr: Progress) -> None:
    """(Re)send the chunk of pr.snap that starts at what the follower acknowledged."""
    snap = pr.snap
    assert snap is not None and not snap.external
    start = pr.snap_offset
    # A SnapshotData (a spool file) is read chunk by chunk: only the chunk in flight is
    # in memory.
    chunk = read_at(snap.data, start, core.cfg.max_snapshot_chunk_bytes)
    done = start + len(chunk) >= len(snap.data)
    core.msgs.append(InstallSnapshot(core.term, core.id, to, snap.meta, start, chunk, done))
    pr.snapshot_wait_ticks = 0


def handle_snapshot_response(core: RaftState, m: SnapshotResponse) -> None:
    pr = core.prs.get(m.frm)
    if pr is None:
        return
    pr.recent_active = True
    pr.last_heard_tick = core.ticks
    snap = pr.snap
    if pr.state is not ProgressState.SNAPSHOT or snap is None or snap.meta.index != m.index:
        return  # about a series we no longer send
    if m.offset == pr.snap_offset or m.offset > len(snap.data):
        return  # a duplicate: the chunk in flight (or its retry) answers for itself
    # Ahead: the next chunk. Behind: the follower lost what it had (it restarted, or a
    # newer series replaced it): start again from there.
    pr.snap_offset = m.offset
    send_snapshot_chunk(core, m.frm, pr)


def handle_append_response(core: RaftState, m: AppendResponse) -> None:
    pr = core.prs.get(m.frm)
    if pr is None:
        return
    pr.recent_active = True
    pr.last_heard_tick = core.ticks
    log = core.log
    if m.reject:
        hint = m.hint_index
        if m.hint_term > 0:
            hint, _ = log.find_conflict_by_term(m.hint_index, m.hint_term)
        if m.corrupt_term:
            # Its log is damaged: forget what it acknowledged (it may have lost it) and
            # send our snapshot, or probe from its hint.
            pr.match = 0
            if log.snapshot is not None and pr.state is not ProgressState.SNAPSHOT:
                _send_snapshot(core, m.frm, pr, fresh_from=log.rejoined_at(m.frm))
                return
            pr.become_probe()
            # Retry at or before the rejected point (the first rejection of a damaged
            # replica says nothing about its log), never before the first entry.
            pr.next = max(1, min(m.index, hint + 1))
            send_append(core, m.frm)
            return
        if pr.maybe_decr_to(m.index, hint):
            if pr.state is ProgressState.REPLICATE:
                pr.become_probe()
            send_append(core, m.frm)
        return
    updated = pr.maybe_update(m.index)
    if not updated and not (pr.match == m.index and pr.state is ProgressState.PROBE):
        return
    snapshot_done = pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot
    if pr.state is ProgressState.PROBE or snapshot_done:
        pr.become_replicate()
    if maybe_commit(core):
        core.bcast = True  # followers learn the new commit index at the next ready()
    if core.role is not Role.LEADER:
        return
    if m.frm == core.transferee and pr.match == log.last_index:
        core.msgs.append(TimeoutNow(core.term, core.id, m.frm))
    while send_append(core, m.frm, send_empty=False):
        pass


def heartbeat_commit(core: RaftState, pr: Progress) -> int:
    """The commit index a heartbeat tells a follower: no further than what the follower
    acknowledged, so that it never commits entries of its log that may not match ours
    (a heartbeat carries no entries to check against)."""
    return min(pr.match, core.log.committed)


def handle_heartbeat_response(core: RaftState, m: HeartbeatResponse) -> None:
    pr = core.prs.get(m.frm)
    if pr is None:
        return
    pr.recent_active = True
    pr.last_heard_tick = core.ticks
    if pr.state is ProgressState.SNAPSHOT or pr.match >= core.log.last_index:
        return
    if pr.state is ProgressState.PROBE:
        pr.probe_sent = False  # the last probe may have been lost: send another
        send_append(core, m.frm)
    elif core.log.term(pr.next - 1) is None:
        # What it needs next was compacted while in flight: probe (sends the snapshot).
        pr.become_probe()
        send_append(core, m.frm)
    elif not send_append(core, m.frm, send_empty=True):
        _send_empty_probe(core, m.frm, pr)


def maybe_commit(core: RaftState) -> bool:
    """Advance the commit index to what a quorum of voters has, if that entry is of our
    term (an older entry is committed only indirectly, by a later one: Figure 8)."""
    if core.log.committed >= core.log.last_index:
        return False  # nothing left to commit (the common case: asked on every tick)
    voters = core.membership.voters
    if not voters:
        return False
    log = core.log

    def match(v: str) -> int:
        pr = core.prs.get(v)
        if pr is None:
            return 0
        # Our own copy counts once durable: a single voter's entries would otherwise be
        # committed at append, and the commit index sent to learners and removed replicas
        # with the AppendEntries that overlap our fsync (they would apply entries that a
        # crash before that fsync loses).
        return min(pr.match, log.stable) if v == core.id else pr.match

    matches = sorted((match(v) for v in voters), reverse=True)
    q = core.membership.quorum()
    if q > len(matches):
        return False  # fewer voters known than a quorum of the cluster's size
    mci = matches[q - 1]
    if mci <= log.committed or log.term(mci) != core.term:
        return False
    log.commit_to(mci)
    if core.id not in voters and log.last_config_index() <= log.committed:
        _step_down_removed(core)
    return True


def _step_down_removed(core: RaftState) -> None:
    """Our removal is committed: hand over to a caught-up voter at once, then follow."""
    last = core.log.last_index
    ready = [v for v in core.membership.voters if v in core.prs and core.prs[v].match == last]
    if ready:
        core.msgs.append(TimeoutNow(core.term, core.id, ready[0]))
    core.become_follower(core.term, "")


# ---------------------------------------------------------------------- follower side
def handle_append(core: RaftState, m: AppendEntries) -> None:
    log = core.log
    if m.prev_index < log.committed:
        core.msgs.append(AppendResponse(core.term, core.id, m.frm, log.committed))
        return
    last = None
    if not core.corrupt or core.repair_asked == core.term:
        last = log.maybe_append(m.prev_index, m.prev_term, m.commit, m.entries)
    if last is not None:
        core.verified = max(core.verified, last)
        core.msgs.append(AppendResponse(core.term, core.id, m.frm, last))
        _check_repaired(core)
        return
    # Once per term, a damaged replica tells the leader (see _repair); otherwise the
    # usual back-off.
    corrupt_term = 0
    if core.corrupt and core.repair_asked != core.term:
        core.repair_asked = core.term
        corrupt_term = max(core.repair_term, 1)  # 0 says "not damaged"; a lost log is term 0
    hint_index, hint_term = log.find_conflict_by_term(
        min(m.prev_index, log.last_index), m.prev_term
    )
    core.msgs.append(
        AppendResponse(
            core.term, core.id, m.frm, m.prev_index, True, hint_index, hint_term, corrupt_term
        )
    )


def handle_heartbeat(core: RaftState, m: Heartbeat) -> None:
    log = core.log
    # Safe because m.commit <= what this follower acknowledged, which matches the
    # leader's log. A damaged log may not hold what it acknowledged: it commits only what
    # AppendEntries verified in this term.
    log.commit_to(min(m.commit, core.verified if core.corrupt else log.last_index))
    core.msgs.append(HeartbeatResponse(core.term, core.id, m.frm))
    if core.corrupt and core.repair_asked != core.term:
        # A damaged replica tells the leader at its first contact of the term, heartbeats
        # included: an idle group sends no AppendEntries that would prompt the report.
        core.repair_asked = core.term
        last, last_term = log.last_index, log.last_term
        core.msgs.append(
            AppendResponse(
                core.term, core.id, m.frm, last, True, last, last_term,
                max(core.repair_term, 1),
            )
        )
    _check_repaired(core)


def handle_snapshot(core: RaftState, m: InstallSnapshot) -> None:
    log = core.log
    meta = m.meta
    # A damaged log is trusted only as far as this term's leader verified it. Where it
    # verified past the snapshot, keep the log: restoring would drop entries we have
    # acknowledged in this term, the leader would go on counting them as ours (its match
    # index never goes back on a success), and they would never be sent again.
    trusted = not core.corrupt or core.verified >= meta.index
    if meta.index <= log.committed:
        index = log.committed
    elif trusted and log.match_term(meta.index, meta.term):
        log.commit_to(meta.index)  # we have the entries: no need for the snapshot
        index = meta.index
    else:
        data = _assemble(core, m)
        if data is None:
            return
        log.restore(Snapshot(meta, data))
        index = core.verified = meta.index
    if core.snap_buf is not None and core.snap_buf[0][1] <= index:
        drop_series(core)  # a series we no longer need
    core.verified = max(core.verified, index)
    core.msgs.append(AppendResponse(core.term, core.id, m.frm, index))
    _check_repaired(core)


def _assemble(core: RaftState, m: InstallSnapshot) -> SnapshotBytes | None:
    """Collect the chunks of one series (one leader term and snapshot) in a spool; the
    whole data once the last chunk is in, else None (after answering with what we hold).
    A chunk of another series than the one collected is answered with 0: the leader
    restarts it."""
    meta = m.meta
    key = (m.term, meta.index, meta.term)
    buf = core.snap_buf
    if m.offset == 0:
        if buf is not None and buf[0][0] == m.term and buf[0][1] > meta.index:
            return None  # a stale start of an older series of this leader
        drop_series(core)  # replaced by this one (or restarted from its start)
        if m.done:
            return m.data
        spool = core.snapshot_spool()
        spool.append(m.data)
        buf = core.snap_buf = (key, spool)
    elif buf is None or buf[0] != key or m.offset != len(buf[1]):
        have = len(buf[1]) if buf is not None and buf[0] == key else 0
        core.msgs.append(SnapshotResponse(core.term, core.id, m.frm, meta.index, have))
        return None
    else:
        buf[1].append(m.data)
    if not m.done:
        core.msgs.append(SnapshotResponse(core.term, core.id, m.frm, meta.index, len(buf[1])))
        return None
    core.snap_buf = None
    return buf[1].data()


def drop_series(core: RaftState) -> None:
    """Forget the series being collected, and free its spool."""
    buf, core.snap_buf = core.snap_buf, None
    if buf is not None:
        buf[1].close()


def _check_repaired(core: RaftState) -> None:
    """A damaged replica may have lost entries it acknowledged, all in terms up to
    repair_term. A leader of any later term holds every such entry that was committed,
    ahead of the entries of its own term; so once our log holds an entry committed in a
    later term, it holds them all again and we may vote."""
    if core.corrupt and core.lead:
        term = core.log.term(core.log.committed)
        if term is not None and term > core.repair_term:
            core.corrupt = False
