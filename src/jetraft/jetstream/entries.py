"""The stream's log entries and its answer to a publish: msgspec Structs, in a module of their own.

``jetraft.jetstream.stream`` (the state machine that applies them) re-exports every name here;
import them from there. They live apart because that module may be compiled (mypyc, the
optional accelerated build) and this one must not be: a Struct class compiled by mypyc loses
its ``tag``, and with it the tagged union the log entries are decoded as. Keep it free of
logic beyond the encoding.
"""

from __future__ import annotations

import msgspec

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.models import encode_json
from jetraft.jetstream.stream_config import StreamConfig


class StoreMsg(msgspec.Struct, frozen=True, tag="msg", array_like=True):
    subject: str
    reply: str
    hdr: bytes | None
    data: bytes
    ts_ns: int


SOURCED = -1


class CopyMsg(StoreMsg, frozen=True, tag="copy", array_like=True):
    """A message a mirror or a sourcing stream copied from its origin (its own tag, so
    that publishes keep their encoding). ``seq`` > 0: a mirror's copy, stored at the
    origin's sequence (a gap before it is skipped); SOURCED: a sourcing stream's copy,
    the only kind that may carry Nats-Stream-Source."""

    seq: int = SOURCED


class Purge(msgspec.Struct, frozen=True, tag="purge", array_like=True):
    filter: str = ""
    seq: int = 0  # remove everything below seq
    keep: int = 0  # keep the newest n


class DeleteMsg(msgspec.Struct, frozen=True, tag="del", array_like=True):
    seq: int
    no_erase: bool = False


class UpdateConfig(msgspec.Struct, frozen=True, tag="cfg", array_like=True):
    config: StreamConfig


class Expire(msgspec.Struct, frozen=True, tag="exp", array_like=True):
    now_ns: int


class ConsumerAck(msgspec.Struct, frozen=True, tag="ack", array_like=True):
    seq: int


class Retire(msgspec.Struct, frozen=True, tag="ret", array_like=True):
    """Interest / workqueue retention in a cluster: these messages are needed by no
    consumer any more. The stream's leader decides (its server holds a replica of every
    consumer of such a stream); every replica removes them alike, so replicas never depend
    on how far their own consumer replicas got."""

    seqs: list[int]


class StoreBatch(msgspec.Struct, frozen=True, tag="msgs", array_like=True):
    """Publishes in one log entry, applied in order (``Stream.apply_batch``): one entry,
    one framing and checksum in the log and one decode per batch instead of per message."""

    msgs: list[StoreMsg | CopyMsg]


Entry = StoreMsg | CopyMsg | Purge | DeleteMsg | UpdateConfig | Expire | ConsumerAck | Retire
# What a clustered stream's log holds: the entries above, or a batch of publishes.
LogEntry = Entry | StoreBatch

_ENTRY_ENCODER = msgspec.msgpack.Encoder()
_ENTRY_DECODER = msgspec.msgpack.Decoder(Entry)
_LOG_ENTRY_DECODER = msgspec.msgpack.Decoder(LogEntry)


def encode_entry(entry: LogEntry) -> bytes:
    return _ENTRY_ENCODER.encode(entry)


def decode_entry(blob: bytes) -> Entry:
    entry: Entry = _ENTRY_DECODER.decode(blob)
    return entry


def decode_log_entry(blob: bytes) -> LogEntry:
    """An entry of a clustered stream's log (``StoreBatch`` included)."""
    entry: LogEntry = _LOG_ENTRY_DECODER.decode(blob)
    return entry


# --- results -------------------------------------------------------------------------------


_NAME_JSON: dict[str, bytes] = {}  # stream name -> its JSON string (PubAck.body)


class PubAck(msgspec.Struct, frozen=True):
    """The answer to one StoreMsg; ``reply`` is where it goes ("" = nowhere). A Struct, not
    a dataclass: one is made per published message, and a frozen dataclass costs several
    times as much to build."""

    reply: str
    stream: str
    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None
    domain: str = ""

    def body(self) -> bytes:
        if self.error is None and not self.duplicate and not self.domain:
            name = _NAME_JSON.get(self.stream)
            if name is None:
                if len(_NAME_JSON) >= 1024:
                    _NAME_JSON.clear()
                name = _NAME_JSON[self.stream] = encode_json(self.stream)
            return b'{"stream":%s,"seq":%d}' % (name, self.seq)
        out: dict[str, object] = {}
        if self.error is not None:
            out["error"] = self.error.to_wire()
        out["stream"] = self.stream
        if self.domain:
            out["domain"] = self.domain
        out["seq"] = self.seq
        if self.duplicate:
            out["duplicate"] = True
        return encode_json(out)


