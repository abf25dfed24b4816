"""Option parsing for the ``jetstream`` data source (pure: no Spark, no sockets).

Spark hands a data source its options as strings in a case-insensitive map. Everything is
validated here, on the driver, before any task starts, so a typo or a bad sequence fails the
query with a message that names the option, instead of failing deep inside an executor.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger("jetraft.spark")

DEFAULT_SERVERS = "nats://127.0.0.1:4222"
DEFAULT_COMMIT_BUCKET = "jetraft_spark_commits"
_STREAM_NAME = re.compile(r"^[^.*>/\\\s]{1,255}$")
_BUCKET_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_SUBJECT_TOKEN = re.compile(r"^[^\s.]+$")

# Options Spark itself (or users' habits from the Kafka source) put in the map; accepted silently.
_SPARK_OWNED = {"path", "checkpointlocation", "queryname"}


class OptionError(ValueError):
    """A bad option. The message names the option and what is expected."""


@dataclass(frozen=True, slots=True)
class ConnOptions:
    """How to reach the servers. Hashable: it keys the per-process connection cache."""

    servers: tuple[str, ...] = (DEFAULT_SERVERS,)
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read starts or ends: a sequence, a time (epoch ns), or earliest/latest."""

    kind: str  # "earliest" | "latest" | "sequence" | "timestamp"
    value: int = 0


@dataclass(frozen=True, slots=True)
class ReadOptions:
    conn: ConnOptions
    stream: str
    subjects: tuple[str, ...] = ()
    starting: Position = Position("earliest")
    ending: Position = Position("latest")
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_s: float = 900.0
    min_partitions: int = 1
    max_records_per_partition: int = 100_000
    include_headers: bool = False
    fail_on_data_loss: bool = True
    fetch_batch: int = 1000
    read_mode: str = "auto"  # "auto" | "direct" | "consumer"
    max_read_retries: int = 20


@dataclass(frozen=True, slots=True)
class WriteOptions:
    conn: ConnOptions
    subject: str | None = None
    expected_stream: str | None = None
    max_pending_acks: int = 1000
    ack_timeout_s: float = 5.0
    max_publish_retries: int = 20
    commit_bucket: str | None = DEFAULT_COMMIT_BUCKET
    write_id: str | None = None
    msg_id_column: str | None = None
    msg_id_prefix: str = ""
    # Test hook: fail the task once when it reaches this row index (see writer.py).
    fail_once_at_row: int | None = None
    fail_once_marker: str | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _float(opts: dict[str, str], name: str, default: float) -> float:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be > 0, got {raw}")
    return value


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?$")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration_s(opts: dict[str, str], name: str, default: float) -> float:
    """A Spark-style time string ("15m", "30s", "500ms"; a bare number is milliseconds)."""
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    match = _DURATION.match(raw.strip().lower())
    if match is None:
        raise OptionError(f"option {name} must be a duration such as 30s or 15m, got {raw!r}")
    number, unit = match.groups()
    return float(number) * _DURATION_UNIT_S[unit or "ms"]


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def parse_timestamp_ns(name: str, raw: str) -> int:
    """Epoch milliseconds (as Kafka's startingTimestamp) or an ISO 8601 time; naive = UTC."""
    text = raw.strip()
    if re.fullmatch(r"-?\d+", text):
        ms = int(text)
        if ms < 0:
            raise OptionError(f"option {name} must not be negative, got {raw!r}")
        return ms * 1_000_000
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            f"option {name} must be epoch milliseconds or an ISO 8601 time, got {raw!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def parse_conn(options: Mapping[str, str]) -> ConnOptions:
    opts = _lower(options)
    raw = opts.get("servers", opts.get("url", DEFAULT_SERVERS))
    servers = tuple(s.strip() for s in raw.split(",") if s.strip())
    if not servers:
        raise OptionError("option servers is empty: give one or more nats:// URLs")
    for url in servers:
        if not re.match(r"^(nats|tls|ws|wss)://[^\s/]+", url) and not re.match(
            r"^[^\s:/]+:\d+$", url
        ):
            raise OptionError(f"option servers: {url!r} is not a nats://host:port URL")
    names = ("credsfile", "nkeyseedfile", "tlscafile", "tlscertfile", "tlskeyfile")
    files = {k: opts.get(k) for k in names}
    if bool(files["tlscertfile"]) != bool(files["tlskeyfile"]):
        raise OptionError("options tlsCertFile and tlsKeyFile must be given together")
    if files["credsfile"] and files["nkeyseedfile"]:
        raise OptionError("options credsFile and nkeySeedFile are exclusive: give only one")
    return ConnOptions(
        servers=servers,
        user=opts.get("user") or None,
        password=opts.get("password") or None,
        token=opts.get("token") or None,
        creds_file=files["credsfile"] or None,
        nkey_seed_file=files["nkeyseedfile"] or None,
        tls_ca_file=files["tlscafile"] or None,
        tls_cert_file=files["tlscertfile"] or None,
        tls_key_file=files["tlskeyfile"] or None,
        connect_timeout_s=_float(opts, "connectTimeoutSeconds", 5.0),
        request_timeout_s=_float(opts, "requestTimeoutSeconds", 5.0),
    )


