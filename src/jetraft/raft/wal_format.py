"""Byte formats of the RAFT log: log records and snapshot files. Pure functions, no I/O.

Log record (little endian)::

    magic  2 bytes  b"\\xa7J"   lets recovery look for the next record after a bad one
    type   1 byte   ENTRY | HARD_STATE | TRUNCATE
    flags  1 byte   0 (anything else is a record from a newer format: corruption here)
    length 4 bytes  payload length
    payload
    crc32  4 bytes  zlib.crc32 over magic..payload

The checksum sits at the end so that a write torn anywhere fails it. Payloads:

    ENTRY       term u64, index u64, kind u8, data
    HARD_STATE  term u64, commit u64, vote length u16, vote (utf-8), then (optional,
                absent in older logs) last index u64 and last term u64: where the log
                ended when this hard state was written (see HardStateRecord)
    TRUNCATE    last u64: the log ends at ``last``; entries above it are gone

Snapshot file: magic b"JRSNAP01", crc32 u32 over everything after it, then index u64,
term u64, voter count u16, learner count u16, each id as u16 length + utf-8, then the data.
An external snapshot (a marker: the state machine holds that state durably itself) has
the magic b"JRSNAPX1" and no data.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from jetraft.raft.types import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    Snapshot,
    SnapshotMeta,
    whole,
)

MAGIC = b"\xa7J"
REC_ENTRY = 1
REC_HARD_STATE = 2
REC_TRUNCATE = 3

_HEAD = struct.Struct("<2sBBI")
HEAD_BYTES = _HEAD.size
CRC_BYTES = 4
_CRC = struct.Struct("<I")
_ENTRY_FIXED = struct.Struct("<QQB")
_ENTRY_PRE = struct.Struct("<2sBBIQQB")  # head + fixed entry fields, packed in one call
_HS_FIXED = struct.Struct("<QQH")
_HS_TAIL = struct.Struct("<QQ")
_TRUNC = struct.Struct("<Q")
RECORD_OVERHEAD = HEAD_BYTES + CRC_BYTES
ENTRY_OVERHEAD = RECORD_OVERHEAD + _ENTRY_FIXED.size
MAX_PAYLOAD = 1 << 31  # larger lengths are garbage, not records

_crc32 = zlib.crc32


def encode_entry_parts(e: Entry, out: list[bytes]) -> None:
    """Append the record of ``e`` to ``out`` as three parts, so a batch joins once."""
    pre = _ENTRY_PRE.pack(
        MAGIC, REC_ENTRY, 0, _ENTRY_FIXED.size + len(e.data), e.term, e.index, e.kind
    )
    out.append(pre)
    out.append(e.data)
    out.append(_CRC.pack(_crc32(e.data, _crc32(pre))))


def _record(rtype: int, payload: bytes) -> bytes:
    head = _HEAD.pack(MAGIC, rtype, 0, len(payload))
    return head + payload + _CRC.pack(_crc32(payload, _crc32(head)))


def encode_entry(e: Entry) -> bytes:
    parts: list[bytes] = []
    encode_entry_parts(e, parts)
    return b"".join(parts)


def encode_hard_state(hs: HardState, tail: tuple[int, int] | None = None) -> bytes:
    """``tail``: (last index, last term) of the log once this record is durable."""
    vote = hs.vote.encode()
    payload = _HS_FIXED.pack(hs.term, hs.commit, len(vote)) + vote
    if tail is not None:
        payload += _HS_TAIL.pack(*tail)
    return _record(REC_HARD_STATE, payload)


def encode_truncate(last_index: int) -> bytes:
    return _record(REC_TRUNCATE, _TRUNC.pack(last_index))


class HardStateRecord(NamedTuple):
    """A hard state with the end of the log, (last index, last term), as it was when the
    record was written. Every batch of entries ends with such a record, and a replica
    acknowledges entries only once their batch is durable, so the newest record bounds
    everything the replica ever acknowledged: what a damaged replica still knows after
    losing entries (state.py, acked_tail). None in records of older logs."""

    hs: HardState
    tail: tuple[int, int] | None


class Record(NamedTuple):
    rtype: int
    start: int  # offset of the record in its file
    end: int  # offset just past it
    value: Entry | HardStateRecord | int  # int: the last index of a TRUNCATE record


_KINDS = {k.value: k for k in EntryKind}


def decode_at(data: bytes, pos: int, view: memoryview | None = None) -> Record | str:
    """The record at ``pos``, or why there is no valid record there. Pass ``view`` (a
    memoryview of ``data``) when decoding many records of one buffer."""
    n = len(data)
    if n - pos < RECORD_OVERHEAD:
        return "incomplete record header"
    magic, rtype, flags, length = _HEAD.unpack_from(data, pos)
    if magic != MAGIC:
        return "bad record magic"
    if length > MAX_PAYLOAD:
        return "implausible record length"
    body_end = pos + HEAD_BYTES + length
    if body_end + CRC_BYTES > n:
        return "record runs past the end of the file"
    if view is None:
        view = memoryview(data)
    (crc,) = _CRC.unpack_from(data, body_end)
    if _crc32(view[pos:body_end]) != crc:
        return "checksum mismatch"
    if flags != 0:
        return f"unknown record flags {flags}"
    start = pos + HEAD_BYTES
    if rtype == REC_ENTRY and length >= _ENTRY_FIXED.size:  # the hot path, inline
        term, index, kind = _ENTRY_FIXED.unpack_from(data, start)
        ekind = _KINDS.get(kind)
        if ekind is None:
            return f"unknown entry kind {kind}"
        entry = Entry(term, index, ekind, data[start + _ENTRY_FIXED.size : body_end])
        return Record(REC_ENTRY, pos, body_end + CRC_BYTES, entry)
    value = _decode_payload(rtype, data, start, body_end)
    if isinstance(value, str):
        return value
    return Record(rtype, pos, body_end + CRC_BYTES, value)


def _decode_payload(
    rtype: int, data: bytes, start: int, end: int
) -> HardStateRecord | int | str:
    length = end - start
    if rtype == REC_ENTRY:
        return "short entry record"
    if rtype == REC_HARD_STATE:
        if length < _HS_FIXED.size:
            return "short hard-state record"
        term, commit, vlen = _HS_FIXED.unpack_from(data, start)
        vote_end = start + _HS_FIXED.size + vlen
        tail: tuple[int, int] | None = None
        if vote_end + _HS_TAIL.size == end:
            tail = _HS_TAIL.unpack_from(data, vote_end)
        elif vote_end != end:
            return "hard-state record length mismatch"
        try:
            vote = data[start + _HS_FIXED.size : vote_end].decode()
        except UnicodeDecodeError:
            return "hard-state vote is not utf-8"
        return HardStateRecord(HardState(term=term, vote=vote, commit=commit), tail)
    if rtype != REC_TRUNCATE:
        return f"unknown record type {rtype}"
    if length != _TRUNC.size:
        return "bad truncate record length"
    (last,) = _TRUNC.unpack_from(data, start)
    return int(last)


def find_next_valid(data: bytes, start: int) -> int | None:
    """Offset of the first valid record that begins at or after ``start``, if any.

    Used only after a bad record, to tell a torn tail (nothing valid follows) from damage in
    the middle of the log (valid records follow). Candidates are found by the magic bytes.
    """
    view = memoryview(data)
    pos = data.find(MAGIC, start)
    while pos >= 0:
        if isinstance(decode_at(data, pos, view), Record):
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None


# --------------------------------------------------------------------------------------------
# Snapshot files

# Magic: snapshot with data or external marker (no data), in version 2 (which adds the
# membership's cluster size) or version 1 (still read).
SNAP_MAGIC = b"JRSNAP02"
SNAP_MAGIC_EXTERNAL = b"JRSNAPX2"
_V1 = {b"JRSNAP01": False, b"JRSNAPX1": True}  # magic -> external
_SNAP_FIXED = struct.Struct("<QQHHI")
_SNAP_FIXED_V1 = struct.Struct("<QQHH")
_U16 = struct.Struct("<H")


def encode_snapshot(snap: Snapshot) -> bytes:
    m = snap.meta
    parts = [
        _SNAP_FIXED.pack(
            m.index,
            m.term,
            len(m.membership.voters),
            len(m.membership.learners),
            m.membership.size,
        )
    ]
    for node_id in (*m.membership.voters, *m.membership.learners):
        raw = node_id.encode()
        parts.append(_U16.pack(len(raw)))
        parts.append(raw)
    if snap.external:
        body = b"".join(parts)
        return SNAP_MAGIC_EXTERNAL + _CRC.pack(_crc32(body)) + body
    parts.append(whole(snap.data))
    body = b"".join(parts)
    return SNAP_MAGIC + _CRC.pack(_crc32(body)) + body


def decode_snapshot(data: bytes) -> Snapshot | str:
    """The snapshot in ``data``, or why it is not a valid snapshot file."""
    head = len(SNAP_MAGIC) + CRC_BYTES
    magic = data[: len(SNAP_MAGIC)]
    if magic in (SNAP_MAGIC, SNAP_MAGIC_EXTERNAL):
        fixed, external = _SNAP_FIXED, magic == SNAP_MAGIC_EXTERNAL
    elif magic in _V1:
        fixed, external = _SNAP_FIXED_V1, _V1[magic]
    else:
        return "bad snapshot magic"
    if len(data) < head + fixed.size:
        return "snapshot file too short"
    (crc,) = _CRC.unpack_from(data, len(SNAP_MAGIC))
    if _crc32(memoryview(data)[head:]) != crc:
        return "snapshot checksum mismatch"
    if fixed is _SNAP_FIXED:
        index, term, n_voters, n_learners, cluster_size = fixed.unpack_from(data, head)
    else:
        index, term, n_voters, n_learners = fixed.unpack_from(data, head)
        cluster_size = 0
    pos = head + fixed.size
    ids: list[str] = []
    for _ in range(n_voters + n_learners):
        if pos + _U16.size > len(data):
            return "snapshot membership truncated"
        (size,) = _U16.unpack_from(data, pos)
        pos += _U16.size
        if pos + size > len(data):
            return "snapshot membership truncated"
        try:
            ids.append(data[pos : pos + size].decode())
        except UnicodeDecodeError:
            return "snapshot member id is not utf-8"
        pos += size
    membership = Membership(tuple(ids[:n_voters]), tuple(ids[n_voters:]), cluster_size)
    if external and pos != len(data):
        return "external snapshot with data"
    return Snapshot(SnapshotMeta(index, term, membership), data[pos:], external)
