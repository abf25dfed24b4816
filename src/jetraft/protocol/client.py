"""The client side of the NATS wire protocol, sans-I/O.

``ClientParser(handler).feed(data)`` turns bytes a client sent into calls on a handler
(one method per operation); the encoders build what the server writes back. Nothing here
touches a socket or a clock, so tests drive it with plain bytes.

The handler interface keeps the publish path free of per-message objects: the publishes of one
read arrive together (``Handler.on_pubs``) as their parsed control lines and bodies, in order,
so the server routes a whole buffer per call. ``EventCollector`` turns the calls into
NamedTuple events for tests and tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple, NoReturn, Protocol

import msgspec

DEFAULT_MAX_CONTROL_LINE = 4096
DEFAULT_MAX_PAYLOAD = 1024 * 1024

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"  # lower case, as nats-server writes it


class ProtocolError(Exception):
    """A violation that nats-server answers with ``-ERR '<text>'`` and then closes."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class Connect(NamedTuple):
    options: dict[str, Any]


class Pub(NamedTuple):
    subject: str
    reply: str | None
    headers: bytes | None  # the raw NATS/1.0 header block, when sent with HPUB
    payload: bytes


class Sub(NamedTuple):
    subject: str
    queue: str | None
    sid: str


class Unsub(NamedTuple):
    sid: str
    max_msgs: int | None


class Ping(NamedTuple):
    pass


class Pong(NamedTuple):
    pass


Event = Connect | Pub | Sub | Unsub | Ping | Pong

PING = Ping()
PONG = Pong()


# A parsed PUB/HPUB control line: (subject, reply, total size, header size or -1, tail).
# ``tail`` is what follows the sid in the MSG/HMSG line the server writes for it
# (b" [reply ][hdr ]total\r\n"). The parser hands out one tuple per distinct control line,
# so consecutive publishes with the same line carry the very same object, and lines with the
# same subject (reply) share the same str object. Under mypyc a tuple type is a C struct,
# boxed into a new tuple object where an object is needed, so the parser tells runs apart by
# the identity of the ``tail`` bytes, which is one object per parsed line in both builds.
PubLine = tuple[str, str | None, int, int, bytes]

class PubBatch:
    """What ``Handler.on_pubs`` receives: publishes in the order sent, as runs. Consecutive
    publishes with the same control line form one run: run ``r`` has the control line
    ``lines[r]`` and the bodies ``bodies[starts[r]:starts[r + 1]]`` (``starts`` has one entry
    more than ``lines``). A body is the header block and the payload together
    (``split_body`` separates them). Flat lists: no object per message but its body."""

    __slots__ = ("bodies", "lines", "starts")

    def __init__(self, lines: list[PubLine], starts: list[int], bodies: list[bytes]) -> None:
        self.lines = lines
        self.starts = starts
        self.bodies = bodies

    @classmethod
    def single(cls, line: PubLine, body: bytes) -> PubBatch:
        return cls([line], [0, 1], [body])

    def headers_contain(self, marker: bytes) -> bool:
        """Does any publish's header block contain ``marker``? (Payloads are not read; a
        batch without headers costs a look at each run's control line.)"""
        starts, bodies = self.starts, self.bodies
        for r, line in enumerate(self.lines):
            hdr_len = line[3]
            if hdr_len > 0:
                for i in range(starts[r], starts[r + 1]):
                    if bodies[i].find(marker, 0, hdr_len) >= 0:
                        return True
        return False

    def messages(self, first: int = 0, stop: int | None = None) -> Iterator[tuple[PubLine, bytes]]:
        """(line, body) of each publish of runs ``first`` to ``stop`` (all by default)."""
        starts, bodies = self.starts, self.bodies
        for r in range(first, len(self.lines) if stop is None else stop):
            line = self.lines[r]
            for i in range(starts[r], starts[r + 1]):
                yield line, bodies[i]


def split_body(line: PubLine, body: bytes) -> tuple[bytes | None, bytes]:
    """(header block or None, payload) of one publish in a batch."""
    hdr_len = line[3]
    if hdr_len < 0:
        return None, body
    return body[:hdr_len], body[hdr_len:]


