"""StreamConfig: decoding the request, normalising it the way nats-server does, validating it
with nats-server's error codes and texts, and encoding it back.

Unknown request fields are refused with 10025 (``json: unknown field "x"``): nats-server runs in
strict mode by default since 2.11, and clients are written against it. Every field nats-server
knows is accepted by the decoder; features jetraft does not implement (sourcing from other
accounts or domains, counters, atomic/batched publish, schedules) are refused with a clear
10052 instead of being silently ignored.

The normalised config is what the stream runs with, what is persisted, and what is echoed back
(with ``-1`` for unlimited and the defaults filled in, which nats-py's tests compare).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from jetraft.jetstream.errors import (
    ApiError,
    api_error,
    invalid_json,
    replicas_negative,
    stream_invalid_config,
)
from jetraft.jetstream.models import go_json_error
from jetraft.jetstream.source_config import check_mirror, check_sources, source_to_wire
from jetraft.protocol.subjects import filters_overlap, is_subset, is_valid_filter
from jetraft.protocol.transform import SubjectTransform as Transform
from jetraft.protocol.transform import TransformError, validate_mapping

NS_PER_MS = 1_000_000
DEFAULT_DUPLICATE_WINDOW_NS = 120 * 1_000_000_000
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MAX_REPLICAS = 5
RETENTIONS = ("limits", "interest", "workqueue")
DISCARDS = ("old", "new")
STORAGES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
PERSIST_MODES = ("default", "async")
_BAD_NAME_CHARS = frozenset(".*>/\\ \t\r\n\f\v")


# --- the request, as decoded (strict: unknown fields are an error) ------------------------


class Placement(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    cluster: str = ""
    tags: list[str] | None = None
    preferred: str = ""


class SubjectTransform(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    src: str = ""
    dest: str = ""


class ExternalStream(msgspec.Struct, forbid_unknown_fields=True):
    api: str = ""
    deliver: str = ""


class ConsumerSource(msgspec.Struct, forbid_unknown_fields=True):
    name: str = ""
    deliver_subject: str = ""


class StreamSource(msgspec.Struct, forbid_unknown_fields=True):
    name: str = ""
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransform] | None = None
    external: ExternalStream | None = None
    consumer: ConsumerSource | None = None


class RePublish(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    src: str = ""
    dest: str = ""
    headers_only: bool = False


class ConsumerLimits(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, frozen=True):
    inactive_threshold: int = 0
    max_ack_pending: int = 0


class StreamConfigRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Everything nats-server's StreamConfigRequest accepts; durations are nanoseconds."""

    name: str = ""
    description: str = ""
    subjects: list[str] | None = None
    retention: str = "limits"
    max_consumers: int = 0
    max_msgs: int = 0
    max_bytes: int = 0
    max_age: int = 0
    max_msgs_per_subject: int = 0
    max_msg_size: int = 0
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 0
    no_ack: bool = False
    duplicate_window: int = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource | None] | None = None
    compression: str = "none"
    first_seq: int = 0
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits | None = None
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: str | None = None
    allow_batched: bool = False
    metadata: dict[str, str] | None = None
    pedantic: bool = False


class _LenientRequest(StreamConfigRequest, forbid_unknown_fields=False):
    """``jetstream { strict: false }``: unknown top-level fields are ignored."""


_DECODER = msgspec.json.Decoder(StreamConfigRequest)
_LENIENT_DECODER = msgspec.json.Decoder(_LenientRequest)


def decode_request(data: bytes, strict: bool = True) -> StreamConfigRequest:
    """Decode a CREATE/UPDATE body (raises ApiError 10025). An empty body or ``null`` is an
    empty request, as Go's decoder leaves the struct untouched for them."""
    body = data.strip()
    if not body or body == b"null":
        return StreamConfigRequest()
    try:
        if not strict:
            return _LENIENT_DECODER.decode(body)
        return _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "JSON is malformed" in text or "truncated" in text or "trailing" in text:
            # A second JSON value after the first is read as more of the same request by Go;
            # either way it is an invalid request.
            raise invalid_json(_syntax_error(body)) from None
        raise invalid_json(go_json_error(exc, "StreamConfigRequest")) from None


