"""What only the file store has: restarts, torn tails, corruption, blocks, fsync batching."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from jetraft.jetstream.store import FileStore, Limits, StoreCorruption, StoreError
from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store import file as file_mod
from jetraft.jetstream.store._recovery import MSGS_DIR, OLD_DIR, RESTORE_DIR, RESTORE_DONE

HDR = b"NATS/1.0\r\nA: 1\r\n\r\n"


def blocks(root: Path) -> list[Path]:
    return sorted((root / MSGS_DIR).glob("blk.*.dat"))


def snapshot_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def contents(s: FileStore) -> list[tuple[int, str, bytes | None, bytes, int]]:
    st = s.state()
    out = []
    for q in range(st.first_seq, st.last_seq + 1):
        m = s.load(q)
        if m is not None:
            out.append((m.seq, m.subject, m.headers, m.data, m.ts_ns))
    return out


def test_restart_keeps_messages_deletes_purges_and_first_seq(tmp_path: Path) -> None:
    s = FileStore(tmp_path, block_size=1024)
    for i in range(50):
        s.store(f"s.{i % 5}", HDR if i % 3 == 0 else None, b"%03d" % i, 10 * i)
    s.remove(10)
    s.remove(1)
    s.purge("s.2")
    s.purge(upto_seq=5)
    before = (s.state(deleted=True), contents(s), s.subjects_state())
    s.close()
    s = FileStore(tmp_path, block_size=1024)
    assert (s.state(deleted=True), contents(s), s.subjects_state()) == before
    assert s.truncated == []
    s.purge()
    s.close()
    s = FileStore(tmp_path, block_size=1024)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts_ns) == (0, 51, 50, 490)
    assert len(blocks(tmp_path)) <= 2  # fully purged sealed blocks are gone
    s.close()


@pytest.mark.parametrize("synced_before_jump", [False, True])
def test_jump_past_the_end_replays_without_filling_the_gap(
    tmp_path: Path, synced_before_jump: bool
) -> None:
    """A purge past the last sequence (or a skip) moves the next sequence far ahead. The
    record saying so must precede the next message on disk, or the replay meets a message
    10**12 beyond the last one it knows and pads the gap slot by slot (memory and time
    proportional to the gap: a stream that can no longer be opened)."""
    jump = 10**12
    s = FileStore(tmp_path)
    s.store("a", None, b"1", 1)
    s.store("b", None, b"2", 2)
    if synced_before_jump:
        s.sync()
    s.purge(upto_seq=jump)
    assert s.store("a", None, b"3", 3)[0] == jump
    s.skip_msgs(jump + 1, 1)
    assert s.store("b", None, b"4", 4)[0] == jump + 2
    s.remove(jump)
    before = (s.state(deleted=True), contents(s), s.subjects_state())
    s.close()
    s = FileStore(tmp_path)
    assert (s.state(deleted=True), contents(s), s.subjects_state()) == before
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (1, jump + 2, jump + 2)
    s.close()


def test_unsynced_writes_are_not_on_disk_synced_ones_are(tmp_path: Path) -> None:
    s = FileStore(tmp_path / "a")
    s.store("a", None, b"one", 1)
    s.sync()
    s.store("a", None, b"two", 2)  # buffered only
    shutil.copytree(tmp_path / "a", tmp_path / "crash", ignore=shutil.ignore_patterns("LOCK"))
    s.sync()
    shutil.copytree(tmp_path / "a", tmp_path / "synced", ignore=shutil.ignore_patterns("LOCK"))
    s.close()
    crashed = FileStore(tmp_path / "crash")
    assert crashed.state().last_seq == 1
    crashed.close()
    synced = FileStore(tmp_path / "synced")
    assert synced.state().last_seq == 2
    synced.close()


def test_group_commit_one_fdatasync_per_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = file_mod.fdatasync
    monkeypatch.setattr(file_mod, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    s = FileStore(tmp_path)
    for i in range(200):
        s.store("a", None, b"x" * 100, i)
    s.remove(5)
    s.purge(upto_seq=10)
    assert calls == []
    s.sync()
    assert len(calls) == 1
    s.sync()  # nothing dirty: no fsync at all
    assert len(calls) == 1
    s.store("a", None, b"", 0)
    s.sync()
    assert len(calls) == 2
    s.close()


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    for i in range(10):
        s.store("a", None, b"payload %d" % i, i)
    s.close()
    blk = blocks(tmp_path)[-1]
    good = blk.stat().st_size
    whole = bytearray()
    rec.append_msg(whole, 11, 11, b"a", None, b"this record never finished")
    with open(blk, "ab") as f:
        f.write(whole[: len(whole) // 2])
    s = FileStore(tmp_path)
    assert s.truncated == [(str(blk), good, len(whole) // 2)]
    assert blk.stat().st_size == good
    assert s.state().last_seq == 10
    assert s.store("a", None, b"after", 11)[0] == 11
    s.close()
    s = FileStore(tmp_path)
    assert s.truncated == []
    m = s.load(11)
    assert m is not None and m.data == b"after"
    s.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"JRM1" + b"\xff" * 40, b"xyz"])
def test_garbage_tail_is_torn_not_corrupt(tmp_path: Path, garbage: bytes) -> None:
    s = FileStore(tmp_path)
    s.store("a", None, b"1", 1)
    s.close()
    blk = blocks(tmp_path)[-1]
    with open(blk, "ab") as f:
        f.write(garbage)
    s = FileStore(tmp_path)
    assert len(s.truncated) == 1 and s.state().msgs == 1
    s.close()


def test_corruption_in_the_middle_is_reported_and_nothing_is_removed(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    for i in range(10):
        s.store("a", None, b"payload %d" % i, i)
    s.close()
    blk = blocks(tmp_path)[-1]
    data = bytearray(blk.read_bytes())
    first_len = rec.HEADER.unpack_from(data, 0)[1]
    data[first_len + 40] ^= 0x01  # a payload bit of the second record; valid records follow
    blk.write_bytes(bytes(data))
    before = snapshot_files(tmp_path)
    with pytest.raises(StoreCorruption) as err:
        FileStore(tmp_path)
    assert err.value.path == str(blk)
    assert err.value.offset == first_len
    assert "checksum" in err.value.reason
    assert str(blk) in str(err.value) and str(first_len) in str(err.value)
    assert snapshot_files(tmp_path) == before


def test_corrupt_length_field_with_valid_data_after_is_corruption(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    for i in range(5):
        s.store("a", None, b"x", i)
    s.close()
    blk = blocks(tmp_path)[-1]
    data = bytearray(blk.read_bytes())
    data[4:8] = (10**6).to_bytes(4, "little")  # first record now "runs past the end"
    blk.write_bytes(bytes(data))
    with pytest.raises(StoreCorruption) as err:
        FileStore(tmp_path)
    assert err.value.offset == 0
    assert blk.read_bytes() == bytes(data)


def test_bad_tail_in_an_older_block_is_corruption(tmp_path: Path) -> None:
    s = FileStore(tmp_path, block_size=256)
    for i in range(20):
        s.store("a", None, b"y" * 50, i)
    s.close()
    first = blocks(tmp_path)[0]
    assert len(blocks(tmp_path)) > 2
    with open(first, "ab") as f:
        f.write(b"\x00" * 10)
    before = snapshot_files(tmp_path)
    with pytest.raises(StoreCorruption) as err:
        FileStore(tmp_path, block_size=256)
    assert err.value.path == str(first)
    assert snapshot_files(tmp_path) == before


def test_bit_rot_after_open_fails_the_load(tmp_path: Path) -> None:
    s = FileStore(tmp_path, read_ahead=0)
    s.store("a", None, b"precious", 1)
    s.sync()
    blk = blocks(tmp_path)[-1]
    data = bytearray(blk.read_bytes())
    data[-6] ^= 0x20
    with open(blk, "r+b") as f:
        f.write(data)
    with pytest.raises(StoreCorruption):
        s.load(1)
    s.close()


def test_second_store_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        FileStore(tmp_path)
    s.close()
    FileStore(tmp_path).close()


def test_blocks_rotate_and_are_unlinked_when_purged(tmp_path: Path) -> None:
    s = FileStore(tmp_path, block_size=1000)
    for i in range(100):
        s.store("a", None, b"z" * 90, i)
    s.sync()
    n = len(blocks(tmp_path))
    assert n >= 10
    s.purge(upto_seq=60)
    s.sync()
    assert len(blocks(tmp_path)) < n * 0.6
    s.close()
    s = FileStore(tmp_path, block_size=1000)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (41, 60, 100)
    s.close()


def test_kv_churn_space_stays_bounded_by_compaction(tmp_path: Path) -> None:
    """History 1 over a few keys: old revisions die in every block; rewrites reclaim them."""
    s = FileStore(tmp_path, Limits(max_msgs_per_subject=1), block_size=2048)
    s.store("$KV.B.pinned", None, b"never updated", 0)  # keeps first_seq at 1 forever
    for i in range(2000):
        s.store(f"$KV.B.k{i % 10}", None, b"v" * 40, i)
    s.remove(1995)
    s.sync()
    total = sum(p.stat().st_size for p in blocks(tmp_path))
    assert total < 20 * 2048, total  # 2000 * 77 bytes were written
    expected = contents(s)
    state = s.state(deleted=True)
    s.close()
    s = FileStore(tmp_path, Limits(max_msgs_per_subject=1), block_size=2048)
    assert contents(s) == expected
    assert s.state(deleted=True) == state
    assert s.subjects_state()["$KV.B.pinned"] == 1
    s.close()


def test_compaction_keeps_deletes_of_older_blocks(tmp_path: Path) -> None:
    """A DEL record carried over by a rewrite must still hide its target after restart."""
    s = FileStore(tmp_path, block_size=400)
    for i in range(10):
        s.store("a", None, b"q" * 50, i)  # block 1: 1..5, block 2: 6..10
    s.remove(2)
    s.sync()  # DEL(2) lands in block 2
    for q in range(6, 11):
        s.remove(q)  # block 2 is now all dead: rewritten at the next rotation
    for i in range(12):
        s.store("b", None, b"r" * 50, i)
    s.sync()
    records = [
        (
            kind,
            list(rec.del_targets(data[off + 32 : off + rlen - 4])) if kind == rec.KIND_DEL else seq,
        )
        for p in blocks(tmp_path)
        for data in [p.read_bytes()]
        for off, kind, rlen, _, seq, _, _ in rec.scan(data)
    ]
    assert (rec.KIND_DEL, [2]) in records  # carried: block 1 still holds 2
    assert not any(k == rec.KIND_MSG and 6 <= v <= 10 for k, v in records)  # type: ignore[operator]
    s.close()
    s = FileStore(tmp_path, block_size=400)
    assert s.load(2) is None and s.load(3) is not None
    st = s.state(deleted=True)
    assert (st.msgs, st.deleted) == (16, (2, 6, 7, 8, 9, 10))
    s.close()


def test_leftover_rewrite_tmp_is_removed(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    s.store("a", None, b"1", 1)
    s.close()
    blk = blocks(tmp_path)[0]
    Path(str(blk) + ".tmp").write_bytes(b"half a rewrite")
    s = FileStore(tmp_path)
    assert not Path(str(blk) + ".tmp").exists()
    assert s.state().msgs == 1
    s.close()
    (tmp_path / MSGS_DIR / "blk.00000099.dat.tmp").write_bytes(b"orphan")
    with pytest.raises(StoreCorruption):
        FileStore(tmp_path)  # a rewrite without its block: not ours to guess


def test_unknown_files_are_left_alone(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    s.store("a", None, b"1", 1)
    s.close()
    (tmp_path / "notes.txt").write_text("operator notes")
    (tmp_path / MSGS_DIR / "blk.1.dat").write_bytes(b"odd name")
    s = FileStore(tmp_path)
    assert s.state().msgs == 1
    s.close()
    assert (tmp_path / "notes.txt").exists() and (tmp_path / MSGS_DIR / "blk.1.dat").exists()


def _prepared_restore(tmp_path: Path) -> tuple[list[bytes], list[bytes]]:
    """A store with 3 msgs and a snapshot of another with 5."""
    src = FileStore(tmp_path / "src")
    for i in range(5):
        src.store("new", None, b"%d" % i, i)
    snap = list(src.snapshot())
    src.close()
    s = FileStore(tmp_path / "s")
    for i in range(3):
        s.store("old", None, b"%d" % i, i)
    s.close()
    return snap, [b"old"]


@pytest.mark.parametrize("crash_after", ["written", "done", "moved_old"])
def test_restore_crash_points_settle(tmp_path: Path, crash_after: str) -> None:
    snap, _ = _prepared_restore(tmp_path)
    root = tmp_path / "s"
    target = FileStore(root / RESTORE_DIR)
    target._apply_snapshot(snap)
    target.close()
    if crash_after in ("done", "moved_old"):
        (root / RESTORE_DIR / RESTORE_DONE).write_bytes(b"")
    if crash_after == "moved_old":
        os.rename(root / MSGS_DIR, root / OLD_DIR)
    s = FileStore(root)
    subject = "new" if crash_after == "moved_old" else "old"
    assert set(s.subjects_state()) == {subject}
    assert not (root / RESTORE_DIR).exists() and not (root / OLD_DIR).exists()
    s.close()


def test_restore_replaces_content_and_survives_restart(tmp_path: Path) -> None:
    snap, _ = _prepared_restore(tmp_path)
    s = FileStore(tmp_path / "s")
    s.restore(snap)
    assert s.subjects_state() == {"new": 5}
    s.store("after", None, b"", 9)
    s.close()
    s = FileStore(tmp_path / "s")
    assert s.subjects_state() == {"new": 5, "after": 1}
    assert s.state().last_seq == 6
    s.close()


def test_delete_is_the_only_thing_that_removes_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "stream"
    s = FileStore(root)
    s.store("a", None, b"", 0)
    s.purge()
    s.close()
    assert root.exists() and blocks(root)
    s = FileStore(root)
    s.delete()
    assert not root.exists()


def test_begin_sync_runs_the_fsync_on_another_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = file_mod.fdatasync
    monkeypatch.setattr(file_mod, "fdatasync", lambda fd: (calls.append("data"), real(fd)))
    s = FileStore(tmp_path, block_size=4096)
    assert s.begin_sync() is None  # a fresh store is already durable
    for i in range(10):
        s.store("a", None, b"x" * 100, i)
    finish = s.begin_sync()
    assert finish is not None and not s.needs_sync
    assert s.begin_sync() is None  # nothing new since
    # The owner keeps storing (and rotating blocks) while the worker syncs.
    worker = threading.Thread(target=finish)
    worker.start()
    for i in range(100):
        s.store("b", None, b"y" * 100, i)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert calls.count("data") >= 2  # the worker's, plus rotations of full blocks
    finish = s.begin_sync()
    assert finish is not None
    finish()
    copy = tmp_path.parent / "copy"
    shutil.copytree(tmp_path, copy, ignore=shutil.ignore_patterns("LOCK"))
    s.close()
    c = FileStore(copy)
    assert c.state().msgs == 110
    c.close()


def test_failed_fsync_poisons_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = FileStore(tmp_path)
    s.store("a", None, b"", 0)
    finish = s.begin_sync()
    assert finish is not None

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(file_mod, "fdatasync", broken)
    with pytest.raises(StoreError):
        finish()
    with pytest.raises(StoreError, match="failed"):
        s.store("a", None, b"", 1)
    s.close()  # still releases the directory
    monkeypatch.undo()
    s = FileStore(tmp_path)
    assert s.state().msgs == 1  # the write reached the OS; only its fsync is in doubt
    s.close()
