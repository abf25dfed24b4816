"""The stream part of ``$JS.API``: INFO, STREAM.CREATE / UPDATE / INFO / DELETE / PURGE /
NAMES / LIST / MSG.GET / MSG.DELETE, DIRECT.GET, and the clustering-only requests.

Handlers follow the contract in ``api.py``: ``(ctx, subject, reply, data) -> Response``; they
raise ``ApiError`` for an error answer of their kind (the table wraps it). They talk to the
server only through ``StreamApiContext``; every change of stream state goes through
``ctx.propose`` so that clustering can replicate it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from jetraft.jetstream import errors as E
from jetraft.jetstream.api_types import API_LEVEL, TYPE_PREFIX, ApiStats
from jetraft.jetstream.direct_get import handle_direct_get, handle_direct_get_last, load_one
from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.models import format_time, go_json_error, parse_time
from jetraft.jetstream.msg_get import MsgGetRequest, Uint64
from jetraft.jetstream.source_config import check_cycle
from jetraft.jetstream.sourcing import source_info
from jetraft.jetstream.stream import DeleteMsg, Entry, OpResult, Purge, Result, Stream
from jetraft.jetstream.stream_config import (
    StreamConfig,
    check_update,
    decode_request,
    normalise,
    to_wire,
)
from jetraft.protocol.subjects import filters_overlap

NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECTS_LIMIT = 100_000
MAX_DIRECT_BATCH_BYTES = 64 * 1024 * 1024
_T = TypeVar("_T")


class StreamApiContext(Protocol):
    """What the stream handlers need from the server's JetStream account."""

    @property
    def streams(self) -> Mapping[str, Stream]: ...

    @property
    def api_stats(self) -> ApiStats: ...

    @property
    def server_name(self) -> str: ...

    @property
    def domain(self) -> str: ...

    @property
    def clustered(self) -> bool: ...

    @property
    def strict(self) -> bool:
        """nats-server's ``jetstream { strict }``: refuse unknown request fields."""
        ...

    def now_ns(self) -> int: ...

    def limits(self) -> dict[str, Any]:
        """The account's ``limits`` object for INFO (unlimited = -1)."""
        ...

    def create_stream(self, cfg: StreamConfig) -> Stream:
        """Open the store, persist the config, subscribe; raises ApiError."""
        ...

    def update_stream(self, stream: Stream, cfg: StreamConfig) -> None:
        """Apply a checked new config (through propose) and persist it."""
        ...

    def delete_stream(self, stream: Stream) -> None: ...

    def propose(self, stream: Stream, entry: Entry) -> Result: ...

    def consumer_count(self, stream: str) -> int: ...


# --- request bodies (strict, like nats-server) ---------------------------------------------


class _InfoRequest(msgspec.Struct, forbid_unknown_fields=True):
    offset: int = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class _NamesRequest(msgspec.Struct, forbid_unknown_fields=True):
    offset: int = 0
    subject: str = ""


class _PurgeRequest(msgspec.Struct, forbid_unknown_fields=True):
    seq: Uint64 = 0
    filter: str = ""
    keep: Uint64 = 0


class _MsgDeleteRequest(msgspec.Struct, forbid_unknown_fields=True):
    seq: Uint64 = 0
    no_erase: bool = False


def _decode(data: bytes, kind: type[_T], go_name: str) -> _T:
    body = data.strip()
    if not body or body == b"null":
        return kind()
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "malformed" in text or "truncated" in text or "trailing" in text:
            raise E.invalid_json(f"invalid JSON request: {text}") from None
        raise E.invalid_json(go_json_error(exc, go_name)) from None


def is_empty_request(data: bytes) -> bool:
    """nats-server's notion: no body, or a JSON object without keys."""
    if not data:
        return True
    try:
        value = json.loads(data)
    except ValueError:
        return False
    return isinstance(value, dict) and not value


def _token(subject: str, index: int) -> str:
    toks = subject.split(".")
    return toks[index] if len(toks) > index else ""


def _lookup(ctx: StreamApiContext, subject: str) -> Stream:
    """The stream named by the subject's last token (every stream-scoped subject ends in it,
    except DIRECT.GET.<stream>.<subject>, which does its own lookup)."""
    stream = ctx.streams.get(subject.rsplit(".", 1)[-1])
    if stream is None:
        raise E.stream_not_found()
    return stream


def _t(kind: str) -> str:
    return TYPE_PREFIX + kind


