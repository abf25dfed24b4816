"""JetStream API errors with nats-server's numbers and texts.

Clients match on ``err_code`` (and some on the description text, e.g. nats-py's KV looks for
"wrong last sequence"), so both come verbatim from nats-server's error catalogue. A response
carries an error as ``{"type": ..., "error": {"code", "err_code", "description"}}``; a PubAck
carries it as ``{"error": {...}, "stream": ..., "seq": 0}``.

Descriptions with ``{field}`` placeholders are filled by :func:`api_error`.
"""

from __future__ import annotations

from typing import Any

# err_code -> (HTTP-like code, description template).
CATALOGUE: dict[int, tuple[int, str]] = {
    10002: (400, "resource limits exceeded for account"),
    10003: (400, "bad request"),
    10004: (503, "incomplete results"),
    10005: (400, "{err}"),
    10006: (500, "JetStream not in clustered mode"),
    10007: (500, "JetStream cluster not assigned to this server"),
    10008: (503, "JetStream system temporarily unavailable"),
    10009: (500, "JetStream cluster can not handle request"),
    10010: (503, "JetStream clustering support required"),
    10011: (400, "tags placement not supported for operation"),
    10012: (500, "{err}"),
    10013: (400, "consumer name already in use"),
    10014: (404, "consumer not found"),
    10015: (400, "deliver subject not valid"),
    10016: (400, "consumer expected to be durable but no durable name set in subject"),
    10017: (400, "consumer name in subject does not match durable name in request"),
    10018: (400, "consumer expected to be durable but a durable name was not set"),
    10019: (400, "consumer expected to be ephemeral but detected a durable name set in subject"),
    10020: (400, "consumer expected to be ephemeral but a durable name was set in request"),
    10021: (400, "stream external api prefix {prefix} must not overlap with {subject}"),
    10022: (400, "stream external delivery prefix {prefix} overlaps with stream subject {subject}"),
    10023: (503, "insufficient resources"),
    10024: (400, "stream external delivery prefix {prefix} must not contain wildcards"),
    10025: (400, "invalid JSON: {err}"),
    10026: (400, "maximum consumers limit reached"),
    10027: (400, "maximum number of streams reached"),
    10028: (500, "insufficient memory resources available"),
    10029: (500, "{err}"),
    10030: (400, "stream mirror must have max message size >= source"),
    10031: (400, "stream mirrors can not also contain other sources"),
    10032: (400, "stream mirrors can not have both start seq and start time configured"),
    10033: (400, "stream mirrors can not contain filtered subjects"),
    10034: (400, "stream mirrors can not contain subjects"),
    10035: (503, "account not found"),
    10036: (503, "not currently supported in clustered mode"),
    10037: (404, "no message found"),
    10038: (400, "expected an empty request payload"),
    10039: (503, "JetStream not enabled for account"),
    10040: (400, "peer not a member"),
    10041: (500, "{err}"),
    10042: (500, "JetStream unable to subscribe to restore snapshot {subject}: {err}"),
    10043: (400, "sequence {seq} not found"),
    10044: (400, "server is not a member of the cluster"),
    10045: (500, "{err}"),
    10046: (400, "stream source must have max message size >= target"),
    10047: (500, "insufficient storage resources available"),
    10048: (500, "{err}"),
    10049: (500, "{err}"),
    10050: (500, "{err}"),
    10051: (500, "{err}"),
    10052: (500, "{err}"),
    10053: (500, "{err}"),
    10054: (400, "message size exceeds maximum allowed"),
    10055: (400, "stream mirror configuration can not be updated"),
    10056: (400, "stream name in subject does not match request"),
    10057: (500, "{err}"),
    10058: (400, "stream name already in use with a different configuration"),
    10059: (404, "stream not found"),
    10060: (400, "expected stream does not match"),
    10061: (400, "Replicas configuration can not be updated"),
    10062: (500, "restore failed: {err}"),
    10063: (503, "expected stream sequence does not match"),
    10064: (500, "snapshot failed: {err}"),
    10065: (400, "subjects overlap with an existing stream"),
    10066: (500, "{err}"),
    10067: (500, "{err}"),
    10068: (404, "template not found"),
    10069: (500, "{err}"),
    10070: (400, "wrong last msg ID: {id}"),
    10071: (400, "wrong last sequence: {seq}"),
    10072: (500, "JetStream unable to open temp storage for restore"),
    10073: (400, "template name in subject does not match request"),
    10074: (500, "replicas > 1 not supported in non-clustered mode"),
    10075: (503, "peer remap failed"),
    10076: (503, "JetStream not enabled"),
    10077: (503, "{err}"),
    10078: (400, "consumer config required"),
    10079: (400, "consumer deliver subject has wildcards"),
    10080: (400, "consumer in push mode can not set max waiting"),
    10081: (400, "consumer deliver subject forms a cycle"),
    10082: (400, "consumer requires ack policy for max ack pending"),
    10083: (400, "consumer idle heartbeat needs to be >= 100ms"),
    10084: (400, "consumer in pull mode requires explicit ack policy on workqueue stream"),
    10085: (400, "consumer in pull mode requires a durable name"),
    10086: (400, "consumer in pull mode can not have rate limit set"),
    10087: (400, "consumer max waiting needs to be positive"),
    10088: (400, "consumer idle heartbeat requires a push based consumer"),
    10089: (400, "consumer flow control requires a push based consumer"),
    10090: (400, "consumer direct requires a push based consumer"),
    10091: (400, "consumer direct requires an ephemeral consumer"),
    10092: (400, "consumer direct on a mapped consumer"),
    10093: (400, "consumer filter subject is not a valid subset of the interest subjects"),
    10094: (400, "{err}"),
    10095: (400, "failed to parse consumer sampling configuration: {err}"),
    10096: (500, "stream not valid"),
    10097: (400, "header size exceeds maximum allowed of 64k"),
    10098: (400, "workqueue stream requires explicit ack"),
    10099: (400, "multiple non-filtered consumers not allowed on workqueue stream"),
    10100: (400, "filtered consumer not unique on workqueue stream"),
    10101: (400, "consumer must be deliver all on workqueue stream"),
    10102: (400, "consumer name is too long, maximum allowed is {max}"),
    10103: (400, "durable name can not contain '.', '*', '>'"),
    10104: (500, "error creating store for consumer: {err}"),
    10105: (400, "consumer already exists and is still active"),
    10106: (400, "consumer replacement durable config not the same"),
    10107: (400, "consumer description is too long, maximum allowed is {max}"),
    10108: (400, "consumer with flow control also needs heartbeats"),
    10109: (400, "invalid operation on sealed stream"),
    10110: (500, "{err}"),
    10111: (500, "{err}"),
    10112: (400, "invalid push consumer deliver subject"),
    10113: (400, "account requires a stream config to have max bytes set"),
    10114: (400, "consumer max request batch needs to be > 0"),
    10115: (400, "consumer max request expires needs to be >= 1ms"),
    10116: (400, "max deliver is required to be > length of backoff values"),
    10117: (500, "subject details would exceed maximum allowed"),
    10118: (500, "stream is offline"),
    10119: (500, "consumer is offline"),
    10120: (400, "no JetStream default or applicable tiered limit present"),
    10121: (400, "consumer max ack pending exceeds system limit of {limit}"),
    10122: (400, "stream max bytes exceeds account limit max stream bytes"),
    10123: (400, "can not move and scale a stream in a single update"),
    10124: (400, "stream move already in progress"),
    10125: (400, "consumer max request batch exceeds server limit of {limit}"),
    10126: (400, "consumer config replica count exceeds parent stream"),
    10127: (400, "Consumer name can not contain path separators"),
    10128: (400, "Stream name can not contain path separators"),
    10129: (400, "stream reconfiguration not in progress"),
    10130: (400, "stream name already in use, cannot restore"),
    10131: (400, "Consumer create request did not match filtered subject from create subject"),
    10132: (400, "Consumer Durable and Name have to be equal if both are provided"),
    10133: (400, "replicas count cannot be negative"),
    10134: (400, "consumer config replicas must match interest retention stream's replicas"),
    10135: (400, "consumer metadata exceeds maximum size of {limit}"),
    10136: (400, "consumer cannot have both FilterSubject and FilterSubjects specified"),
    10137: (400, "consumer with multiple subject filters cannot use subject based API"),
    10138: (400, "consumer subject filters cannot overlap"),
    10139: (400, "consumer filter in FilterSubjects cannot be empty"),
    10140: (400, "duplicate source configuration detected"),
    10141: (400, "sourced stream name is invalid"),
    10142: (400, "mirrored stream name is invalid"),
    10143: (400, "stream mirrors can not have first sequence configured"),
    10144: (
        400,
        "source with multiple subject transforms cannot also have a single subject filter",
    ),
    10145: (400, "source transform source: {err}"),
    10146: (400, "source transform: {err}"),
    10147: (400, "source filters can not overlap"),
    10148: (400, "consumer already exists"),
    10149: (400, "consumer does not exist"),
    10150: (
        400,
        "mirror with multiple subject transforms cannot also have a single subject filter",
    ),
    10151: (400, "mirror transform source: {err}"),
    10152: (400, "mirror subject filters can not overlap"),
    10153: (400, "consumer inactive threshold exceeds system limit of {limit}"),
    10154: (400, "mirror transform: {err}"),
    10155: (400, "stream transform source: {err}"),
    10156: (400, "stream transform: {err}"),
    10157: (400, "pedantic mode: {err}"),
    10158: (409, "duplicate message id is in process"),
    10159: (400, "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
    10160: (400, "Provided priority group does not exist for this consumer"),
    10161: (400, "Group name cannot be an empty string"),
    10162: (
        400,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 "
        "characters",
    ),
    10163: (503, "expected last sequence per subject temporarily unavailable"),
    10164: (400, "wrong last sequence"),
    10165: (400, "invalid per-message TTL"),
    10166: (400, "per-message TTL is disabled"),
    10167: (429, "too many requests"),
    10168: (400, "message counters is disabled"),
    10169: (400, "message counter increment is missing"),
    10170: (400, "message counter has payload"),
    10171: (400, "message counter increment is invalid"),
    10172: (400, "message counter is broken"),
    10173: (400, "stream mirrors can not also calculate counters"),
    10174: (400, "atomic publish is disabled"),
    10175: (400, "atomic publish sequence is missing"),
    10176: (400, "atomic publish batch is incomplete"),
    10177: (400, "atomic publish unsupported header used: {header}"),
    10178: (400, "priority groups can not be used with push consumers"),
    10179: (400, "atomic publish batch ID is invalid"),
    10180: (412, "min last sequence"),
    10181: (400, "consumer ack policy invalid"),
    10182: (400, "consumer replay policy invalid"),
    10183: (400, "consumer ack wait needs to be positive"),
    10184: (400, "consumer backoff needs to be positive"),
    10185: (412, "JetStream minimum api level required"),
    10186: (400, "stream mirrors can not also schedule messages"),
    10187: (400, "stream source can not also schedule messages"),
    10188: (400, "message schedules is disabled"),
    10189: (400, "message schedules pattern is invalid"),
    10190: (400, "message schedules target is invalid"),
    10191: (400, "message schedules invalid per-message TTL"),
    10192: (400, "message schedules invalid rollup"),
    10193: (400, "missing sequence for expected last sequence per subject"),
    10194: (500, "stream is offline: {err}"),
    10195: (500, "consumer is offline: {err}"),
    10196: (400, "consumer can not have priority groups when policy is none"),
    10197: (400, "PinnedTTL cannot be set when PriorityPolicy is none"),
    10198: (400, "stream mirrors can not also use atomic publishing"),
    10199: (400, "atomic publish batch is too large: {size}"),
    10200: (400, "atomic publish batch commit is invalid"),
    10201: (400, "atomic publish batch contains duplicate message id"),
    10202: (400, "cluster member change is in progress"),
    10203: (400, "message schedules source is invalid"),
    10204: (400, "invalid reset: {err}"),
    10205: (400, "batch publish is disabled"),
    10206: (400, "batch publish pattern is invalid"),
    10207: (400, "batch publish ID is invalid"),
    10208: (400, "batch publish ID unknown"),
    10209: (400, "stream mirrors can not also use batch publishing"),
    10210: (429, "atomic publish too many inflight"),
    10211: (429, "batch publish too many inflight"),
    10212: (400, "message schedules invalid scheduler"),
    10213: (400, "stream mirror consumer config is invalid"),
    10214: (400, "stream mirror consumer requires flow control ack policy"),
    10215: (400, "stream source consumer config is invalid"),
    10216: (400, "duplicate stream source consumer detected"),
    10217: (400, "stream source consumer requires flow control ack policy"),
    10218: (400, "flow control ack policy requires a push based consumer"),
    10219: (400, "flow control ack policy requires flow control"),
    10220: (400, "flow control ack policy requires max ack pending"),
    10221: (400, "flow control ack policy requires unset ack wait"),
    10222: (400, "flow control ack policy requires unset max deliver"),
    10223: (400, "message schedules time zone is invalid"),
    10224: (400, "JetStream system rescue not applied: {err}"),
    10225: (400, "consumer's stream identity does not match: {msg}"),
    10226: (400, "stream reconfiguration already in progress"),
    10227: (400, "message stream source header is not allowed"),
}


class ApiError(Exception):
    """One API error answer. Raised inside handlers and the stream state machine, turned into
    the ``error`` object of the response at the edge."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ApiError):
            return NotImplemented
        return (self.code, self.err_code, self.description) == (
            other.code,
            other.err_code,
            other.description,
        )

    def __hash__(self) -> int:
        return hash((self.code, self.err_code, self.description))

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.err_code}, {self.description!r})"


def api_error(err_code: int, **fields: Any) -> ApiError:
    """The catalogue error ``err_code`` with its placeholders filled from ``fields``.

    Raises KeyError for a number that is not in the catalogue (a programming error)."""
    code, template = CATALOGUE[err_code]
    description = template.format(**fields) if fields else template
    return ApiError(code, err_code, description)


# --- the errors the stream side uses, by name --------------------------------------------------


def bad_request() -> ApiError:
    return api_error(10003)


def clustering_required() -> ApiError:
    return api_error(10010)


def invalid_json(err: str) -> ApiError:
    """10025; ``err`` should read like Go's decoder message (``json: unknown field "x"``)."""
    return api_error(10025, err=err)


def no_message_found() -> ApiError:
    return api_error(10037)


def not_empty_request() -> ApiError:
    return api_error(10038)


def stream_general(err: str) -> ApiError:
    return api_error(10051, err=err)


def stream_invalid_config(err: str) -> ApiError:
    return api_error(10052, err=err)


def message_exceeds_maximum() -> ApiError:
    return api_error(10054)


def stream_mismatch() -> ApiError:
    return api_error(10056)


def msg_delete_failed(err: str) -> ApiError:
    return api_error(10057, err=err)


def stream_name_exists() -> ApiError:
    return api_error(10058)


def stream_not_found() -> ApiError:
    return api_error(10059)


def expected_stream_mismatch() -> ApiError:
    return api_error(10060)


def subjects_overlap() -> ApiError:
    return api_error(10065)


def wrong_last_msg_id(last_id: str) -> ApiError:
    return api_error(10070, id=last_id)


def wrong_last_sequence(seq: int) -> ApiError:
    return api_error(10071, seq=seq)


def replicas_not_supported() -> ApiError:
    return api_error(10074)


def store_failed(err: str) -> ApiError:
    return api_error(10077, err=err)


def stream_sealed() -> ApiError:
    return api_error(10109)


def purge_failed(err: str) -> ApiError:
    return api_error(10110, err=err)


def rollup_failed(err: str) -> ApiError:
    return api_error(10111, err=err)


def replicas_negative() -> ApiError:
    return api_error(10133)


def expected_last_seq_per_subject_invalid() -> ApiError:
    return api_error(10193)


def ttl_invalid() -> ApiError:
    return api_error(10165)


def ttl_disabled() -> ApiError:
    return api_error(10166)


def required_api_level() -> ApiError:
    return api_error(10185)


def error_body(type_name: str, err: ApiError, **extra: Any) -> dict[str, Any]:
    """An API response carrying ``err`` (``extra`` keys follow, as nats-server adds them)."""
    out: dict[str, Any] = {"type": type_name, "error": err.to_wire()}
    out.update(extra)
    return out