_CONN_KEYS = {
    "servers", "url", "user", "password", "token", "credsfile", "tlscafile", "tlscertfile",
    "tlskeyfile", "connecttimeoutseconds", "requesttimeoutseconds", "nkeyseedfile",
}  # fmt: skip
_READ_KEYS = _CONN_KEYS | {
    "stream", "subjects", "startingsequence", "startingtimestamp", "startingoffsets",
    "endingsequence", "endingtimestamp", "endingoffsets", "maxmessagespertrigger",
    "minmessagespertrigger", "maxtriggerdelay",
    "minpartitions", "maxrecordsperpartition", "includeheaders", "failondataloss",
    "fetchbatch", "readmode", "maxreadretries",
}  # fmt: skip
_WRITE_KEYS = _CONN_KEYS | {
    "subject", "stream", "maxpendingacks", "acktimeoutseconds", "maxpublishretries",
    "commitbucket", "writeid", "msgidcolumn", "msgidprefix", "_failonceatrow",
    "_failoncemarker",
}  # fmt: skip


def _warn_unknown(opts: dict[str, str], known: set[str]) -> None:
    for key in sorted(set(opts) - known - _SPARK_OWNED):
        log.warning("jetstream source: ignoring unknown option %r", key)


def _stream_name(opts: dict[str, str], required: bool) -> str | None:
    name = opts.get("stream", "").strip()
    if not name:
        if required:
            raise OptionError("option stream is required: the JetStream stream to read")
        return None
    if not _STREAM_NAME.match(name):
        raise OptionError(f"option stream: {name!r} is not a valid stream name")
    return name


def _subjects(opts: dict[str, str]) -> tuple[str, ...]:
    raw = opts.get("subjects", "")
    subjects = tuple(s.strip() for s in raw.split(",") if s.strip())
    for subject in subjects:
        tokens = subject.split(".")
        bad = any(not _SUBJECT_TOKEN.match(t) for t in tokens)
        last = len(tokens) - 1
        bad = bad or any(">" in t and (t != ">" or i != last) for i, t in enumerate(tokens))
        if bad:
            raise OptionError(f"option subjects: {subject!r} is not a valid subject filter")
    return subjects


