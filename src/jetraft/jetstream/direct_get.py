"""DIRECT.GET: raw-message reads of a stream, served when the stream has ``allow_direct``.

``DIRECT.GET.<stream>`` takes a JSON body (``seq`` / ``last_by_subj`` / ``next_by_subj``,
batch forms with ``batch``/``max_bytes``, ``multi_last`` with ``up_to_seq``/``up_to_time``);
``DIRECT.GET.<stream>.<subject...>`` answers the last message on that subject (KV get).
Answers are the stored message with ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence`` and
``Nats-Time-Stamp`` headers added, batch forms end with a ``204 EOB`` status; problems are
bare statuses (404 Message Not Found, 408 Empty/Malformed/Bad Request). A stream without
direct get has no responder at all, so the requester sees 503.

Batch answers are bounded as nats-server bounds them: ``batch`` messages, stopping once
``max_bytes`` (default: the server's ``max_pending``) have been sent, and at most 1024
subjects for ``multi_last`` (413 Too Many Results). They are also lazy: an iterator that
loads each message only when the sender asks for it, so that one request never builds its
whole answer in memory and the server can send it a slice per event-loop turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

import msgspec

from jetraft.jetstream.api_types import RawReply, StatusReply
from jetraft.jetstream.models import format_time, parse_time
from jetraft.jetstream.msg_get import LenientMsgGet, MsgGetRequest
from jetraft.jetstream.store.types import RawMsg, StoredMsg
from jetraft.jetstream.stream import Stream
from jetraft.protocol.headers import encode_headers, parse_headers

# The byte bound of a batch when the request has no max_bytes: nats-server uses its
# max_pending (64 MiB by default); the server passes its own through ``max_pending``.
MAX_DIRECT_BATCH_BYTES = 64 * 1024 * 1024
MAX_MULTI_RESULTS = 1024
# What the sender writes per event-loop turn before yielding to other work.
DIRECT_SLICE_BYTES: Final = 256 * 1024
# Messages a batch loads from the store per call (unfiltered batches).
_RUN_MSGS = 256


Answer = tuple[bytes | None, bytes]
"""One message of a lazy answer: (header block or None, payload), as ``RawReply`` holds it."""


def load_one(stream: Stream, req: MsgGetRequest, start_ns: int | None) -> StoredMsg | None:
    store = stream.store
    seq = store.seq_for_time(start_ns) if start_ns is not None else req.seq
    if seq > 0 and not req.next_by_subj:
        return store.load(seq)
    if req.next_by_subj:
        return store.load_next(max(seq, 1), req.next_by_subj)
    return store.load_last(req.last_by_subj)


def _status(code: int, description: str) -> RawReply:
    return RawReply(encode_headers((), status=code, description=description), b"")


class StreamsContext(Protocol):
    @property
    def streams(self) -> Mapping[str, Stream]: ...


class DirectGetContext(StreamsContext, Protocol):
    @property
    def max_pending(self) -> int:
        """The server's max_pending: the byte bound of a batch without max_bytes."""
        ...


def _byte_limit(ctx: DirectGetContext, req: MsgGetRequest) -> int:
    """nats-server: the request's max_bytes, else the server's max_pending."""
    if req.max_bytes > 0:
        return req.max_bytes
    return ctx.max_pending if ctx.max_pending > 0 else MAX_DIRECT_BATCH_BYTES


def _direct_stream(ctx: StreamsContext, name: str) -> Stream | None:
    stream = ctx.streams.get(name)
    if stream is None or not stream.config.allow_direct:
        return None
    return stream


def handle_direct_get(ctx: DirectGetContext, subject: str, reply: str, data: bytes) -> Any:
    """``DIRECT.GET.<stream>`` with a JSON body. Answers are raw messages, not JSON; a stream
    without direct get has no responder at all (the requester sees 503)."""
    stream = _direct_stream(ctx, _stream_token(subject))
    if stream is None:
        return StatusReply(503)
    if not reply:
        return None
    if not data.strip():
        return _status(408, "Empty Request")
    try:
        req = msgspec.json.decode(data, type=LenientMsgGet)
        start_ns = parse_time(req.start_time) if req.start_time else None
        up_to_ns = parse_time(req.up_to_time) if req.up_to_time else None
    except (msgspec.DecodeError, ValueError):
        return _status(408, "Malformed Request")
    if (
        req.seq == 0
        and not req.last_by_subj
        and not req.next_by_subj
        and not req.multi_last
        and start_ns is None
    ):
        return _status(408, "Empty Request")
    if (
        (req.seq > 0 and req.last_by_subj)
        or (req.seq > 0 and start_ns is not None)
        or (start_ns is not None and req.last_by_subj)
        or (req.last_by_subj and req.next_by_subj)
        or (req.last_by_subj and req.batch > 0)
        or (req.last_by_subj and req.multi_last)
        or (req.next_by_subj and req.multi_last)
        or (req.up_to_seq > 0 and up_to_ns is not None)
    ):
        return _status(408, "Bad Request")
    return direct_answer(stream, req, start_ns, up_to_ns, _byte_limit(ctx, req))


