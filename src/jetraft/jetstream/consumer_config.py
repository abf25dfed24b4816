"""Consumer configuration: the wire form, its normalisation (nats-server's defaults) and its
validation (nats-server's error codes), plus the RFC 3339 helpers consumers need.

Two types on purpose: ``ConsumerConfigRequest`` is what a client may send (every field
optional, ``null`` accepted, unknown keys refused like nats-server's strict decoder), and
``ConsumerConfig`` is the normalised, immutable value the rest of the code uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from jetraft.jetstream.consumer_errors import ConsumerError, cerr
from jetraft.jetstream.models import format_time, go_json_error, parse_time
from jetraft.protocol.subjects import filters_overlap, is_subset, is_valid_filter, is_valid_subject

DeliverPolicy = Literal[
    "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
]
AckPolicy = Literal["none", "all", "explicit"]
ReplayPolicy = Literal["instant", "original"]
Action = Literal["", "create", "update"]

ACK_WAIT_DEFAULT_NS = 30 * 1_000_000_000
INACTIVE_THRESHOLD_DEFAULT_NS = 5 * 1_000_000_000
MAX_ACK_PENDING_DEFAULT = 1000
MAX_WAITING_DEFAULT = 512
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MIN_HEARTBEAT_NS = 100_000_000
_MS_NS = 1_000_000

_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>\\/")
_GROUP_RE = re.compile(r"^[a-zA-Z0-9/_=-]{1,16}$")


class ConsumerConfigRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A consumer config exactly as a client sent it; ``None`` means "not given"."""

    name: str | None = None
    durable_name: str | None = None
    description: str | None = None
    deliver_policy: str | None = None
    opt_start_seq: int | None = None
    opt_start_time: str | None = None
    ack_policy: str | None = None
    ack_wait: int | None = None
    max_deliver: int | None = None
    backoff: list[int] | None = None
    filter_subject: str | None = None
    filter_subjects: list[str] | None = None
    replay_policy: str | None = None
    rate_limit_bps: int | None = None
    sample_freq: str | None = None
    max_waiting: int | None = None
    max_ack_pending: int | None = None
    flow_control: bool | None = None
    headers_only: bool | None = None
    max_batch: int | None = None
    max_expires: int | None = None
    max_bytes: int | None = None
    deliver_subject: str | None = None
    deliver_group: str | None = None
    idle_heartbeat: int | None = None
    inactive_threshold: int | None = None
    num_replicas: int | None = None
    mem_storage: bool | None = None
    direct: bool | None = None
    metadata: dict[str, str] | None = None
    pause_until: str | None = None
    priority_groups: list[str] | None = None
    priority_policy: str | None = None
    priority_timeout: int | None = None


class CreateConsumerRequest(msgspec.Struct, forbid_unknown_fields=True):
    stream_name: str | None = None
    config: ConsumerConfigRequest | None = None
    action: str | None = None
    pedantic: bool | None = None


class ConsumerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A normalised consumer config. Durations are nanoseconds, times RFC 3339 strings."""

    name: str = ""
    durable_name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: int = 0
    max_deliver: int = -1
    backoff: tuple[int, ...] = ()
    filter_subject: str = ""
    filter_subjects: tuple[str, ...] = ()
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    metadata: dict[str, str] | None = None
    pause_until: str | None = None
    priority_groups: tuple[str, ...] = ()
    priority_policy: str = "none"
    priority_timeout: int = 0

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def filters(self) -> tuple[str, ...]:
        """Every subject filter (empty = the whole stream)."""
        if self.filter_subject:
            return (self.filter_subject,)
        return self.filter_subjects


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What consumer validation needs to know about the parent stream."""

    name: str
    subjects: tuple[str, ...]
    retention: str = "limits"  # limits | interest | workqueue
    replicas: int = 1
    max_msgs_per_subject: int = -1
    max_consumers: int = -1
    limits_max_ack_pending: int = 0
    limits_inactive_threshold_ns: int = 0


def stream_facts(cfg: Any) -> StreamFacts:
    """StreamFacts from a ``stream_config.StreamConfig``."""
    limits = cfg.consumer_limits
    return StreamFacts(
        name=cfg.name,
        subjects=tuple(cfg.subjects),
        retention=cfg.retention,
        replicas=cfg.num_replicas,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        max_consumers=cfg.max_consumers,
        limits_max_ack_pending=limits.max_ack_pending if limits else 0,
        limits_inactive_threshold_ns=limits.inactive_threshold if limits else 0,
    )


# --- time ----------------------------------------------------------------------------------


