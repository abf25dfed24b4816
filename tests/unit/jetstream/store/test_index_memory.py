"""The index costs memory for live messages only: deleted, acknowledged (removed) and skipped
sequences cost nothing, wherever they are in the stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetraft.jetstream.store import FileStore, Limits, MemoryStore
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store._index_chunks import CHUNK


def index_bytes(s: BaseStore) -> int:
    return s.index_bytes() if isinstance(s, FileStore) else s._ix.nbytes()


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BaseStore:
    if request.param == "memory":
        return MemoryStore()
    return FileStore(tmp_path / "s")


def fill(s: BaseStore, n: int) -> float:
    for i in range(n):
        s.store("a" if i % 2 else "b", None, b"x", 1_000 + i)
    return index_bytes(s) / n


def test_scattered_deletes_leave_memory_for_the_live_messages_only(store: BaseStore) -> None:
    n = 3 * CHUNK + 100
    per_msg = fill(store, n)
    for seq in range(1, n + 1):
        if seq % 97:
            assert store.remove(seq)
    live = store.state().msgs
    assert live == n // 97
    # What is left is about what those messages cost when the stream was full (the bound
    # leaves room for partly rewritten chunks); the deleted sequences in between cost
    # nothing, where one entry each would be about 97 times as much.
    assert index_bytes(store) / live <= 2 * per_msg
    assert [m.seq for m in (store.load(97), store.load(2 * 97))] == [97, 194]
    assert store.load(98) is None
    assert store.num_pending(1, None) == live


def test_acked_front_and_pinned_first_message_cost_nothing(tmp_path: Path) -> None:
    # KV churn: one key never updated keeps first_seq at 1 while the rest of the stream
    # turns over; the index must not span every sequence ever stored.
    s = FileStore(tmp_path / "kv", Limits(max_msgs_per_subject=1))
    s.store("kv.pinned", None, b"x", 0)
    for i in range(10 * CHUNK):
        s.store(f"kv.k{i % 50}", None, b"x" * 16, i + 1)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (51, 1, 10 * CHUNK + 1)
    assert st.num_deleted == 10 * CHUNK + 1 - 51
    assert s.index_bytes() / st.msgs < 200
    assert s.load(1) is not None and s.load(1).subject == "kv.pinned"


def test_removing_from_the_front_releases_memory(store: BaseStore) -> None:
    n = 4 * CHUNK
    fill(store, n)
    for seq in range(1, n - 10 + 1):  # a work queue acked in order
        store.remove(seq)
    assert store.state().msgs == 10
    assert index_bytes(store) < 2 * CHUNK  # a few dozen bytes per message at most
    assert store.state().first_seq == n - 9


def test_skipped_sequences_cost_nothing(store: BaseStore) -> None:
    store.store("a", None, b"x", 1)
    for _ in range(CHUNK * 5):
        store.skip_msgs(store.state().last_seq + 1, 1)
    store.store("a", None, b"y", 2)
    st = store.state()
    assert (st.msgs, st.last_seq, st.num_deleted) == (2, CHUNK * 5 + 2, CHUNK * 5)
    assert index_bytes(store) < 200
    assert store.load_next(2).seq == CHUNK * 5 + 2