# --- stream info ---------------------------------------------------------------------------


def stream_state(
    ctx: StreamApiContext, stream: Stream, deleted: bool = False, subjects_filter: str = ""
) -> dict[str, Any]:
    st = stream.store.state(deleted=deleted)
    out: dict[str, Any] = {
        "messages": st.msgs,
        "bytes": st.bytes,
        "first_seq": st.first_seq,
        "first_ts": format_time(st.first_ts_ns),
        "last_seq": st.last_seq,
        "last_ts": format_time(st.last_ts_ns),
    }
    if st.num_subjects:
        out["num_subjects"] = st.num_subjects
    if subjects_filter:
        subjects = stream.store.subjects_state(subjects_filter)
        if subjects:
            out["subjects"] = subjects
    if st.num_deleted:
        out["num_deleted"] = st.num_deleted
        if deleted and st.deleted:
            out["deleted"] = list(st.deleted)
    out["consumer_count"] = ctx.consumer_count(stream.name)
    return out


def stream_info(
    ctx: StreamApiContext,
    stream: Stream,
    *,
    deleted: bool = False,
    subjects_filter: str = "",
    with_cluster: bool = True,
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "config": to_wire(stream.config),
        "created": format_time(stream.created_ns),
        "state": stream_state(ctx, stream, deleted, subjects_filter),
    }
    if with_cluster:
        info["cluster"] = {"leader": ctx.server_name}
    cfg = stream.config
    if cfg.mirror is not None or cfg.sources:
        running = stream.source_info
        info.update(running() if running is not None else source_info(cfg, {}, 0))
    info["ts"] = format_time(ctx.now_ns())
    return info


