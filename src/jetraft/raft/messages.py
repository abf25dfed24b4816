"""RAFT messages exchanged between the members of one group, and their wire encoding.

Every message carries the sender's term, its id (`frm`) and the destination (`to`).
Messages are values: the core creates them, the driver sends them only after the Ready
that produced them is durable (see ready.py), and the transport may encode them with
`encode_message` / `decode_message` (msgpack through msgspec, a compact positional layout).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import Entry, Membership, SnapshotMeta


class VoteRequest(msgspec.Struct, frozen=True, gc=False):
    """RequestVote; with `pre_vote` a trial that changes nobody's term (term is ours + 1)."""

    term: int
    frm: str
    to: str
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False  # sent because of a leadership transfer: bypasses leader leases


class VoteResponse(msgspec.Struct, frozen=True, gc=False):
    term: int
    frm: str
    to: str
    granted: bool
    pre_vote: bool = False


class AppendEntries(msgspec.Struct, frozen=True, gc=False):
    """Entries after (prev_index, prev_term); may be empty (a probe or a commit update).
    `member`: the recipient is in the leader's newest configuration (see Heartbeat)."""

    term: int
    frm: str
    to: str
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int
    member: bool = True


class AppendResponse(msgspec.Struct, frozen=True, gc=False):
    """Reply to AppendEntries (and to InstallSnapshot).

    On success `index` is the last index now known to match the leader's log. On reject
    `index` is the rejected prev_index and (hint_index, hint_term) is the follower's best
    guess of where the logs may agree: its largest index <= min(prev_index, last) whose
    term is <= the leader's prev_term, and that term. A non-zero `corrupt_term` says the
    follower's log was found damaged: it may have lost entries it acknowledged in terms up
    to that one; the leader sends it its snapshot (see state.py on repair).
    """

    term: int
    frm: str
    to: str
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0
    corrupt_term: int = 0


class Heartbeat(msgspec.Struct, frozen=True, gc=False):
    """Leader liveness; `commit` is min(follower's match, leader's commit). `member`: the
    recipient is in the leader's newest configuration. A replica that applies a committed
    configuration without itself stops for good only when its leader also says it is no
    member: a server removed once and added again replays its old removal from the log."""

    term: int
    frm: str
    to: str
    commit: int
    member: bool = True
    # The leader's own commit index, not clipped: never used to commit, only to tell a
    # follower how far it must apply before it serves reads (Driver.heard_commit).
    leader_commit: int = 0


class HeartbeatResponse(msgspec.Struct, frozen=True, gc=False):
    term: int
    frm: str
    to: str


class InstallSnapshot(msgspec.Struct, frozen=True, gc=False):
    """One chunk of the leader's snapshot at meta.index: bytes [offset, offset + len(data))
    of its data; `done` marks the last one. The follower answers each chunk but the last
    with a SnapshotResponse, and the last (once installed) with an AppendResponse."""

    term: int
    frm: str
    to: str
    meta: SnapshotMeta
    offset: int
    data: bytes
    done: bool = True


class SnapshotResponse(msgspec.Struct, frozen=True, gc=False):
    """The follower holds the first `offset` bytes of the snapshot at `index` (0 if it
    holds none of it, e.g. after a restart): the leader continues, or starts again, there."""

    term: int
    frm: str
    to: str
    index: int
    offset: int


class TimeoutNow(msgspec.Struct, frozen=True, gc=False):
    """Leadership transfer: the target campaigns at once, without pre-vote."""

    term: int
    frm: str
    to: str


Message = (
    VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | InstallSnapshot
    | SnapshotResponse
    | TimeoutNow
)


def message_bytes(msg: Message) -> int:
    """Approximate payload size, for flow control and batching limits."""
    if isinstance(msg, AppendEntries):
        return 64 + sum(len(e.data) + 24 for e in msg.entries)
    if isinstance(msg, InstallSnapshot):
        return 64 + len(msg.data)
    return 48


# ---------------------------------------------------------------------------- codec
# Layout: [code, term, frm, to, *fields]. Entries are [term, index, kind, data].

