"""The three replicated state machines of a simulated server, as the server runs them.

* ``MetaMachine``: jetstream.meta.MetaState (stream and consumer assignments); applying an
  entry hands the changes to the server (which starts, reshapes or stops replicas), as
  server/js/clustered/meta_group.py does.
* ``StreamMachine``: jetstream.stream.Stream over a MemoryStore, built from the stream's
  assignment when the replica starts and rebuilt from the group's snapshot and log, as
  server/js/clustered/stream_replica.py does (its snapshot carries the same fields).
* ``ConsumerMachine``: jetstream.consumer.ConsumerCore; only the first Start counts, as in
  server/js/clustered/consumer_replica.py.

Each keeps a running digest for the checker: the digest after entry i folds in the digest
before it, i, and a summary of the state (and of the answer given), so two replicas agree
on it at index i exactly when they applied the same answers and hold the same state.
Snapshots carry the digest, so a replica restored from one continues the same chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import msgspec

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import ConsumerCore, Start
from jetraft.jetstream.consumer import decode_entries as decode_consumer_entries
from jetraft.jetstream.meta import Change, MetaState
from jetraft.jetstream.meta import decode_entry as decode_meta_entry
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.stream import decode_entry as decode_stream_entry
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.types import Entry

FULL_EVERY = 8  # a stream's digest covers every stored message at these indexes
_ZERO = b"\0" * 16


def _fold(prev: bytes, index: int, *parts: bytes) -> bytes:
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(index.to_bytes(8, "little"))
    for part in parts:
        h.update(part)
    return h.digest()


class _Chain(msgspec.Struct, array_like=True):
    index: int
    digest: bytes
    body: bytes


_enc = msgspec.msgpack.Encoder()
_chain_dec = msgspec.msgpack.Decoder(_Chain)


# --- meta ----------------------------------------------------------------------------------

MetaListener = Callable[[list[Change], int | None], None]  # (changes, entry index | None)


class MetaMachine:
    """The meta group's state; ``listener(changes, index)`` hears what changed (index None:
    a snapshot was restored, so everything it holds was in force before)."""

    def __init__(self, listener: MetaListener) -> None:
        self.state = MetaState()
        self.listener = listener
        self._index = 0
        self._digest = _ZERO

    @property
    def index(self) -> int:
        return self._index

    def digest(self) -> bytes:
        return self._digest

    def apply(self, entry: Entry) -> object:
        changes = self.state.apply(decode_meta_entry(entry.data), entry.index)
        self._index = entry.index
        self._digest = _fold(self._digest, entry.index, self.state.snapshot())
        if changes:
            self.listener(changes, entry.index)
        return changes

    def snapshot(self) -> bytes:
        return _enc.encode(_Chain(self._index, self._digest, self.state.snapshot()))

    def restore(self, data: bytes) -> None:
        snap = _chain_dec.decode(data)
        changes = self.state.restore(snap.body)
        self._index, self._digest = snap.index, snap.digest
        if changes:
            self.listener(changes, None)


# --- stream --------------------------------------------------------------------------------


class _StreamSnap(msgspec.Struct, array_like=True):
    index: int
    digest: bytes
    config: StreamConfig
    created_ns: int
    chunks: list[bytes]
    dedupe: list[tuple[str, int, int]]
    last_msg_id: str
    ttl: list[tuple[int, int]]


_stream_dec = msgspec.msgpack.Decoder(_StreamSnap)


class StreamMachine:
    def __init__(self, config: StreamConfig, created_ns: int) -> None:
        # As the server's replica: the config of the assignment in force when it starts.
        self.stream = Stream(config, MemoryStore(), created_ns)
        self._index = 0
        self._digest = _ZERO

    @property
    def index(self) -> int:
        return self._index

    def digest(self) -> bytes:
        return self._digest

    def apply(self, entry: Entry) -> object:
        result = self.stream.apply(decode_stream_entry(entry.data))
        store = self.stream.store
        parts = [repr(result).encode(), repr(store.state(deleted=True)).encode()]
        if entry.index % FULL_EVERY == 0:
            parts.append(self.contents())
        self._index = entry.index
        self._digest = _fold(self._digest, entry.index, *parts)
        return result

    def contents(self) -> bytes:
        """Every stored message and what the stream keeps beside its store."""
        out = []
        store = self.stream.store
        msg = store.load_next(1)
        while msg is not None:
            out.append(repr(msg))
            msg = store.load_next(msg.seq + 1)
        out.append(repr(self.stream.beside_store()))
        return "\n".join(out).encode()

    def snapshot(self) -> bytes:
        s = self.stream
        dedupe, last_msg_id, ttl = s.beside_store()
        return _enc.encode(_StreamSnap(self._index, self._digest, s.config, s.created_ns,
                                       list(s.store.snapshot()), dedupe, last_msg_id, ttl))

    def restore(self, data: bytes) -> None:
        snap = _stream_dec.decode(data)
        self.stream.store.restore(snap.chunks)
        self.stream.reload(snap.config, snap.dedupe, snap.last_msg_id, snap.ttl)
        self._index, self._digest = snap.index, snap.digest


# --- consumer ------------------------------------------------------------------------------


class _ConsumerSnap(msgspec.Struct, array_like=True):
    index: int
    digest: bytes
    started: bool
    state: bytes


_consumer_dec = msgspec.msgpack.Decoder(_ConsumerSnap)


class ConsumerMachine:
    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.started = False
        self._index = 0
        self._digest = _ZERO

    @property
    def index(self) -> int:
        return self._index

    def digest(self) -> bytes:
        return self._digest

    def state_bytes(self) -> bytes:
        return consumer_state.encode(consumer_state.snapshot(self.core))

    def summary(self) -> bytes:
        """The replicated state (not the config: a server applies config changes from
        the meta group, outside this group's log order)."""
        st = self.core.state
        return repr((st.delivered, st.ack_floor, sorted(st.pending.items()),
                     sorted(st.redelivered.items()))).encode()

    def apply(self, entry: Entry) -> object:
        done: list[int] = []
        for e in decode_consumer_entries(entry.data):
            if not (isinstance(e, Start) and self.started):  # only the first start counts
                self.started = self.started or isinstance(e, Start)
                done += self.core.apply(e)
        self._index = entry.index
        self._digest = _fold(self._digest, entry.index, self.summary(),
                             b"s" if self.started else b"-")
        return done

    def snapshot(self) -> bytes:
        return _enc.encode(_ConsumerSnap(self._index, self._digest, self.started,
                                         self.state_bytes()))

    def restore(self, data: bytes) -> None:
        snap = _consumer_dec.decode(data)
        restored = consumer_state.restore(consumer_state.decode(snap.state))
        self.core.state = restored.state
        self.core.restore_cursor()
        self.started = snap.started
        self._index, self._digest = snap.index, snap.digest
