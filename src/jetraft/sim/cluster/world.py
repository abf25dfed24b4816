"""The seeded simulation of a JetStream cluster: N servers, a safety phase, a liveness phase.

Each server (server.py) hosts a replica of the meta group and of the stream and consumer
groups placed on it, every one the production RAFT driver over the real WAL on the
server's one crashable disk; RAFT messages travel between servers over the simulator's
faulty network (jetraft.raft.sim.network), in envelopes naming their group.

Safety phase: clients publish, consume, ack and administer (clients.py, admin.py) while
faults strike at rates drawn per seed (faults.py): power loss (also inside an fsync),
process kills, restarts, slow disks, write and fsync errors, corrupted log records,
partitions (also one-way and of a new leader), flaky links, drops, duplicates, delays.
Liveness phase: every server is restarted, the network heals; within a bound every group
must have a leader, match its assignment, hold every acknowledged message on every
replica, and every consumer must have delivered everything (checks.py).

Every step runs the RAFT checker of each group (one leader per term, log matching, leader
completeness, commitment is final, replicas' state digests agree at every index), and the
cluster checks (acknowledged messages, confirmed acks, placement). A seed replays exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from jetraft.raft.core import RaftCore
from jetraft.raft.driver import Item
from jetraft.raft.messages import Message
from jetraft.raft.ready import RaftConfig, RaftError, Ready, SoftState
from jetraft.raft.sim.checker import Checker, Electorate, Violation
from jetraft.raft.sim.faults import FaultRates
from jetraft.raft.sim.network import NetConfig, Network
from jetraft.raft.sim.node import SimNode, hash_sm
from jetraft.raft.sim.world import SeedResult
from jetraft.raft.types import Entry, SnapshotMeta

from .checks import Checks
from .clients import Clients
from .faults import ClusterFaults
from .fixes import ALL_FIXES, FIXES
from .leaders import ConsumerDuty, StreamDuty
from .server import META_GROUP, Replica, SimServer, raft_dir
from .workload import Workload

TICK_NS = 50_000_000  # the server's 50 ms tick
T0 = 1_700_000_000 * 1_000_000_000




@dataclass(frozen=True)
class ClusterConfig:
    servers: int = 3
    safety_ticks: int = 400
    liveness_ticks: int = 1000  # bound for everything to converge after healing
    tick_steps: int = 4
    max_delay_steps: int = 6
    segment_bytes: int = 4096
    max_msg_bytes: int = 4096
    max_snapshot_chunk_bytes: int = 1024
    rates: FaultRates = field(default_factory=lambda: FaultRates(
        crash_per_tick=0.006, kill_per_tick=0.003, restart_per_tick=0.05,
        partition_per_tick=0.008, isolate_new_leader=0.05, change_per_tick=0.0,
        transfer_per_tick=0.0, corrupt_running_per_tick=0.001, corrupt_on_crash=0.15))
    snapshot_every: tuple[int, int] = (10, 60)
    # Fixes of bugs the simulator found in the server's logic it mirrors (see FIXES).
    fixes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Envelope:
    frm: str
    to: str
    group: str
    msg: Message


class GroupChecker(Checker):
    """The RAFT checker of one group; its violations name the group."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group = group

    def _named(self, exc: Violation) -> Violation:
        return Violation(f"group {self.group}: {exc}")

    def on_ready(self, node_id: str, core: RaftCore, rd: Ready) -> None:
        try:
            super().on_ready(node_id, core, rd)
        except Violation as exc:
            raise self._named(exc) from None

    def on_commit(self, node_id: str, e: Entry) -> None:
        try:
            super().on_commit(node_id, e)
        except Violation as exc:
            raise self._named(exc) from None

    def on_apply(self, node_id: str, e: Entry, digest: bytes) -> None:
        try:
            super().on_apply(node_id, e, digest)
        except Violation as exc:
            raise self._named(exc) from None

    def on_restore(self, node_id: str, meta: SnapshotMeta, digest: bytes) -> None:
        try:
            super().on_restore(node_id, meta, digest)
        except Violation as exc:
            raise self._named(exc) from None

    def on_send(self, node_id: str, m: Message, durable: tuple[int, str, int]) -> None:
        try:
            super().on_send(node_id, m, durable)
        except Violation as exc:
            raise self._named(exc) from None

    def check_electable(self, world: Electorate) -> None:
        try:
            super().check_electable(world)
        except Violation as exc:
            raise self._named(exc) from None


class GroupTrack:
    """One RAFT group across the cluster, as the checker sees it (checker.Electorate)."""

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind
        self.checker = GroupChecker(name)
        self.nodes: dict[str, SimNode] = {}
        self.damaged: dict[str, int] = {}

    @property
    def faults(self) -> GroupTrack:
        return self

    def retired(self, node: SimNode) -> bool:
        from jetraft.raft.driver import State

        return node.driver is not None and node.driver.state is State.REMOVED