_VOTE_REQ, _VOTE_RESP, _APP, _APP_RESP, _HB, _HB_RESP, _SNAP, _TIMEOUT, _SNAP_RESP = range(9)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class DecodeError(ValueError):
    """Bytes that are not a RAFT message of this version."""


def _entries_out(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
    return entries  # array-like Structs: msgspec writes each as [term, index, kind, data]


def _fields(msg: Message) -> tuple[Any, ...]:
    if isinstance(msg, AppendEntries):
        return (_APP, msg.prev_index, msg.prev_term, _entries_out(msg.entries), msg.commit,
                msg.member)
    if isinstance(msg, AppendResponse):
        return (_APP_RESP, msg.index, msg.reject, msg.hint_index, msg.hint_term, msg.corrupt_term)
    if isinstance(msg, Heartbeat):
        return (_HB, msg.commit, msg.member, msg.leader_commit)
    if isinstance(msg, HeartbeatResponse):
        return (_HB_RESP,)
    if isinstance(msg, VoteRequest):
        return (_VOTE_REQ, msg.last_index, msg.last_term, msg.pre_vote, msg.transfer)
    if isinstance(msg, VoteResponse):
        return (_VOTE_RESP, msg.granted, msg.pre_vote)
    if isinstance(msg, InstallSnapshot):
        meta = msg.meta
        mem = meta.membership
        return (
            _SNAP,
            meta.index,
            meta.term,
            list(mem.voters),
            list(mem.learners),
            msg.offset,
            msg.done,
            msg.data,
            mem.size,
        )
    if isinstance(msg, SnapshotResponse):
        return (_SNAP_RESP, msg.index, msg.offset)
    return (_TIMEOUT,)


def encode_message(msg: Message) -> bytes:
    fields = _fields(msg)
    return _encoder.encode((fields[0], msg.term, msg.frm, msg.to, *fields[1:]))


def _entries_in(raw: list[Any]) -> tuple[Entry, ...]:
    try:  # builds and type-checks every entry in C (ValidationError on bad ones)
        return msgspec.convert(raw, _Entries)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"bad raft entries: {exc}") from exc


_Entries = tuple[Entry, ...]


def decode_message(data: bytes) -> Message:
    try:
        raw = _decoder.decode(data)
        code, term, frm, to, *rest = raw
        return _build(code, term, frm, to, rest)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise DecodeError(f"bad raft message: {exc}") from exc


def _build(code: int, term: int, frm: str, to: str, rest: list[Any]) -> Message:
    if not isinstance(term, int) or not isinstance(frm, str) or not isinstance(to, str):
        raise DecodeError("bad raft message header")
    if code == _APP:
        prev_index, prev_term, entries, commit, member = rest
        return AppendEntries(term, frm, to, prev_index, prev_term, _entries_in(entries), commit,
                             bool(member))
    if code == _APP_RESP:
        index, reject, hint_index, hint_term, corrupt_term = rest
        return AppendResponse(term, frm, to, index, reject, hint_index, hint_term, corrupt_term)
    if code == _HB:
        commit, member, *more = rest  # a server of an earlier version sends no leader_commit
        leader_commit = more[0] if more else 0
        if not isinstance(leader_commit, int):
            raise DecodeError("bad raft heartbeat")
        return Heartbeat(term, frm, to, commit, bool(member), leader_commit)
    if code == _HB_RESP:
        return HeartbeatResponse(term, frm, to)
    if code == _VOTE_REQ:
        last_index, last_term, pre_vote, transfer = rest
        return VoteRequest(term, frm, to, last_index, last_term, pre_vote, transfer)
    if code == _VOTE_RESP:
        granted, pre_vote = rest
        return VoteResponse(term, frm, to, granted, pre_vote)
    if code == _SNAP:
        index, sterm, voters, learners, offset, done, sdata, *more = rest
        size = int(more[0]) if more else 0
        meta = SnapshotMeta(index, sterm, Membership(tuple(voters), tuple(learners), size))
        return InstallSnapshot(term, frm, to, meta, offset, bytes(sdata), bool(done))
    if code == _SNAP_RESP:
        index, offset = rest
        return SnapshotResponse(term, frm, to, index, offset)
    if code == _TIMEOUT:
        return TimeoutNow(term, frm, to)
    raise DecodeError(f"unknown raft message code {code}")
