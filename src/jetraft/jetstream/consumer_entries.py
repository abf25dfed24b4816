"""A consumer's replicated entries and the values it keeps per message: msgspec Structs.

``jetraft.jetstream.consumer`` (the state machine) re-exports every name here; import them from
there. They live apart because that module may be compiled (mypyc, the optional accelerated
build) and this one must not be: mypyc builds a Struct class in a compiled module without its
class options (``tag`` among them) and field types, which the tagged union of entries needs.
"""

from __future__ import annotations

from typing import Protocol

import msgspec


class Msg(Protocol):
    """A stored message as the consumer sees it."""

    @property
    def seq(self) -> int: ...
    @property
    def subject(self) -> str: ...
    @property
    def hdr(self) -> bytes | None: ...
    @property
    def data(self) -> bytes: ...
    @property
    def ts_ns(self) -> int: ...


# --- entries (the replicated operations) ---------------------------------------------------
# msgspec Structs, not NamedTuples: one or two are made per delivered message. The integer tags
# make msgpack ``[tag, *fields]`` (``encode_entry``); ``gc=False``: they hold only numbers.


class Start(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=0):
    """The consumer starts at stream sequence ``sseq`` (nothing below it is for us)."""

    sseq: int


class Delivered(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=1):
    """Stream seq ``sseq`` went out as consumer seq ``dseq``, delivery number ``dc``."""

    dseq: int
    sseq: int
    dc: int
    ts_ns: int


class Acked(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=2):
    """+ACK / +NXT / +TERM (``term``) / AckAll: ``dseq`` is the ack subject's consumer seq."""

    sseq: int
    dseq: int
    term: bool = False


class Nakked(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=3):
    """-NAK: the pending timestamp becomes ``pending_ts_ns`` (redelivery due ack_wait later)."""

    sseq: int
    pending_ts_ns: int
    delayed: bool


class Progress(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=4):
    """+WPI: restart the ack timer of ``sseq`` at ``ts_ns``."""

    sseq: int
    ts_ns: int


class Dropped(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=6):
    """``sseq`` left the stream (limits, purge, delete) while pending: forget it."""

    sseq: int


class Exhausted(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=5):
    """``sseq`` reached max_deliver: stop tracking it (redelivered count is kept)."""

    sseq: int
    dc: int


Entry = Start | Delivered | Acked | Nakked | Progress | Exhausted | Dropped


class Batch(msgspec.Struct, frozen=True, array_like=True, tag=7):
    """Several entries in one log entry, applied in order: the leader's changes of one
    loop turn (every delivery of a pull request, every ack of one read) cost the group
    one proposal, one log record and one commit instead of one each."""

    entries: list[Entry]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Entry)
_BATCH_DECODER = msgspec.msgpack.Decoder(Entry | Batch)


def encode_entry(entry: Entry) -> bytes:
    """Bytes for a log: msgpack ``[tag, *fields]``."""
    return _ENCODER.encode(entry)


def encode_entries(entries: list[Entry]) -> bytes:
    """Bytes for a log entry holding ``entries`` (one alone is encoded as itself)."""
    return _ENCODER.encode(entries[0] if len(entries) == 1 else Batch(entries))


def decode_entries(blob: bytes) -> list[Entry]:
    """The entries ``encode_entry`` or ``encode_entries`` produced (ValueError otherwise)."""
    try:
        entry: Entry | Batch = _BATCH_DECODER.decode(blob)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a consumer entry: {exc}") from None
    return entry.entries if type(entry) is Batch else [entry]  # type: ignore[list-item]


def decode_entry(blob: bytes) -> Entry:
    """The entry ``encode_entry`` produced (ValueError on anything else)."""
    try:
        entry: Entry = _DECODER.decode(blob)
        return entry
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a consumer entry: {exc}") from None


class Candidate(msgspec.Struct, frozen=True, gc=False):
    """What the leader should deliver next (then propose ``Delivered``)."""

    msg: Msg
    dc: int


class Pending(msgspec.Struct, gc=False):
    dseq: int
    ts_ns: int


