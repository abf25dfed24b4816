"""``store_body``: a publish's header block and payload in one piece, as they arrived, are
stored exactly as ``store`` stores the two apart: the same answers, the same messages and
index, and in the file store the same record bytes on disk (the format does not change)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.store import FileStore, Limits, MemoryStore
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store.cipher import RecordCipher

MSGS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b.c", "ü"]),
        st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=40)),
        st.binary(max_size=300),
    ),
    max_size=30,
)


def _contents(store: BaseStore) -> list[tuple[int, str, bytes | None, bytes, int]]:
    out = []
    msg = store.load_next(1)
    while msg is not None:
        out.append((msg.seq, msg.subject, msg.headers, msg.data, msg.ts_ns))
        msg = store.load_next(msg.seq + 1)
    return out


def _blocks(directory: str) -> bytes:
    msgs = Path(directory) / "msgs"
    return b"".join((msgs / name).read_bytes() for name in sorted(os.listdir(msgs)))


def _same(a: BaseStore, b: BaseStore, msgs: list[tuple[str, bytes | None, bytes]]) -> None:
    for k, (subject, hdr, data) in enumerate(msgs):
        ts = 1_000 + k
        want = a.store(subject, hdr, data, ts)
        body = data if hdr is None else hdr + data
        got = b.store_body(subject, body, -1 if hdr is None else len(hdr), ts)
        assert got == want
    assert _contents(b) == _contents(a)
    assert b.state() == a.state()


@settings(max_examples=60, deadline=None)
@given(msgs=MSGS, per_subject=st.sampled_from([-1, 2]), sealed=st.booleans())
def test_file_store_writes_the_same_records(
    msgs: list[tuple[str, bytes | None, bytes]], per_subject: int, sealed: bool
) -> None:
    limits = Limits(max_msgs_per_subject=per_subject)
    cipher = RecordCipher(b"k" * 32, "aes") if sealed else None
    with tempfile.TemporaryDirectory() as tmp:
        dirs = os.path.join(tmp, "apart"), os.path.join(tmp, "whole")
        a, b = (FileStore(d, limits, block_size=1024, cipher=cipher) for d in dirs)
        _same(a, b, msgs)
        a.close()
        b.close()
        if not sealed:  # (sealed bodies differ by their random nonces)
            assert _blocks(dirs[1]) == _blocks(dirs[0])
        again = FileStore(dirs[1], limits, block_size=1024, cipher=cipher)
        reference = FileStore(dirs[0], limits, block_size=1024, cipher=cipher)
        assert _contents(again) == _contents(reference)
        again.close()
        reference.close()


@settings(max_examples=30, deadline=None)
@given(msgs=MSGS, per_subject=st.sampled_from([-1, 2]))
def test_memory_store_stores_the_same(
    msgs: list[tuple[str, bytes | None, bytes]], per_subject: int
) -> None:
    limits = Limits(max_msgs_per_subject=per_subject)
    _same(MemoryStore(limits), MemoryStore(limits), msgs)


def test_the_file_stores_literal_constants_are_the_record_formats() -> None:
    from jetraft.jetstream.store import _records as rec
    from jetraft.jetstream.store import file

    assert (file._OVERHEAD, file._KIND_MSG, file._NO_HDR, file._MAGIC) == (
        rec.OVERHEAD, rec.KIND_MSG, rec.NO_HDR, rec.MAGIC
    )