class ClusterWorld:
    def __init__(self, seed: int, cfg: ClusterConfig,
                 trace: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.cfg = cfg
        self._trace = trace
        self.rng = random.Random(f"faults:{seed}")
        self.disk_rng = random.Random(f"disk:{seed}")
        self.meta_rng = random.Random(f"meta:{seed}")
        self.rates = cfg.rates.drawn(self.rng)
        self.net: Network[Envelope] = Network(
            random.Random(f"net:{seed}"),
            NetConfig(self.rates.drop, self.rates.duplicate, cfg.max_delay_steps,
                      self.rates.long_delay, 3 * 10 * cfg.tick_steps),
        )
        self.raft_cfg = RaftConfig(election_ticks=10, heartbeat_ticks=2,
                                   max_msg_bytes=cfg.max_msg_bytes,
                                   max_snapshot_chunk_bytes=cfg.max_snapshot_chunk_bytes)
        self.now = 0
        self.tick_no = 0
        self.in_safety = True
        self.stats: Counter[str] = Counter()
        self.groups: dict[str, GroupTrack] = {}
        names = tuple(f"s{i}" for i in range(1, cfg.servers + 1))
        self.servers: dict[str, SimServer] = {}
        for name in names:
            server = SimServer(self, name, names)
            server.tick_phase = self.rng.randrange(cfg.tick_steps)
            drift = self.rates.drift and self.rng.random() < 0.5
            server.tick_period = cfg.tick_steps + (self.rng.choice((-1, 1)) if drift else 0)
            self.servers[name] = server
        self.checks = Checks(self)
        self.clients = Clients(self)
        self.workload = Workload(self)
        self.faults = ClusterFaults(self)
        self._processing = False
        self._pumping: set[int] = set()
        for server in self.servers.values():
            self.start_server(server)

    # ------------------------------------------------------------------ plumbing
    def trace(self, text: str) -> None:
        if self._trace is not None:
            ts = self.cfg.tick_steps
            self._trace(f"t={self.now // ts}.{self.now % ts} {text}")

    def fixed(self, name: str) -> bool:
        assert name in FIXES, name
        return name in self.cfg.fixes

    def violation(self, text: str) -> None:
        raise Violation(text)

    def now_ns(self, server: SimServer) -> int:
        return T0 + self.now * TICK_NS // self.cfg.tick_steps

    def track(self, group: str) -> GroupTrack:
        g = self.groups.get(group)
        if g is None:
            kind = "meta" if group == META_GROUP else group[0].lower()
            g = self.groups[group] = GroupTrack(group, kind)
        return g

    def new_node(self, server: SimServer, group: str) -> SimNode:
        node = SimNode(server.name, self.raft_cfg, f"{self.seed}:{group}", (),
                       self.cfg.segment_bytes, hash_sm, disk=server.disk,
                       wal_dir=raft_dir(group))
        node.snapshot_every = self.cfg.snapshot_every
        track = self.track(group)
        node.send = lambda n, m: self._send(server, group, n, m)
        node.ready_hook = lambda n, rd: self._on_ready(track, n, rd)
        node.commit_hook = lambda n, e: track.checker.on_commit(n.id, e)
        node.applied_hook = lambda n, e: self._on_apply(server, track, n, e)
        node.restored_hook = lambda n, meta: self._on_restore(track, n, meta)
        node.done_hook = _done
        node.removed_hook = lambda n: self._on_removed(server, group)
        track.nodes[server.name] = node
        return node

    def forget_node(self, server: SimServer, group: str) -> None:
        track = self.groups.get(group)
        if track is not None:
            track.nodes.pop(server.name, None)
            track.damaged.pop(server.name, None)

    def start_node(self, server: SimServer, group: str, node: SimNode,
                   replica: Replica | None = None) -> None:
        track = self.track(group)
        track.nodes[server.name] = node
        track.checker.on_start(server.name)
        corrupt = node.start(self.disk_rng)
        self.trace(f"{server.name}: start {group}" + (f" (corrupt: {corrupt})" if corrupt
                                                      else ""))
        if node.driver is not None and replica is not None and replica.duty is not None:
            duty = replica.duty
            node.driver.on_soft_state.append(lambda ss: self._soft(duty, ss))
        self.pump(server, node)

    def _soft(self, duty: StreamDuty | ConsumerDuty, ss: SoftState) -> None:
        duty.on_role(ss)

    def _send(self, server: SimServer, group: str, node: SimNode, m: Message) -> None:
        log = node.log
        assert log is not None
        hs = log.durable_hs
        self.groups[group].checker.on_send(node.id, m, (hs.term, hs.vote, log.durable_last))
        self.net.send(self.now, Envelope(server.name, m.to, group, m))

    def _on_ready(self, track: GroupTrack, node: SimNode, rd: Ready) -> None:
        assert node.driver is not None
        ss = rd.soft_state
        if ss is not None and self._trace is not None:
            self.trace(f"{node.id}: {track.name}: {ss.role.value} term={ss.term} "
                       f"leader={ss.leader or '-'}")
        if ss is not None and ss.role.value == "leader" and self.in_safety:
            self.faults.new_leader(node.id, track)
        if rd.snapshot is not None:
            node.snapshot_meta = rd.snapshot.meta
        track.checker.on_ready(node.id, node.driver.core, rd)

    def _on_apply(self, server: SimServer, track: GroupTrack, node: SimNode, e: Entry) -> None:
        track.checker.on_apply(node.id, e, node.sm.digest())
        if track.kind == "c":
            self.checks.consumer_applied(server, track.name, node)

    def _on_restore(self, track: GroupTrack, node: SimNode, meta: SnapshotMeta) -> None:
        track.checker.on_restore(node.id, meta, node.sm.digest())

    def _on_removed(self, server: SimServer, group: str) -> None:
        self.stats["removed"] += 1
        self.trace(f"{server.name}: {group}: removed from the group")
        for replica in server.replicas():
            if replica.group == group:
                replica.removed = True

    def propose(self, server: SimServer, node: SimNode, item: Item,
                token: Callable[[object], None]) -> BaseException | None:
        d = node.driver
        if d is None or not node.up:
            return RaftError("stopped")
        try:
            d.propose(item, token)
        except RaftError as exc:
            return exc
        self.pump(server, node)
        return None

    def transfer(self, server: SimServer, node: SimNode, to: str | None = None) -> None:
        """Leadership transfer (to: None lets RAFT pick; "" is nobody: nothing done)."""
        d = node.driver
        if d is None or not node.up or to == "":
            return
        try:
            target = d.core.transfer_leadership(to)
        except (RaftError, ValueError):
            return
        self.stats["transfers"] += 1
        self.trace(f"{server.name}: transfer leadership of {node.wal_dir} to {target}")
        self.pump(server, node)

    def pump(self, server: SimServer, node: SimNode) -> None:
        """Let the node's driver run. From inside its own processing (a leadership
        callback proposing) nothing more is needed: the driver feeds what was queued
        into its next Ready before it returns."""
        if not server.up or id(node) in self._pumping:
            return
        self._pumping.add(id(node))
        try:
            outcome = node.pump(self.now, self.disk_rng)
        finally:
            self._pumping.discard(id(node))
        if outcome == "crash":
            self.stats["sync_crashes"] += 1
            self.trace(f"{server.name}: power lost inside an fsync")
            self.server_down(server, power=True, disk_done=True)
            self.faults.after_crash(server)
        elif outcome == "failed":
            d = node.driver
            self.stats["io_errors"] += 1
            self.trace(f"{server.name}: a group stopped on a storage error: "
                       f"{d.error if d is not None else ''}; the server goes down")
            self.server_down(server, power=True)
            self.faults.after_crash(server)
        elif node is server.nodes.get(META_GROUP) and not self._processing:
            self._processing = True
            try:
                server.process_changes()
            finally:
                self._processing = False

    # ------------------------------------------------------------------ servers
    def start_server(self, server: SimServer) -> None:
        self.stats["restarts"] += 1
        self.trace(f"{server.name}: server starts")
        server.start()

    def server_down(self, server: SimServer, *, power: bool, disk_done: bool = False) -> None:
        """The server's process stops; with `power`, unsynced writes may be lost.
        `disk_done`: the disk crashed already (power lost inside an fsync)."""
        server.stop()
        if disk_done:
            return
        if power:
            server.disk.crash(self.disk_rng)
        else:
            server.disk.kill_process()

    def connected(self, a: str, b: str) -> bool:
        return (self.servers[b].up and (a, b) not in self.net.cut
                and (b, a) not in self.net.cut)

    def meta_leader(self) -> SimServer | None:
        best: SimServer | None = None
        best_term = -1
        for s in self.servers.values():
            d = s.meta_node.driver if META_GROUP in s.nodes else None
            if s.meta_leader() and d is not None and d.core.term > best_term:
                best, best_term = s, d.core.term
        return best

    def stream_duties(self, name: str) -> list[StreamDuty]:
        out = []
        for s in self.servers.values():
            replica = s.streams.get(("$G", name)) if s.up else None
            if replica is not None and isinstance(replica.duty, StreamDuty) and \
                    replica.duty.leading:
                out.append(replica.duty)
        return out

    def consumer_runtimes(self, key: tuple[str, str, str]) -> list[ConsumerDuty]:
        out = []
        for s in self.servers.values():
            replica = s.consumers.get(key) if s.up else None
            if replica is not None and isinstance(replica.duty, ConsumerDuty) and \
                    replica.duty.runtime:
                out.append(replica.duty)
        return out

    def consumer_duties(self, key: tuple[str, str, str]) -> list[ConsumerDuty]:
        return self.consumer_runtimes(key)

    # ------------------------------------------------------------------ the clock
    def step(self) -> None:
        now = self.now
        for env in self.net.due(now):
            server = self.servers.get(env.to)
            if server is None or not server.up:
                continue
            node = server.nodes.get(env.group)
            if node is None or not node.up or node.driver is None:
                continue
            node.driver.receive(env.msg)
            self.pump(server, node)
        for server in self.servers.values():
            if not server.up:
                continue
            tick = (now + server.tick_phase) % server.tick_period == 0
            for node in list(server.nodes.values()):
                if not server.running():
                    break  # a pump of another group took the server down
                if not node.up or node.driver is None:
                    continue
                if tick:
                    node.driver.tick()
                    self.pump(server, node)
                elif node.busy() and now >= node.job_at:
                    self.pump(server, node)
        self.now += 1

    def tick(self) -> None:
        """One tick of the world: faults, clients, leaders' duties, then its steps."""
        if self.in_safety:
            self.faults.strike()
        self.workload.tick()
        for server in list(self.servers.values()):
            for replica in server.replicas():
                if server.up and replica.duty is not None and not replica.closed:
                    replica.duty.tick()
            for replica in list(server.leaving.values()):
                if server.up:
                    server.leave_step(replica)
            if server.up:
                server.check_removed()
        for _ in range(self.cfg.tick_steps):
            self.step()
        for track in self.groups.values():
            track.checker.check_electable(track)
        self.tick_no += 1

    def run(self) -> SeedResult:
        try:
            for _ in range(self.cfg.safety_ticks):
                self.tick()
            self.liveness_phase()
        except Violation as exc:
            return self._result(False, str(exc))
        return self._result(True)

    def liveness_phase(self) -> None:
        self.trace("--- liveness phase: heal everything, restart everyone ---")
        self.in_safety = False
        self.net.heal()
        self.net.cfg.drop = self.net.cfg.duplicate = self.net.cfg.long_delay = 0.0
        for server in self.servers.values():
            for node in server.nodes.values():
                node.crash_in_io = False
                node.fail_in_io = None
            if not server.up:
                self.start_server(server)
        start = self.tick_no
        for _ in range(self.cfg.liveness_ticks):
            self.tick()
            if self.tick_no % 5 == 0:
                why = self.checks.converged()
                if why is None:
                    self.checks.final()
                    self.trace(f"--- converged after {self.tick_no - start} ticks ---")
                    self.stats["converge_ticks"] = self.tick_no - start
                    return
        why = self.checks.converged()
        raise Violation(f"liveness: not converged {self.cfg.liveness_ticks} ticks after "
                        f"healing: {why}")

    def _result(self, ok: bool, error: str = "") -> SeedResult:
        stats = dict(self.stats, messages=self.net.sent, groups=len(self.groups))
        return SeedResult(self.seed, self.cfg.servers, ok, error, self.tick_no, stats,
                          "cluster")


def _done(node: SimNode, token: object, outcome: object) -> None:
    if callable(token):
        token(outcome)


class ClusterResult(SeedResult):
    def replay_command(self) -> str:
        off = self.sm.removeprefix("cluster").removeprefix("-without:")
        without = f" --without {off}" if off else ""
        return (f"python -m jetraft.sim --cluster --seed {self.seed} --nodes {self.nodes}"
                f"{without} --trace")


def cluster_config(servers: int, without: frozenset[str] = frozenset()) -> ClusterConfig:
    unknown = without - ALL_FIXES
    if unknown:
        raise ValueError(f"unknown fixes: {', '.join(sorted(unknown))}")
    return ClusterConfig(servers=servers, fixes=ALL_FIXES - without)


def run_cluster_seed(seed: int, cfg: ClusterConfig | None = None,
                     trace: Callable[[str], None] | None = None) -> SeedResult:
    cfg = cfg or ClusterConfig(fixes=ALL_FIXES)
    res = ClusterWorld(seed, cfg, trace).run()
    off = ",".join(sorted(ALL_FIXES - cfg.fixes))
    name = "cluster" + (f"-without:{off}" if off else "")
    return ClusterResult(res.seed, res.nodes, res.ok, res.error, res.ticks, res.stats, name)


def run_cluster_any(args: tuple[int, int, str]) -> SeedResult:
    """run_cluster_seed for (seed, servers, "cluster[-without:fix,...]"), for a pool."""
    seed, servers, name = args
    off = name.removeprefix("cluster").removeprefix("-without:")
    without = frozenset(off.split(",")) if off else frozenset()
    return run_cluster_seed(seed, cluster_config(servers, without))
