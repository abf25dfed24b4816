"""The StreamStore contract, one body for both stores (``h`` is parametrized in conftest).

Every test that mutates also reopens: for the file store that is a clean restart and the
state must survive it unchanged; for the memory store it is the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from jetraft.jetstream.store import (
    ERR_MAX_BYTES,
    ERR_MAX_MSG_SIZE,
    ERR_MAX_MSGS,
    ERR_MAX_MSGS_PER_SUBJECT,
    FileStore,
    Limits,
    MemoryStore,
    StoreClosed,
    StoreCorruption,
    StoreError,
    StoreState,
    StreamStore,
    file_msg_size,
    memory_msg_size,
)
from jetraft.jetstream.store._base import BaseStore

from .conftest import Harness

HDR = b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n"


def fill(s: BaseStore, subjects: list[str], n: int, ts0: int = 1_000) -> list[int]:
    """Store n messages cycling through subjects; data = seq-ish bytes, ts = ts0 + i."""
    seqs = []
    for i in range(n):
        seq, removed = s.store(subjects[i % len(subjects)], None, b"m%d" % i, ts0 + i)
        assert removed == []
        seqs.append(seq)
    return seqs


def test_both_satisfy_the_protocol(h: Harness) -> None:
    assert isinstance(h.open(), StreamStore)


def test_store_load_and_state(h: Harness) -> None:
    s = h.open()
    assert s.state() == StoreState(0, 0, 0, 0, 0, 0, 0, 0)
    assert s.bounds() == (0, 0)
    assert s.store("orders.new", None, b"hello", 10) == (1, [])
    assert s.store("orders.new", HDR, b"", 20) == (2, [])
    assert s.store("orders.old", b"", b"x", 30) == (3, [])  # empty header block = none
    s = h.reopen()
    m = s.load(2)
    assert m is not None
    assert (m.seq, m.subject, m.headers, m.data, m.ts_ns) == (2, "orders.new", HDR, b"", 20)
    assert m.hdr == HDR
    m3 = s.load(3)
    assert m3 is not None and m3.headers is None and m3.data == b"x"
    assert s.load(0) is None and s.load(4) is None
    sizes = [
        h.size("orders.new", None, b"hello"),
        h.size("orders.new", HDR, b""),
        h.size("orders.old", None, b"x"),
    ]
    assert s.state() == StoreState(3, sum(sizes), 1, 10, 3, 30, 2, 0)
    assert s.bounds() == (1, 3)
    assert s.fingerprint() == (1, 3, 3)
    assert s.contains(1) and not s.contains(4)


def test_byte_accounting_matches_nats_server(h: Harness) -> None:
    s = h.open()
    s.store("world", None, b"Hello World!", 1)
    if h.kind != "memory":
        assert s.state().bytes == 47  # nats-py asserts exactly this for a file stream
        assert file_msg_size("a.b", HDR, b"xyz") == 34 + 3 + len(HDR) + 3
    else:
        assert s.state().bytes == 16 + 5 + 12
        assert memory_msg_size("a.b", HDR, b"xyz") == 16 + 3 + len(HDR) + 3
    s.store("world", HDR, b"abc", 2)
    expect = 47 + 34 + 5 + len(HDR) + 3 if h.kind != "memory" else 33 + 16 + 5 + len(HDR) + 3
    assert h.reopen().state().bytes == expect


def test_remove_tracks_deleted_and_first(h: Harness) -> None:
    s = h.open()
    fill(s, ["a", "b"], 6)
    assert s.remove(3) and s.remove(5)
    assert not s.remove(3) and not s.remove(99) and not s.remove(0)
    s = h.reopen()
    st = s.state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (4, 1, 6, 2, (3, 5))
    assert s.state().deleted == ()  # only on demand
    s.remove(1)
    s.remove(2)  # first skips the hole at 3
    st = h.reopen().state(deleted=True)
    assert (st.first_seq, st.first_ts_ns, st.num_deleted, st.deleted) == (4, 1_003, 1, (5,))
    s = h.reopen()
    s.remove(6)  # removing the last leaves last_seq alone
    st = s.state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (1, 4, 6, (5, 6))
    s.remove(4)
    st = h.reopen().state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.bytes) == (0, 7, 6, 0, 0)
    assert st.num_subjects == 0
    s = h.reopen()
    assert s.store("a", None, b"", 5)[0] == 7


def test_load_next_with_filters(h: Harness) -> None:
    s = h.open()
    subjects = ["kv.a", "kv.b", "orders.eu.new", "orders.us.new", "orders.us.old"]
    fill(s, subjects, 20)
    s.remove(3)
    s = h.reopen()

    def nxt(start: int, f: str | list[str] | None) -> int | None:
        m = s.load_next(start, f)
        return None if m is None else m.seq

    assert nxt(1, None) == 1 and nxt(3, None) == 4 and nxt(3, "") == 4 and nxt(3, ">") == 4
    assert nxt(21, None) is None
    assert nxt(1, "kv.b") == 2 and nxt(3, "kv.b") == 7
    assert nxt(1, "orders.eu.new") == 8  # seq 3 was removed
    assert nxt(1, "orders.*.new") == 4 and nxt(5, "orders.*.new") == 8
    assert nxt(1, "orders.>") == 4 and nxt(6, "orders.>") == 8
    assert nxt(1, "*.us.*") == 4
    assert nxt(6, ["kv.a", "orders.us.old"]) == 6 and nxt(7, ["kv.a", "orders.us.old"]) == 10
    assert nxt(1, "nope") is None and nxt(1, "nope.*") is None
    assert nxt(1, []) == 1  # an empty filter list means everything (consumer convention)
    assert nxt(0, "kv.a") == 1
    assert nxt(19, "orders.eu.new") is None  # 18 is the last orders.eu.new
    assert nxt(18, "orders.eu.new") == 18


def test_load_next_many_subjects_wildcard(h: Harness) -> None:
    """Enough matching subjects that the wildcard scan walks the seq array."""
    s = h.open()
    for i in range(300):
        s.store(f"keys.k{i}", None, b"", i)
        s.store("other", None, b"", i)
    s = h.reopen()
    assert [m.seq for m in [s.load_next(1, "keys.*"), s.load_next(2, "keys.>")] if m] == [1, 3]
    assert s.num_pending(0, "keys.*") == 300
    assert s.num_pending(301, "keys.*") == 150
    assert s.num_pending(301, "keys.*", last_per_subject=True) == 150
    last = s.load_last("keys.*")
    assert last is not None and last.seq == 599
    m = s.load_prev(598, "keys.>")
    assert m is not None and m.seq == 597
    assert len(s.subjects_state("keys.*")) == 300
    assert s.last_seqs_per_subject("keys.*")[:3] == [1, 3, 5]


def test_last_and_prev_lookups(h: Harness) -> None:
    s = h.open()
    fill(s, ["kv.a", "kv.b", "x"], 9)  # kv.a: 1,4,7  kv.b: 2,5,8  x: 3,6,9
    s.remove(7)
    s = h.reopen()
    last = s.load_last("kv.a")
    assert last is not None and last.seq == 4
    assert s.last_seq_for_subject("kv.a") == 4
    assert s.last_seq_for_subject("kv.zz") == 0
    assert s.last_seq_matching("kv.*") == 8
    assert s.last_seq_matching(["kv.a", "x"]) == 9
    assert s.last_seq_matching("nope") == 0
    assert s.last_seqs_per_subject("kv.>") == [4, 8]
    assert s.last_seqs_per_subject(None) == [4, 8, 9]
    prev = s.load_prev(6, "kv.*")
    assert prev is not None and prev.seq == 5
    assert s.load_prev(0, None) is None
    every = s.load_last(None)
    assert every is not None and every.seq == 9


def test_num_pending(h: Harness) -> None:
    s = h.open()
    fill(s, ["a.1", "a.2", "b.1"], 12)  # a.1: 1,4,7,10  a.2: 2,5,8,11  b.1: 3,6,9,12
    s.remove(5)
    s.remove(6)
    s = h.reopen()
    assert s.num_pending(0, None) == 10
    assert s.num_pending(5, None) == 6
    assert s.num_pending(13, None) == 0
    assert s.num_pending(1, "a.*") == 7
    assert s.num_pending(5, "a.2") == 2
    assert s.num_pending(5, ["a.*", "a.2"]) == 4  # overlapping filters count once
    assert s.num_pending(1, ["a.1", "b.1"]) == 7
    assert s.num_pending(0, "zzz") == 0
    assert s.num_pending(1, None, last_per_subject=True) == 3
    assert s.num_pending(11, None, last_per_subject=True) == 2  # a.2@11, b.1@12
    assert s.num_pending(11, "a.*", last_per_subject=True) == 1


def test_max_msgs_discard_old(h: Harness) -> None:
    s = h.open(Limits(max_msgs=3))
    fill(s, ["a"], 3)
    assert s.store("a", None, b"x", 5) == (4, [1])
    s.remove(3)
    assert s.store("a", None, b"y", 6) == (5, [])
    assert s.store("a", None, b"z", 7) == (6, [2])
    st = h.reopen().state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 4, 6)


def test_max_bytes_discard_old(h: Harness) -> None:
    one = h.size("a", None, b"0123456789")
    s = h.open(Limits(max_bytes=3 * one))
    fill(s, ["a"], 0)
    for i in range(3):
        assert s.store("a", None, b"0123456789", i)[1] == []
    assert s.store("a", None, b"0123456789", 3)[1] == [1]
    assert s.store("a", None, b"0123456789" * 2, 4)[1] == [2, 3]
    st = h.reopen().state()
    assert (st.msgs, st.bytes, st.first_seq) == (2, one + h.size("a", None, b"0" * 20), 4)


def test_max_msgs_per_subject(h: Harness) -> None:
    s = h.open(Limits(max_msgs_per_subject=2))
    assert [s.store(k, None, b"", 0)[1] for k in ["k1", "k2", "k1", "k1", "k2", "k2"]] == [
        [],
        [],
        [],
        [1],
        [],
        [2],
    ]
    s = h.reopen()
    assert s.subjects_state() == {"k1": 2, "k2": 2}
    assert s.state(deleted=True).deleted == ()
    assert s.state().first_seq == 3
    # discard=new does not change the per-subject rule: the oldest of THAT subject goes.
    s.update_limits(Limits(max_msgs_per_subject=2, discard_new=True))
    assert s.store("k1", None, b"", 0) == (7, [3])


def test_would_exceed_discard_new(h: Harness) -> None:
    one = h.size("a", None, b"xx")
    s = h.open(Limits(max_msgs=2, discard_new=True))
    assert s.would_exceed("a", None, b"xx") is None
    fill(s, ["a", "b"], 2)
    assert s.would_exceed("a", None, b"xx") == ERR_MAX_MSGS
    # With discard new, store() itself never removes to satisfy max_msgs (the caller checked).
    assert s.store("c", None, b"", 3) == (3, [])
    s.update_limits(Limits(max_bytes=2 * one, discard_new=True))
    s.purge()
    s.store("a", None, b"xx", 1)
    assert s.would_exceed("b", None, b"xx") is None
    s.store("b", None, b"xx", 2)
    assert s.would_exceed("b", None, b"x") == ERR_MAX_BYTES
    # At the per-subject limit the new message replaces the oldest: fits if not bigger.
    s.update_limits(Limits(max_bytes=2 * one, max_msgs=2, max_msgs_per_subject=1, discard_new=True))
    assert s.would_exceed("b", None, b"xx") is None
    assert s.would_exceed("b", None, b"xxx") == ERR_MAX_BYTES
    assert s.would_exceed("c", None, b"") == ERR_MAX_MSGS
    per = Limits(max_msgs_per_subject=1, discard_new=True, discard_new_per_subject=True)
    s.update_limits(per)
    assert s.would_exceed("b", None, b"xx") == ERR_MAX_MSGS_PER_SUBJECT
    assert s.would_exceed("b", None, b"xx", rollup=True) is None
    assert s.would_exceed("new", None, b"xx") is None
    s.update_limits(Limits(max_msg_size=4))
    assert s.would_exceed("a", None, b"12345") == ERR_MAX_MSG_SIZE
    assert s.would_exceed("a", b"NATS", b"1") == ERR_MAX_MSG_SIZE
    assert s.would_exceed("a", None, b"1234") is None


def test_expire_by_age(h: Harness) -> None:
    s = h.open(Limits(max_age_ns=100))
    for ts in (10, 20, 30, 40):
        s.store("a", None, b"", ts)
    assert s.expire(100) == []
    assert s.expire(120) == [1, 2]  # ts <= now - max_age goes (nats-server's rule)
    s.remove(4)
    s = h.reopen()
    assert s.expire(1_000) == [3]
    st = h.reopen().state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 5, 4)
    s = h.reopen()
    s.update_limits(Limits())
    s.store("a", None, b"", 0)
    assert s.expire(10**12) == []


def test_update_limits(h: Harness) -> None:
    s = h.open()
    fill(s, ["a", "b", "c"], 9)
    assert s.update_limits(Limits(max_msgs=7)) == [1, 2]
    one = h.size("a", None, b"m3")
    assert s.update_limits(Limits(max_bytes=5 * one)) == [3, 4]
    assert s.update_limits(Limits(max_msgs_per_subject=1)) == [5, 6]
    assert s.subjects_state() == {"a": 1, "b": 1, "c": 1}
    # discard=new: lowering msgs/bytes limits does not remove (nats-server behaviour)
    assert s.update_limits(Limits(max_msgs=1, discard_new=True)) == []
    assert h.reopen().state().msgs == 3


def test_purge_everything(h: Harness) -> None:
    s = h.open()
    fill(s, ["a", "b"], 10)
    assert s.purge() == 10
    s = h.reopen()
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (0, 0, 11, 10, 0)
    assert s.purge() == 0
    assert s.store("a", None, b"", 1)[0] == 11
    assert s.purge(">") == 1
    assert h.reopen().state().first_seq == 12


def test_purge_upto_seq_and_past_the_end(h: Harness) -> None:
    s = h.open()
    fill(s, ["a", "b"], 10)
    assert s.purge(upto_seq=1) == 0
    assert s.purge(upto_seq=4) == 3  # seq 4 itself is kept
    assert s.state().first_seq == 4
    assert s.purge("b", upto_seq=9) == 3  # 4, 6, 8
    s = h.reopen()
    assert s.state(deleted=True).deleted == (6, 8)
    assert s.purge(upto_seq=100) == 4
    st = h.reopen().state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 100, 99)  # nats' "first_seq" trick
    assert h.reopen().store("a", None, b"", 1)[0] == 100


def test_purge_with_filter_and_keep(h: Harness) -> None:
    s = h.open()
    fill(s, ["kv.a", "kv.b", "x"], 12)  # kv.a: 1,4,7,10  kv.b: 2,5,8,11  x: 3,6,9,12
    assert s.purge("kv.a", keep=1) == 3
    assert s.subjects_state() == {"kv.a": 1, "kv.b": 4, "x": 4}
    # keep with a wildcard keeps the newest n of the whole filtered set (nats-server PurgeEx)
    assert s.purge("kv.*", keep=2) == 3
    assert s.subjects_state() == {"kv.a": 1, "kv.b": 1, "x": 4}
    assert s.purge("kv.a", keep=5) == 0
    s = h.reopen()
    assert s.purge("kv.>") == 2
    assert s.purge(keep=2) == 2
    s = h.reopen()
    assert [m.seq for m in (s.load(9), s.load(12)) if m] == [9, 12]
    st = s.state()
    assert (st.msgs, st.first_seq, st.num_subjects) == (2, 9, 1)
    assert s.purge("nope") == 0


def test_purge_keep_zero_rollup(h: Harness) -> None:
    """KV purge / Nats-Rollup: sub keeps only the marker just stored."""
    s = h.open()
    fill(s, ["$KV.B.k", "$KV.B.j"], 6)
    seq, _ = s.store("$KV.B.k", HDR, b"", 99)
    assert s.purge("$KV.B.k", keep=1) == 3
    s = h.reopen()
    assert s.last_seq_for_subject("$KV.B.k") == seq
    assert s.subjects_state("$KV.B.>") == {"$KV.B.k": 1, "$KV.B.j": 3}


def test_skip_msgs(h: Harness) -> None:
    s = h.open()
    s.skip_msgs(1, 5)
    st = h.reopen().state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 6, 5)
    s = h.reopen()
    assert s.store("a", None, b"", 1)[0] == 6
    s.skip_msgs(7, 3)
    with pytest.raises(StoreError):
        s.skip_msgs(5)
    s = h.reopen()
    st = s.state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (1, 6, 9, (7, 8, 9))
    assert s.store("a", None, b"", 2)[0] == 10
    assert s.num_pending(7, None) == 1


def test_seq_for_time(h: Harness) -> None:
    s = h.open()
    for ts in (100, 200, 200, 300, 400):
        s.store("a", None, b"", ts)
    s.remove(4)
    s = h.reopen()
    assert s.seq_for_time(0) == 1
    assert s.seq_for_time(200) == 2
    assert s.seq_for_time(250) == 5  # 4 (ts 300) was removed
    assert s.seq_for_time(500) == 6


def test_subjects_state_and_filters(h: Harness) -> None:
    s = h.open()
    fill(s, ["a.b", "a.c", "d"], 7)
    s = h.reopen()
    assert s.subjects_state() == {"a.b": 3, "a.c": 2, "d": 2}
    assert s.subjects_state("a.*") == {"a.b": 3, "a.c": 2}
    assert s.subjects_state(["d", "a.c"]) == {"a.c": 2, "d": 2}
    assert s.subjects_state("zz") == {}


def test_front_removals_past_the_trim_threshold(h: Harness) -> None:
    """Many front removals trim the index arrays; everything must still line up."""
    h.block_size = 32 << 10
    s = h.open(Limits(max_msgs=100))
    for i in range(12_000):
        s.store(f"s.{i % 7}", None, b"%d" % i, i)
    s.remove(11_950)
    s = h.reopen()
    st = s.state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (99, 11_901, 12_000, (11_950,))
    m = s.load(11_999)
    assert m is not None and m.data == b"11998" and m.subject == f"s.{11_998 % 7}"
    assert s.num_pending(11_990, "s.3") == len(
        [q for q in range(11_990, 12_001) if (q - 1) % 7 == 3]
    )
    assert s.seq_for_time(11_949) == 11_951


def test_snapshot_restore_roundtrip(h: Harness, tmp_path: Path) -> None:
    s = h.open()
    fill(s, ["a", "b.c"], 30)
    s.store("b.c", HDR, b"with headers", 77)
    s.remove(5)
    s.purge(upto_seq=3)
    s.skip_msgs(32, 2)
    chunks = list(s.snapshot())
    expected = s.state(deleted=True)
    other = FileStore(tmp_path / "other", block_size=1024)
    for target in (MemoryStore(), other):
        target.store("junk", None, b"to be replaced", 1)
        target.restore(chunks)
        got = target.state(deleted=True)
        assert replace(got, bytes=0) == replace(expected, bytes=0)
        m = target.load(31)
        assert m is not None and m.headers == HDR and m.data == b"with headers"
        assert target.subjects_state() == s.subjects_state()
        # Same messages, same accounting rule of the target's kind.
        assert got.bytes == sum(
            target._size_of(m.subject, m.headers, m.data)
            for q in range(got.first_seq, got.last_seq + 1)
            if (m := target.load(q)) is not None
        )
    other.close()
    reopened = FileStore(tmp_path / "other")
    assert reopened.state(deleted=True) == other.state(deleted=True)
    reopened.close()
    assert h.reopen().state(deleted=True) == expected


def test_restore_rejects_damaged_snapshot_and_keeps_data(h: Harness) -> None:
    s = h.open()
    fill(s, ["a"], 10)
    blob = b"".join(MemoryStore().snapshot())  # a valid, empty snapshot
    good = b"".join(s.snapshot())
    bad = bytearray(good)
    bad[60] ^= 0xFF
    before = s.state()
    for damaged in (bytes(bad), good[:-10], good + blob, b""):
        with pytest.raises(StoreCorruption):
            s.restore([damaged[:100], damaged[100:]])
        assert s.state() == before
    assert h.reopen().state() == before


def test_snapshot_detects_concurrent_change(h: Harness) -> None:
    h.block_size = 4 << 20
    s = h.open()
    for i in range(1100):
        s.store("a", None, b"x" * 1000, i)
    it = s.snapshot()
    next(it)
    s.store("a", None, b"", 0)
    with pytest.raises(StoreError):
        list(it)


def test_closed_store_refuses_work(h: Harness) -> None:
    s = h.open()
    s.store("a", None, b"", 0)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreClosed):
        s.store("a", None, b"", 0)
    with pytest.raises(StoreClosed):
        s.load(1)
    h.store = None


def test_sync_and_needs_sync(h: Harness) -> None:
    s = h.open()
    assert not s.needs_sync
    s.store("a", None, b"", 0)
    assert s.needs_sync == (h.kind != "memory")
    s.flush()
    s.sync()
    assert not s.needs_sync
    s.remove(1)
    assert s.needs_sync == (h.kind != "memory")
    s.sync()
    assert not s.needs_sync


def test_delete_drops_everything(h: Harness) -> None:
    s = h.open()
    fill(s, ["a"], 5)
    s.delete()
    if isinstance(s, FileStore):
        assert not s.disk.exists(s.directory)
    with pytest.raises(StoreClosed):
        s.load(1)
    h.store = None


@dataclass(frozen=True)
class _Plain:
    subject: str
    data: bytes
    ts_ns: int


def _blocks(s: BaseStore) -> list[tuple[int, ...]]:
    if not isinstance(s, FileStore):
        return []
    return [(b.idx, b.size, b.first_msg, b.last_msg, b.max_ref, b.live, b.live_bytes)
            for b in s._blocks.values()]


def test_a_run_stores_what_storing_one_by_one_does(h: Harness, tmp_path: Path) -> None:
    """store_run (a batch of publishes) writes the same messages, records and index as
    store() for each: across block boundaries, after a gap, and after a restart."""
    one_by_one = Harness(h.kind, tmp_path / "one-by-one")
    try:
        run = [_Plain(f"run.{i % 3}", b"d%d" % i * (i % 40), 1_000 + i) for i in range(150)]
        a, b = h.open(), one_by_one.open()
        for s in (a, b):
            s.store("before", HDR, b"x", 1)
            s.skip_msgs(2, 5)  # the run starts after a gap
        assert a.store_run(run) == 7
        for m in run:
            b.store(m.subject, None, m.data, m.ts_ns)
        assert a.store_run([]) == b.store("after", None, b"y", 9_000)[0] == 157
        a.store("after", None, b"y", 9_000)
        for _ in ("running", "restarted"):
            assert a.state() == b.state()
            assert a.subjects_state() == b.subjects_state()
            assert b"".join(a.snapshot()) == b"".join(b.snapshot())
            assert all(a.load(seq) == b.load(seq) for seq in range(1, 159))
            assert _blocks(a) == _blocks(b)  # what compaction decides on
            a, b = h.reopen(), one_by_one.reopen()
    finally:
        one_by_one.close()


def test_a_run_is_refused_where_limits_remove_messages(h: Harness) -> None:
    s = h.open(Limits(max_msgs=10))
    assert s.prunes_on_store
    with pytest.raises(StoreError):
        s.store_run([_Plain("a", b"x", 1)])
    assert s.state().msgs == 0
    s.update_limits(Limits(max_age_ns=10**9))
    assert not s.prunes_on_store  # age limits expire messages, they do not make room
    with pytest.raises(StoreError, match="empty subject"):
        s.store_run([_Plain("a", b"x", 1), _Plain("", b"y", 2)])
