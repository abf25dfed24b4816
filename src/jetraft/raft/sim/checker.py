"""Invariants the simulator checks at every step.

- Election safety: at most one leader per term.
- Log matching: an (index, term) pair names one entry everywhere, and the entry before it
  has the same term everywhere; by induction, two logs holding the same (index, term)
  are identical up to there. Checked on every batch of entries a replica persists.
- Leader completeness: a new leader's log holds every entry known to be committed.
- Commitment is final: no replica lacking the newest committed entry could win an
  election with the logs as they are now (a voter grants its vote as the core's vote
  rule says). This catches a commit that is not final at once, without waiting for the
  schedule in which a leader without the entry is really elected (Figure 8).
- State machine safety: every replica applies the same entry at each index, and the
  state machine's digest agrees at each index (snapshots included); a replica applies
  each index once per life, in order, and never restores a snapshot behind what it
  applied.
- Persist before send: no message leaves before what it depends on is durable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from ..core import RaftCore
from ..messages import AppendResponse, Message, VoteRequest, VoteResponse
from ..ready import Ready, Role
from ..types import Entry, EntryKind, SnapshotMeta

if TYPE_CHECKING:
    from .node import SimNode


class _Damage(Protocol):
    @property
    def damaged(self) -> Mapping[str, int]: ...


class Electorate(Protocol):
    """What check_electable looks at: the replicas of one group (a World, or one group
    of a simulated cluster)."""

    @property
    def nodes(self) -> Mapping[str, SimNode]: ...

    @property
    def faults(self) -> _Damage: ...

    def retired(self, node: SimNode) -> bool: ...


class Violation(AssertionError):
    """A safety or liveness property does not hold."""


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.entries: dict[tuple[int, int], tuple[EntryKind, bytes, int]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data)
        self.last_committed = 0
        self.digests: dict[int, bytes] = {}
        self.applied: dict[str, int] = {}  # node -> last index applied in this life
        self.checks = 0

    def on_start(self, node_id: str) -> None:
        self.applied.pop(node_id, None)

    def on_ready(self, node_id: str, core: RaftCore, rd: Ready) -> None:
        self.checks += 1
        if core.role is Role.LEADER:
            self.check_leader(node_id, core)
        if rd.entries:
            prev_term = core.log.term(rd.entries[0].index - 1)
            if prev_term is None:
                raise Violation(f"{node_id}: entries {rd.entries[0].index}.. follow a hole")
            for e in rd.entries:
                val = (e.kind, e.data, prev_term)
                old = self.entries.setdefault((e.index, e.term), val)
                if old != val:
                    raise Violation(
                        f"log matching: {node_id} holds {e.index}/{e.term} = {val!r}, "
                        f"elsewhere {old!r}"
                    )
                prev_term = e.term

    def check_leader(self, node_id: str, core: RaftCore) -> None:
        term = core.term
        known = self.leaders.get(term)
        if known == node_id:
            return
        if known is not None:
            raise Violation(f"two leaders in term {term}: {known} and {node_id}")
        self.leaders[term] = node_id
        log = core.log
        for index, (cterm, data) in self.committed.items():
            if index > log.last_index:
                raise Violation(
                    f"leader completeness: {node_id} (term {term}) lacks committed {index}"
                )
            if index > log.offset:
                e = log.entry(index)
                if (e.term, e.data) != (cterm, data):
                    raise Violation(
                        f"leader completeness: {node_id} holds {index}/{e.term}, "
                        f"committed {index}/{cterm}"
                    )
            elif index == log.offset and log.offset_term != cterm:
                raise Violation(f"leader completeness: {node_id} snapshot term at {index}")

    def on_commit(self, node_id: str, e: Entry) -> None:
        """A replica is about to apply e: it is committed."""
        val = (e.term, e.data)
        old = self.committed.setdefault(e.index, val)
        if old != val:
            raise Violation(
                f"state machine safety: {node_id} applies {e.index}/{e.term}, "
                f"others {e.index}/{old[0]}"
            )
        self.last_committed = max(self.last_committed, e.index)
        last = self.applied.get(node_id)
        if last is not None and e.index != last + 1:
            raise Violation(f"{node_id}: applies {e.index} after {last}")
        self.applied[node_id] = e.index

    def on_apply(self, node_id: str, e: Entry, digest: bytes) -> None:
        """The state machine applied e (a NORMAL entry); digest is its state after."""
        known = self.digests.setdefault(e.index, digest)
        if known != digest:
            raise Violation(f"{node_id}: state machine differs after {e.index}")

    def on_restore(self, node_id: str, meta: SnapshotMeta, digest: bytes) -> None:
        index = meta.index
        last = self.applied.get(node_id)
        if last is not None and index < last:
            raise Violation(f"{node_id}: restored a snapshot at {index} after applying {last}")
        self.applied[node_id] = index
        known = self._digest_at(index)
        if known is not None and known != digest:
            raise Violation(f"{node_id}: snapshot at {index} differs from what was applied")
        c = self.committed.get(index)
        if c is not None and c[0] != meta.term:
            raise Violation(f"{node_id}: snapshot {index}/{meta.term} vs committed term")
        if index > self.last_committed:
            raise Violation(f"{node_id}: snapshot at {index} beyond anything committed")

    def _digest_at(self, index: int) -> bytes | None:
        """The digest after the last NORMAL entry at or below index (None: unknown)."""
        best = None
        for i in range(index, 0, -1):
            if i in self.digests:
                best = self.digests[i]
                break
            c = self.committed.get(i)
            if c is None:
                return None
        return best

    def on_send(self, node_id: str, m: Message, durable: tuple[int, str, int]) -> None:
        """`durable` = (term, vote, last index) as persisted before the send."""
        term, vote, last = durable
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        if m.term > term and not pre:
            raise Violation(f"{node_id}: sent term {m.term} before persisting it ({term})")
        # A vote for a term is safe once that term's vote, or a later term, is durable:
        # a replica that persisted a later term never votes in an earlier one again.
        granted = isinstance(m, VoteResponse) and m.granted and not m.pre_vote
        if granted and term == m.term and vote != m.to:
            raise Violation(f"{node_id}: granted a vote before persisting it: {m}")
        if isinstance(m, VoteRequest) and not m.pre_vote and term == m.term and vote != node_id:
            raise Violation(f"{node_id}: asked for votes before persisting its own")
        if isinstance(m, AppendResponse) and not m.reject and m.index > last:
            raise Violation(f"{node_id}: acknowledged {m.index} with only {last} durable")

    def check_electable(self, world: Electorate) -> None:
        """Commitment is final: see the module doc. A replica that is down counts with
        what it may come back with: as a candidate, its durable log (the least it
        recovers); as a voter, its whole log at its death (the most it recovers, so
        the most it may refuse). Damaged disks count as refusing."""
        c = self.last_committed
        if not c:
            return
        cterm = self.committed[c][0]
        views = [v for v in (_view(n, c, cterm, world) for n in world.nodes.values()) if v]
        by_id = {v.id: v for v in views}
        for x in views:
            if x.has_c or not x.promotable:
                continue
            mine = (x.cand_last_term, x.cand_last_index)  # Raft's order, not the core's code
            granted = 0
            for vid in x.voters:
                v = by_id.get(vid)
                if v is None or x.id not in v.voters:
                    continue  # gone, or ignores our requests
                bound = v.acked_bound
                if v.corrupt and bound is not None and mine >= bound:
                    granted += 1  # the damaged voter's rule for the end it acknowledged
                    continue
                if v.damaged:
                    continue  # its log is not to be trusted
                if v.corrupt and (mine[0] <= v.repair_term or not v.repair_term):
                    continue  # a damaged voter's rule (a lost log votes for nobody)
                if v is x or mine >= (v.vote_last_term, v.vote_last_index):
                    granted += 1
            if granted > len(x.voters) // 2:
                raise Violation(
                    f"commitment: {c}/{cterm} is committed but {x.id} (log ends "
                    f"{mine[1]}/{mine[0]}) lacks it and could be elected"
                )


class _View:
    __slots__ = ("acked_bound", "cand_last_index", "cand_last_term", "corrupt", "damaged",
                 "has_c", "id",
                 "promotable", "repair_term", "vote_last_index", "vote_last_term", "voters")

    def __init__(self, nid: str, core: RaftCore, durable: int | None, c: int, cterm: int,
                 damaged: bool) -> None:
        log = core.log
        self.id = nid
        self.voters = core.membership.voters
        self.corrupt = core.corrupt
        self.repair_term = core.repair_term
        self.acked_bound = core.acked_bound()
        self.damaged = damaged
        self.promotable = nid in self.voters and not core.corrupt and not damaged
        self.vote_last_index, self.vote_last_term = log.last_index, log.last_term
        last = log.last_index if durable is None else min(durable, log.last_index)
        term = log.term(last)
        if term is None:  # compacted in memory past what is durable: not a candidate
            self.promotable = False
            term = 0
        self.cand_last_index, self.cand_last_term = last, term
        self.has_c = log.offset >= c or (last >= c and log.term(c) == cterm)


def _view(node: SimNode, c: int, cterm: int, world: Electorate) -> _View | None:
    damaged = node.id in world.faults.damaged
    d = node.driver
    if node.up and d is not None:
        return _View(node.id, d.core, None, c, cterm, damaged) if d.running else None
    if world.retired(node) or node.last_core is None:
        return None
    return _View(node.id, node.last_core, node.last_durable, c, cterm, damaged)