class Handler(Protocol):
    """What the parser calls for each operation, in order.

    Publishes come in batches: every publish the parser found before the next other operation
    (or the end of the input) in one ``on_pubs`` call, in the order they were sent.
    ``on_connect`` may return True to pause the parser (authentication continues elsewhere);
    the rest of the input stays buffered until ``ClientParser.resume()``.
    """

    def on_connect(self, options: dict[str, Any]) -> bool: ...
    def on_pubs(self, batch: PubBatch) -> None: ...
    def on_sub(self, subject: str, queue: str | None, sid: str) -> None: ...
    def on_unsub(self, sid: str, max_msgs: int | None) -> None: ...
    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...


class EventCollector:
    """A Handler that records events; tests and tools use it to see what was parsed."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_connect(self, options: dict[str, Any]) -> bool:
        self.events.append(Connect(options))
        return False

    def on_pubs(self, batch: PubBatch) -> None:
        for line, body in batch.messages():
            hdr, payload = split_body(line, body)
            self.events.append(Pub(line[0], line[1], hdr, payload))

    def on_sub(self, subject: str, queue: str | None, sid: str) -> None:
        self.events.append(Sub(subject, queue, sid))

    def on_unsub(self, sid: str, max_msgs: int | None) -> None:
        self.events.append(Unsub(sid, max_msgs))

    def on_ping(self) -> None:
        self.events.append(PING)

    def on_pong(self) -> None:
        self.events.append(PONG)


_json_decoder = msgspec.json.Decoder(dict[str, Any])
_PUB_CACHE_MAX = 1024
# Subjects that are each published once (JetStream ack subjects carry the message's
# sequence numbers): their lines are parsed every time, never cached.
_UNIQUE_PREFIX = "$JS.ACK."


def _size(tok: bytes) -> int:
    # int() accepts "+5", " 5" and "5_0"; the protocol only has plain digits.
    if not tok.isdigit():
        raise ProtocolError(ERR_UNKNOWN_OP)
    return int(tok)


_SEPARATORS = bytes.maketrans(b"\t\r\n", b"   ")


def split_args(raw: bytes) -> list[bytes]:
    """A protocol line's arguments, split where nats-server splits them: on spaces, tabs,
    CR and LF. ``bytes.split()`` also splits on VT and FF, which nats-server keeps inside
    a token (a subject may hold them: a consumer named so is asked for by its name)."""
    return [a for a in raw.translate(_SEPARATORS).split(b" ") if a]


def _pub_args(args_raw: bytes, with_headers: bool) -> PubLine:
    """The parsed arguments of PUB/HPUB (see ``PubLine``)."""
    args = split_args(args_raw)
    hdr_len = -1
    try:
        if with_headers:
            if len(args) == 3:
                subj, reply, hdr_tok, size_tok = args[0], None, args[1], args[2]
            elif len(args) == 4:
                subj, reply, hdr_tok, size_tok = args[0], args[1], args[2], args[3]
            else:
                raise ProtocolError(ERR_UNKNOWN_OP)
            hdr_len = _size(hdr_tok)
        elif len(args) == 2:
            subj, reply, size_tok = args[0], None, args[1]
        elif len(args) == 3:
            subj, reply, size_tok = args[0], args[1], args[2]
        else:
            raise ProtocolError(ERR_UNKNOWN_OP)
        total = _size(size_tok)
        subject = subj.decode()
        reply_s = reply.decode() if reply is not None else None
    except UnicodeDecodeError:
        raise ProtocolError(ERR_UNKNOWN_OP) from None
    if hdr_len > total:
        raise ProtocolError(ERR_UNKNOWN_OP)
    if hdr_len == 0:
        # "HPUB subj 0 n" carries no header block: nats-server delivers it as a plain MSG, and
        # an HMSG with an empty block would not parse in clients (no NATS/1.0 line).
        hdr_len = -1
    return pub_line(subject, reply_s, total, hdr_len)


def _plain_pub(line: bytes) -> PubLine | None:
    """``PUB <subject> [<reply>] <size>`` written the usual way (one space between tokens, the
    size without leading zeros), which nearly every client does: parsed with one split, and
    the line's own bytes reused as the MSG tail. None for anything else (``_pub_args`` then
    decides). Unique subjects (JetStream acks, one per message) miss the line cache, so this
    runs once per such publish."""
    # Tabs and CR separate tokens too (split_args); int membership is a memchr.
    if 9 in line or 13 in line:
        return None
    args = line.split(b" ")
    k = len(args)
    if k == 3:
        subj, size_tok = args[1], args[2]
        reply: str | None = None
    elif k == 4:
        subj, reply_b, size_tok = args[1], args[2], args[3]
        if not reply_b or not reply_b.isascii():
            return None
        reply = reply_b.decode()
    else:
        return None
    if not subj or not subj.isascii() or not size_tok.isdigit():
        return None
    if size_tok[0] == 48 and len(size_tok) > 1:  # "007": the MSG line says 7
        return None
    return subj.decode(), reply, int(size_tok), -1, line[4 + len(subj) :] + b"\r\n"


def pub_line(subject: str, reply: str | None, total: int, hdr_len: int) -> PubLine:
    """The ``PubLine`` of a publish (``hdr_len`` -1 without headers)."""
    if hdr_len >= 0:
        tail = f" {reply} {hdr_len} {total}\r\n" if reply else f" {hdr_len} {total}\r\n"
    else:
        tail = f" {reply} {total}\r\n" if reply else f" {total}\r\n"
    return subject, reply, total, hdr_len, tail.encode()


def _repeats(data: bytes, pos: int, raw: bytes, total: int, bodies: list[bytes]) -> int:
    """The same control line twice in a row (``raw``, at ``pos`` again): a publisher streaming
    one subject at one size. Take the publishes that repeat it by comparing the raw line
    instead of searching, slicing and looking it up; returns where the general path goes on
    (it deals with anything else, an incomplete publish included)."""
    n = len(data)
    step = len(raw)
    again = b"\r\n" + raw  # a body's end and the same line once more
    while True:
        body_start = pos + step
        body_end = body_start + total
        if body_end + 2 > n:
            return pos
        if data.startswith(again, body_end):
            bodies.append(data[body_start:body_end])
            pos = body_end + 2
            continue
        if data[body_end] == 13 and data[body_end + 1] == 10:
            bodies.append(data[body_start:body_end])
            pos = body_end + 2
        return pos


class ClientParser:
    """Incremental parser for what a client sends to the server.

    Publishing clients repeat the same few control lines (``PUB subject reply size``), so their
    parsed form is cached by the raw line: the hot path is a find, a dict hit, two slices and
    two appends to the batch handed to ``Handler.on_pubs``.
    """

    __slots__ = (
        "_buf",
        "_chunks",
        "_chunks_len",
        "_handler",
        "_headers_ok",
        "_max_control",
        "_max_payload",
        "_names",
        "_need",
        "_paused",
        "_pending",
        "_pub_cache",
        "_stem",
        "_stem_hdr",
        "_stem_reply",
        "_stem_subject",
        "_stem_tail_at",
    )

    def __init__(
        self,
        handler: Handler,
        max_control_line: int = DEFAULT_MAX_CONTROL_LINE,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self._handler = handler
        self._max_control = max_control_line
        self._max_payload = max_payload
        self._buf = b""
        # A publish whose body has not fully arrived, and how many bytes the chunks must reach.
        self._pending: PubLine | None = None
        self._need = 0
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._paused = False
        self._headers_ok = True
        self._pub_cache: dict[bytes, PubLine] = {}
        # One str object per subject or reply among the cached lines: publishes on one subject
        # with different sizes then share it, and the router can compare them by identity.
        self._names: dict[str, str] = {}
        # The start of the last PUB/HPUB line whose reply subject ends in a token after a
        # dot, up to that dot (b"HPUB orders _INBOX.abc."): JetStream publishers send one
        # reply subject per message under one inbox, so nearly every line differs from the
        # one before only after this stem and misses the line cache (``_stem_pub``).
        self._stem = b""
        self._stem_hdr = False
        self._stem_subject = ""
        self._stem_reply = ""
        self._stem_tail_at = 0

    @property
    def paused(self) -> bool:
        return self._paused

    def refuse_headers(self) -> None:
        """From now on HPUB is a protocol violation (the client's CONNECT said no headers)."""
        self._headers_ok = False
        self._pub_cache.clear()  # cached HPUB lines must be parsed (and refused) again
        self._names.clear()
        self._stem = b""

    def resume(self) -> None:
        """Continue after ``on_connect`` paused: parse what was buffered meanwhile."""
        self._paused = False
        held, self._buf = self._buf, b""
        self.feed(held)

    def feed(self, data: bytes) -> None:
        """Consume bytes, calling the handler per operation. Raises ProtocolError on a violation
        (after handing over the publishes that came before it)."""
        if self._paused:
            self._buf += data
            return
        pos = 0
        # First complete what the previous read left unfinished, without copying this read
        # (reads are large and nearly always end inside a message).
        while self._pending is not None or self._buf:
            if self._pending is not None:
                pos = self._finish_body(data, pos)
                if pos < 0:
                    return
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                if len(self._buf) + len(data) - pos > self._max_control:
                    raise ProtocolError(ERR_MAX_CONTROL_LINE)
                self._buf += data[pos:]
                return
            head = self._buf + data[pos : eol + 1]
            self._buf = b""
            pos = eol + 1
            self._scan(head, 0)  # one control line: it may leave a publish's body pending
            if self.paused:  # a CONNECT in that line paused the parser
                self._buf += data[pos:]
                return
        self._scan(data, pos)

    def _scan(self, data: bytes, pos: int) -> None:
        n = len(data)
        cache = self._pub_cache
        max_control = self._max_control
        # The batch being built (see PubBatch): runs' lines and first bodies, and the bodies.
        lines: list[PubLine] = []
        starts: list[int] = []
        bodies: list[bytes] = []
        last: bytes | None = None  # the tail of the last run's line (see PubLine)
        while pos < n:
            start = pos
            eol = data.find(b"\n", pos)
            if eol < 0:
                if n - pos > max_control:
                    self._fail(lines, starts, bodies, ERR_MAX_CONTROL_LINE)
                self._buf = data[pos:]
                break
            if eol - pos > max_control:
                self._fail(lines, starts, bodies, ERR_MAX_CONTROL_LINE)
            end = eol - 1 if eol > pos and data[eol - 1] == 13 else eol
            line = data[pos:end]
            pos = eol + 1
            parsed = cache.get(line)
            if parsed is None and self._stem and line.startswith(self._stem):
                parsed = self._stem_pub(line)
            if parsed is None:
                op = line[:4].upper()
                if op == b"PUB " or op == b"PUB\t" or (
                    op == b"HPUB" and line[4:5] in (b" ", b"\t")
                ):
                    try:
                        parsed = self._parse_pub(line, op == b"HPUB")
                    except ProtocolError as exc:
                        self._fail(lines, starts, bodies, exc.text)
                else:
                    if lines:
                        self._dispatch(lines, starts, bodies)
                        lines, starts, bodies = [], [], []
                        last = None
                    if self._other(line, op):
                        self._paused = True
                        self._buf = data[pos:]
                        return
                    continue
            # A publish: its body follows the control line.
            total = parsed[2]
            body_end = pos + total
            if n < body_end + 2:
                self._pending = parsed
                self._need = total + 2
                rest = data[pos:]
                self._chunks = [rest]
                self._chunks_len = len(rest)
                break
            if data[body_end] != 13 or data[body_end + 1] != 10:
                self._fail(lines, starts, bodies, ERR_UNKNOWN_OP)
            tail = parsed[4]
            if tail is not last:
                lines.append(parsed)
                starts.append(len(bodies))
                bodies.append(data[pos:body_end])
                last = tail
                pos = body_end + 2
                continue
            bodies.append(data[pos:body_end])
            pos = body_end + 2
            raw = data[start : eol + 1]
            if data.startswith(raw, pos):
                pos = _repeats(data, pos, raw, total, bodies)
        if lines:
            self._dispatch(lines, starts, bodies)

    def _dispatch(self, lines: list[PubLine], starts: list[int], bodies: list[bytes]) -> None:
        starts.append(len(bodies))
        self._handler.on_pubs(PubBatch(lines, starts, bodies))

    def _fail(
        self, lines: list[PubLine], starts: list[int], bodies: list[bytes], text: str
    ) -> NoReturn:
        """Hand over the publishes parsed before a violation, then report it."""
        if lines:
            self._dispatch(lines, starts, bodies)
        raise ProtocolError(text)

    def _parse_pub(self, line: bytes, with_headers: bool) -> PubLine:
        if with_headers:
            if not self._headers_ok:
                raise ProtocolError(ERR_UNKNOWN_OP)
            parsed = _pub_args(line[5:], True)
        else:
            plain = _plain_pub(line)
            parsed = plain if plain is not None else _pub_args(line[4:], False)
        if parsed[2] > self._max_payload:
            raise ProtocolError(ERR_MAX_PAYLOAD)
        if parsed[0].startswith(_UNIQUE_PREFIX):
            # A JetStream ack: its subject is used once, so remembering the line or the
            # name would only push out lines that do repeat.
            return parsed
        cache = self._pub_cache
        names = self._names
        if len(cache) >= _PUB_CACHE_MAX:
            cache.clear()
            names.clear()
        subject, reply, total, hdr_len, tail = parsed
        subject = names.setdefault(subject, subject)
        if reply is not None:
            reply = names.setdefault(reply, reply)
            self._note_stem(line, subject, reply, with_headers)
        parsed = cache[line] = (subject, reply, total, hdr_len, tail)
        return parsed

    def _note_stem(self, line: bytes, subject: str, reply: str, with_headers: bool) -> None:
        """Remember the stem of a line just parsed (see ``_stem``), when it has one and the
        line is written the usual way up to its end."""
        dot = reply.rfind(".")
        if dot < 0 or not reply.isascii() or not subject.isascii():
            return
        op = b"HPUB " if with_headers else b"PUB "
        stem = op + subject.encode() + b" " + reply[: dot + 1].encode()
        if not line.startswith(stem):
            return  # tabs or extra spaces: such a client gets the general parse
        self._stem = stem
        self._stem_hdr = with_headers
        self._stem_subject = subject
        self._stem_reply = reply[: dot + 1]
        self._stem_tail_at = len(op) + len(subject)

    def _stem_pub(self, line: bytes) -> PubLine | None:
        """The parse of a line that starts with ``_stem`` and goes on with the last token of
        the reply and the sizes, each after one space, the sizes without leading zeros: what
        ``_parse_pub`` would return (subject and reply prefix shared), without splitting the
        whole line or caching it. None for anything else (the general parse decides)."""
        rest = line[len(self._stem) :]
        if 9 in rest or 13 in rest:
            return None
        parts = rest.split(b" ")
        hdr_len = -1
        if self._stem_hdr:
            if len(parts) != 3:
                return None
            tok, hdr_tok, size_tok = parts[0], parts[1], parts[2]
            if not hdr_tok.isdigit() or hdr_tok[0] == 48:  # "0": no header block; "05"
                return None
            hdr_len = int(hdr_tok)
        else:
            if len(parts) != 2:
                return None
            tok, size_tok = parts[0], parts[1]
        if not tok or not tok.isascii() or not size_tok.isdigit():
            return None
        if size_tok[0] == 48 and len(size_tok) > 1:
            return None
        total = int(size_tok)
        if hdr_len > total or total > self._max_payload:
            return None
        reply = self._stem_reply + tok.decode()
        return self._stem_subject, reply, total, hdr_len, line[self._stem_tail_at :] + b"\r\n"

    def _finish_body(self, data: bytes, pos: int) -> int:
        """Take the rest of a pending publish from ``data[pos:]``: the position after it, or
        -1 when this read ends before it does."""
        missing = self._need - self._chunks_len
        if len(data) - pos < missing:
            self._chunks.append(data[pos:] if pos else data)
            self._chunks_len += len(data) - pos
            return -1
        self._chunks.append(data[pos : pos + missing])
        frame = b"".join(self._chunks)
        self._chunks = []
        self._chunks_len = 0
        parsed = self._pending
        assert parsed is not None
        total = parsed[2]
        if frame[total:] != b"\r\n":
            raise ProtocolError(ERR_UNKNOWN_OP)
        self._pending = None
        self._handler.on_pubs(PubBatch.single(parsed, frame[:total]))
        return pos + missing

    def _other(self, line: bytes, op4: bytes) -> bool:
        """Every operation but PUB/HPUB. Returns True when the handler asked to pause."""
        h = self._handler
        if op4 == b"PING" or op4 == b"PONG":
            if line[4:].strip():
                raise ProtocolError(ERR_UNKNOWN_OP)
            if op4 == b"PING":
                h.on_ping()
            else:
                h.on_pong()
            return False
        op, _, rest = line.strip().partition(b" ")
        op = op.upper()
        if op == b"SUB" or op4 == b"SUB\t":
            args = split_args(rest if op == b"SUB" else line[4:])
            try:
                if len(args) == 2:
                    h.on_sub(args[0].decode(), None, args[1].decode())
                    return False
                if len(args) == 3:
                    h.on_sub(args[0].decode(), args[1].decode(), args[2].decode())
                    return False
            except UnicodeDecodeError:
                pass
            raise ProtocolError(ERR_UNKNOWN_OP)
        if op == b"CONNECT":
            try:
                options = _json_decoder.decode(rest.strip())
            except (msgspec.DecodeError, ValueError):
                raise ProtocolError(ERR_UNKNOWN_OP) from None
            return h.on_connect(options)
        if op == b"UNSUB":
            args = split_args(rest)
            try:
                if len(args) == 1:
                    h.on_unsub(args[0].decode(), None)
                    return False
                if len(args) == 2:
                    h.on_unsub(args[0].decode(), _size(args[1]))
                    return False
            except UnicodeDecodeError:
                pass
        raise ProtocolError(ERR_UNKNOWN_OP)


# --- what the server writes -------------------------------------------------------------------

PING_FRAME = b"PING\r\n"
PONG_FRAME = b"PONG\r\n"
OK_FRAME = b"+OK\r\n"

_json_encoder = msgspec.json.Encoder()


def encode_info(info: dict[str, Any]) -> bytes:
    return b"INFO " + _json_encoder.encode(info) + b"\r\n"


def encode_err(text: str) -> bytes:
    return f"-ERR '{text}'\r\n".encode()


def msg_head(subject: str, sid: str, reply: str | None, size: int) -> bytes:
    """The control line of a MSG frame; the payload and CRLF follow it."""
    if reply:
        return f"MSG {subject} {sid} {reply} {size}\r\n".encode()
    return f"MSG {subject} {sid} {size}\r\n".encode()


def hmsg_head(subject: str, sid: str, reply: str | None, hdr_len: int, total: int) -> bytes:
    if reply:
        return f"HMSG {subject} {sid} {reply} {hdr_len} {total}\r\n".encode()
    return f"HMSG {subject} {sid} {hdr_len} {total}\r\n".encode()


def encode_msg(
    subject: str, sid: str, reply: str | None, payload: bytes, headers: bytes | None = None
) -> bytes:
    """A whole MSG or HMSG frame."""
    if headers:
        head = hmsg_head(subject, sid, reply, len(headers), len(headers) + len(payload))
        return head + headers + payload + b"\r\n"
    return msg_head(subject, sid, reply, len(payload)) + payload + b"\r\n"
