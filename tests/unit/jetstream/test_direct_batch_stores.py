"""Direct-get batches on every store: the answers built from ``load_raw_run``'s rows (the file
store reads them straight from its records) are byte for byte those of one ``load_next`` and
one general header block per message, on the memory store, the file store (records on disk,
in the read-ahead buffer and still in the write buffer, across blocks) and the encrypted file
store; a damaged record fails the batch as it fails a single load."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetraft.jetstream.api_types import RawReply
from jetraft.jetstream.direct_get import _direct_headers, _pending_tail, direct_answer
from jetraft.jetstream.msg_get import MsgGetRequest
from jetraft.jetstream.store import FileStore, MemoryStore, StoreCorruption
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store._recovery import MSGS_DIR
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.headers import encode_headers

KINDS = ["memory", "file", "file-sealed"]
_HDRS = [
    encode_headers([("X-Key", "v")]),
    encode_headers([("A", "1"), ("A", "2")], status=503, description="x"),
    b"NATS/1.0\r\nbroken",  # not a well-formed block: the general encoder's path
]


def _store(kind: str, root: str, read_ahead: int) -> BaseStore:
    if kind == "memory":
        return MemoryStore()
    cipher = RecordCipher(b"k" * 32, "aes") if kind == "file-sealed" else None
    return FileStore(root, block_size=700, read_ahead=read_ahead, cipher=cipher)


def _reference(
    store: BaseStore, start: int, batch: int, limit_bytes: int, no_hdr: bool, filt: str
) -> list[tuple[bytes | None, bytes]]:
    """A batch answer built the plain way: one load_next and one _direct_headers each."""
    out: list[tuple[bytes | None, bytes]] = []
    msg = store.load_next(start, filt or None)
    if msg is None:
        return out
    pending = store.num_pending(start, filt or None)
    sent = sent_bytes = last = 0
    while msg is not None:
        pending = max(pending - 1, 0)
        hdr = None if no_hdr else _direct_headers("ORDERS", msg, _pending_tail(pending, last))
        out.append((hdr, msg.data))
        last, sent = msg.seq, sent + 1
        sent_bytes += len(msg.subject) + len(msg.headers or b"") + len(msg.data)
        if sent >= batch or sent_bytes >= limit_bytes:
            break
        msg = store.load_next(msg.seq + 1, filt or None)
    eob = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last)))
    out.append((encode_headers(eob, status=204, description="EOB"), b""))
    return out


_subjects = st.sampled_from(["a", "a.b", "c.d.e", "wörd.ü"])  # non-ASCII: lengths in chars
# Timestamps: whole seconds, short fractions, trailing zeros, nine digits, shared seconds.
_ts = st.integers(0, 2_000_000_000).flatmap(
    lambda s: st.sampled_from([0, 1, 120_000_000, 123_456_789, 999_999_990]).map(
        lambda f: s * 10**9 + f
    )
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    msgs=st.lists(
        st.tuples(
            _subjects,
            st.sampled_from([None, 0, 1, 2]),
            st.binary(max_size=60),
            st.booleans(),
            _ts,
        ),
        min_size=1,
        max_size=60,
    ),
    flush_at=st.integers(0, 60),
    read_ahead=st.sampled_from([0, 256, 128 << 10]),
    start=st.integers(0, 65),
    batch=st.integers(1, 70),
    limit_bytes=st.sampled_from([1, 30, 300, 64 * 1024 * 1024]),
    no_hdr=st.booleans(),
    filt=st.sampled_from(["", "", "a", "c.>"]),
)
def test_batch_answers_match_one_load_per_message_on_every_store(
    kind: str,
    msgs: list[tuple[str, int | None, bytes, bool, int]],
    flush_at: int,
    read_ahead: int,
    start: int,
    batch: int,
    limit_bytes: int,
    no_hdr: bool,
    filt: str,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = _store(kind, root, read_ahead)
        try:
            for i, (subject, hdr, data, delete, ts) in enumerate(msgs):
                if i == flush_at:
                    store.flush()  # what came before is on disk, the rest in the write buffer
                seq, _ = store.store(subject, None if hdr is None else _HDRS[hdr], data, ts)
                if delete:
                    store.remove(seq)
            want = _reference(store, max(start, 1), batch, limit_bytes, no_hdr, filt)
            stream = Stream(StreamConfig(name="ORDERS", subjects=(">",)), store, created_ns=1)
            req = MsgGetRequest(seq=start, batch=batch, no_hdr=no_hdr, next_by_subj=filt)
            got = direct_answer(stream, req, None, None, limit_bytes)
            if not want:
                assert isinstance(got, RawReply) and got.hdr is not None
                assert b" 404 " in got.hdr
                return
            assert not isinstance(got, RawReply)
            assert [tuple(a) for a in got] == want
        finally:
            store.close()


def _rotted(tmp_path: Path, n: int, rot: int) -> FileStore:
    """A synced file store of ``n`` records with one byte of record ``rot`` flipped."""
    s = FileStore(tmp_path)
    for i in range(n):
        s.store("a", None, b"record %02d" % i, i + 1)
    s.sync()
    blk = sorted((tmp_path / MSGS_DIR).glob("blk.*.dat"))[-1]
    data = bytearray(blk.read_bytes())
    data[data.index(b"record %02d" % rot) + 3] ^= 0x20
    blk.write_bytes(bytes(data))
    return s


@pytest.mark.parametrize("rot", [0, 10])
def test_a_damaged_record_fails_the_run_as_it_fails_a_load(tmp_path: Path, rot: int) -> None:
    """The first record of a run is read through ``_read_at``, the next from the read-ahead
    buffer: a flipped byte in either is a ``StoreCorruption``, the rows before it are fine."""
    s = _rotted(tmp_path, 20, rot)
    try:
        assert [r[3] for r in s.load_raw_run(1, rot)] == [b"record %02d" % i for i in range(rot)]
        with pytest.raises(StoreCorruption):
            s.load_raw_run(1, 100)
        with pytest.raises(StoreCorruption):
            s.load(rot + 1)
    finally:
        s.close()


def test_a_damaged_record_stops_a_direct_batch(tmp_path: Path) -> None:
    s = _rotted(tmp_path, 20, 10)
    try:
        stream = Stream(StreamConfig(name="ORDERS", subjects=(">",)), s, created_ns=1)
        got = direct_answer(stream, MsgGetRequest(seq=1, batch=100), None, None)
        assert not isinstance(got, RawReply)
        with pytest.raises(StoreCorruption):
            list(got)
    finally:
        s.close()
