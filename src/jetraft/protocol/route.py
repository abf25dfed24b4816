"""The route protocol between jetraft servers of one cluster, sans-I/O.

Routes are jetraft's own: they never talk to nats-server, so the wire is chosen for a
cheap parser rather than for compatibility. Every frame is

    u32 big-endian length of what follows | u8 op | body

and bodies are msgpack (msgspec), except PING/PONG which have none. ``RouteParser.feed``
returns the complete frames in a buffer as events; the encoders build frames.

Operations:

* INFO: a map describing the sender (id, name, cluster, route and client URLs, JetStream,
  the routes it knows, for gossip). Sent on connect by both sides and again when what it
  says changes.
* CONNECT: the dialer's credentials and identity, answered by INFO or an ERR and close.
* PING / PONG: keep-alive.
* ERR: a reason, then the sender closes.
* SUB / UNSUB: interest of the sender's clients, per (account, subject, queue); a queue
  subscription carries how many local members it stands for (its weight).
* MSG: one routed message with the queue groups the receiver should serve and, for
  JetStream push delivery, the subject it is routed by when that differs from the one
  shown.
* MSGS: consecutive messages of one client on one subject with one reply, for the
  receiver's plain subscribers only (no queue groups), as runs of bodies that share a
  header size and a size. Sent only to peers whose INFO says ``msg_batches``.
* ANSWERS: messages from server components (PubAcks), each on its own subject, without
  reply or headers, for the receiver's plain subscribers only: one frame for the answers
  of one commit that go to one server, rather than one MSG each. Sent only to peers whose
  INFO says ``answers``.
* PUBS: consecutive messages of one client on several subjects that one interest of the
  receiver covers (JetStream acks: a subject each), for its plain subscribers only, as
  runs that each have a subject, a reply, a header size and a size. Sent only to peers
  whose INFO says ``pub_runs``.
* RAFT: a batch of RAFT messages, each with the name of its group.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgspec

OP_INFO = 1
OP_CONNECT = 2
OP_PING = 3
OP_PONG = 4
OP_ERR = 5
OP_SUB = 6
OP_UNSUB = 7
OP_MSG = 8
OP_RAFT = 9
OP_MSGS = 10
OP_ANSWERS = 11
OP_PUBS = 12

# A frame larger than this is a protocol violation (bounds what a peer can make us buffer):
# room for the largest payload plus headers and a batch of RAFT messages carrying them.
MAX_FRAME = 64 * 1024 * 1024

_HEAD = struct.Struct(">IB")
HEAD_LEN = _HEAD.size


class RouteProtocolError(Exception):
    """The peer broke the route protocol; the connection is closed."""


class Info(NamedTuple):
    fields: dict[str, Any]


class Connect(NamedTuple):
    fields: dict[str, Any]


class Ping(NamedTuple):
    pass


class Pong(NamedTuple):
    pass


class Err(NamedTuple):
    reason: str


class RSub(msgspec.Struct, frozen=True, array_like=True):
    account: str
    subject: str
    queue: str | None = None
    weight: int = 1


class RUnsub(msgspec.Struct, frozen=True, array_like=True):
    account: str
    subject: str
    queue: str | None = None


class RMsg(msgspec.Struct, frozen=True, array_like=True):
    account: str
    subject: str
    reply: str | None
    route_by: str | None
    queues: list[str]
    hdr: bytes | None
    data: bytes


class RMsgs(msgspec.Struct, frozen=True, array_like=True):
    account: str
    subject: str
    reply: str | None
    runs: list[tuple[int, int]]  # (header size or -1, how many bodies), in order
    bodies: list[bytes]  # header block and payload together


class RPubs(msgspec.Struct, frozen=True, array_like=True):
    account: str
    # (subject, reply, header size or -1, how many bodies) per run, in order
    runs: list[tuple[str, str | None, int, int]]
    bodies: list[bytes]  # header block and payload together


class RAnswers(msgspec.Struct, frozen=True, array_like=True):
    account: str
    subjects: list[str]
    bodies: list[bytes]  # one per subject


class RaftBatch(NamedTuple):
    items: list[tuple[str, bytes]]  # (group, encoded RAFT message)


Event = (
    Info | Connect | Ping | Pong | Err | RSub | RUnsub | RMsg | RMsgs | RPubs | RAnswers
    | RaftBatch
)

_encode = msgspec.msgpack.Encoder().encode
_map_decoder = msgspec.msgpack.Decoder(dict[str, Any])
_sub_decoder = msgspec.msgpack.Decoder(RSub)
_unsub_decoder = msgspec.msgpack.Decoder(RUnsub)
_msg_decoder = msgspec.msgpack.Decoder(RMsg)
_msgs_decoder = msgspec.msgpack.Decoder(RMsgs)
_pubs_decoder = msgspec.msgpack.Decoder(RPubs)
_answers_decoder = msgspec.msgpack.Decoder(RAnswers)
_raft_decoder = msgspec.msgpack.Decoder(list[tuple[str, bytes]])

PING_FRAME = _HEAD.pack(1, OP_PING)
PONG_FRAME = _HEAD.pack(1, OP_PONG)


def _frame(op: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 1, op) + body


def encode_info(fields: dict[str, Any]) -> bytes:
    return _frame(OP_INFO, _encode(fields))


def encode_connect(fields: dict[str, Any]) -> bytes:
    return _frame(OP_CONNECT, _encode(fields))


def encode_err(reason: str) -> bytes:
    return _frame(OP_ERR, reason.encode())


def encode_sub(account: str, subject: str, queue: str | None, weight: int) -> bytes:
    return _frame(OP_SUB, _encode(RSub(account, subject, queue, weight)))


def encode_unsub(account: str, subject: str, queue: str | None) -> bytes:
    return _frame(OP_UNSUB, _encode(RUnsub(account, subject, queue)))


def encode_msg(
    account: str,
    subject: str,
    reply: str | None,
    route_by: str | None,
    queues: list[str],
    hdr: bytes | None,
    data: bytes,
) -> bytes:
    return _frame(OP_MSG, _encode(RMsg(account, subject, reply, route_by, queues, hdr, data)))


def encode_msgs(
    account: str,
    subject: str,
    reply: str | None,
    runs: list[tuple[int, int]],
    bodies: list[bytes],
) -> bytes:
    return _frame(OP_MSGS, _encode(RMsgs(account, subject, reply, runs, bodies)))


def encode_pubs(
    account: str, runs: list[tuple[str, str | None, int, int]], bodies: list[bytes]
) -> bytes:
    return _frame(OP_PUBS, _encode(RPubs(account, runs, bodies)))


def _check_runs(what: str, runs: list[tuple[int, int]], bodies: list[bytes]) -> None:
    """Runs must cover the bodies exactly, each run one size and a header size that fits."""
    pos = 0
    for hdr_len, count in runs:
        if count < 1 or pos + count > len(bodies):
            raise RouteProtocolError(f"{what} runs do not match their bodies")
        size = len(bodies[pos])
        if not (hdr_len == -1 or 0 < hdr_len <= size):
            raise RouteProtocolError(f"{what} header size out of range")
        if count > 1 and len(set(map(len, bodies[pos : pos + count]))) != 1:
            raise RouteProtocolError(f"{what} run of mixed sizes")
        pos += count
    if pos != len(bodies):
        raise RouteProtocolError(f"{what} runs do not match their bodies")


def _check_msgs(msgs: RMsgs) -> RMsgs:
    _check_runs("MSGS", msgs.runs, msgs.bodies)
    return msgs


def _check_pubs(pubs: RPubs) -> RPubs:
    _check_runs("PUBS", [(h, n) for _, _, h, n in pubs.runs], pubs.bodies)
    return pubs


def encode_answers(account: str, subjects: list[str], bodies: list[bytes]) -> bytes:
    return _frame(OP_ANSWERS, _encode(RAnswers(account, subjects, bodies)))


def encode_raft(items: list[tuple[str, bytes]]) -> bytes:
    return _frame(OP_RAFT, _encode(items))


def _decode(op: int, body: bytes) -> Event:
    if op == OP_MSG:
        msg: RMsg = _msg_decoder.decode(body)
        return msg
    if op == OP_MSGS:
        return _check_msgs(_msgs_decoder.decode(body))
    if op == OP_PUBS:
        return _check_pubs(_pubs_decoder.decode(body))
    if op == OP_RAFT:
        return RaftBatch(_raft_decoder.decode(body))
    if op == OP_ANSWERS:
        answers: RAnswers = _answers_decoder.decode(body)
        if len(answers.subjects) != len(answers.bodies):
            raise RouteProtocolError("ANSWERS subjects do not match their bodies")
        return answers
    if op == OP_SUB:
        sub: RSub = _sub_decoder.decode(body)
        return sub
    if op == OP_UNSUB:
        unsub: RUnsub = _unsub_decoder.decode(body)
        return unsub
    if op == OP_PING:
        return Ping()
    if op == OP_PONG:
        return Pong()
    if op == OP_INFO:
        return Info(_map_decoder.decode(body))
    if op == OP_CONNECT:
        return Connect(_map_decoder.decode(body))
    if op == OP_ERR:
        return Err(body.decode("utf-8", "replace"))
    raise RouteProtocolError(f"unknown route operation {op}")


class RouteParser:
    """Accumulates bytes and hands back every complete frame as an event."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[Event]:
        buf = self._buf
        buf += data
        out: list[Event] = []
        pos, end = 0, len(buf)
        while end - pos >= HEAD_LEN:
            size, op = _HEAD.unpack_from(buf, pos)
            if size < 1 or size > self._max:
                raise RouteProtocolError(f"route frame of {size} bytes")
            stop = pos + 4 + size
            if stop > end:
                break
            body = bytes(buf[pos + HEAD_LEN : stop])
            try:
                out.append(_decode(op, body))
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
                raise RouteProtocolError(f"malformed route frame (op {op}): {exc}") from None
            pos = stop
        if pos:
            del buf[:pos]
        return out
