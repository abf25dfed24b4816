"""The persisted form of a consumer: its config and replicated state, checksummed.

Layout of a state file: ``b"JRC1"`` + crc32 (4 bytes, big endian) + payload length (4 bytes)
+ msgspec JSON payload. A file whose checksum or length does not match is reported as
corrupt, never silently replaced by an empty state.

Encrypted streams (``cipher`` given): the magic is ``b"JRCE"`` and the payload is the JSON
sealed with the stream's ``RecordCipher``, the stream and consumer names as associated data
(a state file copied to another consumer does not open). A file that does not open, or whose
sealing does not match the stream's, is corrupt too.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgspec

from jetraft.jetstream.consumer import ConsumerCore, Pending, ReplicatedState, SeqPair
from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.store.cipher import CipherError, RecordCipher

MAGIC = b"JRC1"
SEALED_MAGIC = b"JRCE"
_HEAD = struct.Struct(">4sII")


class CorruptState(ValueError):
    """A state file that fails its checksum or framing."""


class StoredConsumer(msgspec.Struct):
    stream: str
    name: str
    created_ns: int
    config: ConsumerConfig
    delivered: tuple[int, int] = (0, 0)  # (consumer_seq, stream_seq)
    ack_floor: tuple[int, int] = (0, 0)
    pending: list[tuple[int, int, int]] = []  # (stream_seq, consumer_seq, ts_ns)
    redelivered: list[tuple[int, int]] = []  # (stream_seq, count)


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(StoredConsumer)


def snapshot(core: ConsumerCore) -> StoredConsumer:
    st = core.state
    return StoredConsumer(
        stream=core.stream,
        name=core.name,
        created_ns=core.created_ns,
        config=core.cfg,
        delivered=(st.delivered.consumer_seq, st.delivered.stream_seq),
        ack_floor=(st.ack_floor.consumer_seq, st.ack_floor.stream_seq),
        pending=[(s, p.dseq, p.ts_ns) for s, p in sorted(st.pending.items())],
        redelivered=sorted(st.redelivered.items()),
    )


def _aad(stream: str, name: str) -> bytes:
    return f"consumer {stream}/{name}".encode()


def encode(stored: StoredConsumer, cipher: RecordCipher | None = None) -> bytes:
    payload = _ENCODER.encode(stored)
    magic = MAGIC
    if cipher is not None:
        payload = cipher.seal(payload, _aad(stored.stream, stored.name))
        magic = SEALED_MAGIC
    return _HEAD.pack(magic, zlib.crc32(payload), len(payload)) + payload


def decode(
    blob: bytes,
    cipher: RecordCipher | None = None,
    expect: tuple[str, str] | None = None,
) -> StoredConsumer:
    """The stored consumer; ``expect`` is (stream, consumer) the file belongs to (required to
    open a sealed file, and checked against what it holds)."""
    if len(blob) < _HEAD.size:
        raise CorruptState("consumer state file is truncated")
    magic, crc, length = _HEAD.unpack_from(blob)
    payload = blob[_HEAD.size :]
    if magic not in (MAGIC, SEALED_MAGIC):
        raise CorruptState("consumer state file has a bad magic")
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise CorruptState("consumer state file fails its checksum")
    if (magic == SEALED_MAGIC) != (cipher is not None):
        raise CorruptState(
            "consumer state file is encrypted and the stream has no key"
            if cipher is None
            else "consumer state file is not encrypted in an encrypted stream"
        )
    if cipher is not None:
        if expect is None:
            raise ValueError("opening a sealed consumer state needs its stream and name")
        try:
            payload = cipher.open(payload, _aad(*expect))
        except CipherError:
            raise CorruptState(
                "consumer state file does not open with the stream's key (tampered or damaged)"
            ) from None
    try:
        stored = _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptState(f"consumer state file does not decode: {exc}") from None
    if expect is not None and (stored.stream, stored.name) != expect:
        raise CorruptState(f"consumer state file holds consumer {stored.stream} > {stored.name}")
    return stored


def restore(stored: StoredConsumer) -> ConsumerCore:
    """A consumer core holding the stored state, its leader cursor rebuilt."""
    core = ConsumerCore(stored.stream, stored.name, stored.config, stored.created_ns)
    core.state = ReplicatedState(
        delivered=SeqPair(*stored.delivered),
        ack_floor=SeqPair(*stored.ack_floor),
        pending={s: Pending(d, ts) for s, d, ts in stored.pending},
        redelivered=dict(stored.redelivered),
    )
    core.restore_cursor()
    return core


def to_builtins(stored: StoredConsumer) -> Any:
    return msgspec.to_builtins(stored)
