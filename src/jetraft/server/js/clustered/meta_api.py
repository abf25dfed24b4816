"""The meta leader's side of ``$JS.API``: account info, stream create, update, delete,
names, list and peer removal, and the system account's server removal.

A create or update is validated as on a single server, placed (``jetstream.placement``),
proposed to the meta group and, once committed, answered with the stream's info as its
new leader reports it; the reply confirms an assignment a quorum of the meta group holds.
What a committed proposal changed is advised (``$JS.EVENT.ADVISORY.STREAM.CREATED`` etc.)
by this server, the meta leader that proposed it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import msgspec

from jetraft.jetstream import consumer_api, stream_api
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import Route
from jetraft.jetstream.api_types import TYPE_PREFIX
from jetraft.jetstream.consumer_api import plan_create
from jetraft.jetstream.consumer_config import (
    ConsumerConfig,
    StreamFacts,
    config_to_wire,
    format_rfc3339_ns,
    stream_facts,
)
from jetraft.jetstream.meta import (
    AssignConsumer,
    AssignStream,
    ConsumerAssignment,
    MetaEntry,
    RemoveConsumer,
    RemoveStream,
    StreamAssignment,
)
from jetraft.jetstream.models import format_time
from jetraft.jetstream.placement import PlacementError, group_name, select_peers
from jetraft.jetstream.source_config import check_cycle
from jetraft.jetstream.stream_config import StreamConfig, check_update, to_wire
from jetraft.protocol.subjects import filters_overlap
from jetraft.server.js.advisories import committed_actions, stream_action
from jetraft.server.js.clustered.group import peer_id
from jetraft.server.js.clustered.meta_group import MetaUnavailable
from jetraft.server.js.clustered.subjects import CONSUMER_INFO_SUBJECT, INFO_SUBJECT
from jetraft.server.js.limits import check_stream_limits

if TYPE_CHECKING:
    from jetraft.server.js.clustered.api import ClusterApi
    from jetraft.server.js.clustered.jetstream import ClusteredJetStream

# How long a create or update waits for the stream's leader to report the new state.
LEADER_WAIT_S = 10.0
# How long a delete waits for the asset's leader to apply it (it is committed already).
GONE_WAIT_S = 2.0


def _t(kind: str) -> str:
    return TYPE_PREFIX + kind


def preferred_from(data: bytes) -> str | None:
    """The ``placement.preferred`` server of a step-down request, if any."""
    if not data.strip():
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return None
    placement = body.get("placement") if isinstance(body, dict) else None
    if isinstance(placement, dict) and isinstance(placement.get("preferred"), str):
        return placement["preferred"] or None
    return None


def handle(
    api: ClusterApi, route: Route, subject: str, reply: str, data: bytes
) -> Coroutine[Any, Any, Any]:
    handlers = {
        "INFO": _account_info,
        "STREAM.CREATE.*": _create,
        "STREAM.UPDATE.*": _update,
        "STREAM.DELETE.*": _delete,
        "STREAM.NAMES": _names,
        "STREAM.LIST": _list,
        "STREAM.PEER.REMOVE.*": _peer_remove,
        "CONSUMER.CREATE.*": _consumer_create,
        "CONSUMER.CREATE.*.>": _consumer_create,
        "CONSUMER.DURABLE.CREATE.*": _consumer_create,
        "CONSUMER.DURABLE.CREATE.*.>": _consumer_create,
        "CONSUMER.DELETE.*.*": _consumer_delete,
        "CONSUMER.NAMES.*": _consumer_names,
        "CONSUMER.LIST.*": _consumer_list,
        "CONSUMER.PAUSE.*.*": _consumer_pause,
    }
    return handlers[route.pattern](api, subject, reply, data)


def _meta_failed(exc: MetaUnavailable) -> E.ApiError:
    return E.api_error(10008)


# --- account info ----------------------------------------------------------------------------


async def _account_info(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    js = api.js
    acc = api.account.name
    streams = [sa for (a, _), sa in js.meta.state.streams.items() if a == acc]
    memory = storage = 0
    for sa in streams:
        replica = js.streams.get((acc, sa.name))
        if replica is None:
            continue
        used = replica.stream.store.state().bytes
        if sa.config.storage == "memory":
            memory += used
        else:
            storage += used
    consumers = sum(1 for k in js.meta.state.consumers if k[0] == acc)
    return stream_api.account_info_body(
        memory, storage, len(streams), consumers, api.limits(), js.domain, api.stats
    )


# --- create / update / delete ----------------------------------------------------------------


class _Strict:
    """What ``stream_api.checked_config`` needs."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict


def _check_overlap(api: ClusterApi, cfg: StreamConfig) -> None:
    streams = api.js.meta.state.streams
    if cfg.sources or cfg.mirror is not None:
        account = api.account.name

        def lookup(name: str) -> StreamConfig | None:
            sa = streams.get((account, name))
            return None if sa is None else sa.config

        check_cycle(cfg, lookup)
    for (acc, name), sa in streams.items():
        if acc != api.account.name or name == cfg.name:
            continue
        for mine in cfg.subjects:
            if any(filters_overlap(mine, theirs) for theirs in sa.config.subjects):
                raise E.subjects_overlap()


def _place(api: ClusterApi, cfg: StreamConfig, existing: tuple[str, ...] = (),
           exclude: tuple[str, ...] = ()) -> list[str]:
    js = api.js
    placement = cfg.placement
    cluster = (placement.cluster if placement is not None else "") or js.cluster_name
    tags = tuple(placement.tags) if placement is not None and placement.tags else ()
    try:
        return select_peers(
            cfg.num_replicas,
            js.server_facts(),
            cluster=cluster,
            tags=tags,
            unique_tag=js.config.unique_tag,
            existing=existing,
            exclude=exclude,
            rng=js.rng,
        )
    except PlacementError as exc:
        raise E.api_error(10005, err=exc.text) from None


async def _propose(api: ClusterApi, entry: MetaEntry) -> None:
    """Propose ``entry`` and, once the meta group committed it, publish the action advisories
    of what it changed. Only the meta leader proposes, and only for the requests it serves,
    so each change is advised once, and only if it was committed (nats-server has the
    asset's leader advise once it applies the change)."""
    try:
        changes = await api.js.meta.propose(entry)
    except MetaUnavailable as exc:
        raise _meta_failed(exc) from None
    for subject, body in committed_actions(changes, time.time_ns(), api.js.domain):
        api.client.publish(subject, body)


class _Answered:
    """The asset's leader sent the answer itself (see ``ClusteredJetStream.asset_info``)."""


ANSWERED = _Answered()


async def _stream_answer(
    api: ClusterApi, sa: StreamAssignment, reply: str, kind: str, tail: dict[str, Any]
) -> Any:
    """Have the stream's leader answer once it runs ``sa``'s config; after the wait, what
    the assignment says (no leader yet, empty state)."""
    js = api.js
    want = to_wire(sa.config)
    ask = {"reply": reply, "head": {"type": _t(kind)}, "tail": tail, "config": want}
    subject = f"{INFO_SUBJECT}.{sa.account}.{sa.name}"
    if await js.asset_info(subject, timeout_s=LEADER_WAIT_S, answer=ask) is not None:
        return ANSWERED
    now = time.time_ns()
    return {
        "type": _t(kind),
        "config": want,
        "created": format_time(sa.created_ns),
        "state": {"messages": 0, "bytes": 0, "first_seq": 0, "first_ts": format_time(0),
                  "last_seq": 0, "last_ts": format_time(0), "consumer_count": 0},
        "cluster": {"name": js.cluster_name, "raft_group": sa.group, "leader": ""},
        "ts": format_time(now),
        **tail,
    }


