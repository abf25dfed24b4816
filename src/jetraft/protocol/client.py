"""The client side of the NATS wire protocol, sans-I/O.

``ClientParser.feed(data)`` turns bytes a client sent into events; the encoders build what the
server writes back. Nothing here touches a socket or a clock, so tests drive it with plain bytes.

Events are NamedTuples: immutable like frozen dataclasses but built at tuple speed, which matters
on the publish path where one event is made per message.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

DEFAULT_MAX_CONTROL_LINE = 4096
DEFAULT_MAX_PAYLOAD = 1024 * 1024

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"
ERR_MAX_CONTROL_LINE = "Maximum Control Line Exceeded"


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

_json_decoder = msgspec.json.Decoder(dict[str, Any])


def _size(tok: bytes) -> int:
    # int() accepts "+5", " 5" and "5_0"; the protocol only has plain digits.
    if not tok.isdigit():
        raise ProtocolError(ERR_UNKNOWN_OP)
    return int(tok)


class ClientParser:
    """Incremental parser for what a client sends to the server."""

    __slots__ = (
        "_buf",
        "_chunks",
        "_chunks_len",
        "_max_control",
        "_max_payload",
        "_need",
        "_pending",
    )

    def __init__(
        self,
        max_control_line: int = DEFAULT_MAX_CONTROL_LINE,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self._max_control = max_control_line
        self._max_payload = max_payload
        self._buf = b""
        # A publish whose body has not fully arrived: (body size, subject, reply, header size or
        # -1), and how many bytes the chunks must reach before it can be finished.
        self._pending: tuple[int, str, str | None, int] | None = None
        self._need = 0
        self._chunks: list[bytes] = []
        self._chunks_len = 0

    def feed(self, data: bytes) -> list[Event]:
        """Consume bytes; return every complete event. Raises ProtocolError on a violation."""
        if self._pending is not None:
            self._chunks.append(data)
            self._chunks_len += len(data)
            if self._chunks_len < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._chunks_len = 0
        elif self._buf:
            data = self._buf + data
        self._buf = b""
        events: list[Event] = []
        pos = 0
        n = len(data)
        if self._pending is not None:
            pos = self._finish_body(data, 0, events)
        while pos < n:
            eol = data.find(b"\n", pos)
            if eol < 0:
                if n - pos > self._max_control:
                    raise ProtocolError(ERR_MAX_CONTROL_LINE)
                self._buf = data[pos:]
                break
            if eol - pos > self._max_control:
                raise ProtocolError(ERR_MAX_CONTROL_LINE)
            end = eol - 1 if eol > pos and data[eol - 1] == 13 else eol
            line = data[pos:end]
            pos = eol + 1
            op = line[:4].upper()
            if op == b"PUB " or op == b"PUB\t":
                self._start_pub(line[4:], False)
            elif op == b"HPUB" and line[4:5] in (b" ", b"\t"):
                self._start_pub(line[5:], True)
            elif op == b"SUB " or op == b"SUB\t":
                events.append(self._sub(line[4:]))
                continue
            elif op == b"PING":
                if line[4:].strip():
                    raise ProtocolError(ERR_UNKNOWN_OP)
                events.append(PING)
                continue
            elif op == b"PONG":
                if line[4:].strip():
                    raise ProtocolError(ERR_UNKNOWN_OP)
                events.append(PONG)
                continue
            else:
                events.append(self._other(line))
                continue
            # A publish: its body follows the control line.
            pos = self._finish_body(data, pos, events)
        return events

    def _finish_body(self, data: bytes, pos: int, events: list[Event]) -> int:
        assert self._pending is not None
        total, subject, reply, hdr_len = self._pending
        end = pos + total
        if len(data) < end + 2:
            # Wait for the rest; keep what we have as the first chunk.
            rest = data[pos:]
            self._chunks = [rest]
            self._chunks_len = len(rest)
            self._need = total + 2
            return len(data)
        if data[end : end + 2] != b"\r\n":
            raise ProtocolError(ERR_UNKNOWN_OP)
        self._pending = None
        if hdr_len >= 0:
            headers = data[pos : pos + hdr_len]
            events.append(Pub(subject, reply, headers, data[pos + hdr_len : end]))
        else:
            events.append(Pub(subject, reply, None, data[pos:end]))
        return end + 2

    def _start_pub(self, args_raw: bytes, with_headers: bool) -> None:
        args = args_raw.split()
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
        if total > self._max_payload:
            raise ProtocolError(ERR_MAX_PAYLOAD)
        if hdr_len > total:
            raise ProtocolError(ERR_UNKNOWN_OP)
        self._pending = (total, subject, reply_s, hdr_len)

    @staticmethod
    def _sub(args_raw: bytes) -> Sub:
        args = args_raw.split()
        try:
            if len(args) == 2:
                return Sub(args[0].decode(), None, args[1].decode())
            if len(args) == 3:
                return Sub(args[0].decode(), args[1].decode(), args[2].decode())
        except UnicodeDecodeError:
            pass
        raise ProtocolError(ERR_UNKNOWN_OP)

    @staticmethod
    def _other(line: bytes) -> Event:
        op, _, rest = line.strip().partition(b" ")
        op = op.upper()
        if op == b"CONNECT":
            try:
                return Connect(_json_decoder.decode(rest.strip()))
            except (msgspec.DecodeError, ValueError):
                raise ProtocolError(ERR_UNKNOWN_OP) from None
        if op == b"UNSUB":
            args = rest.split()
            try:
                if len(args) == 1:
                    return Unsub(args[0].decode(), None)
                if len(args) == 2:
                    return Unsub(args[0].decode(), _size(args[1]))
            except UnicodeDecodeError:
                pass
            raise ProtocolError(ERR_UNKNOWN_OP)
        if op in (b"PING", b"PONG") and not rest.strip():
            return PING if op == b"PING" else PONG
        if op in (b"SUB", b"PUB", b"HPUB"):
            # Reached only for a tab-separated form like "PUB\tfoo 1" handled above, or garbage.
            raise ProtocolError(ERR_UNKNOWN_OP)
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
