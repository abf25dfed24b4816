"""Pure encoders/decoders the connector needs on top of nats-py (no sockets, no Spark).

nats-py folds headers into a ``dict`` (one value per name); the Spark schema promises every
value, so the raw header block is parsed here. Message ids and ack-subject metadata live here
too, so they can be tested without a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HDR_LINE = b"NATS/1.0"
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

# Headers the server adds to a direct-get answer; not part of the stored message.
DIRECT_GET_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    }
)


@dataclass(frozen=True, slots=True)
class HeaderBlock:
    status: int | None
    description: str
    items: tuple[tuple[str, str], ...]

    def get(self, name: str) -> str | None:
        for key, value in self.items:
            if key == name:
                return value
        return None


def parse_header_block(raw: bytes) -> HeaderBlock:
    """``NATS/1.0[ code[ description]]\\r\\nName: value\\r\\n...\\r\\n`` -> HeaderBlock.

    Repeated names stay repeated, in order. Lines without a colon are skipped, as servers do.
    """
    text = raw.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0] if lines else ""
    status: int | None = None
    description = ""
    if first.startswith("NATS/1.0 "):
        rest = first[9:].strip()
        code, _, desc = rest.partition(" ")
        if code.isdigit():
            status = int(code)
            description = desc.strip()
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if sep:
            items.append((name.strip(), value.strip()))
    return HeaderBlock(status, description, tuple(items))


def user_headers(block: HeaderBlock) -> dict[str, list[str]]:
    """Stored headers only (direct-get bookkeeping removed), as name -> values."""
    out: dict[str, list[str]] = {}
    for name, value in block.items:
        if name in DIRECT_GET_HEADERS:
            continue
        out.setdefault(name, []).append(value)
    return out


def encode_header_block(items: list[tuple[str, str]]) -> bytes:
    """Header block for HPUB. Names must be tokens; CR/LF in values are replaced by spaces."""
    parts = [_HDR_LINE, b"\r\n"]
    for name, value in items:
        key = name.strip()
        if not _HEADER_NAME.match(key):
            raise ValueError(f"invalid header name {name!r}")
        clean = value.replace("\r", " ").replace("\n", " ").strip()
        parts.append(f"{key}: {clean}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class AckMeta:
    stream_seq: int
    timestamp_ns: int
    pending: int


def parse_ack_subject(reply: str) -> AckMeta:
    """Metadata in a consumer delivery's reply subject (v1 9 tokens, v2 12+ tokens)."""
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return AckMeta(int(tokens[5]), int(tokens[7]), int(tokens[8]))
    if len(tokens) >= 12 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return AckMeta(int(tokens[7]), int(tokens[9]), int(tokens[10]))
    raise ValueError(f"not a JetStream ack subject: {reply!r}")


def format_rfc3339_ns(epoch_ns: int) -> str:
    """UTC RFC 3339 with nanoseconds and ``Z``, the form JetStream requests expect."""
    import datetime as _dt

    secs, nanos = divmod(epoch_ns, 1_000_000_000)
    base = _dt.datetime.fromtimestamp(secs, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}Z"


def source_msg_id(stream: str, seq: int) -> str:
    """Stream-to-stream pipelines: the source position identifies the message."""
    return f"{stream}:{seq}"


def row_msg_id(prefix: str, batch: str, partition: int, row: int) -> str:
    """Other pipelines: who wrote it (query or job), which batch, which partition and row."""
    return f"{prefix}:{batch}:{partition}:{row}"


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject filter match: ``*`` is one token, a final ``>`` is one or more tokens."""
    pat = pattern.split(".")
    sub = subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or (token != "*" and token != sub[i]):
            return False
    return len(sub) == len(pat)
