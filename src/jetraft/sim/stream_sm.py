"""The JetStream stream as the simulator's replicated state machine.

Each replica runs jetraft.jetstream.stream.Stream over a MemoryStore and applies the
entries of jetraft.jetstream.stream (StoreMsg with Nats-Msg-Id and Nats-Expected-*
headers, Purge, DeleteMsg, Expire, UpdateConfig) exactly as a clustered stream will. The
checker compares, at every index, a digest of each replica's stream: the answers given
(PubAck sequence, duplicate, error; counts removed), the stream state (messages, bytes,
first and last sequence and time, deleted sequences), and every 8th index and after each
snapshot restore, every stored message and the dedupe window.

A snapshot carries everything apply() decides with: the store's own snapshot, the dedupe
window, the last Nats-Msg-Id and the TTL heap, and the running digest of answers.

``DurableStreamStateMachine`` (``--sm stream-file``) keeps the stream in a checkpointed
FileStore on the replica's crashing disk, as a clustered file stream's replica does
(``server.js.clustered.stream_file``): a self-durable state machine, restarted from its last
checkpoint after every simulated crash, whose log is compacted under markers.
"""

from __future__ import annotations

import hashlib
import random

import msgspec

from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.store.types import StreamStore
from jetraft.jetstream.stream import (
    DeleteMsg,
    Expire,
    Purge,
    StoreMsg,
    Stream,
    UpdateConfig,
    decode_entry,
    encode_entry,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.disk import MemDisk
from jetraft.raft.sim.node import SimStateMachine
from jetraft.raft.types import Entry, SnapshotBytes, whole

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
SUBJECTS = ("orders.a", "orders.b", "orders.c", "events.x", "events.y")
FULL_EVERY = 8  # indexes at which the digest covers every stored message


def stream_config(**kw: object) -> StreamConfig:
    base: dict[str, object] = {
        "name": "SIM",
        "subjects": ("orders.*", "events.*"),
        "max_msgs": 60,
        "max_msgs_per_subject": 20,
        "duplicate_window": 5 * NS,
        "allow_rollup_hdrs": True,
        "allow_msg_ttl": True,
    }
    base.update(kw)
    return StreamConfig(**base)  # type: ignore[arg-type]


class _Snap(msgspec.Struct, array_like=True):
    index: int
    digest: bytes
    config: StreamConfig
    store: list[bytes]
    dedupe: list[tuple[str, int, int]]
    last_msg_id: str
    ttl_heap: list[tuple[int, int]]


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(_Snap)


class StreamStateMachine:
    def __init__(
        self, store: StreamStore | None = None, config: StreamConfig | None = None
    ) -> None:
        config = config or stream_config()
        self.stream = Stream(config, store or MemoryStore(), created_ns=T0)
        self._index = 0
        self._digest = b"\0" * 16

    @property
    def index(self) -> int:
        return self._index

    def digest(self) -> bytes:
        return self._digest

    def apply(self, entry: Entry) -> object:
        result = self.stream.apply(decode_entry(entry.data))
        h = hashlib.blake2b(self._digest, digest_size=16)
        h.update(entry.index.to_bytes(8, "little"))
        h.update(repr(result).encode())
        h.update(repr(self.stream.store.state(deleted=True)).encode())
        if entry.index % FULL_EVERY == 0:
            self._full(h)
        self._digest = h.digest()
        self._index = entry.index
        return result

    def _full(self, h: hashlib.blake2b) -> None:
        store = self.stream.store
        msg = store.load_next(1)
        while msg is not None:
            h.update(repr(msg).encode())
            msg = store.load_next(msg.seq + 1)
        h.update(repr(self.stream.beside_store()).encode())

    def snapshot(self) -> bytes:
        s = self.stream
        dedupe, last_msg_id, ttl = s.beside_store()
        return _enc.encode(_Snap(
            self._index, self._digest, s.config, list(s.store.snapshot()),
            dedupe, last_msg_id, ttl,
        ))

    def restore(self, data: bytes) -> None:
        snap = _dec.decode(data)
        store = MemoryStore()
        store.restore(snap.store)
        s = Stream(snap.config, store, created_ns=T0)
        s.reload(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl_heap)
        self.stream = s
        self._index = snap.index
        self._digest = snap.digest


def stream_sm(disk: MemDisk) -> SimStateMachine:
    return StreamStateMachine()


class _Ckpt(msgspec.Struct, array_like=True):
    digest: bytes
    config: StreamConfig
    dedupe: list[tuple[str, int, int]]
    last_msg_id: str
    ttl_heap: list[tuple[int, int]]


class DurableStreamStateMachine(StreamStateMachine):
    """The stream in a checkpointed FileStore on the replica's disk: a checkpoint (with
    the digest, config and state beside the store) and a store sync every ``every``
    entries; skips replayed entries it holds; ``restore`` durable on return."""

    ROOT = "/stream"

    def __init__(self, disk: MemDisk, every: int = 4) -> None:
        store = FileStore(self.ROOT, disk=disk, block_size=1024, checkpoints=True)
        found = store.checkpointed
        ck = None if found is None else msgspec.msgpack.decode(found[1], type=_Ckpt)
        # The stream opens under the checkpoint's config: another one's limits would
        # change the store before anything is applied.
        super().__init__(store, ck.config if ck is not None else None)
        self._every = every
        self._since = 0
        self._durable = 0
        if found is not None and ck is not None:
            self.stream.reload(ck.config, ck.dedupe, ck.last_msg_id, ck.ttl_heap)
            self._index = self._durable = found[0]
            self._digest = ck.digest

    def durable_index(self) -> int:
        return self._durable

    def _state(self) -> bytes:
        dedupe, last_msg_id, ttl = self.stream.beside_store()
        return _enc.encode(_Ckpt(self._digest, self.stream.config, dedupe, last_msg_id, ttl))

    def apply(self, entry: Entry) -> object:
        if entry.index <= self._index:
            return None  # held already (replayed after a restart)
        result = super().apply(entry)
        self._since += 1
        if self._since >= self._every:
            store = self.stream.store
            assert isinstance(store, FileStore)
            store.checkpoint(self._index, self._state())
            store.sync()
            self._durable = self._index
            self._since = 0
        return result

    def restore(self, data: SnapshotBytes) -> None:
        snap = _dec.decode(whole(data))
        store = self.stream.store
        assert isinstance(store, FileStore)
        ck = _Ckpt(snap.digest, snap.config, snap.dedupe, snap.last_msg_id, snap.ttl_heap)
        store.restore(snap.store, (snap.index, _enc.encode(ck)))
        self.stream = Stream(snap.config, store, created_ns=T0)
        self.stream.reload(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl_heap)
        self._index = self._durable = snap.index
        self._digest = snap.digest
        self._since = 0


def durable_stream_sm(disk: MemDisk) -> SimStateMachine:
    return DurableStreamStateMachine(disk)


def stream_payload(rng: random.Random, pid: bytes) -> bytes:
    """What a client proposes: mostly publishes (some with a Nats-Msg-Id seen before, some
    expecting a last sequence), sometimes a purge, a delete, an expiry or a config change.
    Times are the leader's, carried in the entry (here: drawn, increasing)."""
    n = int(pid.strip(b"plive") or b"0")
    ts = T0 + n * NS // 4
    r = rng.random()
    if r < 0.80:
        subject = rng.choice(SUBJECTS)
        headers = []
        if rng.random() < 0.3:
            headers.append(f"Nats-Msg-Id: m{rng.randrange(max(1, n))}")
        if rng.random() < 0.05:
            headers.append(f"Nats-Expected-Last-Sequence: {rng.randrange(max(1, n))}")
        if rng.random() < 0.03:
            headers.append("Nats-Rollup: sub")
        if rng.random() < 0.05:
            headers.append("Nats-TTL: 2s")
        hdr = ("NATS/1.0\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()
        return encode_entry(StoreMsg(subject, "", hdr if headers else None, pid, ts))
    if r < 0.86:
        return encode_entry(DeleteMsg(rng.randrange(1, max(2, n)), rng.random() < 0.5))
    if r < 0.90:
        subject = rng.choice(("", "orders.a", "events.*"))
        return encode_entry(Purge(subject, rng.choice((0, max(1, n // 2))), rng.choice((0, 3))))
    if r < 0.97:
        return encode_entry(Expire(ts))
    cfg = stream_config(max_msgs=rng.choice((30, 60, 100)),
                        max_msgs_per_subject=rng.choice((5, 20)))
    return encode_entry(UpdateConfig(cfg))
