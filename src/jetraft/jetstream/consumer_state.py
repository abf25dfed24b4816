"""The persisted form of a consumer: its config and replicated state, checksummed.

Layout of a state file: ``b"JRC1"`` + crc32 (4 bytes, big endian) + payload length (4 bytes)
+ msgspec JSON payload. A file whose checksum or length does not match is reported as
corrupt, never silently replaced by an empty state.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgspec

from jetraft.jetstream.consumer import ConsumerCore, Pending, ReplicatedState, SeqPair
from jetraft.jetstream.consumer_config import ConsumerConfig

MAGIC = b"JRC1"
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


def encode(stored: StoredConsumer) -> bytes:
    payload = _ENCODER.encode(stored)
    return _HEAD.pack(MAGIC, zlib.crc32(payload), len(payload)) + payload


def decode(blob: bytes) -> StoredConsumer:
    if len(blob) < _HEAD.size:
        raise CorruptState("consumer state file is truncated")
    magic, crc, length = _HEAD.unpack_from(blob)
    payload = blob[_HEAD.size :]
    if magic != MAGIC:
        raise CorruptState("consumer state file has a bad magic")
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise CorruptState("consumer state file fails its checksum")
    try:
        return _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptState(f"consumer state file does not decode: {exc}") from None


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
