"""The meta leader's decisions for the JetStream API, as server/js/clustered/meta_api.py
makes them, returning the meta entries to propose (in order) instead of proposing.

* create a stream: least-loaded placement (jetstream.placement.select_peers) over the
  servers the leader sees online, a new group name;
* update a stream (config, scaling): the current peers kept, the stream's leader (as the
  meta leader's own replica knows it) first (its consumers follow in MetaState.apply);
* peer removal: the peer is replaced by placement (refused when none qualifies), then
  each consumer replica on it moves to the replacement (a no-op since MetaState.apply
  moves them with the stream);
* delete a stream; create a consumer on the stream's servers, the stream's leader first.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.meta import (
    AssignConsumer,
    AssignStream,
    ConsumerAssignment,
    MetaEntry,
    MetaState,
    RemoveStream,
    StreamAssignment,
)
from jetraft.jetstream.placement import PlacementError, ServerFacts, group_name, select_peers
from jetraft.jetstream.stream_config import StreamConfig

if TYPE_CHECKING:
    from .server import SimServer

ACCOUNT = "$G"
CLUSTER = "C1"


class Refused(Exception):
    """The API answers with an error (nothing proposed)."""


def server_facts(leader: SimServer) -> list[ServerFacts]:
    assert leader.meta is not None
    state = leader.meta.state
    world = leader.world
    out = []
    for name in leader.servers:
        online = name == leader.name or world.connected(leader.name, name)
        assets, ha = state.assets_of(name)
        out.append(ServerFacts(name, CLUSTER, frozenset(), online, assets, ha))
    return out


def _state(leader: SimServer) -> MetaState:
    assert leader.meta is not None
    return leader.meta.state


def _place(leader: SimServer, cfg: StreamConfig, rng: random.Random,
           existing: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> list[str]:
    try:
        return select_peers(cfg.num_replicas, server_facts(leader), cluster=CLUSTER,
                            existing=existing, exclude=exclude, rng=rng)
    except PlacementError as exc:
        raise Refused(exc.text) from None


def _stream_leader(leader: SimServer, sa: StreamAssignment) -> str:
    """What the meta leader's own replica of the stream knows of its leader."""
    replica = leader.streams.get((sa.account, sa.name))
    d = replica.node.driver if replica is not None else None
    return d.core.lead if replica is not None and replica.running and d is not None else ""


def create_stream(leader: SimServer, cfg: StreamConfig, rng: random.Random,
                  now_ns: int) -> list[MetaEntry]:
    if (ACCOUNT, cfg.name) in _state(leader).streams:
        raise Refused("stream name already in use")
    peers = _place(leader, cfg, rng)
    group = group_name("S", cfg.num_replicas, cfg.storage, rng)
    return [AssignStream(StreamAssignment(ACCOUNT, cfg, group, tuple(peers), now_ns))]


def update_stream(leader: SimServer, cfg: StreamConfig, rng: random.Random
                  ) -> list[MetaEntry]:
    sa = _state(leader).streams.get((ACCOUNT, cfg.name))
    if sa is None:
        raise Refused("stream not found")
    peers = sa.peers
    if cfg.num_replicas != len(sa.peers):
        lead = _stream_leader(leader, sa)
        ordered = ([lead] if lead in sa.peers else []) + [p for p in sa.peers if p != lead]
        peers = tuple(_place(leader, cfg, rng, existing=tuple(ordered)))
    new = StreamAssignment(sa.account, cfg, sa.group, peers, sa.created_ns)
    return [AssignStream(new, update=_update_flag(leader))] if new != sa else []


def peer_remove(leader: SimServer, name: str, peer: str, rng: random.Random
                ) -> list[MetaEntry]:
    state = _state(leader)
    sa = state.streams.get((ACCOUNT, name))
    if sa is None:
        raise Refused("stream not found")
    if peer not in sa.peers:
        raise Refused("peer not a member")
    rest = tuple(p for p in sa.peers if p != peer)
    # No server to take the peer's place: refused (10075 "peer remap failed"), as the
    # server and nats-server do, rather than leaving the stream short of replicas.
    try:
        peers = _place(leader, sa.config, rng, existing=rest, exclude=(peer,))
    except Refused:
        raise Refused("peer remap failed") from None
    new = StreamAssignment(sa.account, sa.config, sa.group, tuple(peers), sa.created_ns)
    out: list[MetaEntry] = [AssignStream(new, update=_update_flag(leader))]
    added = [p for p in new.peers if p not in sa.peers]
    for ca in state.stream_consumers(sa.account, sa.name):
        if peer not in ca.peers:
            continue
        cpeers = [p for p in ca.peers if p != peer]
        spare = [p for p in added if p not in cpeers]
        if spare:
            cpeers.append(spare[0])
        if not cpeers:
            continue
        out.append(AssignConsumer(ConsumerAssignment(
            ca.account, ca.stream, ca.name, ca.config, ca.group, tuple(cpeers),
            ca.created_ns)))
    return out


def _update_flag(leader: SimServer) -> bool:
    """The fix updates_marked: an update is marked so that a delete before it wins."""
    return leader.world.fixed("updates_marked")


def delete_stream(leader: SimServer, name: str) -> list[MetaEntry]:
    if (ACCOUNT, name) not in _state(leader).streams:
        raise Refused("stream not found")
    return [RemoveStream(ACCOUNT, name)]


def create_consumer(leader: SimServer, stream: str, cfg: ConsumerConfig,
                    rng: random.Random, now_ns: int) -> list[MetaEntry]:
    state = _state(leader)
    sa = state.streams.get((ACCOUNT, stream))
    if sa is None:
        raise Refused("stream not found")
    if (ACCOUNT, stream, cfg.name) in state.consumers:
        raise Refused("consumer already exists")
    lead = _stream_leader(leader, sa)
    ordered = ([lead] if lead in sa.peers else []) + [p for p in sa.peers if p != lead]
    replicas = cfg.num_replicas or sa.config.num_replicas
    peers = tuple(ordered[:replicas]) if replicas > 0 else tuple(ordered)
    group = group_name("C", len(peers), "file", rng)
    ca = ConsumerAssignment(ACCOUNT, stream, cfg.name, cfg, group, peers, now_ns)
    return [AssignConsumer(ca)]
