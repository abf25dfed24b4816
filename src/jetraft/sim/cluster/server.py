"""One simulated server: one disk, the meta group's replica, stream and consumer replicas.

What the server does with its replicas mirrors server/js/clustered/jetstream.py, on
simulated time and without asyncio:

* the meta group's applied changes are queued and carried out after each pump (the
  server's change queue): a stream or consumer assigned here gets a replica (a server
  joining an existing group starts it without peers: the group's leader adds it);
  one taken out keeps serving (``leaving``) until its group let it go, or a timeout, and
  is then destroyed with its log; one deleted is destroyed at once;
* changes replayed from the meta log on restart (``replay``) start replicas as "known":
  an empty log then means the server lost it, and the replica rejoins as damaged;
* a new group's first-placed server campaigns at once;
* a consumer replica reads the stream replica of its server that existed when it was made.

A crash (power loss) or kill stops every replica of the server at once; a restart starts
a new "process": the meta replica replays its log and the replicas are made again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from jetraft.jetstream.consumer import ConsumerCore
from jetraft.jetstream.meta import (
    Change,
    ConsumerAssignment,
    ConsumerChanged,
    StreamAssignment,
    StreamChanged,
    carried_out,
    joins_group,
    superseded,
)
from jetraft.raft.disk import MemDisk
from jetraft.raft.driver import State
from jetraft.raft.ready import Role
from jetraft.raft.sim.node import SimNode
from jetraft.raft.wal import Recovered, Wal

from .leaders import ConsumerDuty, StreamDuty
from .machines import ConsumerMachine, MetaMachine, StreamMachine

if TYPE_CHECKING:
    from .world import ClusterWorld

META_GROUP = "_meta_"
RAFT_ROOT = "/jetstream/_raft_"
META_APPLIED = "/jetstream/meta_applied"  # the fix "meta_applied_recorded"
LEAVE_TIMEOUT_TICKS = 600  # the server's LEAVE_TIMEOUT_S (30 s) in 50 ms ticks


def raft_dir(group: str) -> str:
    return f"{RAFT_ROOT}/{group}"


class Replica:
    """This server's replica of one stream or consumer group (one process's life)."""

    def __init__(self, server: SimServer, kind: str, key: tuple[str, ...], group: str,
                 node: SimNode) -> None:
        self.server = server
        self.kind = kind
        self.key = key
        self.group = group
        self.node = node
        self.closed = False
        self.removed = False
        self.leaving_since: int | None = None
        self.stream_machine: StreamMachine | None = None
        self.consumer_machine: ConsumerMachine | None = None
        self.sa: StreamAssignment | None = None
        self.ca: ConsumerAssignment | None = None
        self.stream_ref: Replica | None = None  # a consumer's stream replica
        self.duty: StreamDuty | ConsumerDuty | None = None

    @property
    def running(self) -> bool:
        d = self.node.driver
        return not self.closed and self.node.up and d is not None and d.running

    @property
    def raft_leader(self) -> bool:
        d = self.node.driver
        return self.running and d is not None and d.core.role is Role.LEADER

    def members(self) -> tuple[str, ...]:
        """Voters and learners of the configuration in force here (RaftGroup.members)."""
        d = self.node.driver
        if d is None:
            return self.node.peers
        m = d.core.membership
        return (*m.voters, *m.learners) if m.voters else self.node.peers

    def stream(self) -> StreamMachine:
        assert self.stream_machine is not None
        return self.stream_machine

    def consumer(self) -> ConsumerMachine:
        assert self.consumer_machine is not None
        return self.consumer_machine


class SimServer:
    def __init__(self, world: ClusterWorld, name: str, servers: tuple[str, ...]) -> None:
        self.world = world
        self.name = name
        self.servers = servers
        self.disk = MemDisk()
        self.up = False
        self.incarnation = 0
        self.nodes: dict[str, SimNode] = {}  # group -> its replica's node, across lives
        self.meta: MetaMachine | None = None
        self.meta_recovered_last = 0
        self.streams: dict[tuple[str, ...], Replica] = {}
        self.consumers: dict[tuple[str, ...], Replica] = {}
        self.leaving: dict[tuple[str, ...], Replica] = {}
        self.changes: list[tuple[Change, bool]] = []
        self.tick_phase = 0
        self.tick_period = 4

    # ------------------------------------------------------------------ lives
    def running(self) -> bool:
        return self.up

    def replicas(self) -> list[Replica]:
        return [*self.streams.values(), *self.consumers.values(), *self.leaving.values()]

    def start(self) -> None:
        """A new process: the meta replica first (its replay makes the others)."""
        self.incarnation += 1
        self.up = True
        self.streams, self.consumers, self.leaving = {}, {}, {}
        self.changes = []
        node = self._node(META_GROUP, self.servers)
        node.sm_factory = lambda disk: self._new_meta()

        def note(wal: Wal, rec: Recovered) -> Recovered:
            last = rec.entries[-1].index if rec.entries else 0
            snap = rec.snapshot.meta.index if rec.snapshot is not None else 0
            self.meta_recovered_last = max(last, snap, rec.hard_state.commit)
            if self.world.fixed("meta_applied_recorded"):
                disk = self.disk
                done = disk.read(META_APPLIED) if disk.exists(META_APPLIED) else b"0"
                self.meta_recovered_last = int(done)
            return rec

        node.recover_hook = note
        self.world.start_node(self, META_GROUP, node)
        self.process_changes()
        self._adopt_leftovers()

    def _adopt_leftovers(self) -> None:
        """The fix restart_keeps_leaving: a group's log on disk whose assignment no longer
        names this server was a replica on its way out when the process stopped. The
        server starts only the replicas its assignments name, so one still counted as a
        voter by its group is gone from it for good (seed 361: a consumer group of two
        voters, one of them never started again, could elect no leader). The fix starts
        it again as leaving, to serve until the group lets it go."""
        meta = self.meta
        if not self.world.fixed("restart_keeps_leaving") or meta is None:
            return
        if not self.disk.exists(RAFT_ROOT):
            return
        state = meta.state
        streams = {sa.group: (key, sa) for key, sa in state.streams.items()}
        consumers = {ca.group: (key, ca) for key, ca in state.consumers.items()}
        for group in self.disk.list(RAFT_ROOT):
            node = self.nodes.get(group)
            if node is not None and node.up:
                continue
            if group in streams:
                key, sa = streams[group]
                if self.name in sa.peers or key in self.streams or key in self.leaving:
                    continue
                self._make_stream(key, sa, joining=True, known=True)
                self._start_leaving(key, self.streams.pop(key))
            elif group in consumers:
                ckey, ca = consumers[group]
                if self.name in ca.peers or ckey in self.consumers or ckey in self.leaving:
                    continue
                stream = self.streams.get(ckey[:2]) or self.leaving.get(ckey[:2])
                self._make_consumer(ckey, ca, stream, joining=True, known=True)
                self._start_leaving(ckey, self.consumers.pop(ckey))

    def _new_meta(self) -> MetaMachine:
        self.meta = MetaMachine(self._meta_changed)
        return self.meta

    def _meta_changed(self, changes: list[Change], index: int | None) -> None:
        done = self.meta_recovered_last
        if self.world.fixed("snapshot_placements_known"):
            self.changes.extend((c, carried_out(c, index, done, self.name)) for c in changes)
        else:
            replay = index is None or index <= done
            self.changes.extend((c, replay) for c in changes)
        if self.meta is not None:
            self.world.checks.placement(self.meta.state)

    def _joining(self, change: Change) -> bool:
        if self.world.fixed("snapshot_placements_known"):
            return joins_group(change, self.name)
        return change.old is not None and self.name not in change.old.peers

    def stop(self) -> None:
        """The process is gone (the caller crashes or keeps the disk)."""
        for node in self.nodes.values():
            node.halt()
        for replica in self.replicas():
            replica.closed = True
        self.up = False
        self.meta = None
        self.streams, self.consumers, self.leaving = {}, {}, {}
        self.changes = []

    def _node(self, group: str, peers: tuple[str, ...]) -> SimNode:
        node = self.nodes.get(group)
        if node is None:
            node = self.world.new_node(self, group)
            self.nodes[group] = node
        node.peers = peers
        node.recover_hook = lambda wal, rec: rec
        return node

    # ------------------------------------------------------------------ the meta group
    @property
    def meta_node(self) -> SimNode:
        return self.nodes[META_GROUP]

    def meta_leader(self) -> bool:
        d = self.meta_node.driver
        return self.up and d is not None and d.running and d.core.role is Role.LEADER

    def meta_leader_name(self) -> str:
        d = self.meta_node.driver
        return d.core.lead if self.up and d is not None else ""

    def process_changes(self) -> None:
        done = False
        while self.up and self.changes:
            change, replay = self.changes.pop(0)
            done = True
            if isinstance(change, StreamChanged):
                self._stream_changed(change, replay)
            else:
                self._consumer_changed(change, replay)
        if done and self.up:
            self._adopt_leftovers()  # the meta state moved: leftovers may show only now
        meta = self.meta
        if done and self.up and meta is not None and self.world.fixed("meta_applied_recorded"):
            # Every change up to the meta index applied is carried out: say so durably, so
            # that a restart tells the changes carried out before from new ones.
            self.disk.makedirs(RAFT_ROOT)
            self.disk.write_atomic(META_APPLIED, str(meta.index).encode())

    def _stream_changed(self, change: StreamChanged, replay: bool) -> None:
        me, key, new = self.name, change.key, change.new
        replica = self.streams.get(key)
        if new is not None and me not in new.peers and replica is not None:
            del self.streams[key]
            self._start_leaving(key, replica)
            replica.sa = new
            self._assignment_changed(replica)
            return
        if replica is None and new is not None and me in new.peers and key in self.leaving:
            replica = self._back(key)
            if replica is not None:
                self.streams[key] = replica
        if new is None or me not in new.peers:
            if replica is not None:
                del self.streams[key]
                self.destroy(replica)
            elif new is None and change.old is not None:
                self._deleted(key)
                self.remove_dir(change.old.group)
            elif new is not None:
                self._still_leaving(key, lambda r: setattr(r, "sa", new))
            return
        if replica is not None:
            replica.sa = new
            self._assignment_changed(replica)
            return
        if replay and self.meta is not None and superseded(self.meta.state.streams.get(key),
                                                           new):
            return  # as the server's keeper: deleted later in the log
        joining = self._joining(change)
        self._make_stream(key, new, joining=joining, known=replay)

    def _make_stream(self, key: tuple[str, ...], sa: StreamAssignment, *, joining: bool,
                     known: bool) -> None:
        node = self._node(sa.group, () if joining else sa.peers)
        replica = Replica(self, "stream", key, sa.group, node)
        replica.sa = sa

        def machine(disk: MemDisk) -> StreamMachine:
            sa = replica.sa
            assert sa is not None
            fixed = self.world.fixed("replica_starts_with_first_config")
            config = sa.first_config if fixed else sa.config
            replica.stream_machine = StreamMachine(config, sa.created_ns)
            return replica.stream_machine

        node.sm_factory = machine
        replica.duty = StreamDuty(replica)
        self.streams[key] = replica
        self._start_replica(replica, known=known)

    def _consumer_changed(self, change: ConsumerChanged, replay: bool) -> None:
        me, key, new = self.name, change.key, change.new
        replica = self.consumers.get(key)
        if new is not None and me not in new.peers and replica is not None:
            del self.consumers[key]
            self._start_leaving(key, replica)
            replica.ca = new
            self._assignment_changed(replica)
            return
        if replica is None and new is not None and me in new.peers and key in self.leaving:
            replica = self._back(key)
            if replica is not None:
                self.consumers[key] = replica
        if new is None or me not in new.peers:
            if replica is not None:
                del self.consumers[key]
                self.destroy(replica)
            elif change.old is not None and new is None:
                self._deleted(key)
                self.remove_dir(change.old.group)
            elif new is not None:
                self._still_leaving(key, lambda r: setattr(r, "ca", new))
            return
        if replica is not None:
            replica.ca = new
            self._assignment_changed(replica)
            return
        if replay and self.meta is not None and superseded(
                self.meta.state.consumers.get(key), new):
            return  # as the server's keeper: deleted later in the log
        # As the server's keeper: a stream replica on its way out still serves its
        # consumers (they follow the stream's replica here when it comes back).
        stream = self.streams.get(key[:2]) or self.leaving.get(key[:2])
        if stream is None:
            self.world.trace(f"{me}: consumer {key[2]}: its stream has no replica here")
            self.world.stats["orphan_consumers"] += 1
            return
        joining = self._joining(change)
        self._make_consumer(key, new, stream, joining=joining, known=replay)

    def _make_consumer(self, key: tuple[str, ...], ca: ConsumerAssignment,
                       stream: Replica | None, *, joining: bool, known: bool) -> None:
        node = self._node(ca.group, () if joining else ca.peers)
        replica = Replica(self, "consumer", key, ca.group, node)
        replica.ca = ca
        self.world.checks.consumer_of[ca.group] = key
        replica.stream_ref = stream

        def machine(disk: MemDisk) -> ConsumerMachine:
            ca = replica.ca
            assert ca is not None
            core = ConsumerCore(ca.stream, ca.name, ca.config, ca.created_ns)
            replica.consumer_machine = ConsumerMachine(core)
            return replica.consumer_machine

        node.sm_factory = machine
        replica.duty = ConsumerDuty(replica)
        self.consumers[key] = replica
        self._start_replica(replica, known=known)

    def check_removed(self) -> None:
        """A replica its group let go (stopped for good) while this server is assigned to
        it again (the assignment came back before the removal was applied): the server
        keeps the stopped replica, and the group's leader waits for it as a learner
        forever; the fix (rejoin_fresh) destroys it and joins with a fresh one."""
        if not self.world.fixed("rejoin_fresh"):
            return
        for key, replica in list(self.streams.items()):
            if replica.removed and replica.sa is not None:
                del self.streams[key]
                self.destroy(replica)
                self._make_stream(key, replica.sa, joining=True, known=False)
        for key, replica in list(self.consumers.items()):
            stream = self.streams.get(key[:2])
            if replica.removed and replica.ca is not None and stream is not None:
                del self.consumers[key]
                self.destroy(replica)
                self._make_consumer(key, replica.ca, stream, joining=True, known=False)

    def _assignment_changed(self, replica: Replica) -> None:
        if replica.duty is not None:
            replica.duty.assignment_changed()

    def _start_replica(self, replica: Replica, *, known: bool) -> None:
        """RaftGroup.start: a known group with an empty log lost it (damaged replica);
        a fresh group's first-placed server campaigns at once."""
        node = replica.node
        seen: list[bool] = []
        missing = not self.disk.exists(raft_dir(replica.group))

        def check(wal: Wal, rec: Recovered) -> Recovered:
            empty = not rec.entries and rec.snapshot is None and not rec.hard_state.term
            seen.append(empty)
            recorded = self.world.fixed("bootstrap_recorded")
            # The server: lost when neither a log nor the record of how the replica
            # started is there (its directory, or its files, are gone).
            unknown = missing or (recorded and rec.bootstrap is None)
            lost = empty and (unknown or not self.world.fixed("lost_log_means_missing_dir"))
            if recorded:
                if not known and empty:
                    wal.set_bootstrap(node.peers)  # before it takes part in anything
                elif rec.bootstrap is not None:
                    node.peers = rec.bootstrap  # as it started, whatever is replayed
                elif known and empty and unknown:
                    node.peers = ()  # lost: its configuration comes from the leader
                    wal.set_bootstrap(())
            if known and lost and rec.corrupt is None:
                self.world.trace(f"{self.name}: {replica.group}: no log although the group "
                                 "exists: rejoins as a damaged replica")
                if self.world.fixed("lost_log_marked"):
                    wal.mark_corrupt("log lost")
                return dataclasses.replace(rec, corrupt="log lost")
            return rec

        node.recover_hook = check
        self.world.start_node(self, replica.group, node, replica)
        fresh = bool(seen) and seen[0] and not known
        d = node.driver
        if fresh and node.peers and node.peers[0] == self.name and d is not None and node.up:
            d.core.campaign()
            self.world.pump(self, node)

    # ------------------------------------------------------------------ leaving
    def _back(self, key: tuple[str, ...]) -> Replica | None:
        """Assigned here again before the replica left. The server's code takes it back
        as it is; one its group already let go (stopped for good) then never runs again,
        and the group's leader waits for it forever. The fix destroys such a replica and
        makes a fresh one (None)."""
        replica = self.leaving.pop(key)
        gone = replica.removed or replica.node.driver is None
        if gone and self.world.fixed("rejoin_fresh"):
            self.destroy(replica)
            return None
        replica.leaving_since = None
        return replica

    def _still_leaving(self, key: tuple[str, ...], assign: Callable[[Replica], None]
                       ) -> None:
        """A newer assignment that still leaves this server out. The server's code keeps
        the leaving replica on the assignment it had when it started to leave (a leader
        of it then reconciles the group towards a stale one); the fix gives it the new."""
        replica = self.leaving.get(key)
        if replica is not None and self.world.fixed("leaving_follows_assignment"):
            assign(replica)
            self._assignment_changed(replica)

    def _deleted(self, key: tuple[str, ...]) -> None:
        """The asset is deleted: with leave_only_when_removed (no timeout), the server
        destroys a replica still leaving it at once (no group is left to protect)."""
        replica = self.leaving.get(key)
        if replica is not None and self.world.fixed("leave_only_when_removed"):
            del self.leaving[key]
            self.destroy(replica)

    def _start_leaving(self, key: tuple[str, ...], replica: Replica) -> None:
        self.leaving[key] = replica
        replica.leaving_since = self.world.tick_no
        self.world.trace(f"{self.name}: {replica.group}: no longer a replica here")

    def leave_step(self, replica: Replica) -> None:
        """One turn of the server's _leave loop for a replica taken out of its group."""
        if self.leaving.get(replica.key) is not replica or replica.closed:
            return
        since = replica.leaving_since or 0
        timed_out = self.world.tick_no - since >= LEAVE_TIMEOUT_TICKS
        if timed_out and self.world.fixed("leave_only_when_removed"):
            timed_out = False  # a voter destroyed can cost its group its quorum for good
        if not timed_out:
            d = replica.node.driver
            if replica.raft_leader and d is not None:
                self.world.transfer(self, replica.node, self._successor(replica))
                return
            if self.world.fixed("leave_when_removed"):
                # Let go by a committed removal, its leader says; or never given the
                # group's configuration (joined, not added yet): it never counted.
                if not replica.removed and not _never_joined(replica):
                    return
            elif not (replica.removed or self.name not in replica.members()):
                return  # the server's test: also a newest configuration not committed
        del self.leaving[replica.key]
        self.destroy(replica)

    def _successor(self, replica: Replica) -> str | None:
        """Whom a leaving leader hands over to: the server's code lets RAFT pick the most
        up-to-date voter (often another replica on its way out, which hands it back);
        the fix picks a voter of the assignment, or nobody yet (the reconcile task adds
        one, then hands over itself)."""
        if not self.world.fixed("leaving_follows_assignment"):
            return None
        d = replica.node.driver
        assert d is not None
        peers = replica.sa.peers if replica.sa is not None else (
            replica.ca.peers if replica.ca is not None else ())
        voters = d.core.membership.voters
        return next((p for p in sorted(peers) if p in voters), "")

    # ------------------------------------------------------------------ removal
    def destroy(self, replica: Replica) -> None:
        """Stop the replica and remove its log (RaftGroup.destroy: rmtree)."""
        replica.closed = True
        if replica.duty is not None:
            replica.duty.closed()
        node = replica.node
        node.halt()
        self.world.forget_node(self, replica.group)
        self.nodes.pop(replica.group, None)
        self.remove_dir(replica.group)
        self.world.trace(f"{self.name}: {replica.group}: replica destroyed")

    def remove_dir(self, group: str) -> None:
        """shutil.rmtree of the group's directory: files unlinked, the directory removed,
        nothing synced (a power loss may bring files back, as on a real file system;
        the fix syncs the unlinks first)."""
        d = raft_dir(group)
        disk = self.disk
        if not disk.exists(d):
            return
        for name in disk.list(d):
            path = f"{d}/{name}"
            if disk.exists(path):
                try:
                    disk.remove(path)
                except FileNotFoundError:
                    continue
        if self.world.fixed("durable_destroy"):
            disk.sync_dir(d)
        if not disk.list(d):
            disk.rmdir(d)

    # ------------------------------------------------------------------ queries
    def driver_state(self, group: str) -> State | None:
        node = self.nodes.get(group)
        return node.driver.state if node is not None and node.driver is not None else None


def _never_joined(replica: Replica) -> bool:
    """The server's test (replicas._never_joined): no configuration known, not damaged."""
    d = replica.node.driver
    if d is None or d.core.corrupt:
        return False
    m = d.core.membership
    return not m.voters and not m.learners and not d.core.in_bootstrap


Callback = Callable[[object], None]