def handle_stream_info(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_info_response"
    try:
        req = _decode(data, _InfoRequest, "JSApiStreamInfoRequest")
        stream = _lookup(ctx, subject)
    except ApiError as exc:
        return _err(kind, exc, total=0, offset=0, limit=0)
    info = stream_info(
        ctx, stream, deleted=req.deleted_details, subjects_filter=req.subjects_filter
    )
    total = offset = limit = 0
    subjects = info["state"].get("subjects")
    if subjects is not None:
        names = sorted(subjects)
        total, offset, limit = len(names), min(max(req.offset, 0), len(names)), SUBJECTS_LIMIT
        page = names[offset : offset + limit]
        info["state"]["subjects"] = {name: subjects[name] for name in page}
    return {"type": _t(kind), "total": total, "offset": offset, "limit": limit, **info}


def _err(kind: str, exc: ApiError, **extra: Any) -> dict[str, Any]:
    return E.error_body(_t(kind), exc, **extra)


# --- create / update / delete --------------------------------------------------------------


def _check_overlap(ctx: StreamApiContext, cfg: StreamConfig) -> None:
    if cfg.sources or cfg.mirror is not None:
        streams = ctx.streams

        def lookup(name: str) -> StreamConfig | None:
            found = streams.get(name)
            return None if found is None else found.config

        check_cycle(cfg, lookup)
    for other in ctx.streams.values():
        if other.name == cfg.name:
            continue
        for mine in cfg.subjects:
            if any(filters_overlap(mine, theirs) for theirs in other.config.subjects):
                raise E.subjects_overlap()


class _StrictSetting(Protocol):
    @property
    def strict(self) -> bool: ...


def checked_config(
    ctx: _StrictSetting, subject: str, data: bytes, creating: bool
) -> StreamConfig:
    """The normalised config of a CREATE/UPDATE request; raises ApiError."""
    req = decode_request(data, ctx.strict)
    name = _token(subject, 4)
    if req.name != name:
        raise E.stream_mismatch()
    if "/" in name or "\\" in name:
        raise E.api_error(10128)
    if creating and req.sealed:
        raise E.stream_invalid_config("stream configuration for create can not be sealed")
    if creating and req.mirror_direct and req.mirror is None:
        raise E.stream_invalid_config("stream has no mirror but does have mirror direct")
    return normalise(req)


def handle_create(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_create_response"
    try:
        cfg = checked_config(ctx, subject, data, creating=True)
        if cfg.num_replicas > 1 and not ctx.clustered:
            raise E.replicas_not_supported()
        existing = ctx.streams.get(cfg.name)
        if existing is not None:
            if existing.config != cfg:
                raise E.stream_name_exists()
            stream = existing
        else:
            _check_overlap(ctx, cfg)
            stream = ctx.create_stream(cfg)
    except ApiError as exc:
        return _err(kind, exc)
    return {"type": _t(kind), **stream_info(ctx, stream, with_cluster=False), "did_create": True}


def handle_update(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_update_response"
    try:
        cfg = checked_config(ctx, subject, data, creating=False)
        stream = ctx.streams.get(cfg.name)
        if stream is None:
            raise E.stream_not_found()
        if cfg.num_replicas > 1 and not ctx.clustered:
            raise E.replicas_not_supported()
        cfg = check_update(stream.config, cfg)
        _check_overlap(ctx, cfg)
        if cfg != stream.config:
            ctx.update_stream(stream, cfg)
    except ApiError as exc:
        return _err(kind, exc)
    return {"type": _t(kind), **stream_info(ctx, stream, with_cluster=False)}


def handle_delete(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_delete_response"
    try:
        if not is_empty_request(data):
            raise E.not_empty_request()
        stream = _lookup(ctx, subject)
        ctx.delete_stream(stream)
    except ApiError as exc:
        return _err(kind, exc)
    return {"type": _t(kind), "success": True}


PURGE_KIND = "stream_purge_response"
MSG_DELETE_KIND = "stream_msg_delete_response"


def purge_request(ctx: StreamApiContext, subject: str, data: bytes) -> tuple[Stream, Purge]:
    """The stream and the entry a PURGE request asks for; raises ApiError."""
    req = _decode(data, _PurgeRequest, "JSApiStreamPurgeRequest")
    stream = _lookup(ctx, subject)
    if req.seq and req.keep:
        raise E.bad_request()
    return stream, Purge(req.filter, req.seq, req.keep)


def purge_response(result: Result) -> dict[str, Any]:
    if result.error is not None:
        return _err(PURGE_KIND, result.error, purged=0)
    assert isinstance(result, OpResult)
    return {"type": _t(PURGE_KIND), "success": True, "purged": result.count}


def handle_purge(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    try:
        stream, entry = purge_request(ctx, subject, data)
    except ApiError as exc:
        return _err(PURGE_KIND, exc, purged=0)
    return purge_response(ctx.propose(stream, entry))


def _raise_if_failed(result: Result) -> None:
    if result.error is not None:
        raise result.error


# --- names / list --------------------------------------------------------------------------


def filtered_names(
    data: bytes, configs: Mapping[str, StreamConfig], go_name: str
) -> tuple[list[str], int]:
    """Sorted names of the streams a NAMES/LIST request asks for, and its offset (clamped);
    a ``subject`` filter keeps the streams whose subjects overlap it."""
    req = _decode(data, _NamesRequest, go_name)
    names = sorted(configs)
    if req.subject:
        names = [
            n for n in names if any(filters_overlap(req.subject, s) for s in configs[n].subjects)
        ]
    return names, min(max(req.offset, 0), len(names))


def _matching_names(ctx: StreamApiContext, data: bytes, go_name: str) -> tuple[list[str], int]:
    configs = {name: stream.config for name, stream in ctx.streams.items()}
    return filtered_names(data, configs, go_name)


def handle_names(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_names_response"
    try:
        names, offset = _matching_names(ctx, data, "JSApiStreamNamesRequest")
    except ApiError as exc:
        return _err(kind, exc, total=0, offset=0, limit=0, streams=None)
    offset = min(offset, len(names))
    page = names[offset : offset + NAMES_LIMIT]
    return {
        "type": _t(kind),
        "total": len(names),
        "offset": offset,
        "limit": NAMES_LIMIT,
        "streams": page or None,
    }


def handle_list(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_list_response"
    try:
        names, offset = _matching_names(ctx, data, "JSApiStreamListRequest")
    except ApiError as exc:
        return _err(kind, exc, total=0, offset=0, limit=0, streams=[])
    offset = min(offset, len(names))
    page = names[offset : offset + LIST_LIMIT]
    infos = [stream_info(ctx, ctx.streams[n], with_cluster=False) for n in page]
    return {
        "type": _t(kind),
        "total": len(names),
        "offset": offset,
        "limit": LIST_LIMIT,
        "streams": infos,
    }


# --- messages ------------------------------------------------------------------------------


def _time_arg(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise E.invalid_json(str(exc)) from None


def handle_msg_get(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    kind = "stream_msg_get_response"
    try:
        if is_empty_request(data):
            raise E.bad_request()
        req = _decode(data, MsgGetRequest, "JSApiMsgGetRequest")
        start_ns = _time_arg(req.start_time)
        if req.batch > 0 or req.max_bytes > 0:
            raise E.bad_request()
        if (
            (req.seq > 0 and req.last_by_subj)
            or (req.seq == 0 and not req.last_by_subj and not req.next_by_subj and start_ns is None)
            or (req.seq > 0 and start_ns is not None)
            or (start_ns is not None and req.last_by_subj)
            or (req.last_by_subj and req.next_by_subj)
        ):
            raise E.bad_request()
        stream = _lookup(ctx, subject)
        msg = load_one(stream, req, start_ns)
        if msg is None:
            raise E.no_message_found()
    except ApiError as exc:
        return _err(kind, exc)
    message: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
    if msg.headers:
        message["hdrs"] = base64.b64encode(msg.headers).decode()
    if msg.data:
        message["data"] = base64.b64encode(msg.data).decode()
    message["time"] = format_time(msg.ts_ns)
    return {"type": _t(kind), "message": message}


def msg_delete_request(
    ctx: StreamApiContext, subject: str, data: bytes
) -> tuple[Stream, DeleteMsg]:
    """The stream and the entry a MSG.DELETE request asks for; raises ApiError."""
    if is_empty_request(data):
        raise E.bad_request()
    req = _decode(data, _MsgDeleteRequest, "JSApiMsgDeleteRequest")
    return _lookup(ctx, subject), DeleteMsg(req.seq, req.no_erase)


def msg_delete_response(result: Result) -> dict[str, Any]:
    if result.error is not None:
        return _err(MSG_DELETE_KIND, result.error)
    return {"type": _t(MSG_DELETE_KIND), "success": True}


def handle_msg_delete(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    try:
        stream, entry = msg_delete_request(ctx, subject, data)
    except ApiError as exc:
        return _err(MSG_DELETE_KIND, exc)
    return msg_delete_response(ctx.propose(stream, entry))


# --- account info and clustering-only requests ----------------------------------------------


def handle_account_info(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
    memory = storage = consumers = 0
    for stream in ctx.streams.values():
        used = stream.store.state().bytes
        if stream.config.storage == "memory":
            memory += used
        else:
            storage += used
        consumers += ctx.consumer_count(stream.name)
    return account_info_body(
        memory, storage, len(ctx.streams), consumers, ctx.limits(), ctx.domain, ctx.api_stats
    )


def account_info_body(
    memory: int,
    storage: int,
    streams: int,
    consumers: int,
    limits: dict[str, Any],
    domain: str,
    stats: ApiStats,
) -> dict[str, Any]:
    """$JS.API.INFO's answer as nats-server words it."""
    out: dict[str, Any] = {
        "type": _t("account_info_response"),
        "memory": memory,
        "storage": storage,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "streams": streams,
        "consumers": consumers,
        "limits": limits,
    }
    if domain:
        out["domain"] = domain
    out["api"] = {"level": API_LEVEL, "total": stats.total, "errors": stats.errors}
    return out


def _clustering_only(kind: str) -> Any:
    def handler(ctx: StreamApiContext, subject: str, reply: str, data: bytes) -> Any:
        try:
            if data.strip():
                json.loads(data)
            _lookup(ctx, subject)
        except ValueError as exc:
            return _err(kind, E.invalid_json(str(exc)))
        except ApiError as exc:
            return _err(kind, exc)
        return _err(kind, E.clustering_required())

    return handler


HANDLERS: dict[str, Any] = {
    "INFO": handle_account_info,
    "STREAM.CREATE.*": handle_create,
    "STREAM.UPDATE.*": handle_update,
    "STREAM.INFO.*": handle_stream_info,
    "STREAM.DELETE.*": handle_delete,
    "STREAM.PURGE.*": handle_purge,
    "STREAM.NAMES": handle_names,
    "STREAM.LIST": handle_list,
    "STREAM.MSG.GET.*": handle_msg_get,
    "STREAM.MSG.DELETE.*": handle_msg_delete,
    "DIRECT.GET.*": handle_direct_get,
    "DIRECT.GET.*.>": handle_direct_get_last,
    "STREAM.LEADER.STEPDOWN.*": _clustering_only("stream_leader_stepdown_response"),
    "STREAM.PEER.REMOVE.*": _clustering_only("stream_remove_peer_response"),
}
