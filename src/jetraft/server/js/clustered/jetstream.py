"""JetStream on a server of a cluster: the meta group, this server's stream replicas, the
``$JS.API`` of each account, and the internal requests servers send each other.

Who answers an API request (every JetStream server receives it; exactly one answers):

* the meta leader: account INFO, creates, updates, deletes, names and lists, peer removal,
  and "not found" for assets that do not exist;
* a stream's leader: its INFO, PURGE, MSG.GET, MSG.DELETE and leader step-down; every
  replica answers DIRECT.GET when the stream allows it (a queue group picks one);
* when there is no meta leader (JetStream not ready yet, or quorum lost), the server with
  the smallest name among those connected answers 10008 after a short wait.

Servers ask each other for stream info on ``$JSC.SI.<account>.<stream>`` in an internal
account no client can reach; the stream's leader answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import msgspec

from jetraft.config import ServerConfig
from jetraft.jetstream.meta import (
    Change,
    MetaEntry,
    RemoveConsumer,
)
from jetraft.jetstream.models import encode_json
from jetraft.jetstream.placement import ServerFacts
from jetraft.raft.node import Ticker
from jetraft.raft.ready import RaftError
from jetraft.server.cluster.raftnet import RaftNet
from jetraft.server.cluster.route_conn import PeerInfo
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.advisories import domain_leader_elected
from jetraft.server.js.clustered.api import ClusterApi, SystemApi
from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
from jetraft.server.js.clustered.group import TICK_S, RaftGroup, peer_id
from jetraft.server.js.clustered.meta_group import MetaGroup, MetaUnavailable
from jetraft.server.js.clustered.replicas import ReplicaKeeper
from jetraft.server.js.clustered.stream_replica import StreamReplica
from jetraft.server.js.clustered.subjects import (
    CONSUMER_DELETE_SUBJECT,
    CONSUMER_INFO_SUBJECT,
    INFO_SUBJECT,
    RETIRE_SUBJECT,
)
from jetraft.server.js.host import JsHost

log = logging.getLogger("jetraft.js.cluster")

# How long a server knows no meta leader before the smallest-named one answers for it
# (shorter gaps are missed heartbeats while the leader goes on answering).
LEADERLESS_AFTER_S = 1.0


def expected_cluster_size(config: ServerConfig) -> int:
    """How many JetStream servers the meta group is bootstrapped for: the configured routes
    (at least two), as nats-server counts them."""
    routes = len(config.cluster.routes) if config.cluster is not None else 0
    return max(2, routes)


class ClusteredJetStream:
    def __init__(self, server: JsHost, accounts: list[Account]) -> None:
        mesh = server.mesh
        js_cfg = server.config.jetstream
        assert mesh is not None and js_cfg is not None and server.config.cluster is not None
        self.server = server
        self.mesh = mesh
        self.config = js_cfg
        self.root = Path(js_cfg.store_dir) / "jetstream"
        self.raftnet = RaftNet(mesh)
        self.ticker = Ticker(TICK_S)
        mesh.raft_receiver = self.raftnet.deliver
        self.meta = MetaGroup(self, expected_cluster_size(server.config))
        self.streams: dict[tuple[str, str], StreamReplica] = {}
        # Replicas taken out of their group, still voting until the group lets them go.
        self.leaving: dict[tuple[str, ...], StreamReplica | ConsumerReplica] = {}
        self.consumers: dict[tuple[str, str, str], ConsumerReplica] = {}
        self.apis: dict[str, ClusterApi] = {}
        self._enabled = accounts
        self.internal = InternalClient(server.router, server.internal_account, "jetstream cluster")
        self.system_api: SystemApi | None = None
        self.keeper = ReplicaKeeper(self)
        self._change_task: asyncio.Task[None] | None = None
        self.rng = random.Random()
        self.peer_facts: dict[str, PeerInfo] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.keeper.load()
        self._change_task = asyncio.ensure_future(self.keeper.process_changes())
        self.spawn(self.keeper.recheck_leaders())
        self.mesh.add_peer_listener(self._peer_changed)
        for peer in self.mesh.peers():
            self._peer_changed(peer, True)
        await self.meta.start()
        for account in self._enabled:
            api = ClusterApi(self, account)
            self.apis[account.name] = api
            api.start()
        system = self.server.account_named(self.server.config.system_account or "")
        if system is not None:
            self.system_api = SystemApi(self, system)
            self.system_api.start()
        self.internal.subscribe(f"{INFO_SUBJECT}.*.*", self._on_info_request)
        self.internal.subscribe(f"{CONSUMER_INFO_SUBJECT}.*.*.*", self._on_consumer_info)
        self.internal.subscribe(f"{RETIRE_SUBJECT}.*.*", self._on_retire)
        self.internal.subscribe(f"{CONSUMER_DELETE_SUBJECT}.*.*.*", self._on_consumer_delete)
        log.info("JetStream cluster starting (expecting %d servers)", self.meta.expected_size)

    async def stop(self) -> None:
        for api in self.apis.values():
            api.stop()
        if self.system_api is not None:
            self.system_api.stop()
        self.internal.close()
        if self._change_task is not None:
            self._change_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._change_task
        for task in list(self._tasks):
            task.cancel()
        for consumer in list(self.consumers.values()):
            await consumer.stop()
        self.consumers.clear()
        for replica in [*self.streams.values(), *self.leaving.values()]:
            await replica.stop()
        self.streams.clear()
        self.leaving.clear()
        await self.meta.stop()

    async def hand_over(self, timeout_s: float = 2.0) -> None:
        """Lame duck mode: move every leadership this server holds to another server."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            groups: list[StreamReplica | ConsumerReplica] = [
                *self.consumers.values(), *self.streams.values()
            ]
            leading = [r for r in groups if r.is_leader]
            if self.meta.is_leader:
                with contextlib.suppress(MetaUnavailable):
                    self.meta.step_down()
            for replica in leading:
                with contextlib.suppress(RaftError):
                    replica.step_down()
            if not leading and not self.meta.is_leader:
                return
            await asyncio.sleep(0.1)

    # --- what groups need (GroupHost, MetaHost, ReplicaHost) ---------------------------------

    @property
    def server_name(self) -> str:
        return self.server.name

    @property
    def cluster_name(self) -> str:
        cluster = self.server.config.cluster
        return cluster.name if cluster is not None else ""

    @property
    def router(self) -> Router:
        return self.server.router

    @property
    def domain(self) -> str:
        return self.config.domain

    def account_named(self, name: str) -> Account | None:
        return self.server.account_named(name)

    def raft_dir(self, group: str) -> Path:
        return self.root / "_raft_" / group

    def is_online(self, server: str) -> bool:
        return server == self.server.name or server in self.mesh.by_name

    def meta_changed(self, changes: list[Change], index: int | None) -> None:
        self.keeper.meta_changed(changes, index)

    def stream_replica(self, account: str, name: str) -> StreamReplica | None:
        key = (account, name)
        replica = self.streams.get(key) or self.leaving.get(key)
        return replica if isinstance(replica, StreamReplica) else None

    def meta_leader_changed(self, leader: str) -> None:
        system = self.system_api
        if leader == self.server_name and system is not None:
            replicas = self.meta.group.peer_infos(with_leader=True)
            system.client.publish(
                *domain_leader_elected(
                    peer_id(leader), replicas, self.cluster_name, time.time_ns(), self.domain
                )
            )

    def advise_leader(self, account: str, advisory: Callable[[str], tuple[str, bytes]]) -> None:
        # As nats-server: into the asset's account, and, naming it, into the system account.
        system = self.system_api
        api = self.apis.get(account)
        if api is not None and (system is None or system.client.account.name != account):
            api.client.publish(*advisory(""))
        if system is not None:
            system.client.publish(*advisory(account))

    def stream_leader_changed(self, replica: StreamReplica) -> None:
        pass

    # --- peers -------------------------------------------------------------------------------

    def _peer_changed(self, peer: PeerInfo, up: bool) -> None:
        if not peer.jetstream:
            return
        self.peer_facts[peer.name] = peer
        self.meta.server_seen(peer.name, up)

    def server_facts(self) -> list[ServerFacts]:
        """Every JetStream server the meta group knows, for placement."""
        names = set(self.meta.members()) | set(self.meta.js_servers) | {self.server.name}
        out = []
        for name in sorted(names):
            if name == self.server.name:
                tags = frozenset(self.server.config.server_tags)
                cluster = self.cluster_name
            else:
                info = self.peer_facts.get(name)
                tags = frozenset(info.tags) if info is not None else frozenset()
                cluster = info.cluster if info is not None else self.cluster_name
            assets, ha = self.meta.state.assets_of(name)
            out.append(ServerFacts(name, cluster, tags, self.is_online(name), assets, ha))
        return out

    def answers_meta(self) -> bool:
        """Does this server answer what the meta leader answers? The leader does; without
        one, the smallest-named connected server (see ``answers_when_leaderless``)."""
        meta = self.meta
        return meta.is_leader or (
            meta.leaderless_for() >= LEADERLESS_AFTER_S and self.answers_when_leaderless()
        )

    def answers_when_leaderless(self) -> bool:
        """Without a meta leader, only the smallest-named connected server answers."""
        names = [self.server.name, *(p.name for p in self.mesh.peers() if p.jetstream)]
        return min(names) == self.server.name

    def retire(self, account: str, stream: str, seqs: Sequence[int]) -> None:
        replica = self.streams.get((account, stream))
        if replica is not None and replica.is_leader:
            replica.retire(seqs)
        else:
            body = msgspec.msgpack.encode(list(seqs))
            self.internal.publish(f"{RETIRE_SUBJECT}.{account}.{stream}", body)

    def _on_retire(self, subject: str, reply: str | None, hdr: bytes | None,
                   data: bytes) -> None:
        _, _, account, name = subject.split(".", 3)
        replica = self.streams.get((account, name))
        if replica is None or not replica.is_leader:
            return
        try:
            seqs = msgspec.msgpack.decode(data, type=list[int])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        replica.retire(seqs)

    def delete_consumer(self, account: str, stream: str, name: str) -> None:
        self.internal.publish(f"{CONSUMER_DELETE_SUBJECT}.{account}.{stream}.{name}", b"")

    def _on_consumer_delete(self, subject: str, reply: str | None, hdr: bytes | None,
                            data: bytes) -> None:
        if not self.meta.is_leader:
            return
        _, _, account, stream, name = subject.split(".", 4)
        if (account, stream, name) in self.meta.state.consumers:
            log.info("deleting inactive consumer %s > %s > %s", account, stream, name)
            self.spawn(self._propose_quietly(RemoveConsumer(account, stream, name)))

    async def _propose_quietly(self, entry: MetaEntry) -> None:
        with contextlib.suppress(MetaUnavailable):
            await self.meta.propose(entry)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def serve_direct(self, replica: StreamReplica) -> None:
        api = self.apis.get(replica.sa.account)
        replica.serve_direct(api.direct_get if api is not None else None)

    # --- internal info requests --------------------------------------------------------------
    #
    # $JSC.SI.<account>.<stream> / $JSC.CI.<account>.<stream>.<consumer>: the asset's leader
    # answers with its info. With a JSON body {"reply", "head", "tail", "config", "initial"}
    # it answers the *client* instead, at "reply" in the client's account, with
    # {**head, **info, **tail}: the leader subscribed (to the stream's subjects, the
    # consumer's pull subject) before it answers, and its answer travels the same route as
    # that interest, so a client never hears "created" before it can use what was created.
    # With "config", a leader still on another config answers {"pending": true}.

    def _on_info_request(self, subject: str, reply: str | None, hdr: bytes | None,
                         data: bytes) -> None:
        _, _, account, name = subject.split(".", 3)
        replica = self.streams.get((account, name))
        api = self.apis.get(account)
        # A replica whose removal this server applied is silent (see ``asset_gone``).
        if (reply and replica is not None and replica.is_leader and api is not None
                and (account, name) in self.meta.state.streams):
            self._answer_info(api, reply, data, lambda initial: api.stream_info(replica))

    def _on_consumer_info(self, subject: str, reply: str | None, hdr: bytes | None,
                          data: bytes) -> None:
        _, _, account, stream, name = subject.split(".", 4)
        replica = self.consumers.get((account, stream, name))
        api = self.apis.get(account)
        if not reply or replica is None or not replica.is_leader or api is None:
            return
        if (account, stream, name) not in self.meta.state.consumers:
            return  # its removal is applied here (see ``asset_gone``)

        def info(initial: bool) -> dict[str, Any] | None:
            if initial:
                return replica.initial_info  # None until its start is applied: pending
            return replica.info()

        with contextlib.suppress(RaftError):
            self._answer_info(api, reply, data, info)

    def _answer_info(self, api: ClusterApi, reply: str, data: bytes,
                     info_of: Callable[[bool], dict[str, Any] | None]) -> None:
        ask = _json_dict((None, data)) if data else None
        info = info_of(bool(ask and ask.get("initial")))
        if info is None or (ask and "config" in ask and info.get("config") != ask["config"]):
            self.internal.publish(reply, b'{"pending":true}')
            return
        client_reply = ask.get("reply") if ask else None
        if isinstance(client_reply, str) and client_reply:
            head, tail = ask.get("head") or {}, ask.get("tail") or {}  # type: ignore[union-attr]
            api.answer(client_reply, {**head, **info, **tail})
        self.internal.publish(reply, encode_json(info))

    async def asset_info(
        self,
        subject: str,
        *,
        timeout_s: float,
        answer: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Ask the leader on ``subject`` (see above) until it answers with the wanted
        config or ``timeout_s`` passed; returns the info (None: no leader answered)."""
        body = encode_json(answer) if answer else b""
        deadline = time.monotonic() + timeout_s
        while True:
            got = _json_dict(await self.internal.request(subject, body, 0.1))
            if got is not None and not got.get("pending"):
                return got
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)

    async def asset_gone(self, subject: str, *, timeout_s: float) -> None:
        """Wait until no leader answers on ``subject`` any more (or ``timeout_s`` passed).

        A delete is committed once the meta leader applied it, but the asset's leader
        applies it later and answers for the asset until then; a client that deletes and
        at once looks the asset up must not find it, so deletes are answered after this."""
        deadline = time.monotonic() + timeout_s
        while await self.internal.request(subject, b"", 0.1) is not None:
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.01)

    async def fetch_consumer_info(self, account: str, stream: str, name: str,
                                  timeout_s: float = 1.0) -> dict[str, Any] | None:
        subject = f"{CONSUMER_INFO_SUBJECT}.{account}.{stream}.{name}"
        return await self.asset_info(subject, timeout_s=timeout_s)

    async def fetch_stream_info(self, account: str, name: str,
                                timeout_s: float = 1.0) -> dict[str, Any] | None:
        """The stream's info from its leader (None when no leader answered in time)."""
        replica = self.streams.get((account, name))
        api = self.apis.get(account)
        if replica is not None and replica.is_leader and api is not None:
            return api.stream_info(replica)
        return await self.asset_info(f"{INFO_SUBJECT}.{account}.{name}", timeout_s=timeout_s)

    def account_details(self, streams: bool) -> list[dict[str, Any]]:
        """/jsz?accounts=1[&streams=1]: this server's replicas, by account."""
        out = []
        for name, api in sorted(self.apis.items()):
            detail: dict[str, Any] = {
                "name": name,
                "id": name,
                "api": {"total": api.stats.total, "errors": api.stats.errors},
            }
            if streams:
                detail["stream_detail"] = [
                    {"name": r.name, **api.stream_info(r)}
                    for (acc, _), r in sorted(self.streams.items())
                    if acc == name
                ]
            out.append(detail)
        return out

    # --- monitoring --------------------------------------------------------------------------

    def raftz(self, account: str = "", group: str = "") -> dict[str, dict[str, Any]]:
        """/raftz: every RAFT group this server runs, by account (the meta group under the
        system account), optionally only one account or one group."""
        system = self.server.config.system_account or "$SYS"
        groups: list[tuple[str, RaftGroup]] = [(system, self.meta.group)]
        groups += [(k[0], r.group) for k, r in self.streams.items()]
        groups += [(k[0], r.group) for k, r in self.consumers.items()]
        out: dict[str, dict[str, Any]] = {}
        for acc, g in groups:
            if (account and acc != account) or (group and g.group != group):
                continue
            out.setdefault(acc, {})[g.group] = g.raftz()
        return out

    def meta_cluster(self) -> dict[str, Any]:
        """/jsz's meta_cluster: the meta group as this server sees it."""
        group = self.meta.group
        node = group.node
        info = group.cluster_info()
        size = len(self.meta.members()) or self.meta.expected_size
        out: dict[str, Any] = {
            "name": self.cluster_name,
            "leader": self.meta.leader,
            "peer": peer_id(self.meta.leader) if self.meta.leader else "",
            "replicas": info.get("replicas", []),
            "cluster_size": size,
            "quorum_needed": size // 2 + 1,
            "pending": 0,
        }
        if node is not None:
            st = node.status()
            out["pending"] = max(st.last_index - st.applied, 0)
        return out


def _json_dict(got: tuple[bytes | None, bytes] | None) -> dict[str, Any] | None:
    if got is None:
        return None
    try:
        value = json.loads(got[1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