async def _create(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_create_response"
    js = api.js
    cfg = stream_api.checked_config(_Strict(js.config.strict), subject, data, creating=True)
    key = (api.account.name, cfg.name)
    existing = js.meta.state.streams.get(key)
    if existing is not None:
        if existing.config != cfg:
            raise E.stream_name_exists()
        return await _stream_answer(api, existing, reply, kind, {"did_create": True})
    _check_overlap(api, cfg)
    count = sum(1 for k in js.meta.state.streams if k[0] == api.account.name)
    check_stream_limits(api.account_limits, cfg, count, creating=True)
    peers = _place(api, cfg)
    group = group_name("S", cfg.num_replicas, cfg.storage, js.rng)
    sa = StreamAssignment(api.account.name, cfg, group, tuple(peers), time.time_ns())
    await _propose(api, AssignStream(sa))
    return await _stream_answer(api, sa, reply, kind, {"did_create": True})


async def _update(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_update_response"
    js = api.js
    cfg = stream_api.checked_config(_Strict(js.config.strict), subject, data, creating=False)
    sa = js.meta.state.streams.get((api.account.name, cfg.name))
    if sa is None:
        raise E.stream_not_found()
    cfg = check_update(sa.config, cfg)
    _check_overlap(api, cfg)
    count = sum(1 for k in js.meta.state.streams if k[0] == api.account.name)
    check_stream_limits(api.account_limits, cfg, count, creating=False)
    peers = sa.peers
    if cfg.num_replicas != len(sa.peers):
        # Scaling keeps the current leader and the longest-serving replicas.
        replica = js.streams.get((sa.account, sa.name))
        leader = replica.leader if replica is not None else ""
        ordered = ([leader] if leader in sa.peers else []) + [p for p in sa.peers if p != leader]
        peers = tuple(_place(api, cfg, existing=tuple(ordered)))
    new = StreamAssignment(sa.account, cfg, sa.group, peers, sa.created_ns)
    if new != sa:
        # Marked as an update: if a delete is ordered before it, it makes nothing.
        await _propose(api, AssignStream(new, update=True))
    else:
        # Nothing to commit; advised all the same, as nats-server and a single server do.
        api.client.publish(*stream_action(cfg.name, "modify", time.time_ns(), api.js.domain))
    return await _stream_answer(api, new, reply, kind, {})


async def _delete(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_delete_response"
    if not stream_api.is_empty_request(data):
        raise E.not_empty_request()
    name = subject.rsplit(".", 1)[-1]
    if (api.account.name, name) not in api.js.meta.state.streams:
        raise E.stream_not_found()
    await _propose(api, RemoveStream(api.account.name, name))
    await api.js.asset_gone(f"{INFO_SUBJECT}.{api.account.name}.{name}", timeout_s=GONE_WAIT_S)
    return {"type": _t(kind), "success": True}


# --- names / list ----------------------------------------------------------------------------


def _names_of(api: ClusterApi, data: bytes) -> tuple[list[str], int]:
    names, offset = stream_api.filtered_names(
        data,
        {name: sa.config for (acc, name), sa in api.js.meta.state.streams.items()
         if acc == api.account.name},
        "JSApiStreamNamesRequest",
    )
    return names, offset


async def _names(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    names, offset = _names_of(api, data)
    limit = stream_api.NAMES_LIMIT
    page = names[offset : offset + limit]
    return {"type": _t("stream_names_response"), "total": len(names), "offset": offset,
            "limit": limit, "streams": page}


async def _list(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    names, offset = _names_of(api, data)
    limit = stream_api.LIST_LIMIT
    page = names[offset : offset + limit]
    acc = api.account.name
    infos = await asyncio.gather(*(api.js.fetch_stream_info(acc, n, 2.0) for n in page))
    streams = [info for info in infos if info is not None]
    missing = [n for n, info in zip(page, infos, strict=True) if info is None]
    out: dict[str, Any] = {"type": _t("stream_list_response"), "total": len(names),
                           "offset": offset, "limit": limit, "streams": streams}
    if missing:
        out["missing"] = missing
    return out


# --- consumers --------------------------------------------------------------------------------


def _consumer_configs(api: ClusterApi, stream: str) -> dict[str, ConsumerConfig]:
    return {
        ca.name: ca.config
        for ca in api.js.meta.state.stream_consumers(api.account.name, stream)
    }


def _consumer_peers(api: ClusterApi, sa: StreamAssignment, replicas: int) -> tuple[str, ...]:
    """A consumer lives on servers of its stream: all of them, or for fewer replicas the
    stream's leader first (delivery then reads a local, current copy)."""
    replica = api.js.streams.get((sa.account, sa.name))
    leader = replica.leader if replica is not None else ""
    ordered = ([leader] if leader in sa.peers else []) + [p for p in sa.peers if p != leader]
    if replicas <= 0:
        return tuple(ordered)
    return tuple(ordered[:replicas])


async def _consumer_answer(
    api: ClusterApi, ca: ConsumerAssignment, reply: str, kind: str, initial: bool = False
) -> Any:
    """Have the consumer's leader answer once it runs ``ca``'s config (``initial``: a new
    consumer, described as it was before its first delivery)."""
    ask = {"reply": reply, "head": {"type": _t(kind)}, "config": config_to_wire(ca.config),
           "initial": initial}
    subject = f"{CONSUMER_INFO_SUBJECT}.{ca.account}.{ca.stream}.{ca.name}"
    if await api.js.asset_info(subject, timeout_s=LEADER_WAIT_S, answer=ask) is None:
        raise E.api_error(10008)
    return ANSWERED


async def _consumer_create(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    kind = "consumer_create_response"
    js = api.js
    acc = api.account.name
    account = api.account

    def stream_of(name: str) -> tuple[StreamFacts, dict[str, ConsumerConfig]] | None:
        sa = js.meta.state.streams.get((acc, name))
        if sa is None:
            return None
        return stream_facts(sa.config), _consumer_configs(api, name)

    def bound(name: str) -> bool:
        ca = next((c for c in js.meta.state.consumers.values()
                   if c.account == acc and c.name == name), None)
        subject = ca.config.deliver_subject if ca is not None else ""
        return bool(subject) and account.sublist.has_interest(subject)

    plan = plan_create(subject, data, stream_of, bound, clustered=True)
    sa = js.meta.state.streams[(acc, plan.stream)]
    old = js.meta.state.consumers.get((acc, plan.stream, plan.name))
    if old is not None:
        ca = old
        if plan.cfg != old.config:
            ca = ConsumerAssignment(acc, plan.stream, plan.name, plan.cfg, old.group,
                                    old.peers, old.created_ns)
            await _propose(api, AssignConsumer(ca))
        return await _consumer_answer(api, ca, reply, kind)
    replicas = plan.cfg.num_replicas or sa.config.num_replicas
    if plan.cfg.mem_storage and not plan.cfg.num_replicas and not plan.cfg.durable_name:
        replicas = 1
    peers = _consumer_peers(api, sa, replicas)
    group = group_name("C", len(peers), "memory" if plan.cfg.mem_storage else "file", js.rng)
    ca = ConsumerAssignment(acc, plan.stream, plan.name, plan.cfg, group, peers, time.time_ns())
    await _propose(api, AssignConsumer(ca))
    return await _consumer_answer(api, ca, reply, kind, initial=True)


def _consumer_key(api: ClusterApi, subject: str) -> tuple[str, str, str]:
    toks = subject.split(".")
    key = (api.account.name, toks[-2], toks[-1])
    state = api.js.meta.state
    if key[:2] not in state.streams:
        raise E.stream_not_found()
    if key not in state.consumers:
        raise E.api_error(10014)
    return key


async def _consumer_delete(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    acc, stream, name = _consumer_key(api, subject)
    await _propose(api, RemoveConsumer(acc, stream, name))
    subject = f"{CONSUMER_INFO_SUBJECT}.{acc}.{stream}.{name}"
    await api.js.asset_gone(subject, timeout_s=GONE_WAIT_S)
    return {"type": _t("consumer_delete_response"), "success": True}


def _consumer_page(api: ClusterApi, subject: str, data: bytes, limit: int
                   ) -> tuple[list[str], int, int]:
    stream = subject.split(".")[4] if subject.count(".") >= 4 else ""
    if (api.account.name, stream) not in api.js.meta.state.streams:
        raise E.stream_not_found()
    names = sorted(_consumer_configs(api, stream))
    offset = min(consumer_api.page_offset(data), len(names))
    return names[offset : offset + limit], len(names), offset


async def _consumer_names(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    limit = consumer_api.NAMES_LIMIT
    page, total, offset = _consumer_page(api, subject, data, limit)
    return {"type": _t("consumer_names_response"), "total": total, "offset": offset,
            "limit": limit, "consumers": page}


async def _consumer_list(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    limit = consumer_api.LIST_LIMIT
    page, total, offset = _consumer_page(api, subject, data, limit)
    stream = subject.split(".")[4]
    acc = api.account.name
    infos = await asyncio.gather(*(api.js.fetch_consumer_info(acc, stream, n, 2.0) for n in page))
    out: dict[str, Any] = {"type": _t("consumer_list_response"), "total": total,
                           "offset": offset, "limit": limit,
                           "consumers": [i for i in infos if i is not None]}
    missing = [n for n, i in zip(page, infos, strict=True) if i is None]
    if missing:
        out["missing"] = missing
    return out


async def _consumer_pause(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    key = _consumer_key(api, subject)
    ca = api.js.meta.state.consumers[key]
    until_ns = consumer_api.pause_until_from(data)
    until = format_rfc3339_ns(until_ns) if until_ns > 0 else None
    cfg = msgspec.structs.replace(ca.config, pause_until=until)
    if cfg != ca.config:
        new = ConsumerAssignment(ca.account, ca.stream, ca.name, cfg, ca.group, ca.peers,
                                 ca.created_ns)
        await _propose(api, AssignConsumer(new))
    return consumer_api.pause_response(until_ns, time.time_ns())


# --- peers -----------------------------------------------------------------------------------


async def _peer_remove(api: ClusterApi, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_remove_peer_response"
    js = api.js
    name = subject.rsplit(".", 1)[-1]
    sa = js.meta.state.streams.get((api.account.name, name))
    if sa is None:
        raise E.stream_not_found()
    try:
        body = json.loads(data) if data.strip() else {}
    except ValueError as exc:
        raise E.invalid_json(str(exc)) from None
    peer = str(body.get("peer", "")) if isinstance(body, dict) else ""
    if not peer:
        raise E.api_error(10003)
    chosen = next((p for p in sa.peers if peer in (p, peer_id(p))), None)
    if chosen is None:
        raise E.api_error(10040)
    rest = tuple(p for p in sa.peers if p != chosen)
    try:
        peers = _place(api, sa.config, existing=rest, exclude=(chosen,))
    except E.ApiError:
        # No server can take the peer's place: refused, as nats-server refuses it ("peer
        # remap failed"), rather than leaving the stream with fewer replicas than asked.
        raise E.api_error(10075) from None
    new = StreamAssignment(sa.account, sa.config, sa.group, tuple(peers), sa.created_ns)
    await _propose(api, AssignStream(new, update=True))
    try:
        await _move_consumers(api.js, sa, new, chosen)
    except MetaUnavailable as exc:
        raise _meta_failed(exc) from None
    return {"type": _t(kind), "success": True}


async def _move_consumers(
    js: ClusteredJetStream, old: StreamAssignment, new: StreamAssignment, gone: str
) -> None:
    """The stream's consumers follow it: each replica on ``gone`` moves to the server
    that replaced it in the stream (or is dropped when there is none)."""
    added = [p for p in new.peers if p not in old.peers]
    for ca in js.meta.state.stream_consumers(old.account, old.name):
        if gone not in ca.peers:
            continue
        peers = [p for p in ca.peers if p != gone]
        spare = [p for p in added if p not in peers]
        if spare:
            peers.append(spare[0])
        if not peers:
            continue
        moved = ConsumerAssignment(ca.account, ca.stream, ca.name, ca.config, ca.group,
                                   tuple(peers), ca.created_ns)
        await js.meta.propose(AssignConsumer(moved))


async def server_remove(js: ClusteredJetStream, data: bytes) -> dict[str, Any]:
    """$JS.API.SERVER.REMOVE {peer, peer_id}: a server that will never return leaves the
    meta group, and each of its stream replicas is placed elsewhere."""
    kind = "meta_server_remove_response"
    try:
        body = json.loads(data) if data.strip() else {}
    except ValueError as exc:
        return E.error_body(_t(kind), E.invalid_json(str(exc)))
    name = str(body.get("peer", "")) if isinstance(body, dict) else ""
    pid = str(body.get("peer_id", "")) if isinstance(body, dict) else ""
    members = js.meta.members()
    target = next((m for m in members if m == name or (pid and peer_id(m) == pid)), None)
    if target is None:
        return E.error_body(_t(kind), E.api_error(10044))
    if target == js.server_name:
        return E.error_body(_t(kind), E.api_error(10044))
    try:
        await js.meta.remove_server(target)
        for sa in list(js.meta.state.streams.values()):
            if target not in sa.peers:
                continue
            rest = tuple(p for p in sa.peers if p != target)
            api = js.apis.get(sa.account)
            if api is None:
                continue
            try:
                peers = _place(api, sa.config, existing=rest, exclude=(target,))
            except E.ApiError:
                peers = list(rest)
            if not peers:
                continue
            new = StreamAssignment(sa.account, sa.config, sa.group, tuple(peers), sa.created_ns)
            await js.meta.propose(AssignStream(new, update=True))
            await _move_consumers(js, sa, new, target)
    except MetaUnavailable:
        return E.error_body(_t(kind), E.api_error(10008))
    return {"type": _t(kind), "success": True}