def handle_direct_get_last(ctx: StreamsContext, subject: str, reply: str, data: bytes) -> Any:
    """``DIRECT.GET.<stream>.<subject...>``: the last message on that subject (KV get)."""
    stream = _direct_stream(ctx, _stream_token(subject))
    if stream is None:
        return StatusReply(503)
    if not reply:
        return None
    req = LenientMsgGet()
    if data.strip():
        try:
            req = msgspec.json.decode(data, type=LenientMsgGet)
        except msgspec.DecodeError:
            return _status(408, "Malformed Request")
    key = subject.split(".", 5)[5] if subject.count(".") >= 5 else ""
    if not key:
        return _status(408, "Bad Request")
    if (
        req.last_by_subj
        or req.next_by_subj
        or req.multi_last
        or req.seq
        or req.batch
        or req.start_time
        or req.up_to_seq
        or req.up_to_time
    ):
        return _status(408, "Bad Request")
    req.last_by_subj = key
    return direct_answer(stream, req, None, None)


def _pending_tail(pending: int, last: int) -> str:
    """The header lines a batch answer adds after the stored message's own."""
    return f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"


def _direct_headers(stream: str, msg: StoredMsg, tail: str = "") -> bytes:
    """The stored headers and ours (for the stream named ``stream``): Nats-Stream, -Subject,
    -Sequence, -Time-Stamp, then ``tail`` (header lines, each ending in CRLF)."""
    return _headers_of(stream, msg.subject, msg.seq, msg.ts_ns, msg.headers, tail)


def _headers_of(
    stream: str, subject: str, seq: int, ts_ns: int, stored: bytes | None, tail: str
) -> bytes:
    """``_direct_headers`` from a message's fields (a batch row has no message object)."""
    added = (
        f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\n"
        f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: {format_time(ts_ns)}\r\n{tail}\r\n"
    )
    if not stored:
        # The common case, written in one piece: same block as encode_headers would build.
        return b"NATS/1.0\r\n" + added.encode()
    if stored.startswith(b"NATS/1.0") and stored.endswith(b"\r\n\r\n"):
        # Stored headers stay as they are, ours go after them (as nats-server appends its
        # own): no parse and re-encode per message of a batch.
        return stored[:-2] + added.encode()
    items: list[tuple[str, str]] = []
    description = ""
    status: int | None = None
    try:
        parsed = parse_headers(stored)
        items.extend(parsed.items)
        status, description = parsed.status, parsed.description
    except ValueError:
        pass
    items.extend(
        (
            ("Nats-Stream", stream),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", format_time(ts_ns)),
        )
    )
    for line in tail.split("\r\n"):
        name, sep, value = line.partition(": ")
        if sep:
            items.append((name, value))
    return encode_headers(items, status=status, description=description)


def direct_answer(
    stream: Stream, req: MsgGetRequest, start_ns: int | None, up_to_ns: int | None,
    limit_bytes: int = MAX_DIRECT_BATCH_BYTES,
) -> RawReply | Iterator[Answer]:
    """One message, or for batch / multi_last forms a lazy sequence ending with 204 EOB."""
    store = stream.store
    if req.multi_last:
        return _direct_multi(stream, req, up_to_ns, limit_bytes)
    seq = store.seq_for_time(start_ns) if start_ns is not None else req.seq
    if req.batch <= 0:
        msg = load_one(stream, req, start_ns)
        if msg is None:
            return _status(404, "Message Not Found")
        hdr = None if req.no_hdr else _direct_headers(stream.name, msg)
        return RawReply(hdr, msg.data)
    cursor = max(seq, 1)
    first = store.load_next(cursor, req.next_by_subj or None)
    if first is None:
        return _status(404, "Message Not Found")
    pending = store.num_pending(cursor, req.next_by_subj or None)
    return _direct_batch(stream, req, first, pending, limit_bytes)


