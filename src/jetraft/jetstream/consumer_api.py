"""The consumer part of ``$JS.API``: CREATE / DURABLE.CREATE / INFO / DELETE / NAMES / LIST /
MSG.NEXT / PAUSE / LEADER.STEPDOWN.

Handlers are plain functions of (context, subject, reply, data) that return the response
body (a dict to JSON-encode) or None when the answer goes out another way (MSG.NEXT). The
context is a narrow Protocol the server's JetStream manager implements; this module never
imports the server.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from jetraft.jetstream.consumer import ConsumerCore, MsgSource
from jetraft.jetstream.consumer_config import (
    MAX_NAME_LEN,
    ConsumerConfig,
    ConsumerConfigRequest,
    StreamFacts,
    apply_defaults,
    check_pedantic,
    check_update,
    check_workqueue,
    config_from_request,
    config_to_wire,
    decode_create_request,
    format_rfc3339_ns,
    invalid_json,
    parse_rfc3339_ns,
    partition_unique,
    valid_asset_name,
    validate,
)
from jetraft.jetstream.consumer_errors import ConsumerError, cerr

PREFIX = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
ZERO_TIME = "0001-01-01T00:00:00Z"
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class ConsumerHandle(Protocol):
    """A running consumer as the API sees it."""

    core: ConsumerCore

    @property
    def cfg(self) -> ConsumerConfig: ...

    def info(self, now: int | None = None) -> dict[str, Any]: ...

    def update_config(self, cfg: ConsumerConfig) -> None: ...

    def pull_request(self, reply: str, data: bytes) -> None: ...

    def write_now(self) -> None: ...

    def deliver_bound(self) -> bool: ...

    def unpin(self, group: str) -> None: ...


class ConsumerSet(Protocol):
    """The consumers of one stream (``server.js_consumers.StreamConsumers``)."""

    consumers: dict[str, Any]

    @property
    def persistent(self) -> bool: ...

    def facts(self) -> StreamFacts: ...

    def add(self, core: ConsumerCore, fresh: bool) -> Any: ...

    def delete(self, name: str) -> bool: ...


class ApiContext(Protocol):
    """What the consumer API handlers need from the JetStream account context."""

    def now_ns(self) -> int: ...

    def stream_consumers(self, stream: str) -> tuple[StreamFacts, ConsumerSet] | None:
        """The stream's facts and its consumers; None when there is no such stream."""
        ...


def _consumer_set(ctx: ApiContext, stream: str) -> ConsumerSet | None:
    found = ctx.stream_consumers(stream)
    return None if found is None else found[1]


# Consumer names are chosen by whoever receives the request and then travel inside the
# create entry, so they need no determinism; they only must not collide.
_NAME_RNG = random.Random()