def _position(opts: dict[str, str], which: str, default: str) -> Position:
    seq_key, ts_key, off_key = f"{which}sequence", f"{which}timestamp", f"{which}offsets"
    given = [k for k in (seq_key, ts_key, off_key) if opts.get(k, "").strip()]
    pretty = {
        seq_key: f"{which}Sequence", ts_key: f"{which}Timestamp", off_key: f"{which}Offsets"
    }  # fmt: skip
    if len(given) > 1:
        names = " and ".join(pretty[k] for k in given)
        raise OptionError(f"options {names} are exclusive: give only one")
    if not given:
        return Position(default)
    key = given[0]
    raw = opts[key].strip()
    if key == seq_key:
        value = _int(opts, pretty[seq_key], None, 1)
        assert value is not None
        return Position("sequence", value)
    if key == ts_key:
        return Position("timestamp", parse_timestamp_ns(pretty[ts_key], raw))
    if raw.lower() not in ("earliest", "latest"):
        raise OptionError(f"option {pretty[off_key]} must be earliest or latest, got {raw!r}")
    return Position(raw.lower())


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Validate the reader's options. Raises OptionError naming the offending option."""
    opts = _lower(options)
    _warn_unknown(opts, _READ_KEYS)
    stream = _stream_name(opts, required=True)
    assert stream is not None
    starting = _position(opts, "starting", "earliest")
    ending = _position(opts, "ending", "latest")
    if streaming and ending.kind != "latest":
        raise OptionError("endingSequence/endingTimestamp apply to batch reads only")
    if ending.kind == "earliest":
        raise OptionError("option endingOffsets must be latest (or use endingSequence)")
    if (
        starting.kind == ending.kind
        and starting.kind in ("sequence", "timestamp")
        and ending.value < starting.value
    ):
        raise OptionError(
            f"ending position {ending.value} is before starting position {starting.value}"
        )
    mode = opts.get("readmode", "auto").strip().lower()
    if mode not in ("auto", "direct", "consumer"):
        raise OptionError(f"option readMode must be auto, direct or consumer, got {mode!r}")
    max_trigger = _int(opts, "maxMessagesPerTrigger", None, 1)
    min_trigger = _int(opts, "minMessagesPerTrigger", None, 1)
    if not streaming and (max_trigger or min_trigger):
        log.warning("jetstream source: max/minMessagesPerTrigger apply to streaming reads only")
    if max_trigger is not None and min_trigger is not None and min_trigger > max_trigger:
        raise OptionError(
            f"option minMessagesPerTrigger ({min_trigger}) is above "
            f"maxMessagesPerTrigger ({max_trigger})"
        )
    return ReadOptions(
        conn=parse_conn(options),
        stream=stream,
        subjects=_subjects(opts),
        starting=starting,
        ending=ending,
        max_messages_per_trigger=max_trigger,
        min_messages_per_trigger=min_trigger,
        max_trigger_delay_s=_duration_s(opts, "maxTriggerDelay", 900.0),
        min_partitions=_int(opts, "minPartitions", 1, 1) or 1,
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", 100_000, 1) or 1,
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        fetch_batch=_int(opts, "fetchBatch", 1000, 1) or 1000,
        read_mode=mode,
        max_read_retries=_int(opts, "maxReadRetries", 20, 0) or 0,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    _warn_unknown(opts, _WRITE_KEYS)
    subject = opts.get("subject", "").strip() or None
    if subject is not None and any(not _SUBJECT_TOKEN.match(t) for t in subject.split(".")):
        raise OptionError(f"option subject: {subject!r} is not a valid subject")
    if subject is not None and ("*" in subject.split(".") or ">" in subject.split(".")):
        raise OptionError(f"option subject: {subject!r} must not contain wildcards")
    bucket_raw = opts.get("commitbucket")
    bucket: str | None = DEFAULT_COMMIT_BUCKET if bucket_raw is None else bucket_raw.strip()
    if bucket and not _BUCKET_NAME.match(bucket):
        raise OptionError(f"option commitBucket: {bucket!r} is not a valid bucket name")
    fail_row = _int(opts, "_failOnceAtRow", None, 0)
    if fail_row is not None and not opts.get("_failoncemarker"):
        raise OptionError("option _failOnceAtRow needs _failOnceMarker (a file path)")
    return WriteOptions(
        conn=parse_conn(options),
        subject=subject,
        expected_stream=_stream_name(opts, required=False),
        max_pending_acks=_int(opts, "maxPendingAcks", 1000, 1) or 1000,
        ack_timeout_s=_float(opts, "ackTimeoutSeconds", 5.0),
        max_publish_retries=_int(opts, "maxPublishRetries", 20, 0) or 0,
        commit_bucket=bucket or None,
        write_id=opts.get("writeid", "").strip() or None,
        msg_id_column=opts.get("msgidcolumn", "").strip() or None,
        msg_id_prefix=opts.get("msgidprefix", "").strip(),
        fail_once_at_row=fail_row,
        fail_once_marker=opts.get("_failoncemarker") or None,
    )
