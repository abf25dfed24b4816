"""The seeded, single-threaded cluster simulation: a safety phase, then a liveness phase.

Safety phase: clients propose on whoever claims to lead (forwarding on NotLeader), while
the faults of faults.py strike at rates drawn per seed: power loss (sometimes in the
middle of an fsync), process kills, slow fsyncs, write and fsync errors, corrupted
records, partitions (also one-way), flaky links, long delays, clock drift, membership
changes and leadership transfers; the network delays, drops, duplicates and reorders.
Liveness phase: every replica is restarted, the network heals and stops losing
messages; a leader must be elected and commit a new proposal on every member within a
bound. Every step is checked by Checker; a violation raises Violation.

Each replica runs the production driver (driver.Driver, what RaftNode runs) over the
real WAL on a MemDisk, with a pluggable state machine (`SimConfig.sm`: the running-hash
machine by default; jetraft.sim plugs in the JetStream stream).

Everything is drawn from random.Random streams seeded by the seed, so a seed replays
exactly: `python -m jetraft.raft.sim --seed S --nodes N --trace`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ..driver import Applied, Outcome, State
from ..messages import Message
from ..ready import NotLeader, RaftConfig, RaftError, Ready, Role
from ..types import Entry, SnapshotMeta
from .checker import Checker, Violation
from .faults import FaultRates, Faults
from .network import NetConfig, Network
from .node import Payload, SimNode, SmFactory, durable_hash_sm, hash_sm, plain_payload


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 3
    safety_ticks: int = 300
    liveness_ticks: int = 200  # bound to elect a leader and commit on every member
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    tick_steps: int = 4  # steps per tick; messages take 1..max_delay_steps steps
    max_delay_steps: int = 8
    propose_per_tick: float = 0.7
    segment_bytes: int = 1024
    max_msg_bytes: int = 0  # entry bytes per AppendEntries; 0: drawn per seed (96..256)
    entry_scale: int = 1  # times max_msg_bytes, for state machines with larger entries
    max_inflight: int = 4
    max_snapshot_chunk_bytes: int = 6  # the running hash's snapshot is 16 bytes
    rates: FaultRates = field(default_factory=FaultRates)
    vary_rates: bool = True  # draw each fault rate per seed around `rates`
    storm_every: int = 4  # every n-th seed runs FaultRates.storm(), as drawn; 0: none
    snapshot_every: tuple[int, int] = (8, 40)  # entries between snapshots, drawn per life
    sm: SmFactory = hash_sm  # the replicated state machine, made on the replica's disk
    sm_name: str = "hash"
    payload: Payload = plain_payload  # what a client proposes


@dataclass
class SeedResult:
    seed: int
    nodes: int
    ok: bool
    error: str = ""
    ticks: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    sm: str = "hash"

    def replay_command(self) -> str:
        # Machines this package does not know (the JetStream stream) replay in jetraft.sim.
        module = "jetraft.raft.sim" if self.sm in STATE_MACHINES else "jetraft.sim"
        sm = "" if self.sm == "hash" else f" --sm {self.sm}"
        return f"python -m {module} --seed {self.seed} --nodes {self.nodes}{sm} --trace"


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
        self.storm = cfg.storm_every > 0 and seed % cfg.storm_every == cfg.storm_every - 1
        rates = FaultRates.storm() if self.storm else cfg.rates
        self.rates = rates.drawn(self.rng) if cfg.vary_rates and not self.storm else rates
        self.net: Network[Message] = Network(
            random.Random(f"net:{seed}"),
            NetConfig(self.rates.drop, self.rates.duplicate, cfg.max_delay_steps,
                      self.rates.long_delay, 3 * cfg.election_ticks * cfg.tick_steps),
        )
        self.raft_cfg = RaftConfig(
            election_ticks=cfg.election_ticks,
            heartbeat_ticks=cfg.heartbeat_ticks,
            max_msg_bytes=(cfg.max_msg_bytes or (
                96 if self.storm else self.rng.choice((96, 160, 256)))) * cfg.entry_scale,
            max_inflight=cfg.max_inflight,
            max_snapshot_chunk_bytes=cfg.max_snapshot_chunk_bytes,
        )
        self.checker = Checker()
        self.now = 0
        self.nodes: dict[str, SimNode] = {}
        self.phase: dict[str, int] = {}
        self.period: dict[str, int] = {}  # steps per tick of each node (clock drift)
        self.next_id = 1
        self.acked: dict[bytes, int] = {}
        self.proposed: dict[bytes, bytes] = {}  # proposal id -> entry data
        self.proposals = 0
        self.stats = {
            "crashes": 0, "kills": 0, "sync_crashes": 0, "io_errors": 0, "slow_io": 0,
            "corruptions": 0, "restarts": 0, "partitions": 0, "one_way": 0, "flaky": 0,
            "changes": 0, "transfers": 0, "transfers_expired": 0, "snapshots": 0,
            "removed": 0,
        }
        self.faults = Faults(self)
        self.in_safety = True
        peers = tuple(f"n{i}" for i in range(1, cfg.nodes + 1))
        for _ in peers:
            self.add_node(peers)

    # ------------------------------------------------------------------ plumbing
    def trace(self, text: str) -> None:
        if self._trace is not None:
            ts = self.cfg.tick_steps
            self._trace(f"t={self.now // ts}.{self.now % ts} {text}")

    def add_node(self, peers: tuple[str, ...]) -> SimNode:
        nid = f"n{self.next_id}"
        self.next_id += 1
        node = SimNode(nid, self.raft_cfg, str(self.seed), peers, self.cfg.segment_bytes,
                       self.cfg.sm)
        # Storms compact often too: followers then need snapshots while entries fly.
        node.snapshot_every = (2, 8) if self.storm else self.cfg.snapshot_every
        node.send = self._send
        node.ready_hook = self._on_ready
        node.commit_hook = lambda n, e: self.checker.on_commit(n.id, e)
        node.applied_hook = self._on_apply
        node.restored_hook = self._on_restore
        node.done_hook = self._on_done
        node.removed_hook = self._on_removed
        self.nodes[nid] = node
        ts = self.cfg.tick_steps
        self.phase[nid] = self.rng.randrange(ts)
        drift = self.rates.drift and self.rng.random() < 0.5
        self.period[nid] = ts + (self.rng.choice((-1, 1)) if drift else 0)
        self.start(node)
        return node

    def start(self, node: SimNode) -> None:
        self.checker.on_start(node.id)
        corrupt = node.start(self.disk_rng)
        self.stats["restarts"] += 1
        self.trace(f"{node.id}: start" + (f" (corrupt: {corrupt})" if corrupt else ""))
        self.pump(node)

    def _send(self, node: SimNode, m: Message) -> None:
        log = node.log
        assert log is not None and node.driver is not None
        hs = log.durable_hs
        self.checker.on_send(node.id, m, (hs.term, hs.vote, log.durable_last))
        if self._trace is not None:
            self.trace(f"  send {_msg(m)}")
        self.net.send(self.now, m)

    def _on_ready(self, node: SimNode, rd: Ready) -> None:
        assert node.driver is not None
        if rd.soft_state is not None and self._trace is not None:
            ss = rd.soft_state
            self.trace(f"{node.id}: {ss.role.value} term={ss.term} leader={ss.leader or '-'}")
        if rd.soft_state is not None and rd.soft_state.role is Role.LEADER and self.in_safety:
            self.faults.new_leader(node.id)
        if rd.snapshot is not None:
            node.snapshot_meta = rd.snapshot.meta
        self.checker.on_ready(node.id, node.driver.core, rd)

    def _on_apply(self, node: SimNode, e: Entry) -> None:
        self.checker.on_apply(node.id, e, node.sm.digest())

    def _on_restore(self, node: SimNode, meta: SnapshotMeta) -> None:
        self.checker.on_restore(node.id, meta, node.sm.digest())

    def _on_done(self, node: SimNode, token: object, outcome: Outcome) -> None:
        if isinstance(token, bytes) and isinstance(outcome, Applied):
            self.acked[token] = outcome.index
            if self._trace is not None:
                self.trace(f"{node.id}: ack {token.decode()} at {outcome.index}")

    def _on_removed(self, node: SimNode) -> None:
        self.stats["removed"] += 1
        self.trace(f"{node.id}: removed from the group, stops")

    def pump(self, node: SimNode) -> None:
        driver = node.driver
        before = driver.core.log.snapshot if driver is not None else None
        outcome = node.pump(self.now, self.disk_rng)
        if outcome == "crash":
            self.stats["sync_crashes"] += 1
            self.trace(f"{node.id}: power lost inside an fsync")
            self.faults.after_crash(node)
        elif outcome == "failed":
            assert driver is not None
            self.stats["io_errors"] += 1
            self.trace(f"{node.id}: stopped on a storage error: {driver.error}")
            # The kernel may have dropped the pages it could not write: on restart the
            # disk holds what was durable, and maybe some of the rest.
            node.crash(self.disk_rng)
            self.faults.after_crash(node)
        elif driver is not None and driver.core.log.snapshot is not before:
            self.stats["snapshots"] += 1

    # ------------------------------------------------------------------ the clock
    def step(self) -> None:
        now = self.now
        for m in self.net.due(now):
            node = self.nodes.get(m.to)
            if node is None or not node.up or node.driver is None:
                continue
            if self._trace is not None:
                self.trace(f"  recv {_msg(m)}")
            node.driver.receive(m)
            self.pump(node)
        for nid, node in self.nodes.items():
            if not node.up or node.driver is None:
                continue
            if (now + self.phase[nid]) % self.period[nid] == 0:
                self._tick(node)
            elif node.busy() and now >= node.job_at:  # a slow disk job completes
                self.pump(node)
        self.checker.check_electable(self)
        self.now += 1

    def _tick(self, node: SimNode) -> None:
        assert node.driver is not None
        core = node.driver.core
        transferring = core.role is Role.LEADER and core.transferee != ""
        node.driver.tick()
        if transferring and core.role is not Role.LEADER:
            # The transfer did not finish within an election period: the leader gave
            # up leadership anyway (what a step-down asks), to whoever can win next.
            self.stats["transfers_expired"] += 1
            self.trace(f"{node.id}: transfer not done in an election period: stepped down")
        self.pump(node)

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
        ticks = self.now // self.cfg.tick_steps
        return SeedResult(self.seed, self.cfg.nodes, ok, error, ticks, stats, self.cfg.sm_name)

    # ------------------------------------------------------------------ phases
    def safety_phase(self) -> None:
        ts = self.cfg.tick_steps
        for _ in range(self.cfg.safety_ticks):
            self.faults.strike()
            self.clients()
            for _ in range(ts):
                self.step()

    def liveness_phase(self) -> None:
        self.trace("--- liveness phase: heal everything, restart everyone ---")
        self.in_safety = False
        self.net.heal()
        self.net.cfg.drop = 0.0
        self.net.cfg.duplicate = 0.0
        self.net.cfg.long_delay = 0.0
        for node in self.nodes.values():
            node.crash_in_io = False
            node.fail_in_io = None
            if not node.up and not self.retired(node):
                self.start(node)
        ts = self.cfg.tick_steps
        start = self.now
        live: bytes | None = None
        for tick in range(self.cfg.liveness_ticks):
            if tick % 5 == 0 and (live is None or live not in self.acked):
                live = self.propose_on_leader(b"live")
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

    def retired(self, node: SimNode) -> bool:
        """Removed from the group (it knows, and stopped for good)."""
        return node.driver is not None and node.driver.state is State.REMOVED

    def leader(self) -> str | None:
        best: tuple[int, str] | None = None
        for nid, node in self.nodes.items():
            d = node.driver
            leads = node.up and d is not None and d.core.role is Role.LEADER
            if leads and d is not None and (best is None or d.core.term > best[0]):
                best = (d.core.term, nid)
        return best[1] if best else None

    def members(self) -> tuple[str, ...]:
        lead = self.leader()
        assert lead is not None
        d = self.nodes[lead].driver
        assert d is not None
        m = d.core.membership
        return (*m.voters, *m.learners)

    def _all_applied(self, index: int) -> bool:
        if self.leader() is None:
            return False
        for nid in self.members():
            d = self.nodes[nid].driver
            if not self.nodes[nid].up or d is None or d.core.applied < index:
                return False
        return True

    def _check_acked(self) -> None:
        members = self.members()
        for pid, index in self.acked.items():
            c = self.checker.committed.get(index)
            if c is None or c[1] != self.proposed[pid]:
                raise Violation(f"acknowledged {pid.decode()} at {index} is not committed")
            for nid in members:
                d = self.nodes[nid].driver
                if d is None or d.core.applied < index:
                    raise Violation(f"{nid} has not applied acknowledged {pid.decode()}")

    # ------------------------------------------------------------------ clients
    def clients(self) -> None:
        r = self.client_rng
        if r.random() < self.cfg.propose_per_tick:
            for _ in range(r.randint(1, 3)):
                self.propose_on_leader(b"p")

    def propose_on_leader(self, prefix: bytes) -> bytes | None:
        """Propose on a random live node, forwarding once to the leader it names."""
        ups = [n for n in self.nodes.values() if n.up and n.driver is not None]
        if not ups:
            return None
        node = self.client_rng.choice(ups)
        self.proposals += 1
        pid = prefix + b"%d" % self.proposals
        data = self.proposed[pid] = self.cfg.payload(self.client_rng, pid)
        for _ in range(2):
            driver = node.driver
            assert driver is not None
            try:
                driver.propose(data, pid)
            except NotLeader as exc:
                nxt = self.nodes.get(exc.leader)
                if nxt is None or not nxt.up or nxt.driver is None:
                    return None
                node = nxt
                continue
            except RaftError:
                return None
            self.trace(f"{node.id}: propose {pid.decode()}")
            self.pump(node)
            return pid
        return None


def _msg(m: Message) -> str:
    fields = ", ".join(
        f"{k}={getattr(m, k)!r}" for k in m.__struct_fields__ if k not in ("frm", "to")
    )
    return f"{m.frm}->{m.to} {type(m).__name__}({fields})"


def run_seed(
    seed: int, cfg: SimConfig | None = None, trace: Callable[[str], None] | None = None
) -> SeedResult:
    return World(seed, cfg or SimConfig(), trace).run()


STATE_MACHINES: dict[str, tuple[SmFactory, Payload]] = {
    "hash": (hash_sm, plain_payload),
    "durable": (durable_hash_sm, plain_payload),
}


def config_for(nodes: int, sm: str) -> SimConfig:
    factory, payload = STATE_MACHINES[sm]
    return SimConfig(nodes=nodes, sm=factory, sm_name=sm, payload=payload)


def run_seed_nodes(args: tuple[int, int, str]) -> SeedResult:
    """run_seed for (seed, nodes, state machine), picklable for a process pool."""
    seed, nodes, sm = args
    return run_seed(seed, config_for(nodes, sm))
