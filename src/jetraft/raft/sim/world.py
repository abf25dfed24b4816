"""The seeded, single-threaded cluster simulation: a safety phase, then a liveness phase.

Safety phase: clients propose on whoever claims to lead (forwarding on NotLeader), while
replicas crash (sometimes in the middle of an fsync), restart, have a byte of their log
corrupted while down, get partitioned and healed, and the group changes membership and
transfers leadership; the network delays, drops, duplicates and reorders. Liveness
phase: every replica is restarted, the network heals and stops losing messages; a
leader must be elected and commit a new proposal on every member within a bound. Every
step is checked by Checker; a violation raises Violation.

Everything is drawn from random.Random streams seeded by the seed, so a seed replays
exactly: `python -m jetraft.raft.sim --seed S --nodes N --trace`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ..disk import MemDisk
from ..membership import ChangeKind, MembershipChange
from ..messages import Message
from ..ready import NotLeader, RaftConfig, RaftError, Ready, Role
from ..types import Entry, Snapshot
from ..wal_format import decode_at
from .checker import Checker, Violation
from .network import NetConfig, Network
from .node import WAL_DIR, SimNode


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 3
    safety_ticks: int = 300
    liveness_ticks: int = 200  # bound to elect a leader and commit on every member
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    tick_steps: int = 4  # steps per tick; messages take 1..max_delay_steps steps
    max_delay_steps: int = 8
    drop: float = 0.05
    duplicate: float = 0.03
    crash_per_tick: float = 0.012
    restart_per_tick: float = 0.06
    partition_per_tick: float = 0.012
    heal_per_tick: float = 0.04
    propose_per_tick: float = 0.7
    change_per_tick: float = 0.012
    transfer_per_tick: float = 0.006
    corrupt_on_crash: float = 0.25
    crash_in_sync: float = 0.3
    segment_bytes: int = 1024
    max_msg_bytes: int = 256
    max_inflight: int = 4


@dataclass
class SeedResult:
    seed: int
    nodes: int
    ok: bool
    error: str = ""
    ticks: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    def replay_command(self) -> str:
        return f"python -m jetraft.raft.sim --seed {self.seed} --nodes {self.nodes} --trace"


class World:
    def __init__(
        self, seed: int, cfg: SimConfig, trace: Callable[[str], None] | None = None
    ) -> None:
        self.seed = seed
        self.cfg = cfg
        self._trace = trace
        self.rng = random.Random(f"faults:{seed}")
        self.client_rng = random.Random(f"clients:{seed}")
        self.disk_rng = random.Random(f"disk:{seed}")
        self.net = Network(
            random.Random(f"net:{seed}"),
            NetConfig(cfg.drop, cfg.duplicate, cfg.max_delay_steps),
        )
        self.raft_cfg = RaftConfig(
            election_ticks=cfg.election_ticks,
            heartbeat_ticks=cfg.heartbeat_ticks,
            max_msg_bytes=cfg.max_msg_bytes,
            max_inflight=cfg.max_inflight,
        )
        self.checker = Checker()
        self.now = 0
        self.nodes: dict[str, SimNode] = {}
        self.phase: dict[str, int] = {}
        self.next_id = 1
        self.acked: dict[bytes, int] = {}
        self.pending: dict[str, list[tuple[int, int, bytes]]] = {}
        self.proposals = 0
        self.damaged: set[str] = set()  # disks damaged (checked while the node is down)
        self.stats = {
            "crashes": 0,
            "sync_crashes": 0,
            "corruptions": 0,
            "restarts": 0,
            "partitions": 0,
            "changes": 0,
            "transfers": 0,
            "snapshots": 0,
        }
        peers = tuple(f"n{i}" for i in range(1, cfg.nodes + 1))
        for _ in peers:
            self._add_node(peers)

    # ------------------------------------------------------------------ plumbing
    def trace(self, text: str) -> None:
        if self._trace is not None:
            self._trace(
                f"t={self.now // self.cfg.tick_steps}.{self.now % self.cfg.tick_steps} {text}"
            )

    def _add_node(self, peers: tuple[str, ...]) -> SimNode:
        nid = f"n{self.next_id}"
        self.next_id += 1
        node = SimNode(nid, self.raft_cfg, str(self.seed), peers, self.cfg.segment_bytes)
        self.nodes[nid] = node
        self.phase[nid] = self.rng.randrange(self.cfg.tick_steps)
        self._start(node)
        return node

    def _start(self, node: SimNode) -> None:
        corrupt = node.start(self.disk_rng)
        self.stats["restarts"] += 1
        self.trace(f"{node.id}: start" + (f" (corrupt: {corrupt})" if corrupt else ""))
        if node.sm.index:
            self._restored(node, None)
        self._process(node)

    def _send(self, node: SimNode, m: Message) -> None:
        assert node.core is not None
        self.checker.on_send(
            node.id, node.core, m, (node.durable_term, node.durable_vote, node.durable_last)
        )
        if self._trace is not None:
            self.trace(f"  send {_msg(m)}")
        self.net.send(self.now, m)

    def _on_ready(self, node: SimNode, rd: Ready) -> None:
        assert node.core is not None
        if rd.soft_state is not None and self._trace is not None:
            ss = rd.soft_state
            self.trace(f"{node.id}: {ss.role.value} term={ss.term} leader={ss.leader or '-'}")
        self.checker.on_ready(node.id, node.core, rd)

    def _on_apply(self, node: SimNode, e: Entry) -> None:
        self.checker.on_apply(node.id, e, node.sm.digest)
        pend = self.pending.get(node.id)
        while pend and pend[0][0] <= e.index:
            index, term, pid = pend.pop(0)
            if index == e.index and term == e.term and e.data == pid:
                self.acked[pid] = index
                if self._trace is not None:
                    self.trace(f"{node.id}: ack {pid.decode()} at {index}")

    def _restored(self, node: SimNode, snap: Snapshot | None) -> None:
        assert node.core is not None
        if snap is None:
            snap = node.core.log.snapshot
        if snap is not None:
            self.checker.on_restore(node.id, snap, node.sm.digest)
            pend = self.pending.get(node.id)
            while pend and pend[0][0] <= snap.meta.index:
                pend.pop(0)  # outcome unknown to this client: never acknowledged

    def _process(self, node: SimNode) -> None:
        before = node.core.log.snapshot if node.core else None
        ok = node.process(
            self.disk_rng,
            lambda m: self._send(node, m),
            self._on_ready,
            self._on_apply,
            lambda n, s: self._restored(n, s),
        )
        if not ok:
            self.stats["sync_crashes"] += 1
            self.trace(f"{node.id}: crashed inside fsync")
            self._after_crash(node)
        elif node.core is not None and node.core.log.snapshot is not before:
            self.stats["snapshots"] += 1

    # ------------------------------------------------------------------ the clock
    def step(self) -> None:
        now = self.now
        for m in self.net.due(now):
            node = self.nodes.get(m.to)
            if node is None or not node.up or node.core is None:
                continue
            if self._trace is not None:
                self.trace(f"  recv {_msg(m)}")
            node.core.step(m)
            self._process(node)
        ts = self.cfg.tick_steps
        for nid, node in self.nodes.items():
            if node.up and node.core is not None and (now + self.phase[nid]) % ts == 0:
                node.core.tick()
                self._process(node)
        self.now += 1

    def run(self) -> SeedResult:
        try:
            self.safety_phase()
            self.liveness_phase()
        except Violation as exc:
            return self._result(False, str(exc))
        return self._result(True)

    def _result(self, ok: bool, error: str = "") -> SeedResult:
        stats = dict(
            self.stats,
            proposals=self.proposals,
            acked=len(self.acked),
            messages=self.net.sent,
            leaders=len(self.checker.leaders),
        )
        return SeedResult(
            self.seed, self.cfg.nodes, ok, error, self.now // self.cfg.tick_steps, stats
        )

    # ------------------------------------------------------------------ phases
    def safety_phase(self) -> None:
        ts = self.cfg.tick_steps
        for _ in range(self.cfg.safety_ticks):
            self.faults()
            self.clients()
            for _ in range(ts):
                self.step()

    def liveness_phase(self) -> None:
        self.trace("--- liveness phase: heal everything, restart everyone ---")
        self.net.heal()
        self.net.cfg.drop = 0.0
        self.net.cfg.duplicate = 0.0
        for node in self.nodes.values():
            node.crash_in_sync = False
            if not node.up:
                self._start(node)
        ts = self.cfg.tick_steps
        start = self.now
        live: bytes | None = None
        for tick in range(self.cfg.liveness_ticks):
            if tick % 5 == 0 and (live is None or live not in self.acked):
                live = self._propose_on_leader(b"live")
            if live is not None and live in self.acked and self._all_applied(self.acked[live]):
                self._check_acked()
                self.trace(f"--- live after {(self.now - start) // ts} ticks ---")
                return
            for _ in range(ts):
                self.step()
        leader = self.leader()
        raise Violation(
            f"liveness: no new entry committed on every member within "
            f"{self.cfg.liveness_ticks} ticks of healing (leader: {leader or 'none'})"
        )

    def leader(self) -> str | None:
        best: tuple[int, str] | None = None
        for nid, node in self.nodes.items():
            core = node.core
            is_leader = node.up and core is not None and core.role is Role.LEADER
            if is_leader and core is not None and (best is None or core.term > best[0]):
                best = (core.term, nid)
        return best[1] if best else None

    def _all_applied(self, index: int) -> bool:
        lead = self.leader()
        if lead is None:
            return False
        core = self.nodes[lead].core
        assert core is not None
        m = core.membership
        for nid in (*m.voters, *m.learners):
            node = self.nodes[nid]
            if not node.up or node.sm.index < index:
                return False
        return True

    def _check_acked(self) -> None:
        lead = self.leader()
        assert lead is not None
        core = self.nodes[lead].core
        assert core is not None
        members = (*core.membership.voters, *core.membership.learners)
        for pid, index in self.acked.items():
            c = self.checker.committed.get(index)
            if c is None or c[1] != pid:
                raise Violation(f"acknowledged {pid.decode()} at {index} is not committed")
            for nid in members:
                if self.nodes[nid].sm.index < index:
                    raise Violation(f"{nid} has not applied acknowledged {pid.decode()}")

    # ------------------------------------------------------------------ clients
    def clients(self) -> None:
        r = self.client_rng
        if r.random() < self.cfg.propose_per_tick:
            for _ in range(r.randint(1, 3)):
                self._propose_on_leader(b"p")

    def _propose_on_leader(self, prefix: bytes) -> bytes | None:
        """Propose on a random live node, forwarding once to the leader it names."""
        ups = [n for n in self.nodes.values() if n.up and n.core is not None]
        if not ups:
            return None
        node = self.client_rng.choice(ups)
        self.proposals += 1
        pid = prefix + b"%d" % self.proposals
        for _ in range(2):
            core = node.core
            assert core is not None
            try:
                index = core.propose(pid)
            except NotLeader as exc:
                nxt = self.nodes.get(exc.leader)
                if nxt is None or not nxt.up or nxt.core is None:
                    return None
                node = nxt
                continue
            except RaftError:
                return None
            self.pending.setdefault(node.id, []).append((index, core.term, pid))
            self.trace(f"{node.id}: propose {pid.decode()} at {index}")
            self._process(node)
            return pid
        return None

    # ------------------------------------------------------------------ faults
    def faults(self) -> None:
        r, cfg = self.rng, self.cfg
        ups = [n for n in self.nodes.values() if n.up]
        downs = [n for n in self.nodes.values() if not n.up]
        if ups and r.random() < cfg.crash_per_tick:
            node = r.choice(ups)
            if r.random() < cfg.crash_in_sync:
                node.crash_in_sync = True
                self.trace(f"{node.id}: will crash inside its next fsync")
            else:
                self.stats["crashes"] += 1
                self.trace(f"{node.id}: crash")
                node.crash(self.disk_rng)
                self._after_crash(node)
        if downs and r.random() < cfg.restart_per_tick:
            self._start(r.choice(downs))
        if r.random() < cfg.partition_per_tick:
            self._partition()
        if self.net.cut and r.random() < cfg.heal_per_tick:
            self.trace("heal")
            self.net.heal()
        if r.random() < cfg.change_per_tick:
            self._change_membership()
        if r.random() < cfg.transfer_per_tick:
            lead = self.leader()
            if lead is not None:
                core = self.nodes[lead].core
                assert core is not None
                try:
                    to = core.transfer_leadership()
                    self.stats["transfers"] += 1
                    self.trace(f"{lead}: transfer leadership to {to}")
                except RaftError:
                    pass
                self._process(self.nodes[lead])

    def _after_crash(self, node: SimNode) -> None:
        self.pending.pop(node.id, None)
        if self.rng.random() < self.cfg.corrupt_on_crash and not self._any_corrupt():
            self._corrupt(node.disk, node.id)

    def _any_corrupt(self) -> bool:
        """Is a replica damaged and not yet repaired? (One at a time: two damaged replicas
        of three could no longer elect a leader, by design.)"""
        for nid, node in self.nodes.items():
            if node.up and node.core is not None and node.core.corrupt:
                return True
            if node.disk.exists(f"{WAL_DIR}/CORRUPT") or (nid in self.damaged and not node.up):
                return True
        return False

    def _corrupt(self, disk: MemDisk, nid: str) -> None:
        """Flip a byte of a durable record that is not the last one of the log (a bad last
        record is indistinguishable from a torn write, and is treated as one)."""
        names = disk.list(WAL_DIR)
        segs = [n for n in names if n.startswith("seg-") and n.endswith(".wal")]
        snaps = [n for n in names if n.startswith("snap-") and n.endswith(".snap")]
        choices: list[tuple[str, int]] = []
        for k, name in enumerate(segs):
            data = disk.read(f"{WAL_DIR}/{name}")
            limit = len(data) if k < len(segs) - 1 else _last_record_start(data)
            if limit > 0:
                choices.append((name, limit))
        for name in snaps:
            choices.append((name, len(disk.read(f"{WAL_DIR}/{name}"))))
        if not choices:
            return
        name, limit = self.rng.choice(choices)
        offset = self.rng.randrange(limit)
        disk.corrupt(f"{WAL_DIR}/{name}", offset)
        self.damaged.add(nid)
        self.stats["corruptions"] += 1
        self.trace(f"{nid}: corrupt {name} at offset {offset}")

    def _partition(self) -> None:
        ids = list(self.nodes)
        self.rng.shuffle(ids)
        if self.rng.random() < 0.4:
            groups = [ids[:1], ids[1:]]
        else:
            cut = self.rng.randint(1, len(ids) - 1)
            groups = [ids[:cut], ids[cut:]]
        self.net.partition(groups)
        self.stats["partitions"] += 1
        self.trace("partition " + " | ".join(" ".join(sorted(g)) for g in groups))

    def _change_membership(self) -> None:
        lead = self.leader()
        if lead is None:
            return
        core = self.nodes[lead].core
        assert core is not None
        m = core.membership
        r = self.rng
        caught_up = [n for n in m.learners if core.learner_caught_up(n)]
        max_members = self.cfg.nodes + 2
        min_voters = 3  # with two voters one damaged replica could stop elections
        if caught_up:
            change = MembershipChange(ChangeKind.PROMOTE, r.choice(caught_up))
        elif len(m.voters) + len(m.learners) < max_members and r.random() < 0.6:
            change = MembershipChange(ChangeKind.ADD_LEARNER, f"n{self.next_id}")
        elif len(m.voters) > min_voters or m.learners:
            victims = list(m.learners) or list(m.voters)
            change = MembershipChange(ChangeKind.REMOVE, r.choice(victims))
        else:
            return
        try:
            index = core.change_membership(change)
        except (RaftError, ValueError) as exc:
            self.trace(f"{lead}: {change.kind.value} {change.node} refused: {exc}")
            return
        self.stats["changes"] += 1
        self.trace(f"{lead}: {change.kind.value} {change.node} at {index}")
        if change.kind is ChangeKind.ADD_LEARNER:
            self._add_node(())
        self._process(self.nodes[lead])


def _last_record_start(data: bytes) -> int:
    """Offset where the last valid record of a segment starts (0 if one or none)."""
    pos, last = 0, 0
    while pos < len(data):
        rec = decode_at(data, pos)
        if isinstance(rec, str):
            break
        last, pos = pos, rec.end
    return last


def _msg(m: Message) -> str:
    fields = ", ".join(
        f"{k}={getattr(m, k)!r}" for k in m.__dataclass_fields__ if k not in ("frm", "to")
    )
    return f"{m.frm}->{m.to} {type(m).__name__}({fields})"


def run_seed(
    seed: int, cfg: SimConfig | None = None, trace: Callable[[str], None] | None = None
) -> SeedResult:
    return World(seed, cfg or SimConfig(), trace).run()


def run_seed_nodes(args: tuple[int, int]) -> SeedResult:
    """run_seed for (seed, nodes), picklable for a process pool."""
    seed, nodes = args
    return run_seed(seed, SimConfig(nodes=nodes))
