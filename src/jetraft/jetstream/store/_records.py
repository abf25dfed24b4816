"""The checksummed record format of block files and snapshots.

Every record, little endian::

    magic   4  b"JRM1"
    length  u32  whole record, header and checksum included
    kind    u8   MSG | DEL | FLOOR | SKIP | END | ERASED | CKPT
    flags   u8   SEALED when the body is encrypted
    slen    u16  subject length (MSG)
    seq     u64  MSG: its seq; DEL: highest deleted seq; FLOOR: new first seq;
                 SKIP: new last seq; END: number of messages (snapshots); ERASED: the seq
                 of the message whose record this was; CKPT: the owner's index (a RAFT
                 log index) whose state the records before it are
    ts      i64  MSG, ERASED: timestamp; FLOOR/SKIP: last_ts at the time; DEL: number of seqs
    hlen    u32  MSG: header block length, 0xFFFFFFFF for "no headers"
    body         MSG: subject, headers, data; DEL: (start, count) u64 pairs; ERASED: zeros;
                 CKPT: the owner's opaque state at that index
    crc32   u32  zlib.crc32 of everything before it

Sealed (encryption at rest): the body is ``cipher.seal(plain body, aad=header)``, so it is
``OVERHEAD`` bytes longer and the header (seq, kind, lengths) is authenticated with it;
``slen``/``hlen`` are the plain lengths. An ERASED record's body is a sealed empty body
followed by zeros. The CRC covers the record as written (it finds torn writes without a key).

Meaning on replay, in file order: MSG appends (its seq is above every seq seen before); DEL
removes the listed seqs; FLOOR removes everything below ``seq`` (and moves last_seq up to
``seq - 1`` when it is past the end); SKIP moves last_seq up to ``seq``; ERASED is a message
that was deleted and overwritten in place (secure erase): its seq exists, its bytes do not;
CKPT changes nothing in the store (see ``FileStore.checkpoint``).
DEL, FLOOR and SKIP only ever remove or skip, so replaying them late is harmless, which lets
the writer batch them at flush time.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence

from jetraft.jetstream.store import cipher as _cipher
from jetraft.jetstream.store.cipher import CipherError, RecordCipher

MAGIC_BYTES = b"JRM1"
MAGIC = int.from_bytes(MAGIC_BYTES, "little")
HEADER = struct.Struct("<IIBBHQqI")
HDR_SIZE = HEADER.size  # 32
CRC = struct.Struct("<I")
SEAL_OVERHEAD = _cipher.OVERHEAD  # what sealing adds to a body (nonce and tag)
OVERHEAD = HDR_SIZE + CRC.size  # 36: header and checksum of every record
NO_HDR = 0xFFFFFFFF
MAX_RECORD = 1 << 30

KIND_MSG = 1
KIND_DEL = 2
KIND_FLOOR = 3
KIND_SKIP = 4
KIND_END = 5
KIND_ERASED = 6
KIND_CKPT = 7
_KINDS = frozenset(
    (KIND_MSG, KIND_DEL, KIND_FLOOR, KIND_SKIP, KIND_END, KIND_ERASED, KIND_CKPT)
)
FLAG_SEALED = 0x01
KIND_AT = 8  # byte offsets of the kind and flags fields in the header
FLAGS_AT = 9

DEL_PAIRS_PER_RECORD = 8192

_pack_head = HEADER.pack
_pack_crc = CRC.pack
_crc32 = zlib.crc32


class BadRecord(Exception):
    """A record that fails framing or checksum; ``truncated`` when it runs past the end."""

    def __init__(self, offset: int, reason: str, truncated: bool) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason
        self.truncated = truncated


def append_msg(
    buf: bytearray,
    seq: int,
    ts: int,
    subject: bytes,
    headers: bytes | None,
    data: bytes,
    cipher: RecordCipher | None = None,
) -> int:
    """Append one MSG record to ``buf``; returns the record length."""
    hlen = NO_HDR if headers is None else len(headers)
    plain = len(subject) + (len(headers) if headers else 0) + len(data)
    if cipher is not None:
        rec_len = OVERHEAD + plain + SEAL_OVERHEAD
        head = HEADER.pack(MAGIC, rec_len, KIND_MSG, FLAG_SEALED, len(subject), seq, ts, hlen)
        body = cipher.seal(b"".join((subject, headers or b"", data)), head)
        buf += head
        buf += body
        buf += CRC.pack(zlib.crc32(body, zlib.crc32(head)))
        return rec_len
    rec_len = OVERHEAD + plain
    # One joined body and one checksum call: cheaper than checksumming the parts in turn.
    if headers:
        body = _pack_head(MAGIC, rec_len, KIND_MSG, 0, len(subject), seq, ts, hlen)
        body += subject + headers + data
    else:
        body = _pack_head(MAGIC, rec_len, KIND_MSG, 0, len(subject), seq, ts, hlen) + subject + data
    buf += body
    buf += _pack_crc(_crc32(body))
    return rec_len


def append_control(
    buf: bytearray,
    kind: int,
    seq: int,
    ts: int,
    body: bytes = b"",
    cipher: RecordCipher | None = None,
) -> int:
    """Append a DEL / FLOOR / SKIP / END record; returns its length."""
    if cipher is not None:
        rec_len = OVERHEAD + len(body) + SEAL_OVERHEAD
        head = HEADER.pack(MAGIC, rec_len, kind, FLAG_SEALED, 0, seq, ts, 0)
        body = cipher.seal(body, head)
    else:
        rec_len = OVERHEAD + len(body)
        head = HEADER.pack(MAGIC, rec_len, kind, 0, 0, seq, ts, 0)
    buf += head
    buf += body
    buf += CRC.pack(zlib.crc32(body, zlib.crc32(head)))
    return rec_len


def erased_record(rec_len: int, seq: int, ts: int, cipher: RecordCipher | None = None) -> bytes:
    """The ERASED record that overwrites a MSG record of ``rec_len`` bytes in place."""
    flags = FLAG_SEALED if cipher is not None else 0
    head = HEADER.pack(MAGIC, rec_len, KIND_ERASED, flags, 0, seq, ts, 0)
    body = bytearray(rec_len - OVERHEAD)
    if cipher is not None:
        proof = cipher.seal(b"", head)
        body[: len(proof)] = proof
    return head + bytes(body) + CRC.pack(zlib.crc32(body, zlib.crc32(head)))


def plain_body(
    rec: bytes | bytearray | memoryview, off: int, rec_len: int, cipher: RecordCipher | None
) -> bytes | memoryview:
    """The body of the verified record at ``rec[off:]``, opened when sealed. Raises
    ``CipherError`` when it does not open or when its sealing does not match the store's."""
    flags = rec[off + FLAGS_AT]
    body = memoryview(rec)[off + HDR_SIZE : off + rec_len - 4]
    if cipher is None:
        if flags & FLAG_SEALED:
            raise CipherError("the record is encrypted and no key is configured")
        return body
    if not flags & FLAG_SEALED:
        raise CipherError("an unencrypted record in an encrypted store")
    head = bytes(rec[off : off + HDR_SIZE])
    if rec[off + KIND_AT] == KIND_ERASED:
        cipher.open(body[:SEAL_OVERHEAD], head)
        return b""
    return cipher.open(body, head)


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