def consumer_info(
    core: ConsumerCore,
    src: MsgSource,
    now_ns: int,
    num_waiting: int,
    push_bound: bool,
    priority_groups: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """ConsumerInfo as nats-server words it (without the ``type`` key); ``priority_groups``:
    the state of the consumer's groups (its runtime knows the pinned client)."""
    st = core.state
    # A clustered leader counts what it delivered but has not applied yet (equal otherwise).
    delivered: dict[str, Any] = {
        "consumer_seq": max(st.delivered.consumer_seq, core.dseq - 1),
        "stream_seq": max(st.delivered.stream_seq, core.noted_sseq),
    }
    if core.last_delivered_ns:
        delivered["last_active"] = format_rfc3339_ns(core.last_delivered_ns)
    ack_floor: dict[str, Any] = {
        "consumer_seq": st.ack_floor.consumer_seq,
        "stream_seq": st.ack_floor.stream_seq,
    }
    if core.last_ack_ns:
        ack_floor["last_active"] = format_rfc3339_ns(core.last_ack_ns)
    info: dict[str, Any] = {
        "stream_name": core.stream,
        "name": core.name,
        "created": format_rfc3339_ns(core.created_ns),
        "config": config_to_wire(core.cfg),
        "delivered": delivered,
        "ack_floor": ack_floor,
        "num_ack_pending": core.num_ack_pending,
        "num_redelivered": core.num_redelivered,
        "num_waiting": num_waiting,
        "num_pending": core.num_pending(src),
    }
    if push_bound:
        info["push_bound"] = True
    if core.cfg.pause_until:
        remaining = parse_rfc3339_ns(core.cfg.pause_until) - now_ns
        if remaining > 0:
            info["paused"] = True
            info["pause_remaining"] = remaining
    info["ts"] = format_rfc3339_ns(now_ns)
    if priority_groups:
        info["priority_groups"] = priority_groups
    return info


def _error(kind: str, exc: ConsumerError) -> dict[str, Any]:
    return {"type": PREFIX + kind, "error": exc.to_wire()}


def _tokens(subject: str) -> list[str]:
    return subject.split(".")


def new_consumer_name(rng: random.Random = _NAME_RNG) -> str:
    return "".join(rng.choice(_NAME_CHARS) for _ in range(8))


# --- CREATE ---------------------------------------------------------------------------------


def handle_create(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    kind = "consumer_create_response"
    try:
        info = _create(ctx, subject, data)
    except ConsumerError as exc:
        return _error(kind, exc)
    return {"type": PREFIX + kind, **info}


def _names_from_subject(subject: str) -> tuple[str, str, str, str]:
    """(mode, stream, consumer, filter) from a create subject; mode legacy|durable|new."""
    toks = _tokens(subject)
    if len(toks) == 5:
        return "legacy", toks[4], "", ""
    if toks[3] == "DURABLE":
        if len(toks) != 7:
            raise cerr(10016)
        return "durable", toks[5], toks[6], ""
    return "new", toks[4], toks[5], ".".join(toks[6:])


@dataclass(frozen=True, slots=True)
class CreatePlan:
    """What a create request amounts to: a new consumer, or an update of ``existing``
    (``cfg == existing config``: nothing to change)."""

    stream: str
    name: str
    cfg: ConsumerConfig
    existing: bool


StreamView = Callable[[str], "tuple[StreamFacts, Mapping[str, ConsumerConfig]] | None"]


def plan_create(
    subject: str,
    data: bytes,
    stream_of: StreamView,
    bound: Callable[[str], bool],
    *,
    clustered: bool = False,
) -> CreatePlan:
    """Validate a CREATE / DURABLE.CREATE request as nats-server does. ``stream_of(name)``
    gives the stream's facts and its consumers' configs (None: no such stream),
    ``bound(name)`` whether a push consumer's deliver subject has interest. Raises
    ConsumerError with nats-server's code, in nats-server's order of checks."""
    req = decode_create_request(data)
    mode, stream_name, cname, filtered = _names_from_subject(subject)
    if stream_name != (req.stream_name or ""):
        raise cerr(10056)
    if cname and ("\\" in cname or "/" in cname):
        raise cerr(10127)
    if req.action not in (None, "", "create", "update"):
        raise cerr(10025, err=f'unknown consumer action: "{req.action}"')
    cfg = config_from_request(req.config or ConsumerConfigRequest())
    if mode == "durable":
        if not cfg.durable_name:
            raise cerr(10018)
        if cname != cfg.durable_name:
            raise cerr(10017)
        cfg = msgspec.structs.replace(cfg, name=cname)
    elif mode == "new":
        if cfg.durable_name and cname != cfg.durable_name:
            raise cerr(10017)
        cfg = msgspec.structs.replace(cfg, name=cname)
    elif cfg.durable_name:
        raise cerr(10020)
    if filtered and cfg.filter_subjects:
        raise cerr(10137)
    if filtered and cfg.filter_subject != filtered:
        raise cerr(10131)
    if cfg.num_replicas > 1 and not clustered:
        raise cerr(10074)
    found = stream_of(stream_name)
    if found is None:
        raise cerr(10059)
    facts, configs = found
    if clustered and cfg.num_replicas > facts.replicas:
        raise cerr(10012, err="consumer replicas exceed stream replicas")
    if (
        clustered
        and facts.retention != "limits"
        and cfg.num_replicas
        and cfg.num_replicas != facts.replicas
    ):
        raise cerr(10134)
    lookup = cfg.durable_name or cfg.name
    old = configs.get(lookup) if lookup else None
    if old is not None:
        cfg = msgspec.structs.replace(cfg, pause_until=old.pause_until)
    if req.pedantic:
        check_pedantic(cfg, facts)
    cfg = apply_defaults(cfg, facts)
    validate(cfg, facts)
    action = req.action or ""
    if old is not None:
        if action == "create" and cfg != msgspec.structs.replace(old, metadata=cfg.metadata):
            raise cerr(10148)
        if facts.retention == "workqueue":
            others = [c for n, c in configs.items() if n != lookup]
            if cfg.filters and others and not partition_unique(cfg.filters, others):
                raise cerr(10100)
        check_update(old, cfg, bound(lookup))
        return CreatePlan(stream_name, lookup, cfg, True)
    if action == "update":
        raise cerr(10149)
    if 0 < facts.max_consumers <= len(configs):
        raise cerr(10026)
    check_workqueue(cfg, cfg.name, list(configs.values()), facts)
    if cfg.durable_name:
        if len(cfg.durable_name) > MAX_NAME_LEN:
            raise cerr(10102, max=MAX_NAME_LEN)
        name = cfg.durable_name
    elif cfg.name:
        name = cfg.name
    else:
        name = new_consumer_name()
        while name in configs:
            name = new_consumer_name()
    if not valid_asset_name(name):
        raise cerr(10103)
    return CreatePlan(stream_name, name, cfg, False)


def _create(ctx: ApiContext, subject: str, data: bytes) -> dict[str, Any]:
    sets: dict[str, ConsumerSet] = {}

    def stream_of(stream: str) -> tuple[StreamFacts, Mapping[str, ConsumerConfig]] | None:
        cset = _consumer_set(ctx, stream)
        if cset is None:
            return None
        sets[stream] = cset
        return cset.facts(), {n: c.cfg for n, c in cset.consumers.items()}

    def bound(name: str) -> bool:
        return any(c.consumers[name].deliver_bound() for c in sets.values() if name in c.consumers)

    plan = plan_create(subject, data, stream_of, bound)
    cset = sets[plan.stream]
    if plan.existing:
        existing: ConsumerHandle = cset.consumers[plan.name]
        if plan.cfg != existing.cfg:
            existing.update_config(plan.cfg)
            if cset.persistent and not plan.cfg.mem_storage:
                existing.write_now()
        return existing.info()
    core = ConsumerCore(plan.stream, plan.name, plan.cfg, ctx.now_ns())
    handle: ConsumerHandle = cset.add(core, fresh=True)
    return handle.info()


# --- INFO / DELETE / NAMES / LIST -----------------------------------------------------------


def _lookup(ctx: ApiContext, subject: str) -> tuple[ConsumerSet, ConsumerHandle]:
    # Every such subject ends in <stream>.<consumer> (INFO, DELETE, MSG.NEXT, PAUSE, ...).
    toks = _tokens(subject)
    if len(toks) < 6:
        raise cerr(10003)
    cset = _consumer_set(ctx, toks[-2])
    if cset is None:
        raise cerr(10059)
    handle: ConsumerHandle | None = cset.consumers.get(toks[-1])
    if handle is None:
        raise cerr(10014)
    return cset, handle


def handle_info(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    kind = "consumer_info_response"
    try:
        _, handle = _lookup(ctx, subject)
    except ConsumerError as exc:
        return _error(kind, exc)
    return {"type": PREFIX + kind, **handle.info()}


def handle_delete(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    kind = "consumer_delete_response"
    try:
        cset, handle = _lookup(ctx, subject)
    except ConsumerError as exc:
        return _error(kind, exc)
    cset.delete(handle.core.name)
    return {"type": PREFIX + kind, "success": True}


def page_offset(data: bytes) -> int:
    body = data.strip()
    if not body:
        return 0
    try:
        req = json.loads(body)
    except ValueError as exc:
        raise invalid_json(exc) from None
    if not isinstance(req, dict):
        raise cerr(10025, err="json: cannot unmarshal into request")
    offset = req.get("offset", 0) or 0
    if not isinstance(offset, int) or offset < 0:
        raise cerr(10025, err="json: bad offset")
    return offset


def _paged(ctx: ApiContext, subject: str, data: bytes, limit: int) -> tuple[list[Any], int, int]:
    toks = _tokens(subject)
    if len(toks) < 5:
        raise cerr(10003)
    offset = page_offset(data)
    cset = _consumer_set(ctx, toks[4])
    if cset is None:
        raise cerr(10059)
    names = sorted(cset.consumers)
    total = len(names)
    offset = min(offset, total)
    return [cset.consumers[n] for n in names[offset : offset + limit]], total, offset


def _page_response(
    ctx: ApiContext, subject: str, data: bytes, kind: str, limit: int, render: Any
) -> dict[str, Any]:
    """One page of NAMES or LIST: the same paging, each consumer rendered by ``render``."""
    try:
        page, total, offset = _paged(ctx, subject, data, limit)
    except ConsumerError as exc:
        return _error(kind, exc)
    return {
        "type": PREFIX + kind,
        "total": total,
        "offset": offset,
        "limit": limit,
        "consumers": [render(h) for h in page],
    }


def handle_names(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    return _page_response(
        ctx, subject, data, "consumer_names_response", NAMES_LIMIT, lambda h: h.core.name
    )


def handle_list(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    return _page_response(
        ctx, subject, data, "consumer_list_response", LIST_LIMIT, lambda h: h.info()
    )


# --- MSG.NEXT / PAUSE / STEPDOWN ------------------------------------------------------------


def handle_next(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any] | None:
    """Queue a pull request; the consumer answers the requester itself. With no such
    consumer nobody would be listening in nats-server: the requester sees a 503."""
    try:
        _, handle = _lookup(ctx, subject)
    except ConsumerError:
        return {"__status__": 503}
    handle.pull_request(reply, data)
    return None


class _PauseRequest(msgspec.Struct):
    pause_until: str | None = None


PAUSE_KIND = "consumer_pause_response"


def pause_until_from(data: bytes) -> int:
    """The ``pause_until`` of a PAUSE request in ns (0: resume); raises ConsumerError."""
    req = _PauseRequest()
    if data.strip()[:1] in (b"{", b"["):
        try:
            req = msgspec.json.decode(data, type=_PauseRequest)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise invalid_json(exc) from None
    if not req.pause_until:
        return 0
    try:
        return parse_rfc3339_ns(req.pause_until)
    except ValueError as exc:
        raise cerr(10025, err=str(exc)) from None


def pause_response(until_ns: int, now_ns: int) -> dict[str, Any]:
    until = format_rfc3339_ns(until_ns) if until_ns > 0 else None
    remaining = until_ns - now_ns if until_ns else 0
    out: dict[str, Any] = {
        "type": PREFIX + PAUSE_KIND,
        "paused": remaining > 0,
        "pause_until": until or ZERO_TIME,
    }
    if remaining > 0:
        out["pause_remaining"] = remaining
    return out


def handle_pause(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    try:
        until_ns = pause_until_from(data)
        cset, handle = _lookup(ctx, subject)
    except ConsumerError as exc:
        return _error(PAUSE_KIND, exc)
    until = format_rfc3339_ns(until_ns) if until_ns > 0 else None
    handle.update_config(msgspec.structs.replace(handle.cfg, pause_until=until))
    if cset.persistent and not handle.cfg.mem_storage:
        handle.write_now()
    return pause_response(until_ns, ctx.now_ns())


UNPIN_KIND = "consumer_unpin_response"
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


class _UnpinRequest(msgspec.Struct):
    group: str = ""


def unpin_group(data: bytes, cfg: ConsumerConfig | None = None) -> str:
    """The priority group an UNPIN request names, checked as nats-server checks it (against
    the consumer's groups when ``cfg`` is given); raises ConsumerError."""
    try:
        req = msgspec.json.decode(data, type=_UnpinRequest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise invalid_json(exc) from None
    if not req.group:
        raise cerr(10025, err="consumer group not specified")
    if not _GROUP_NAME.fullmatch(req.group):
        raise cerr(10162)
    if cfg is not None and req.group not in cfg.priority_groups:
        raise cerr(10160)
    return req.group


def handle_unpin(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    """Take the pin from a pinned_client consumer's pinned client: the next requester gets
    it."""
    try:
        unpin_group(data)
        _, handle = _lookup(ctx, subject)
        group = unpin_group(data, handle.cfg)
    except ConsumerError as exc:
        return _error(UNPIN_KIND, exc)
    handle.unpin(group)
    return {"type": PREFIX + UNPIN_KIND}


def handle_stepdown(ctx: ApiContext, subject: str, reply: str, data: bytes) -> dict[str, Any]:
    kind = "consumer_leader_stepdown_response"
    try:
        _lookup(ctx, subject)
    except ConsumerError as exc:
        return _error(kind, exc)
    return _error(kind, cerr(10010))


Handler = Callable[[ApiContext, str, str, bytes], "dict[str, Any] | None"]

# Subject pattern (after "$JS.API.") -> handler; the manager's table takes these.
HANDLERS: dict[str, Handler] = {
    "CONSUMER.CREATE.*": handle_create,
    "CONSUMER.CREATE.*.>": handle_create,
    "CONSUMER.DURABLE.CREATE.*": handle_create,
    "CONSUMER.DURABLE.CREATE.*.>": handle_create,
    "CONSUMER.INFO.*.*": handle_info,
    "CONSUMER.DELETE.*.*": handle_delete,
    "CONSUMER.NAMES.*": handle_names,
    "CONSUMER.LIST.*": handle_list,
    "CONSUMER.MSG.NEXT.*.*": handle_next,
    "CONSUMER.PAUSE.*.*": handle_pause,
    "CONSUMER.UNPIN.*.*": handle_unpin,
    "CONSUMER.LEADER.STEPDOWN.*.*": handle_stepdown,
}
