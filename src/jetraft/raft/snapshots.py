"""The snapshots a replica keeps and a leader sends: wrapping the state machine's snapshot,
compacting the log under it, and choosing the snapshot a follower that needs compacted
entries is sent (the log's own, or the state machine's current state when the log's own is
an external marker).

Functions over a RaftState; RaftCore.create_snapshot, compact and sendable_snapshot call
them, replication.py sends what sendable_snapshot gives in chunks.
"""

from __future__ import annotations

from .progress import ProgressState
from .ready import RaftError, Role, SnapshotUnavailable
from .state import RaftState
from .types import Snapshot, SnapshotBytes, SnapshotMeta


def create_snapshot(core: RaftState, index: int, data: SnapshotBytes, *,
                    external: bool = False) -> Snapshot:
    """Wrap the state machine's snapshot taken at `index` (<= applied); `external`
    makes a marker without data (the state machine holds that state durably)."""
    if index > core.log.applied or index < core.log.offset:
        raise RaftError(f"snapshot index {index} outside [{core.log.offset}, applied]")
    term = core.log.term(index)
    assert term is not None
    meta = SnapshotMeta(index, term, core.log.membership_at(index))
    return Snapshot(meta, b"" if external else data, external)


def compact(core: RaftState, snapshot: Snapshot, compact_to: int) -> None:
    """`snapshot` is durable: keep it for lagging followers and drop the entries up
    to compact_to (entries after it stay, so followers a little behind need none).
    A leader keeps the entries after any snapshot it is still sending: the follower
    continues from there, and a transfer slower than our compactions would otherwise
    need another snapshot each time it ends."""
    live = core.ticks - 2 * core.cfg.election_ticks  # not for a follower gone quiet
    for pr in core.prs.values():
        if pr.state is ProgressState.SNAPSHOT and pr.last_heard_tick >= live:
            compact_to = min(compact_to, pr.pending_snapshot)
    core.log.compact(snapshot, compact_to)
    if core.snapshot_to_send is not None and core.snapshot_to_send.meta.index < core.log.offset:
        core.snapshot_to_send = None


def sendable_snapshot(core: RaftState, at_least: int = 0) -> Snapshot | None:
    """The snapshot to send a follower that needs compacted entries: the log's own,
    or, when that is an external marker, the state machine's current state (from
    snapshot_source). With `at_least`, one at or after that index (the state
    machine's current state when the log's own is older). None if there is none to
    send now."""
    log = core.log
    snap = log.snapshot
    own = snap is not None and snap.meta.index >= at_least
    if (snap is None and not at_least) or (own and snap is not None and not snap.external):
        return snap
    cached = core.snapshot_to_send
    if cached is not None and cached.meta.index >= max(log.offset, at_least):
        return cached
    if core.snapshot_source is None:
        return None
    # The state machine holds only committed entries, possibly more than our commit
    # index says (a self-durable one, after a restart). Only a leader sends
    # snapshots, and a leader's log holds every committed entry: the term at that
    # index in our log is the right one.
    try:
        index, data = core.snapshot_source()
    except SnapshotUnavailable:
        return None  # tried again at the follower's next answer
    term = log.term(index)
    if term is None or core.role is not Role.LEADER or index < at_least:
        return None
    core.snapshot_to_send = Snapshot(SnapshotMeta(index, term, log.membership_at(index)), data)
    return core.snapshot_to_send