def append_dels(
    buf: bytearray, seqs: Sequence[int], cipher: RecordCipher | None = None
) -> None:
    """Append DEL records covering the sorted ``seqs``."""
    pairs = runs(seqs)
    for i in range(0, len(pairs), DEL_PAIRS_PER_RECORD):
        chunk = pairs[i : i + DEL_PAIRS_PER_RECORD]
        flat = array("Q", [v for pair in chunk for v in pair])
        top = chunk[-1][0] + chunk[-1][1] - 1
        append_control(buf, KIND_DEL, top, sum(c for _, c in chunk), flat.tobytes(), cipher)


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
    sealed = buf[off + FLAGS_AT] & FLAG_SEALED
    body = rec_len - OVERHEAD - (SEAL_OVERHEAD if sealed else 0)
    if body < 0:
        raise BadRecord(off, "bad sealed record framing", False)
    if kind == KIND_MSG:
        if slen == 0 or slen + (0 if hlen == NO_HDR else hlen) > body:
            raise BadRecord(off, "bad message record framing", False)
    elif kind == KIND_DEL and body % 16:
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


def framed_length(data: bytes, off: int) -> int:
    """The length of the (bad) record at ``off`` if its header still frames it: magic, a sane
    length that ends at the end of ``data`` or where a valid record starts; else 0. Such a
    record may be an interrupted secure erase (see ``_recovery``)."""
    if off + HDR_SIZE > len(data) or data[off : off + 4] != MAGIC_BYTES:
        return 0
    rec_len = int.from_bytes(data[off + 4 : off + 8], "little")
    end = off + rec_len
    if rec_len < OVERHEAD or end > len(data):
        return 0
    if end == len(data):
        return rec_len
    try:
        check_one(data, end)
    except BadRecord:
        return 0
    return rec_len


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
    body: bytes | bytearray | memoryview, slen: int, hlen: int
) -> tuple[bytes, bytes | None, bytes]:
    """(subject bytes, headers, data) of a MSG record's plain body."""
    subject = bytes(body[:slen])
    p = slen
    headers: bytes | None = None
    if hlen != NO_HDR:
        headers = bytes(body[p : p + hlen]) or None
        p += hlen
    return subject, headers, bytes(body[p:])


def plain_record(
    rec: bytes | bytearray | memoryview, off: int, rec_len: int, cipher: RecordCipher | None
) -> bytes:
    """The record at ``rec[off:]`` as an unsealed record (snapshots travel in the clear)."""
    if cipher is None:
        return bytes(rec[off : off + rec_len])
    body = plain_body(rec, off, rec_len, cipher)
    _, _, kind, _, slen, seq, ts, hlen = HEADER.unpack_from(rec, off)
    out = bytearray()
    if kind == KIND_MSG:
        subject, headers, data = msg_fields(body, slen, hlen)
        append_msg(out, seq, ts, subject, headers, data)
    else:
        append_control(out, kind, seq, ts, bytes(body))
    return bytes(out)
