"""What the clients do each tick: publish, consume, and now and then one API request.

Safety phase: two streams are made at once, then requests are drawn: create a stream
(R1, R3, or R5 on five servers) or a consumer on one, scale a stream to another replica
count, change its config (max_msg_size, which decides what is stored), remove a peer,
delete a stream (rarely), step down a stream's, a consumer's or the meta leader.
Liveness phase: no new messages or requests; publishers retry what is unacknowledged,
pull clients fetch and ack everything.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import msgspec

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.stream_config import StreamConfig

from . import admin
from .leaders import Wait

if TYPE_CHECKING:
    from .world import ClusterWorld

MAX_STREAMS = 3
MAX_CONSUMERS = 2  # per stream
NS = 1_000_000_000


class Workload:
    def __init__(self, world: ClusterWorld) -> None:
        self.w = world
        self.rng = random.Random(f"workload:{world.seed}")
        self.streams_made = 0
        self.consumers_made = 0
        self.incarnation: dict[str, int] = {}
        self.admin_wait: Wait | None = None

    def tick(self) -> None:
        w = self.w
        clients = w.clients
        safety = w.in_safety
        for pub in list(clients.publishers.values()):
            if self._stream_alive(pub.stream, pub.incarnation):
                clients.publish_tick(pub, new=safety)
        for p in list(clients.pullers.values()):
            clients.consume_tick(p, drain=not safety)
        self._run_admin()
        if safety and clients.admin_task is None:
            leader = w.meta_leader()
            if leader is not None and leader.meta is not None:
                self._request(leader)

    def _stream_alive(self, name: str, incarnation: int) -> bool:
        return self.incarnation.get(name) == incarnation

    def _run_admin(self) -> None:
        task = self.w.clients.admin_task
        if task is None:
            return
        wait = self.admin_wait
        if wait is not None and not wait.until() and self.w.tick_no < wait.deadline:
            return
        try:
            self.admin_wait = next(task)  # type: ignore[call-overload]
        except StopIteration:
            self.w.clients.admin_task = None
            self.admin_wait = None

    # ------------------------------------------------------------------ requests
    def _request(self, leader: object) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer) and leader.meta is not None
        w, r = self.w, self.rng
        state = leader.meta.state
        streams = sorted(name for (_, name) in state.streams)
        early = self.streams_made < 2
        if not early and r.random() > 0.04:
            return
        roll = r.random()
        # As the RAFT simulator: no reshaping of a group while one of its replicas is
        # damaged (a quorum repairs one damaged replica; shrinking the group could leave
        # the damaged one alone). Streams carry their consumers along.
        steady = [n for n in streams if not self._damaged(state, n)]
        try:
            if early or (roll < 0.15 and len(streams) < MAX_STREAMS):
                self._create_stream(leader)
            elif roll < 0.35 and streams:
                self._create_consumer(leader, r.choice(streams))
            elif roll < 0.5 and steady:
                self._scale(leader, r.choice(steady))
            elif roll < 0.6 and streams:
                self._update(leader, r.choice(streams))
            elif roll < 0.72 and steady:
                name = r.choice(steady)
                peer = r.choice(state.streams[("$G", name)].peers)
                w.clients.admin(admin.peer_remove(leader, name, peer, w.meta_rng),
                                f"peer_remove {name} {peer}")
            elif roll < 0.76 and streams:
                name = r.choice(streams)
                w.clients.admin(admin.delete_stream(leader, name), f"delete {name}")
            else:
                self._step_down(leader, streams)
        except admin.Refused as exc:
            w.trace(f"api refused: {exc}")
            w.stats["api_refused"] += 1

    def _damaged(self, state: object, name: str) -> bool:
        from jetraft.jetstream.meta import MetaState

        assert isinstance(state, MetaState)
        sa = state.streams[("$G", name)]
        groups = [sa.group, *(ca.group for ca in state.stream_consumers("$G", name))]
        return any(g in self.w.groups and self.w.groups[g].damaged for g in groups)

    def _create_stream(self, leader: object) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer)
        w, r = self.w, self.rng
        self.streams_made += 1
        name = f"S{self.streams_made}"
        replicas = r.choice((1, 3, 3, 5) if w.cfg.servers >= 5 else (1, 3, 3))
        cfg = StreamConfig(name=name, subjects=(f"s{self.streams_made}.>",),
                           num_replicas=replicas, duplicate_window=600 * NS)
        entries = admin.create_stream(leader, cfg, w.meta_rng, w.now_ns(leader))
        self.incarnation[name] = self.streams_made
        w.clients.publisher(name, self.streams_made, f"s{self.streams_made}.x")
        w.clients.admin(entries, f"create {name} R{replicas}")

    def _create_consumer(self, leader: object, stream: str) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer) and leader.meta is not None
        w, r = self.w, self.rng
        have = leader.meta.state.stream_consumers("$G", stream)
        if len(have) >= MAX_CONSUMERS:
            return
        self.consumers_made += 1
        name = f"C{self.consumers_made}"
        ack_all = r.random() < 0.25
        cfg = ConsumerConfig(name=name, durable_name=name, ack_policy="all" if ack_all
                             else "explicit", ack_wait=r.choice((1, 2, 3)) * NS,
                             max_deliver=r.choice((-1, -1, 4)), max_ack_pending=-1)
        entries = admin.create_consumer(leader, stream, cfg, w.meta_rng, w.now_ns(leader))
        w.clients.puller(("$G", stream, name), ack_all)
        w.clients.admin(entries, f"consumer {stream} {name}")

    def _scale(self, leader: object, name: str) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer) and leader.meta is not None
        w, r = self.w, self.rng
        sa = leader.meta.state.streams[("$G", name)]
        choices = [n for n in ((1, 3, 5) if w.cfg.servers >= 5 else (1, 3))
                   if n != sa.config.num_replicas]
        cfg = msgspec.structs.replace(sa.config, num_replicas=r.choice(choices))
        w.clients.admin(admin.update_stream(leader, cfg, w.meta_rng),
                        f"scale {name} R{sa.config.num_replicas}->R{cfg.num_replicas}")

    def _update(self, leader: object, name: str) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer) and leader.meta is not None
        w, r = self.w, self.rng
        sa = leader.meta.state.streams[("$G", name)]
        size = r.choice((-1, 64, 120))
        cfg = msgspec.structs.replace(sa.config, max_msg_size=size)
        w.clients.admin(admin.update_stream(leader, cfg, w.meta_rng),
                        f"update {name} max_msg_size={size}")

    def _step_down(self, leader: object, streams: list[str]) -> None:
        from .server import SimServer

        assert isinstance(leader, SimServer) and leader.meta is not None
        w, r = self.w, self.rng
        roll = r.random()
        if roll < 0.3:
            w.stats["api_stepdown_meta"] += 1
            w.trace(f"api: meta leader step-down ({leader.name})")
            w.transfer(leader, leader.meta_node)
            return
        if not streams:
            return
        name = r.choice(streams)
        if roll < 0.7:
            for duty in w.stream_duties(name):
                w.stats["api_stepdown_stream"] += 1
                w.trace(f"api: stream {name} step-down ({duty.replica.server.name})")
                w.transfer(duty.replica.server, duty.replica.node)
                return
            return
        consumers = leader.meta.state.stream_consumers("$G", name)
        if consumers:
            ca = r.choice(consumers)
            for cduty in w.consumer_runtimes(("$G", name, ca.name)):
                w.stats["api_stepdown_consumer"] += 1
                w.trace(f"api: consumer {ca.name} step-down ({cduty.replica.server.name})")
                w.transfer(cduty.replica.server, cduty.replica.node)
                return