def _syntax_error(body: bytes) -> str:
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        return f"invalid character at offset {exc.pos + 1}: {exc.msg}"
    except ValueError as exc:
        return str(exc)
    return "invalid JSON"


# --- the normalised config ---------------------------------------------------------------


class StreamConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A validated, normalised stream configuration (``-1`` = unlimited)."""

    name: str
    description: str = ""
    subjects: tuple[str, ...] = ()
    retention: str = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0  # ns, 0 = unlimited
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = DEFAULT_DUPLICATE_WINDOW_NS
    placement: Placement | None = None
    # UNSET when absent, as subject_transform below: read them as ``mirror`` / ``sources``.
    mirror_of: StreamSource | msgspec.UnsetType = msgspec.field(
        default=msgspec.UNSET, name="mirror")
    sources_of: tuple[StreamSource, ...] | msgspec.UnsetType = msgspec.field(
        default=msgspec.UNSET, name="sources")
    compression: str = "none"
    first_seq: int = 0
    # UNSET when absent: left out of the encoded config, so a config without them encodes
    # as before (persisted configs, RAFT entries and the simulator's byte layouts).
    subject_transform: SubjectTransform | msgspec.UnsetType = msgspec.UNSET
    republish: RePublish | msgspec.UnsetType = msgspec.UNSET
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = ConsumerLimits()
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    persist_mode: str = "default"
    metadata: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def mirror(self) -> StreamSource | None:
        m = self.mirror_of
        return None if isinstance(m, msgspec.UnsetType) else m

    @property
    def sources(self) -> tuple[StreamSource, ...]:
        s = self.sources_of
        return () if isinstance(s, msgspec.UnsetType) else s

    @property
    def discard_new(self) -> bool:
        return self.discard == "new"

    def input_transform(self) -> Transform | None:
        """The compiled ``subject_transform`` (validated by ``normalise``)."""
        st = self.subject_transform
        return Transform.create(st.src, st.dest) if isinstance(st, SubjectTransform) else None

    def republish_transform(self) -> Transform | None:
        """The compiled ``republish`` source -> destination (validated by ``normalise``)."""
        rp = self.republish
        return Transform.create(rp.src or ">", rp.dest) if isinstance(rp, RePublish) else None


def _bad_enum(value: str) -> ApiError:
    # nats-server words it with Go's %q of the raw JSON token.
    return invalid_json("can not unmarshal " + json.dumps(json.dumps(value)))


def valid_stream_name(name: str) -> bool:
    return bool(name) and not any(c in _BAD_NAME_CHARS for c in name)


def _unlimited(value: int, what: str, pedantic: bool) -> int:
    if value == 0 or value < -1:
        if pedantic and value < -1:
            raise api_error(10157, err=f"{what} must be set to -1")
        return -1
    return value


def _check_unsupported(req: StreamConfigRequest) -> None:
    unsupported = (
        (req.allow_msg_counter, "message counters"),
        (req.allow_atomic, "atomic publish"),
        (req.allow_batched, "batch publish"),
        (req.allow_msg_schedules, "message schedules"),
    )
    for present, what in unsupported:
        if present:
            raise stream_invalid_config(f"{what} are not supported by this server")


def normalise(req: StreamConfigRequest) -> StreamConfig:
    """Fill defaults and validate one config on its own (nats-server's checkStreamCfg order);
    account-level checks (overlaps, limits, clustering) are done by the caller."""
    if not valid_stream_name(req.name):
        raise stream_invalid_config(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'"
        )
    if len(req.name) > MAX_NAME_LEN:
        raise stream_invalid_config(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(req.description) > MAX_DESCRIPTION_LEN:
        raise stream_invalid_config(
            f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}"
        )
    metadata = dict(req.metadata or {})
    if sum(len(k) + len(v) for k, v in metadata.items()) > MAX_METADATA_LEN:
        raise stream_invalid_config(
            f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes"
        )
    if req.retention not in RETENTIONS:
        raise _bad_enum(req.retention)
    if req.discard not in DISCARDS:
        raise _bad_enum(req.discard)
    if req.storage not in STORAGES:
        raise _bad_enum(req.storage)
    if req.compression not in COMPRESSIONS:
        raise _bad_enum(req.compression)
    persist_mode = req.persist_mode or "default"
    if persist_mode not in PERSIST_MODES:
        raise _bad_enum(persist_mode)
    _check_unsupported(req)
    ped = req.pedantic
    replicas = req.num_replicas or 1
    if replicas > MAX_REPLICAS:
        raise stream_invalid_config(f"maximum replicas is {MAX_REPLICAS}")
    if replicas < 0:
        raise replicas_negative()
    max_msgs = _unlimited(req.max_msgs, "max_msgs", ped)
    max_per = _unlimited(req.max_msgs_per_subject, "max_msgs_per_subject", ped)
    max_bytes = _unlimited(req.max_bytes, "max_bytes", ped)
    max_msg_size = _unlimited(req.max_msg_size, "max_msg_size", ped)
    max_consumers = _unlimited(req.max_consumers, "max_consumers", ped)
    if max_msg_size > 2**31 - 1:
        raise invalid_json(
            "json: cannot unmarshal number into Go struct field "
            "StreamConfigRequest.max_msg_size of type int32"
        )
    max_age = req.max_age
    if max_age < 0:
        raise stream_invalid_config("max age can not be negative")
    if 0 < max_age < 100 * NS_PER_MS:
        raise stream_invalid_config("max age needs to be >= 100ms")
    sourcing = req.mirror is not None or bool(req.sources)
    window = _duplicate_window(req.duplicate_window, max_age, ped, sourcing)
    if req.deny_purge and req.allow_rollup_hdrs:
        raise stream_invalid_config("roll-ups require the purge permission")
    if req.discard_new_per_subject:
        if req.discard != "new":
            raise stream_invalid_config(
                "discard new per subject requires discard new policy to be set"
            )
        if max_per <= 0:
            raise stream_invalid_config("discard new per subject requires max msgs per subject > 0")
    allow_ttl, allow_rollup, deny_purge = req.allow_msg_ttl, req.allow_rollup_hdrs, req.deny_purge
    marker_ttl = req.subject_delete_marker_ttl
    if marker_ttl > 0:
        if marker_ttl < 1_000_000_000:
            raise stream_invalid_config("subject delete marker TTL must be at least 1 second")
        if not allow_ttl:
            if ped:
                raise stream_invalid_config(
                    "subject delete marker cannot be set if message TTLs are disabled"
                )
            allow_ttl = True
        if not allow_rollup:
            if ped:
                raise stream_invalid_config(
                    "subject delete marker cannot be set if roll-ups are disabled"
                )
            allow_rollup, deny_purge = True, False
    elif marker_ttl < 0:
        raise stream_invalid_config("subject delete marker TTL must not be negative")
    if persist_mode == "async" and req.storage != "file":
        raise stream_invalid_config("async persist mode is only supported on file storage")
    if persist_mode == "async" and replicas > 1:
        raise stream_invalid_config("async persist mode is not supported on replicated streams")
    mirror = check_mirror(req)
    sources = check_sources(req)
    subjects = _check_subjects(req)
    transform = _check_transform(req.subject_transform)
    republish = _check_republish(req.republish, transform, subjects, ped)
    placement = req.placement
    if placement is not None and placement == Placement():
        placement = None
    if placement is not None and placement.preferred:
        raise stream_invalid_config("preferred server not permitted in placement")
    if req.first_seq < 0:
        raise invalid_json(
            "json: cannot unmarshal number into Go struct field "
            "StreamConfigRequest.first_seq of type uint64"
        )
    return StreamConfig(
        name=req.name,
        description=req.description,
        subjects=subjects,
        retention=req.retention,
        max_consumers=max_consumers,
        max_msgs=max_msgs,
        max_bytes=max_bytes,
        max_age=max_age,
        max_msgs_per_subject=max_per,
        max_msg_size=max_msg_size,
        discard=req.discard,
        storage=req.storage,
        num_replicas=replicas,
        no_ack=req.no_ack,
        duplicate_window=window,
        placement=placement,
        mirror_of=msgspec.UNSET if mirror is None else mirror,
        sources_of=sources or msgspec.UNSET,
        compression=req.compression,
        first_seq=req.first_seq,
        subject_transform=msgspec.UNSET if transform is None else transform,
        republish=msgspec.UNSET if republish is None else republish,
        allow_direct=req.allow_direct,
        mirror_direct=req.mirror_direct,
        discard_new_per_subject=req.discard_new_per_subject,
        sealed=req.sealed,
        deny_delete=req.deny_delete,
        deny_purge=deny_purge,
        allow_rollup_hdrs=allow_rollup,
        consumer_limits=req.consumer_limits or ConsumerLimits(),
        allow_msg_ttl=allow_ttl,
        subject_delete_marker_ttl=marker_ttl,
        persist_mode=persist_mode,
        metadata=metadata,
    )


def _duplicate_window(window: int, max_age: int, pedantic: bool, sourcing: bool) -> int:
    if window == 0 and sourcing:
        return 0  # nats-server leaves a mirror's or sourcing stream's window unset
    if window == 0:
        if max_age != 0 and max_age < DEFAULT_DUPLICATE_WINDOW_NS:
            if pedantic:
                raise api_error(10157, err="duplicate window cannot be bigger than max age")
            window = max_age
        else:
            window = DEFAULT_DUPLICATE_WINDOW_NS
    if window < 0:
        raise stream_invalid_config("duplicates window can not be negative")
    if max_age != 0 and window > max_age:
        raise stream_invalid_config("duplicates window can not be larger then max age")
    if 0 < window < 100 * NS_PER_MS:
        raise stream_invalid_config("duplicates window needs to be >= 100ms")
    return window


def _check_subjects(req: StreamConfigRequest) -> tuple[str, ...]:
    if not req.subjects:
        if req.mirror is not None or req.sources:
            return ()
        return (req.name,)
    seen: set[str] = set()
    subjects = req.subjects
    for i, subj in enumerate(subjects):
        if not is_valid_filter(subj):
            raise stream_invalid_config("invalid subject")
        if subj in seen:
            raise stream_invalid_config("duplicate subjects detected")
        if subj == ">":
            if not req.no_ack:
                raise stream_invalid_config("capturing all subjects requires no-ack to be true")
            if (req.num_replicas or 1) != 1:
                raise stream_invalid_config("capturing all subjects requires replicas of 1")
        if not req.no_ack:
            for namespace in ("$JS.>", "$JSC.>", "$NRG.>"):
                if filters_overlap(subj, namespace) and not is_subset(subj, "$JS.EVENT.>"):
                    raise stream_invalid_config(
                        "subjects that overlap with jetstream api require no-ack to be true"
                    )
            if filters_overlap(subj, "$SYS.>") and not is_subset(subj, "$SYS.ACCOUNT.>"):
                raise stream_invalid_config(
                    "subjects that overlap with system api require no-ack to be true"
                )
        for other in subjects[i + 1 :]:
            if filters_overlap(other, subj):
                raise stream_invalid_config(f'subject "{subj}" overlaps with "{other}"')
        seen.add(subj)
    return tuple(subjects)


def _check_transform(st: SubjectTransform | None) -> SubjectTransform | None:
    """nats-server's checks of ``subject_transform``: a valid source filter (empty: all),
    then the mapping rules of the destination."""
    if st is None:
        return None
    if st.src and not is_valid_filter(st.src):
        raise api_error(10155, err=f"invalid subject {st.src}")
    try:
        validate_mapping(st.src, st.dest)
    except TransformError as exc:
        raise api_error(10156, err=str(exc)) from None
    return st


def _check_republish(
    rp: RePublish | None,
    transform: SubjectTransform | None,
    subjects: tuple[str, ...],
    pedantic: bool,
) -> RePublish | None:
    """An empty source means every subject; '>' to '>' on a stream whose only subject is
    its transform's source republishes the transformed subjects (nats-server's implicit
    republish); a destination that a stream subject would capture forms a cycle."""
    if rp is None:
        return None
    src, dest = rp.src, rp.dest
    if not src:
        if pedantic:
            raise api_error(10157, err="republish source can not be empty")
        src = ">"
    if (
        src == ">"
        and dest == ">"
        and transform is not None
        and len(subjects) == 1
        and transform.src == subjects[0]
    ):
        if pedantic:
            raise api_error(10157, err="implicit republish based on subject transform")
        src = dest = transform.dest
    if any(filters_overlap(dest, subj) for subj in subjects if dest):
        raise stream_invalid_config("stream configuration for republish destination forms a cycle")
    try:
        Transform.create(src, dest)
    except TransformError:
        raise stream_invalid_config(
            f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
        ) from None
    return RePublish(src, dest, rp.headers_only)


def check_update(old: StreamConfig, new: StreamConfig) -> StreamConfig:
    """What an UPDATE may change (nats-server's configUpdateCheck); returns the config to
    run with (sealing forces its own settings)."""
    if new.name != old.name:
        raise stream_invalid_config("stream configuration name must match original")
    if new.storage != old.storage:
        raise stream_invalid_config("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
        raise stream_invalid_config(
            "stream configuration update can not change retention policy to/from workqueue"
        )
    if old.sealed and not new.sealed:
        raise stream_invalid_config("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise stream_invalid_config(
            "stream configuration update can not cancel deny message deletes"
        )
    if old.deny_purge and not new.deny_purge:
        raise stream_invalid_config("stream configuration update can not cancel deny purge")
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise stream_invalid_config("message TTL status can not be disabled")
    if new.mirror is not None and new.mirror != old.mirror:
        raise api_error(10055)
    if old.persist_mode != new.persist_mode:
        raise stream_invalid_config("stream configuration update can not change persist mode")
    if new.sealed:
        new = msgspec.structs.replace(
            new,
            max_age=0,
            discard="new",
            deny_delete=True,
            deny_purge=True,
            allow_rollup_hdrs=False,
        )
    return new


# --- encoding ----------------------------------------------------------------------------


def to_wire(cfg: StreamConfig) -> dict[str, Any]:
    """The config as nats-server emits it (its field order and omitempty rules)."""
    out: dict[str, Any] = {"name": cfg.name}
    if cfg.description:
        out["description"] = cfg.description
    if cfg.subjects:
        out["subjects"] = list(cfg.subjects)
    out["retention"] = cfg.retention
    out["max_consumers"] = cfg.max_consumers
    out["max_msgs"] = cfg.max_msgs
    out["max_bytes"] = cfg.max_bytes
    out["max_age"] = cfg.max_age
    out["max_msgs_per_subject"] = cfg.max_msgs_per_subject
    out["max_msg_size"] = cfg.max_msg_size
    out["discard"] = cfg.discard
    out["storage"] = cfg.storage
    out["num_replicas"] = cfg.num_replicas
    if cfg.no_ack:
        out["no_ack"] = True
    if cfg.duplicate_window:
        out["duplicate_window"] = cfg.duplicate_window
    if cfg.placement is not None:
        out["placement"] = msgspec.to_builtins(cfg.placement)
    if cfg.mirror is not None:
        out["mirror"] = source_to_wire(cfg.mirror)
    if cfg.sources:
        out["sources"] = [source_to_wire(src) for src in cfg.sources]
    out["compression"] = cfg.compression
    if cfg.first_seq:
        out["first_seq"] = cfg.first_seq
    st = cfg.subject_transform
    if isinstance(st, SubjectTransform):
        out["subject_transform"] = {"src": st.src, "dest": st.dest}
    rp = cfg.republish
    if isinstance(rp, RePublish):
        out["republish"] = {"src": rp.src, "dest": rp.dest} if rp.src else {"dest": rp.dest}
        if rp.headers_only:
            out["republish"]["headers_only"] = True
    out["allow_direct"] = cfg.allow_direct
    out["mirror_direct"] = cfg.mirror_direct
    if cfg.discard_new_per_subject:
        out["discard_new_per_subject"] = True
    out["sealed"] = cfg.sealed
    out["deny_delete"] = cfg.deny_delete
    out["deny_purge"] = cfg.deny_purge
    out["allow_rollup_hdrs"] = cfg.allow_rollup_hdrs
    out["consumer_limits"] = msgspec.to_builtins(cfg.consumer_limits)
    out["allow_msg_ttl"] = cfg.allow_msg_ttl
    if cfg.subject_delete_marker_ttl:
        out["subject_delete_marker_ttl"] = cfg.subject_delete_marker_ttl
    if cfg.persist_mode != "default":
        out["persist_mode"] = cfg.persist_mode
    if cfg.metadata:
        out["metadata"] = dict(cfg.metadata)
    return out


def from_wire(data: bytes) -> StreamConfig:
    """Read a persisted config back (same JSON as ``to_wire``), re-validating it."""
    return normalise(decode_request(data))
