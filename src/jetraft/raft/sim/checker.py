"""Invariants the simulator checks at every step.

- Election safety: at most one leader per term.
- Log matching: an (index, term) pair names one entry everywhere, and the entry before it
  has the same term everywhere; by induction, two logs holding the same (index, term)
  are identical up to there. Checked on every batch of entries a replica persists.
- Leader completeness: a new leader's log holds every entry known to be committed.
- State machine safety: every replica applies the same entry at each index, and the
  running hash of everything applied agrees at each index (snapshots included).
- Persist before send: no message leaves before what it depends on is durable.
"""

from __future__ import annotations

from ..core import RaftCore
from ..messages import AppendResponse, Message, VoteRequest, VoteResponse
from ..ready import Ready, Role
from ..types import Entry, EntryKind, Snapshot


class Violation(AssertionError):
    """A safety or liveness property does not hold."""


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.entries: dict[tuple[int, int], tuple[EntryKind, bytes, int]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.digests: dict[int, bytes] = {}
        self.checks = 0

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

    def on_apply(self, node_id: str, e: Entry, digest: bytes) -> None:
        val = (e.term, e.data)
        old = self.committed.setdefault(e.index, val)
        if old != val:
            raise Violation(
                f"state machine safety: {node_id} applied {e.index}/{e.term}, "
                f"others {e.index}/{old[0]}"
            )
        known = self.digests.setdefault(e.index, digest)
        if known != digest:
            raise Violation(f"{node_id}: applied sequence differs at {e.index}")

    def on_restore(self, node_id: str, snap: Snapshot, digest: bytes) -> None:
        index = snap.meta.index
        known = self.digests.get(index)
        if index and known is None:
            raise Violation(f"{node_id}: snapshot at {index} that nobody applied")
        if known is not None and known != digest:
            raise Violation(f"{node_id}: snapshot at {index} differs from what was applied")
        c = self.committed.get(index)
        if c is not None and c[0] != snap.meta.term:
            raise Violation(f"{node_id}: snapshot {index}/{snap.meta.term} vs committed term")

    def on_send(
        self, node_id: str, core: RaftCore, m: Message, durable: tuple[int, str, int]
    ) -> None:
        """`durable` = (term, vote, last index) as persisted before the send."""
        term, vote, last = durable
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        if m.term > term and not pre:
            raise Violation(f"{node_id}: sent term {m.term} before persisting it ({term})")
        granted = isinstance(m, VoteResponse) and m.granted and not m.pre_vote
        if granted and (term, vote) != (m.term, m.to):
            raise Violation(f"{node_id}: granted a vote before persisting it")
        if isinstance(m, VoteRequest) and not m.pre_vote and (term, vote) != (m.term, node_id):
            raise Violation(f"{node_id}: asked for votes before persisting its own")
        if isinstance(m, AppendResponse) and not m.reject and m.index > last:
            raise Violation(f"{node_id}: acknowledged {m.index} with only {last} durable")
