"""The cluster's invariants, beyond each RAFT group's checker (raft.sim.checker).

Continuously:
- a confirmed ack holds: once a consumer replica has applied the index from which an ack
  sent as a request was answered, the message is not pending there (explicit acks) or
  lies under the ack floor (AckAll), whatever failovers happened;
- a message id is never acknowledged at two sequences (clients.py);
- placement: every assignment names distinct servers of the cluster, at most the
  configured number, and a consumer's servers hold its stream.

After healing (``converged``, then ``final``):
- a meta leader, and every replica of the meta group at its commit index;
- every stream and consumer group led, its RAFT voters exactly its assignment's servers,
  every replica running and at the leader's commit index (so the digests compared by the
  group's checker at every index cover the final state too);
- every acknowledged message is in the stream on every replica, at the acknowledged
  sequence, and no message id is stored twice;
- every consumer has handed out every message of its stream and holds nothing pending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetraft.jetstream.meta import MetaState
from jetraft.raft.sim.checker import Violation
from jetraft.raft.sim.node import SimNode

from .machines import ConsumerMachine, StreamMachine
from .server import META_GROUP, Replica, SimServer

if TYPE_CHECKING:
    from .clients import Puller
    from .world import ClusterWorld


class Checks:
    def __init__(self, world: ClusterWorld) -> None:
        self.w = world
        self.consumer_of: dict[str, tuple[str, ...]] = {}  # group -> consumer key

    # ------------------------------------------------------------------ continuously
    def consumer_applied(self, server: SimServer, group: str, node: SimNode) -> None:
        key = self.consumer_of.get(group)
        if key is None or len(key) != 3:
            return
        p = self.w.clients.pullers.get((key[0], key[1], key[2]))
        if p is None or not p.confirmed:
            return
        m = node.sm
        if isinstance(m, ConsumerMachine):
            self._held(p, m, server.name)

    def ack_confirmed(self, p: Puller, sseq: int, index: int) -> None:
        for server in self.w.servers.values():
            replica = server.consumers.get(p.key) if server.up else None
            if replica is not None and replica.consumer_machine is not None:
                self._held(p, replica.consumer_machine, server.name)

    def _held(self, p: Puller, m: ConsumerMachine, where: str) -> None:
        st = m.core.state
        if p.ack_all:
            # AckAll of (sseq, dseq): applied, the floor is past that delivery or past
            # that message (an ack at or below the floor changes nothing).
            for c in p.confirmed.values():
                if c.index > m.index:
                    continue
                floor = st.ack_floor
                if floor.consumer_seq < c.dseq and floor.stream_seq < c.sseq:
                    raise Violation(
                        f"confirmed ack lost: {where}: consumer {p.key[2]} at index "
                        f"{m.index} has ack floor {floor} below the confirmed ack of "
                        f"{c.sseq}/{c.dseq} (from index {c.index}, tick {c.at_tick})")
            return
        for sseq in st.pending:
            held = p.confirmed.get(sseq)
            if held is not None and held.index <= m.index:
                raise Violation(
                    f"confirmed ack lost: {where}: consumer {p.key[2]} at index {m.index} "
                    f"holds seq {sseq} pending, though its ack was confirmed (from index "
                    f"{held.index}, tick {held.at_tick})")

    def placement(self, state: MetaState, final: bool = False) -> None:
        """Streams at every step; consumers at the end (a peer removal moves a stream,
        then its consumers, by separate meta entries)."""
        names = set(self.w.servers)
        for sa in state.streams.values():
            peers = sa.peers
            if len(set(peers)) != len(peers) or not set(peers) <= names:
                raise Violation(f"stream {sa.name} placed on {peers}")
            if not 1 <= len(peers) <= sa.config.num_replicas:
                raise Violation(f"stream {sa.name} R{sa.config.num_replicas} on {peers}")
        for ca in state.consumers.values() if final else ():
            sa = state.streams[(ca.account, ca.stream)]
            if len(set(ca.peers)) != len(ca.peers) or not set(ca.peers) <= set(sa.peers):
                raise Violation(f"consumer {ca.name} on {ca.peers}, its stream {sa.name} "
                                f"on {sa.peers}")

    # ------------------------------------------------------------------ after healing
    def converged(self) -> str | None:
        """None once everything converged, else what has not."""
        w = self.w
        leader = w.meta_leader()
        if leader is None or leader.meta is None:
            return "no meta leader"
        why = self._group_settled(META_GROUP, tuple(w.servers))
        if why:
            return why
        state = leader.meta.state
        for sa in state.streams.values():
            why = self._group_settled(sa.group, sa.peers)
            if why:
                return f"stream {sa.name}: {why}"
        for pub in w.clients.publishers.values():
            alive = w.workload.incarnation.get(pub.stream) == pub.incarnation
            if alive and pub.outstanding and ("$G", pub.stream) in state.streams:
                return f"stream {pub.stream}: {len(pub.outstanding)} messages unacknowledged"
        for ca in state.consumers.values():
            why = self._group_settled(ca.group, ca.peers)
            if why:
                return f"consumer {ca.name}: {why}"
            why = self._drained(state, (ca.account, ca.stream, ca.name))
            if why:
                return f"consumer {ca.name}: {why}"
        return None

    def _replicas(self, group: str) -> dict[str, SimNode]:
        return {name: s.nodes[group] for name, s in self.w.servers.items()
                if s.up and group in s.nodes}

    def _group_settled(self, group: str, peers: tuple[str, ...]) -> str | None:
        nodes = self._replicas(group)
        leaders = [n for n in nodes.values() if n.core_role_leader]
        if not leaders:
            return "no leader"
        lead = max(leaders, key=lambda n: n.driver.core.term if n.driver else 0)
        d = lead.driver
        assert d is not None
        m = d.core.membership
        if set(m.voters) != set(peers) or m.learners:
            return f"voters {sorted(m.voters)} learners {sorted(m.learners)}, " \
                   f"assigned {sorted(peers)}"
        commit = d.core.log.committed
        if d.core.log.last_index != commit:
            return "leader has uncommitted entries"
        for name in peers:
            n = nodes.get(name)
            nd = n.driver if n is not None else None
            if n is None or nd is None or not nd.running:
                return f"no running replica on {name}"
            if nd.core.applied != commit:
                return f"{name} applied {nd.core.applied} of {commit}"
        return None

    def _drained(self, state: MetaState, key: tuple[str, str, str]) -> str | None:
        w = self.w
        p = w.clients.pullers.get(key)
        if p is None:
            return None
        if p.received or p.waiting:
            return "acks outstanding"
        runtimes = [d for d in w.consumer_runtimes(key) if d.is_leader]
        if not runtimes:
            return "no runtime"
        core = runtimes[0].replica.consumer().core
        stream = self._stream_last(key[1])
        if core.state.pending:
            return f"{len(core.state.pending)} pending"
        if core.state.delivered.stream_seq < stream:
            return f"delivered {core.state.delivered.stream_seq} of {stream}"
        return None

    def _stream_last(self, name: str) -> int:
        for duty in self.w.stream_duties(name):
            if duty.is_leader:
                return duty.replica.stream().stream.last_seq
        return 0

    def final(self) -> None:
        w = self.w
        leader = w.meta_leader()
        assert leader is not None and leader.meta is not None
        state = leader.meta.state
        self.placement(state, final=True)
        for sa in state.streams.values():
            replicas = [w.servers[p].streams.get((sa.account, sa.name)) for p in sa.peers]
            for name, replica in zip(sa.peers, replicas, strict=True):
                if replica is None or replica.stream_machine is None:
                    raise Violation(f"stream {sa.name}: no replica on {name}")
                self._stream_holds(sa.name, replica, name)
            digests = {r.stream().digest() for r in replicas if r is not None}
            if len(digests) != 1:
                raise Violation(f"stream {sa.name}: replicas differ at the same index")
        for ca in state.consumers.values():
            key = (ca.account, ca.stream, ca.name)
            p = w.clients.pullers.get(key)
            for name in ca.peers:
                replica = w.servers[name].consumers.get(key)
                if replica is None or replica.consumer_machine is None:
                    raise Violation(f"consumer {ca.name}: no replica on {name}")
                if p is not None:
                    self._held(p, replica.consumer(), name)
            if p is not None:
                self._all_seen(p, ca.stream)

    def _stream_holds(self, stream: str, replica: Replica, where: str) -> None:
        w = self.w
        inc = w.workload.incarnation.get(stream)
        pub = w.clients.publishers.get((stream, inc)) if inc is not None else None
        machine: StreamMachine = replica.stream()
        store = machine.stream.store
        ids: dict[str, int] = {}
        msg = store.load_next(1)
        while msg is not None:
            msg_id = bytes(msg.data).split(b"|", 1)[0].decode()
            if msg_id in ids:
                raise Violation(f"stream {stream} on {where}: message {msg_id} stored at "
                                f"seq {ids[msg_id]} and {msg.seq}")
            ids[msg_id] = msg.seq
            msg = store.load_next(msg.seq + 1)
        if pub is None:
            return
        for msg_id, seq in pub.acked.items():
            if ids.get(msg_id) != seq:
                raise Violation(f"stream {stream} on {where}: acknowledged {msg_id} at seq "
                                f"{seq}, stored at {ids.get(msg_id)}")

    def _all_seen(self, p: Puller, stream: str) -> None:
        for duty in self.w.stream_duties(stream):
            store = duty.replica.stream().stream.store
            msg = store.load_next(1)
            while msg is not None:
                if msg.seq not in p.seen:
                    raise Violation(f"consumer {p.key[2]} never handed out seq {msg.seq} "
                                    f"of {stream}")
                msg = store.load_next(msg.seq + 1)
            return


__all__ = ["Checks", "Replica"]
