"""A deterministic, hand-driven cluster of RaftCores for unit tests and transcripts.

Nothing happens unless a test says so: `tick` a node, `deliver` queued messages (FIFO,
dropping those across a partition), `propose`. Each node has a trivial durable store
that follows the Ready contract (persist, then send, then apply, then advance), so nodes
can crash and restart from what they persisted.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jetraft.raft.core import RaftCore
from jetraft.raft.membership import decode_membership
from jetraft.raft.messages import (
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
from jetraft.raft.ready import RaftConfig, Ready
from jetraft.raft.types import Entry, EntryKind, HardState, Snapshot


@dataclass
class Store:
    """Durable state of one node, written exactly as a driver would."""

    hard_state: HardState = field(default_factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)

    def persist(self, rd: Ready) -> None:
        if rd.snapshot is not None:
            self.snapshot = rd.snapshot
            self.entries = []
        if rd.entries:
            first = rd.entries[0].index
            self.entries = [e for e in self.entries if e.index < first]
            self.entries.extend(rd.entries)
        if rd.hard_state is not None:
            self.hard_state = rd.hard_state

    def compact(self, snap: Snapshot, compact_to: int) -> None:
        self.snapshot = snap
        self.entries = [e for e in self.entries if e.index > compact_to]


@dataclass
class TestNode:
    id: str
    core: RaftCore
    store: Store
    applied: list[Entry] = field(default_factory=list)  # state machine: applied entries
    up: bool = True

    def data(self) -> list[str]:
        """Applied data; a restored snapshot (index 0 here) holds comma-joined data."""
        out: list[str] = []
        for e in self.applied:
            if e.index == 0:
                out.extend(x for x in e.data.decode().split(",") if x)
            elif e.kind is EntryKind.NORMAL:
                out.append(e.data.decode())
        return out


def check_persisted(store: Store, rd: Ready) -> None:
    """Every message in rd may depend only on what `store` holds durably."""
    hs = store.hard_state
    for m in rd.messages:
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        assert m.term <= hs.term or pre, f"{m} before its term is durable"
        if isinstance(m, VoteResponse) and m.granted and not m.pre_vote:
            assert (hs.term, hs.vote) == (m.term, m.to), f"{m} before the vote is durable"
        if isinstance(m, VoteRequest) and not m.pre_vote:
            assert (hs.term, hs.vote) == (m.term, m.frm), f"{m} before the vote is durable"
        if isinstance(m, AppendResponse) and not m.reject:
            have = store.entries[-1].index if store.entries else 0
            snap = store.snapshot.meta.index if store.snapshot else 0
            assert m.index <= max(have, snap), f"{m} acknowledges entries not durable"


def entry_str(e: Entry) -> str:
    if e.kind is EntryKind.NOOP:
        what = "noop"
    elif e.kind is EntryKind.CONFIG:
        m = decode_membership(e.data)
        what = "conf(" + ",".join(m.voters) + ("; learners " + ",".join(m.learners)
                                              if m.learners else "") + ")"
    else:
        what = e.data.decode(errors="replace")
    return f"{e.index}/{e.term}:{what}"


def msg_str(m: Message) -> str:
    head = f"{m.frm}->{m.to} "
    if isinstance(m, AppendEntries):
        ents = " ".join(entry_str(e) for e in m.entries)
        return (head + f"App t{m.term} prev={m.prev_index}/{m.prev_term} "
                f"commit={m.commit} [{ents}]")
    if isinstance(m, AppendResponse):
        if m.reject:
            extra = f" corrupt-term={m.corrupt_term}" if m.corrupt_term else ""
            return (head + f"AppResp t{m.term} reject {m.index} "
                    f"hint={m.hint_index}/{m.hint_term}{extra}")
        return head + f"AppResp t{m.term} ok {m.index}"
    if isinstance(m, Heartbeat):
        return head + f"Heartbeat t{m.term} commit={m.commit}"
    if isinstance(m, HeartbeatResponse):
        return head + f"HeartbeatResp t{m.term}"
    if isinstance(m, VoteRequest):
        kind = "PreVote" if m.pre_vote else "Vote"
        extra = " transfer" if m.transfer else ""
        return head + f"{kind} t{m.term} last={m.last_index}/{m.last_term}{extra}"
    if isinstance(m, VoteResponse):
        kind = "PreVoteResp" if m.pre_vote else "VoteResp"
        return head + f"{kind} t{m.term} {'granted' if m.granted else 'rejected'}"
    if isinstance(m, InstallSnapshot):
        meta = m.meta
        chunk = "" if m.offset == 0 and m.done else (
            f" chunk@{m.offset}+{len(m.data)}{' done' if m.done else ''}")
        return head + f"Snapshot t{m.term} {meta.index}/{meta.term}{chunk}"
    if isinstance(m, SnapshotResponse):
        return head + f"SnapshotResp t{m.term} {m.index} have={m.offset}"
    assert isinstance(m, TimeoutNow)
    return head + f"TimeoutNow t{m.term}"


class Cluster:
    def __init__(
        self,
        ids: Iterable[str],
        cfg: RaftConfig | None = None,
        *,
        seed: int = 0,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.cfg = cfg or RaftConfig(election_ticks=10, heartbeat_ticks=1)
        self.ids = list(ids)
        self.seed = seed
        self.trace = trace or (lambda _line: None)
        self.queue: list[Message] = []
        self.held: list[Message] = []  # delayed in the network (hold / release)
        self.cut: set[frozenset[str]] = set()
        self.nodes: dict[str, TestNode] = {}
        for nid in self.ids:
            self.nodes[nid] = self._new_node(nid, Store(), peers=self.ids)

    def _new_node(self, nid: str, store: Store, peers: Iterable[str] = (),
                  corrupt: bool = False) -> TestNode:
        rng = random.Random(f"{self.seed}:{nid}")
        core = RaftCore(
            nid, self.cfg, rng, peers=tuple(peers), hard_state=store.hard_state,
            snapshot=store.snapshot, entries=store.entries, corrupt=corrupt,
        )
        node = TestNode(nid, core, store)
        if store.snapshot is not None:
            node.applied = [Entry(0, 0, EntryKind.NORMAL, store.snapshot.data)]
        return node

    # ------------------------------------------------------------------ driving
    def process(self, nid: str) -> None:
        """Run the Ready loop of one node until it has nothing more to do."""
        node = self.nodes[nid]
        for _ in range(100):
            if not node.up or not node.core.has_ready():
                return
            rd = node.core.ready()
            if rd.soft_state is not None:
                ss = rd.soft_state
                self.trace(f"{nid}: {ss.role.value} term={ss.term} leader={ss.leader or '-'}")
            node.store.persist(rd)
            check_persisted(node.store, rd)
            self.queue.extend(rd.messages)
            if rd.snapshot is not None:
                node.applied = [Entry(0, 0, EntryKind.NORMAL, rd.snapshot.data)]
                self.trace(f"{nid}: restored snapshot {rd.snapshot.meta.index}"
                           f"/{rd.snapshot.meta.term}")
            for e in rd.committed:
                node.applied.append(e)
                if e.kind is not EntryKind.NOOP:
                    self.trace(f"{nid}: apply {entry_str(e)}")
            node.core.advance(rd)
        raise AssertionError("Ready loop did not settle")

    def tick(self, nid: str, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[nid].core.tick()
            self.process(nid)

    def tick_all(self, n: int = 1) -> None:
        for _ in range(n):
            for nid in self.ids:
                if self.nodes[nid].up:
                    self.tick(nid)

    def blocked(self, m: Message) -> bool:
        if frozenset((m.frm, m.to)) in self.cut:
            return True
        dest = self.nodes.get(m.to)
        return dest is None or not dest.up

    def deliver(self, limit: int | None = None, *, only: str | None = None) -> int:
        """Deliver queued messages in order (to `only` if given); returns how many."""
        n = 0
        while self.queue and (limit is None or n < limit):
            k = 0 if only is None else next(
                (i for i, m in enumerate(self.queue) if m.to == only), -1)
            if k < 0:
                break
            m = self.queue.pop(k)
            n += 1
            if self.blocked(m):
                self.trace(f"  drop {msg_str(m)}")
                continue
            self.trace(f"  {msg_str(m)}")
            self.nodes[m.to].core.step(m)
            self.process(m.to)
        return n

    def stabilize(self, max_msgs: int = 10_000) -> None:
        for nid in self.ids:
            self.process(nid)
        delivered = self.deliver(max_msgs)
        assert not self.queue, f"not stable after {delivered} messages"

    def hold(self, frm: str, to: str, limit: int | None = None) -> int:
        """Delay queued messages from frm to to (all, or the first `limit`): they stay in
        the network until release(), so later messages overtake them."""
        keep: list[Message] = []
        n = 0
        for m in self.queue:
            if m.frm == frm and m.to == to and (limit is None or n < limit):
                self.held.append(m)
                n += 1
            else:
                keep.append(m)
        self.queue = keep
        return n

    def release(self, frm: str | None = None, to: str | None = None) -> int:
        """Delayed messages (all, or those from frm to to) arrive after everything queued
        now, in the order they were sent."""
        out: list[Message] = []
        keep: list[Message] = []
        for m in self.held:
            (out if frm is None or (m.frm, m.to) == (frm, to) else keep).append(m)
        self.held = keep
        self.queue.extend(out)
        return len(out)

    def partition(self, *groups: Iterable[str]) -> None:
        sets = [set(g) for g in groups]
        self.cut = set()
        for i, a in enumerate(sets):
            for b in sets[i + 1:]:
                self.cut |= {frozenset((x, y)) for x in a for y in b}

    def heal(self) -> None:
        self.cut = set()

    def crash(self, nid: str) -> None:
        self.nodes[nid].up = False
        self.queue = [m for m in self.queue if m.to != nid and m.frm != nid]

    def restart(self, nid: str, *, corrupt: bool = False) -> None:
        old = self.nodes[nid]
        self.nodes[nid] = self._new_node(nid, old.store, peers=self.ids, corrupt=corrupt)
        self.process(nid)

    def add_node(self, nid: str) -> None:
        """A fresh node that knows no group yet (it joins through a membership change)."""
        self.ids.append(nid)
        self.nodes[nid] = self._new_node(nid, Store())

    # ------------------------------------------------------------------ queries
    def leader(self) -> str | None:
        leaders = [n.id for n in self.nodes.values()
                   if n.up and n.core.role.value == "leader"]
        if not leaders:
            return None
        return max(leaders, key=lambda nid: self.nodes[nid].core.term)

    def expire_lease(self, *nids: str) -> None:
        """As if an election period passed without news from a leader, short of the
        node's own election timeout (so it does not campaign by itself)."""
        for nid in nids or self.ids:
            core = self.nodes[nid].core
            core.elapsed = max(core.elapsed, self.cfg.election_ticks)

    def elect(self, nid: str) -> None:
        self.expire_lease()
        self.nodes[nid].core.campaign()
        self.process(nid)
        self.stabilize()
        assert self.nodes[nid].core.role.value == "leader"

    def propose(self, nid: str, data: str) -> int:
        idx = self.nodes[nid].core.propose(data.encode())
        self.process(nid)
        return idx

    def snapshot(self, nid: str, compact_to: int | None = None) -> Snapshot:
        """The node's state machine snapshots at its applied index; the log compacts."""
        node = self.nodes[nid]
        core = node.core
        data = ",".join(node.data()).encode()
        snap = core.create_snapshot(core.applied, data)
        to = snap.meta.index if compact_to is None else compact_to
        node.store.compact(snap, to)
        core.compact(snap, to)
        return snap