def _direct_batch(
    stream: Stream, req: MsgGetRequest, msg: StoredMsg, pending: int, limit_bytes: int
) -> Iterator[Answer]:
    store = stream.store
    sent = sent_bytes = last = 0
    name = stream.name
    no_hdr = req.no_hdr
    filt = req.next_by_subj
    # Our headers for a message without stored ones, as _headers_of(..., _pending_tail())
    # writes them, in one format per message; a row's Nats-Last-Sequence is the previous
    # row's sequence, whose text is kept.
    head = f"NATS/1.0\r\nNats-Stream: {name}\r\nNats-Subject: "
    last_text = "0"
    run: list[RawMsg] = [(msg.seq, msg.subject, msg.headers, msg.data, msg.ts_ns)]
    while run:
        for seq, subject, stored, data, ts in run:
            if pending > 0:
                pending -= 1
            if no_hdr:
                hdr = None
            elif stored is None:
                seq_text = str(seq)
                hdr = (
                    f"{head}{subject}\r\nNats-Sequence: {seq_text}\r\n"
                    f"Nats-Time-Stamp: {format_time(ts)}\r\n"
                    f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_text}\r\n\r\n"
                ).encode()
                last_text = seq_text
            else:
                hdr = _headers_of(name, subject, seq, ts, stored, _pending_tail(pending, last))
                last_text = str(seq)
            # A plain pair, not a RawReply: building a NamedTuple runs interpreted code.
            yield hdr, data
            last, sent = seq, sent + 1
            sent_bytes += len(subject) + len(data)
            if stored is not None:
                sent_bytes += len(stored)
            if sent >= req.batch or sent_bytes >= limit_bytes:
                run = []
                break
        else:
            if filt:
                found = store.load_next(last + 1, filt)
                run = []
                if found is not None:
                    run.append((found.seq, found.subject, found.headers, found.data, found.ts_ns))
            else:
                # Unfiltered batches walk consecutive sequences: one store call per run
                # (bounded like a slice, so a run never holds much more than one), the rows
                # read straight from the records (no message object per row).
                run = store.load_raw_run(
                    last + 1,
                    min(req.batch - sent, _RUN_MSGS),
                    min(limit_bytes - sent_bytes, DIRECT_SLICE_BYTES),
                )
    eob = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last)))
    yield encode_headers(eob, status=204, description="EOB"), b""


def _direct_multi(
    stream: Stream, req: MsgGetRequest, up_to_ns: int | None, limit_bytes: int
) -> RawReply | Iterator[RawReply]:
    """The last message of every subject matching ``multi_last``, as of ``up_to_seq`` (or
    ``up_to_time``) and not below ``seq``, oldest first; ``Nats-Num-Pending`` counts what is
    left of the whole answer, also when ``batch`` or ``max_bytes`` cut it short."""
    store = stream.store
    first, last_seq = store.bounds()
    up_to = req.up_to_seq
    if up_to_ns is not None:
        up_to = store.seq_for_time(up_to_ns)
        if up_to <= first:
            return _status(404, "No Results")
        up_to -= 1
    if up_to == 0:
        up_to = last_seq
    seqs = []
    for subject in store.subjects_state(req.multi_last or []):
        msg = store.load_prev(up_to, subject)
        if msg is not None and msg.seq >= req.seq:
            seqs.append(msg.seq)
            if len(seqs) > MAX_MULTI_RESULTS:
                return _status(413, "Too Many Results")
    if not seqs:
        return _status(404, "No Results")
    seqs.sort()
    return _multi_replies(stream, req, seqs, up_to, limit_bytes)


def _multi_replies(
    stream: Stream, req: MsgGetRequest, seqs: list[int], up_to: int, limit_bytes: int
) -> Iterator[RawReply]:
    last = sent = sent_bytes = 0
    pending = len(seqs)
    for seq in seqs:
        msg = stream.store.load(seq)
        if msg is None:
            continue
        pending -= 1
        tail = _pending_tail(pending, last)
        hdr = None if req.no_hdr else _direct_headers(stream.name, msg, tail)
        yield RawReply(hdr, msg.data)
        last, sent = msg.seq, sent + 1
        sent_bytes += len(msg.subject) + len(msg.headers or b"") + len(msg.data)
        if sent_bytes >= limit_bytes or (req.batch > 0 and sent >= req.batch):
            break
    eob = (
        ("Nats-Num-Pending", str(pending)),
        ("Nats-Last-Sequence", str(last)),
        ("Nats-UpTo-Sequence", str(up_to)),
    )
    yield RawReply(encode_headers(eob, status=204, description="EOB"), b"")


def _stream_token(subject: str) -> str:
    toks = subject.split(".", 5)
    return toks[4] if len(toks) > 4 else ""