def parse_rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch for an RFC 3339 time (raises ValueError)."""
    return parse_time(text)


def format_rfc3339_ns(ns: int) -> str:
    """UTC RFC 3339 with Go's RFC3339Nano trimming (no trailing zeros in the fraction)."""
    return format_time(ns)


def normalize_time(text: str) -> str:
    return format_time(parse_time(text))


# --- decoding ------------------------------------------------------------------------------

_REQUEST_DECODER = msgspec.json.Decoder(CreateConsumerRequest)


def invalid_json(exc: Exception) -> ConsumerError:
    """nats-server words decode errors like Go's encoding/json; so do we."""
    return cerr(10025, err=go_json_error(exc, "CreateConsumerRequest"))


def decode_create_request(data: bytes) -> CreateConsumerRequest:
    """Decode a CONSUMER.CREATE body; an empty body is an empty request."""
    if not data.strip():
        return CreateConsumerRequest()
    try:
        return _REQUEST_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise invalid_json(exc) from None


def _enum(value: str | None, allowed: tuple[str, ...], default: str, what: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise cerr(10025, err=f'can not unmarshal "\\"{value}\\""')
    return value


def config_from_request(req: ConsumerConfigRequest) -> ConsumerConfig:
    """Map a wire config onto the typed config; only enum spellings are checked here."""
    deliver = _enum(
        "all" if req.deliver_policy == "undefined" else req.deliver_policy,
        ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
        "all",
        "deliver_policy",
    )
    ack = _enum(req.ack_policy, ("none", "all", "explicit"), "none", "ack_policy")
    replay = _enum(req.replay_policy, ("instant", "original"), "instant", "replay_policy")
    prio = _enum(
        req.priority_policy,
        ("none", "overflow", "pinned_client", "prioritized"),
        "none",
        "priority_policy",
    )
    for label, text in (("opt_start_time", req.opt_start_time), ("pause_until", req.pause_until)):
        if text is not None:
            try:
                parse_rfc3339_ns(text)
            except ValueError as exc:
                raise cerr(10025, err=f"{label}: {exc}") from None
    return ConsumerConfig(
        name=req.name or "",
        durable_name=req.durable_name or "",
        description=req.description or "",
        deliver_policy=deliver,  # type: ignore[arg-type]
        opt_start_seq=req.opt_start_seq or 0,
        opt_start_time=normalize_time(req.opt_start_time) if req.opt_start_time else None,
        ack_policy=ack,  # type: ignore[arg-type]
        ack_wait=req.ack_wait or 0,
        max_deliver=req.max_deliver or 0,
        backoff=tuple(req.backoff or ()),
        filter_subject=req.filter_subject or "",
        filter_subjects=tuple(req.filter_subjects or ()),
        replay_policy=replay,  # type: ignore[arg-type]
        rate_limit_bps=req.rate_limit_bps or 0,
        sample_freq=req.sample_freq or "",
        max_waiting=req.max_waiting or 0,
        max_ack_pending=req.max_ack_pending or 0,
        flow_control=bool(req.flow_control),
        headers_only=bool(req.headers_only),
        max_batch=req.max_batch or 0,
        max_expires=req.max_expires or 0,
        max_bytes=req.max_bytes or 0,
        deliver_subject=req.deliver_subject or "",
        deliver_group=req.deliver_group or "",
        idle_heartbeat=req.idle_heartbeat or 0,
        inactive_threshold=req.inactive_threshold or 0,
        num_replicas=req.num_replicas or 0,
        mem_storage=bool(req.mem_storage),
        direct=bool(req.direct),
        metadata=dict(req.metadata) if req.metadata else None,
        pause_until=normalize_time(req.pause_until) if req.pause_until else None,
        priority_groups=tuple(req.priority_groups or ()),
        priority_policy=prio,
        priority_timeout=req.priority_timeout or 0,
    )


# --- defaults ------------------------------------------------------------------------------


def check_pedantic(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    """A pedantic create (``"pedantic": true``) refuses what ``apply_defaults`` would silently
    change, with nats-server's 10157 texts; raises ConsumerError."""
    negatives = ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat",
                 "inactive_threshold", "priority_timeout")
    problem = ""
    if cfg.max_deliver < -1:
        problem = "max_deliver must be set to -1"
    else:
        for key in negatives:  # the field names are the JSON ones
            if getattr(cfg, key) < 0:
                problem = f"{key} must not be negative"
                break
    if not problem and cfg.max_ack_pending < -1:
        problem = "max_ack_pending must be set to -1"
    ack_wait = cfg.ack_wait
    if ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        ack_wait = ACK_WAIT_DEFAULT_NS
    if not problem and cfg.backoff and ack_wait != cfg.backoff[0]:
        problem = "first backoff value has to equal batch AckWait"
    if not problem and cfg.max_ack_pending == 0 and stream.limits_max_ack_pending > 0:
        problem = "max_ack_pending must be set if it's configured in stream limits"
    if not problem and cfg.inactive_threshold == 0 and stream.limits_inactive_threshold_ns > 0:
        problem = "inactive_threshold must be set if it's configured in stream limits"
    if problem:
        raise cerr(10157, err=problem)


def apply_defaults(cfg: ConsumerConfig, stream: StreamFacts) -> ConsumerConfig:
    """nats-server's setConsumerConfigDefaults (non-pedantic): negative values are clamped."""
    changes: dict[str, Any] = {}
    max_deliver = cfg.max_deliver
    if max_deliver == 0 or max_deliver < -1:
        max_deliver = -1
    changes["max_deliver"] = max_deliver
    for key in (
        "max_waiting",
        "max_batch",
        "max_expires",
        "max_bytes",
        "idle_heartbeat",
        "inactive_threshold",
        "priority_timeout",
    ):
        if getattr(cfg, key) < 0:
            changes[key] = 0
    max_waiting = changes.get("max_waiting", cfg.max_waiting)
    if not cfg.deliver_subject and max_waiting == 0:
        changes["max_waiting"] = MAX_WAITING_DEFAULT
    max_ack_pending = cfg.max_ack_pending
    if max_ack_pending < -1:
        max_ack_pending = -1
    ack_wait = cfg.ack_wait
    if ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        ack_wait = ACK_WAIT_DEFAULT_NS
    if cfg.backoff:
        ack_wait = cfg.backoff[0]
    changes["ack_wait"] = ack_wait
    if max_ack_pending == 0:
        max_ack_pending = stream.limits_max_ack_pending
    if changes.get("inactive_threshold", cfg.inactive_threshold) == 0:
        changes["inactive_threshold"] = stream.limits_inactive_threshold_ns
    if max_ack_pending == 0 and cfg.ack_policy != "none":
        max_ack_pending = MAX_ACK_PENDING_DEFAULT
    changes["max_ack_pending"] = max_ack_pending
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        changes["priority_timeout"] = 120 * 1_000_000_000
    # Ephemerals always get an inactivity threshold (nats-server stamps the default, sans jitter).
    if not cfg.durable_name and changes.get("inactive_threshold", cfg.inactive_threshold) <= 0:
        changes["inactive_threshold"] = INACTIVE_THRESHOLD_DEFAULT_NS
    return msgspec.structs.replace(cfg, **changes)


# --- validation ----------------------------------------------------------------------------


def valid_asset_name(name: str) -> bool:
    return bool(name) and not any(c in _BAD_NAME_CHARS for c in name)


def _policy_error(text: str) -> ConsumerError:
    return cerr(10094, err=text)


def _check_start_policy(cfg: ConsumerConfig) -> None:
    def bad_start(dp: str, start: str) -> ConsumerError:
        return _policy_error(
            f"consumer delivery policy is deliver {dp}, but optional start {start} is also set"
        )

    def not_set(dp: str, what: str) -> ConsumerError:
        return _policy_error(
            f"consumer delivery policy is deliver {dp}, but optional {what} is not set"
        )

    dp = cfg.deliver_policy
    label = {
        "all": "all",
        "last": "last",
        "new": "new",
        "last_per_subject": "last per subject",
        "by_start_sequence": "by start sequence",
        "by_start_time": "by start time",
    }[dp]
    if dp in ("all", "last", "new", "last_per_subject"):
        if cfg.opt_start_seq > 0:
            raise bad_start(label, "sequence")
        if cfg.opt_start_time is not None:
            raise bad_start(label, "time")
        if dp == "last_per_subject" and not cfg.filters:
            raise not_set(label, "filter subject")
    elif dp == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            raise not_set(label, "start sequence")
        if cfg.opt_start_time is not None:
            raise bad_start(label, "time")
    else:
        if cfg.opt_start_time is None:
            raise not_set(label, "start time")
        if cfg.opt_start_seq != 0:
            raise bad_start(label, "start sequence")


def _check_mode(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    if cfg.deliver_subject:
        if not is_valid_filter(cfg.deliver_subject):
            raise cerr(10112)
        if not is_valid_subject(cfg.deliver_subject):
            raise cerr(10079)
        if any(
            is_subset(cfg.deliver_subject, s) or is_subset(s, cfg.deliver_subject)
            for s in stream.subjects
        ):
            raise cerr(10081)
        if cfg.max_waiting != 0:
            raise cerr(10080)
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise cerr(10082)
        if 0 < cfg.idle_heartbeat < MIN_HEARTBEAT_NS:
            raise cerr(10083)
        return
    if cfg.ack_policy == "none" and stream.retention == "workqueue":
        raise cerr(10084)
    if cfg.rate_limit_bps > 0:
        raise cerr(10086)
    if cfg.max_waiting < 0:
        raise cerr(10087)
    if cfg.idle_heartbeat > 0:
        raise cerr(10088)
    if cfg.flow_control:
        raise cerr(10089)
    if cfg.max_batch < 0:
        raise cerr(10114)
    if cfg.max_expires != 0 and cfg.max_expires < _MS_NS:
        raise cerr(10115)


def _check_filters(cfg: ConsumerConfig) -> None:
    if cfg.filter_subject and cfg.filter_subjects:
        raise cerr(10136)
    if cfg.filter_subject and not is_valid_filter(cfg.filter_subject):
        raise cerr(10052, err="invalid subject")
    if any(f == "" for f in cfg.filter_subjects):
        raise cerr(10139)
    filters = cfg.filters
    for i, outer in enumerate(filters):
        if not is_valid_filter(outer):
            raise cerr(10052, err="invalid subject")
        for j, inner in enumerate(filters):
            if i != j and is_subset(outer, inner):
                raise cerr(10138)


def _check_priority(cfg: ConsumerConfig) -> None:
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise cerr(10178)
        if not cfg.priority_groups:
            raise cerr(10159)
        for group in cfg.priority_groups:
            if group == "":
                raise cerr(10161)
            if not _GROUP_RE.match(group):
                raise cerr(10162)
    else:
        if cfg.priority_groups:
            raise cerr(10196)
        if cfg.priority_timeout > 0:
            raise cerr(10197)


def validate(cfg: ConsumerConfig, stream: StreamFacts) -> None:
    """nats-server's checkConsumerCfg on an already defaulted config; raises ConsumerError."""
    if cfg.name and not valid_asset_name(cfg.name):
        raise cerr(10052, err="consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not valid_asset_name(cfg.durable_name):
        raise cerr(10052, err="consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream.replicas:
        raise cerr(10126)
    if cfg.num_replicas < 0:
        raise cerr(10133)
    if (
        stream.retention in ("interest", "workqueue")
        and cfg.num_replicas != 0
        and cfg.num_replicas != stream.replicas
    ):
        raise cerr(10134)
    if any(b < 0 for b in cfg.backoff):
        raise cerr(10184)
    if cfg.ack_wait < 0:
        raise cerr(10183)
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise cerr(10116)
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise cerr(10107, max=MAX_DESCRIPTION_LEN)
    _check_mode(cfg, stream)
    if stream.limits_max_ack_pending > 0 and cfg.max_ack_pending > stream.limits_max_ack_pending:
        raise cerr(10121, limit=stream.limits_max_ack_pending)
    if (
        stream.limits_inactive_threshold_ns > 0
        and cfg.inactive_threshold > stream.limits_inactive_threshold_ns
    ):
        raise cerr(10153, limit=_go_duration(stream.limits_inactive_threshold_ns))
    if cfg.direct and not cfg.deliver_subject:
        raise cerr(10090)
    if cfg.direct and cfg.durable_name:
        raise cerr(10091)
    _check_filters(cfg)
    _check_start_policy(cfg)
    if cfg.sample_freq:
        text = cfg.sample_freq.removesuffix("%")
        if not text.isdigit():
            raise cerr(10095, err=f'strconv.Atoi: parsing "{text}": invalid syntax')
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise cerr(10108)
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise cerr(10132)
    meta_len = sum(len(k) + len(v) for k, v in (cfg.metadata or {}).items())
    if meta_len > MAX_METADATA_LEN:
        raise cerr(10135, limit=f"{MAX_METADATA_LEN // 1024}KB")
    _check_priority(cfg)


def check_workqueue(
    cfg: ConsumerConfig, name: str, others: list[ConsumerConfig], stream: StreamFacts
) -> None:
    """Workqueue streams: explicit acks, deliver all, and partitions that do not overlap.

    ``others`` are the configs of the stream's other consumers (not the one named ``name``).
    """
    if stream.retention != "workqueue" or cfg.direct:
        return
    if cfg.ack_policy != "explicit":
        raise cerr(10098)
    if cfg.deliver_policy != "all":
        raise cerr(10101)
    if not others:
        return
    mine = cfg.filters
    if not mine:
        raise cerr(10099)
    if not partition_unique(mine, others):
        raise cerr(10100)


def partition_unique(mine: tuple[str, ...], others: list[ConsumerConfig]) -> bool:
    for other in others:
        theirs = other.filters
        if not theirs:
            return False
        for a in mine:
            for b in theirs:
                if filters_overlap(a, b):
                    return False
    return True


def check_update(old: ConsumerConfig, new: ConsumerConfig, deliver_bound: bool) -> None:
    """Which config changes an update may make (nats-server's checkNewConsumerConfig).

    ``deliver_bound``: the old push deliver subject still has interest.
    """
    if old == new:
        return

    def fail(text: str) -> ConsumerError:
        return cerr(10012, err=text)

    if old.deliver_policy != new.deliver_policy:
        raise fail("deliver policy can not be updated")
    if old.mem_storage != new.mem_storage:
        raise fail("storage type can not be updated")
    if old.direct != new.direct:
        raise fail("direct can not be updated")
    if old.opt_start_seq != new.opt_start_seq:
        raise fail("start sequence can not be updated")
    if old.opt_start_time != new.opt_start_time:
        raise fail("start time can not be updated")
    if old.ack_policy != new.ack_policy:
        raise fail("ack policy can not be updated")
    if old.replay_policy != new.replay_policy:
        raise fail("replay policy can not be updated")
    if old.idle_heartbeat != new.idle_heartbeat:
        raise fail("heart beats can not be updated")
    if old.flow_control != new.flow_control:
        raise fail("flow control can not be updated")
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise fail("can not update push consumer to pull based")
        if deliver_bound:
            raise cerr(10013)
    if old.max_waiting != new.max_waiting:
        raise fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise cerr(10116)


# --- encoding ------------------------------------------------------------------------------


def config_to_wire(cfg: ConsumerConfig) -> dict[str, Any]:
    """The JSON nats-server emits: Go field order, ``omitempty`` except the policy fields."""
    out: dict[str, Any] = {}

    def opt(key: str, value: Any) -> None:
        if value:
            out[key] = list(value) if isinstance(value, tuple) else value

    opt("durable_name", cfg.durable_name)
    opt("name", cfg.name)
    opt("description", cfg.description)
    out["deliver_policy"] = cfg.deliver_policy
    opt("opt_start_seq", cfg.opt_start_seq)
    opt("opt_start_time", cfg.opt_start_time)
    out["ack_policy"] = cfg.ack_policy
    opt("ack_wait", cfg.ack_wait)
    opt("max_deliver", cfg.max_deliver)
    opt("backoff", cfg.backoff)
    opt("filter_subject", cfg.filter_subject)
    opt("filter_subjects", cfg.filter_subjects)
    out["replay_policy"] = cfg.replay_policy
    opt("rate_limit_bps", cfg.rate_limit_bps)
    opt("sample_freq", cfg.sample_freq)
    opt("max_waiting", cfg.max_waiting)
    opt("max_ack_pending", cfg.max_ack_pending)
    opt("flow_control", cfg.flow_control)
    opt("headers_only", cfg.headers_only)
    opt("max_batch", cfg.max_batch)
    opt("max_expires", cfg.max_expires)
    opt("max_bytes", cfg.max_bytes)
    opt("deliver_subject", cfg.deliver_subject)
    opt("deliver_group", cfg.deliver_group)
    opt("idle_heartbeat", cfg.idle_heartbeat)
    opt("inactive_threshold", cfg.inactive_threshold)
    out["num_replicas"] = cfg.num_replicas
    opt("mem_storage", cfg.mem_storage)
    opt("direct", cfg.direct)
    opt("metadata", cfg.metadata)
    opt("pause_until", cfg.pause_until)
    opt("priority_groups", cfg.priority_groups)
    if cfg.priority_policy != "none":
        out["priority_policy"] = cfg.priority_policy
    opt("priority_timeout", cfg.priority_timeout)
    return out


def _go_duration(ns: int) -> str:
    """Go's time.Duration String() for whole-unit values (enough for error texts)."""
    if ns % 1_000_000_000 == 0:
        secs = ns // 1_000_000_000
        hours, rem = divmod(secs, 3600)
        mins, secs = divmod(rem, 60)
        text = ""
        if hours:
            text += f"{hours}h"
        if hours or mins:
            text += f"{mins}m"
        return text + f"{secs}s"
    if ns % 1_000_000 == 0:
        return f"{ns // 1_000_000}ms"
    return f"{ns}ns"


def go_duration(ns: int) -> str:
    return _go_duration(ns)
