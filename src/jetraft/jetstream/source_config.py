"""Checks and normalisation of a stream's ``mirror`` and ``sources`` (nats-server's
checkStreamCfg rules, its error codes and texts), and their wire form.

Only sourcing within the stream's own account is served: ``external`` (another account or
JetStream domain) and ``consumer`` (sourcing through a named durable) are refused with a
clear 10052 rather than accepted and ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from jetraft.jetstream.errors import ApiError, api_error, invalid_json, stream_invalid_config
from jetraft.jetstream.models import format_time, parse_time
from jetraft.protocol.subjects import filters_overlap, is_subset, is_valid_filter
from jetraft.protocol.transform import TransformError, validate_mapping

if TYPE_CHECKING:
    from collections.abc import Callable

    from jetraft.jetstream.stream_config import StreamConfig, StreamConfigRequest, StreamSource

_BAD_NAME_CHARS = frozenset(".*>/\\ \t\r\n\f\v")


def _valid_name(name: str) -> bool:
    return bool(name) and not any(c in _BAD_NAME_CHARS for c in name)


def _refuse_remote(src: StreamSource) -> None:
    if src.external is not None:
        raise stream_invalid_config(
            "sourcing or mirroring from another account or domain (external) "
            "is not supported by this server"
        )
    if src.consumer is not None:
        raise stream_invalid_config(
            "sourcing or mirroring through a durable consumer is not supported by this server"
        )


def _start_time(src: StreamSource) -> StreamSource:
    """``opt_start_time`` parsed and echoed as Go's RFC3339Nano (UTC) does."""
    if src.opt_start_time is None:
        return src
    try:
        ns = parse_time(src.opt_start_time)
    except ValueError as exc:
        raise invalid_json(str(exc)) from None
    return msgspec.structs.replace(src, opt_start_time=format_time(ns))


def iname(src: StreamSource) -> str:
    """nats-server's index name of a source: ``<name> <filter> <dest>`` (transforms joined
    by form feeds, empty parts read as '>'); it tells sources apart and goes into the
    Nats-Stream-Source header."""
    if not src.subject_transforms:
        return f"{src.name} {src.filter_subject or '>'} >"
    srcs = "\f".join(t.src or ">" for t in src.subject_transforms)
    dests = "\f".join(t.dest or ">" for t in src.subject_transforms)
    return f"{src.name} {srcs} {dests}"


def check_mirror(req: StreamConfigRequest) -> StreamSource | None:
    m = req.mirror
    if m is None:
        if req.mirror_direct:
            raise stream_invalid_config("stream has no mirror but does have mirror direct")
        return None
    if req.first_seq > 0:
        raise api_error(10143)
    if req.subjects:
        raise api_error(10034)
    if req.sources:
        raise api_error(10031)
    if req.allow_msg_counter:
        raise api_error(10173)
    if req.allow_atomic:
        raise api_error(10198)
    if req.allow_batched:
        raise api_error(10209)
    if req.allow_msg_schedules:
        raise api_error(10186)
    if m.filter_subject and m.subject_transforms:
        raise api_error(10150)
    if req.subject_delete_marker_ttl > 0:
        raise stream_invalid_config("subject delete markers forbidden on mirrors")
    transforms = m.subject_transforms or []
    for i, tr in enumerate(transforms):
        if tr.src and not is_valid_filter(tr.src):
            raise api_error(10151, err=f"invalid subject {tr.src}")
        try:
            validate_mapping(tr.src, tr.dest)
        except TransformError as exc:
            raise api_error(10154, err=str(exc)) from None
        for j, other in enumerate(transforms):
            if i != j and filters_overlap(tr.src or ">", other.src or ">"):
                raise api_error(10152)
    _refuse_remote(m)
    if not _valid_name(m.name):
        raise api_error(10142)
    return _start_time(m)


def check_sources(req: StreamConfigRequest) -> tuple[StreamSource, ...]:
    if not req.sources:
        return ()
    if req.allow_msg_schedules:
        raise api_error(10187)
    seen: set[str] = set()
    out: list[StreamSource] = []
    for src in req.sources:
        if src is None or not _valid_name(src.name):
            raise api_error(10141)
        key = iname(src)
        if key in seen:
            raise api_error(10140)
        seen.add(key)
        if src.filter_subject and src.subject_transforms:
            raise api_error(10144)
        transforms = src.subject_transforms or []
        for tr in transforms:
            if tr.src and not is_valid_filter(tr.src):
                raise api_error(10145, err=f"invalid subject {tr.src}")
            try:
                validate_mapping(tr.src, tr.dest)
            except TransformError as exc:
                raise api_error(10146, err=str(exc)) from None
        for i, tr in enumerate(transforms):
            for j, other in enumerate(transforms):
                if i != j and is_subset(tr.src or ">", other.src or ">"):
                    raise api_error(10147)
        _refuse_remote(src)
        out.append(_start_time(src))
    return tuple(out)


def check_cycle(cfg: StreamConfig, lookup: Callable[[str], StreamConfig | None]) -> None:
    """nats-server's cycle check across the account's streams (``lookup(name)``: the config
    of an existing stream, None if there is none): a stream that would, through its sources
    and mirrors, copy its own messages back into itself (the filters permitting) is refused."""
    to_visit: list[StreamConfig] = [cfg]
    visited: set[str] = set()
    while to_visit:
        cur = to_visit.pop(0)
        visited.add(cur.name)
        for src in cur.sources:
            if src.name in visited:
                if not src.filter_subject or any(
                    filters_overlap(s, src.filter_subject) for s in cur.subjects
                ):
                    raise stream_invalid_config("detected cycle")
            else:
                other = lookup(src.name)
                if other is not None:
                    to_visit.append(other)
        mir = cur.mirror
        if mir is not None:
            if mir.name in visited:
                raise stream_invalid_config("detected cycle")
            other = lookup(mir.name)
            if other is not None:
                to_visit.append(other)


def source_to_wire(src: StreamSource) -> dict[str, Any]:
    """One source as nats-server emits it (omitempty fields left out)."""
    out: dict[str, Any] = {"name": src.name}
    if src.opt_start_seq:
        out["opt_start_seq"] = src.opt_start_seq
    if src.opt_start_time is not None:
        out["opt_start_time"] = src.opt_start_time
    if src.filter_subject:
        out["filter_subject"] = src.filter_subject
    if src.subject_transforms:
        out["subject_transforms"] = [
            {"src": t.src, "dest": t.dest} for t in src.subject_transforms
        ]
    return out


__all__ = ["ApiError", "check_cycle", "check_mirror", "check_sources", "iname", "source_to_wire"]
