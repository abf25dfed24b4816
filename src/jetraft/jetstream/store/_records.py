"""The checksummed record format of block files and snapshots.

Every record, little endian::

    magic   4  b"JRM1"
    length  u32  whole record, header and checksum included
    kind    u8   MSG | DEL | FLOOR | SKIP | END
    flags   u8   0 (reserved)
    slen    u16  subject length (MSG)
    seq     u64  MSG: its seq; DEL: highest deleted seq; FLOOR: new first seq;
                 SKIP: new last seq; END: number of messages (snapshots)
    ts      i64  MSG: timestamp; FLOOR/SKIP: last_ts at the time; DEL: number of seqs
    hlen    u32  MSG: header block length, 0xFFFFFFFF for "no headers"
    body         MSG: subject, headers, data; DEL: (start, count) u64 pairs
    crc32   u32  zlib.crc32 of everything before it

Meaning on replay, in file order: MSG appends (its seq is above every seq seen before); DEL
removes the listed seqs; FLOOR removes everything below ``seq`` (and moves last_seq up to
``seq - 1`` when it is past the end); SKIP moves last_seq up to ``seq``. DEL, FLOOR and SKIP
only ever remove or skip, so replaying them late is harmless, which lets the writer batch
them at flush time.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence

MAGIC_BYTES = b"JRM1"
MAGIC = int.from_bytes(MAGIC_BYTES, "little")
HEADER = struct.Struct("<IIBBHQqI")
HDR_SIZE = HEADER.size  # 32
CRC = struct.Struct("<I")
OVERHEAD = HDR_SIZE + CRC.size  # 36
NO_HDR = 0xFFFFFFFF
MAX_RECORD = 1 << 30

KIND_MSG = 1
KIND_DEL = 2
KIND_FLOOR = 3
KIND_SKIP = 4
KIND_END = 5
_KINDS = frozenset((KIND_MSG, KIND_DEL, KIND_FLOOR, KIND_SKIP, KIND_END))

DEL_PAIRS_PER_RECORD = 8192


class BadRecord(Exception):
    """A record that fails framing or checksum; ``truncated`` when it runs past the end."""

    def __init__(self, offset: int, reason: str, truncated: bool) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason
        self.truncated = truncated


def append_msg(
    buf: bytearray, seq: int, ts: int, subject: bytes, headers: bytes | None, data: bytes
) -> int:
    """Append one MSG record to ``buf``; returns the record length."""
    hlen = NO_HDR if headers is None else len(headers)
    rec_len = OVERHEAD + len(subject) + (len(headers) if headers else 0) + len(data)
    head = HEADER.pack(MAGIC, rec_len, KIND_MSG, 0, len(subject), seq, ts, hlen)
    crc = zlib.crc32(subject, zlib.crc32(head))
    buf += head
    buf += subject
    if headers:
        crc = zlib.crc32(headers, crc)
        buf += headers
    buf += data
    buf += CRC.pack(zlib.crc32(data, crc))
    return rec_len


def append_control(buf: bytearray, kind: int, seq: int, ts: int, body: bytes = b"") -> int:
    """Append a DEL / FLOOR / SKIP / END record; returns its length."""
    rec_len = OVERHEAD + len(body)
    head = HEADER.pack(MAGIC, rec_len, kind, 0, 0, seq, ts, 0)
    buf += head
    buf += body
    buf += CRC.pack(zlib.crc32(body, zlib.crc32(head)))
    return rec_len


def runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted seqs as (start, count) runs."""
    out: list[tuple[int, int]] = []
    start = prev = -2
    for s in seqs:
        if s == prev + 1:
            prev = s
            continue
        if start >= 0:
            out.append((start, prev - start + 1))
        start = prev = s
    if start >= 0:
        out.append((start, prev - start + 1))
    return out


def append_dels(buf: bytearray, seqs: Sequence[int]) -> None:
    """Append DEL records covering the sorted ``seqs``."""
    pairs = runs(seqs)
    for i in range(0, len(pairs), DEL_PAIRS_PER_RECORD):
        chunk = pairs[i : i + DEL_PAIRS_PER_RECORD]
        flat = array("Q", [v for pair in chunk for v in pair])
        top = chunk[-1][0] + chunk[-1][1] - 1
        append_control(buf, KIND_DEL, top, sum(c for _, c in chunk), flat.tobytes())


def del_targets(body: bytes | memoryview) -> Iterator[int]:
    """The seqs listed in a DEL record body."""
    flat = array("Q")
    flat.frombytes(body)
    for i in range(0, len(flat), 2):
        yield from range(flat[i], flat[i] + flat[i + 1])


Parsed = tuple[int, int, int, int, int, int, int]
"""(offset, kind, rec_len, slen, seq, ts, hlen)"""


def check_one(buf: bytes | bytearray | memoryview, off: int) -> Parsed:
    """Parse and verify the record at ``off``; raises BadRecord."""
    n = len(buf)
    if off + HDR_SIZE > n:
        raise BadRecord(off, "record header runs past the end", True)
    magic, rec_len, kind, _flags, slen, seq, ts, hlen = HEADER.unpack_from(buf, off)
    if magic != MAGIC:
        raise BadRecord(off, "bad record magic", False)
    if rec_len < OVERHEAD or rec_len > MAX_RECORD or kind not in _KINDS:
        raise BadRecord(off, "bad record length or kind", False)
    end = off + rec_len
    if end > n:
        raise BadRecord(off, "record runs past the end", True)
    (want,) = CRC.unpack_from(buf, end - 4)
    with memoryview(buf) as mv:
        got = zlib.crc32(mv[off : end - 4])
    if got != want:
        raise BadRecord(off, "checksum mismatch", False)
    if kind == KIND_MSG:
        body = rec_len - OVERHEAD
        if slen == 0 or slen + (0 if hlen == NO_HDR else hlen) > body:
            raise BadRecord(off, "bad message record framing", False)
    elif kind == KIND_DEL and (rec_len - OVERHEAD) % 16:
        raise BadRecord(off, "bad delete record framing", False)
    return off, kind, rec_len, slen, seq, ts, hlen


def scan(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[Parsed]:
    """Every record from ``start`` to the end; raises BadRecord at the first bad one."""
    off = start
    n = len(buf)
    while off < n:
        rec = check_one(buf, off)
        yield rec
        off += rec[2]


def valid_record_after(buf: bytes | bytearray | memoryview, off: int) -> int:
    """Offset of the first valid record starting after ``off``, -1 when there is none.

    Tells a torn tail (nothing valid follows the bad bytes) from corruption in the middle.
    """
    data = bytes(buf)
    pos = data.find(MAGIC_BYTES, off + 1)
    while pos >= 0:
        try:
            check_one(data, pos)
            return pos
        except BadRecord:
            pos = data.find(MAGIC_BYTES, pos + 1)
    return -1


def msg_fields(
    rec: bytes | bytearray | memoryview, slen: int, hlen: int
) -> tuple[bytes, bytes | None, bytes]:
    """(subject bytes, headers, data) of a verified MSG record that starts at rec[0]."""
    p = HDR_SIZE + slen
    subject = bytes(rec[HDR_SIZE:p])
    headers: bytes | None = None
    if hlen != NO_HDR:
        headers = bytes(rec[p : p + hlen]) or None
        p += hlen
    return subject, headers, bytes(rec[p : len(rec) - 4])
