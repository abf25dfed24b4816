"""What only the file store has: restarts, torn tails, corruption, blocks, fsync batching."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from jetraft.jetstream.store import FileStore, Limits, StoreCorruption, StoreError
from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._recovery import MSGS_DIR
from jetraft.jetstream.store._restore import RESTORE_DIR, RESTORE_DONE
from jetraft.jetstream.store.disk import AppendFile, MemDisk, OsDisk, SimulatedCrash

HDR = b"NATS/1.0\r\nA: 1\r\n\r\n"


def blocks(root: Path) -> list[Path]:
    return sorted((root / MSGS_DIR).glob("blk.*.dat"))


def snapshot_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


class _CountingFile:
    def __init__(self, disk: CountingDisk, inner: AppendFile) -> None:
        self._disk, self._inner = disk, inner

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def sync(self) -> None:
        self._disk.syncs.append(threading.get_ident())
        if self._disk.fail_syncs:
            raise OSError(5, "Input/output error")
        self._inner.sync()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        self._inner.close()


class CountingDisk(OsDisk):
    """The real file system, counting file syncs (by thread) and failing them on demand."""

    def __init__(self) -> None:
        self.syncs: list[int] = []
        self.fail_syncs = False

    def open_append(self, path: str) -> AppendFile:
        return _CountingFile(self, super().open_append(path))


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


@pytest.mark.parametrize("seed", range(20))
def test_only_synced_writes_survive_a_power_loss(seed: int) -> None:
    import random

    disk = MemDisk()
    s = FileStore("/st", disk=disk)
    s.store("a", None, b"one", 1)
    s.sync()
    s.store("a", None, b"two", 2)
    s.flush()  # in the OS's hands, not synced
    s.store("a", None, b"three", 3)  # buffered only
    disk.crash(random.Random(seed))
    crashed = FileStore("/st", disk=disk)
    assert crashed.state().last_seq in (1, 2)  # "two" may or may not have reached the disk
    m = crashed.load(1)
    assert m is not None and m.data == b"one"
    crashed.store("a", None, b"again", 9)
    crashed.sync()
    disk.crash(random.Random(seed))
    again = FileStore("/st", disk=disk)
    assert [m.data for m in (again.load(q) for q in (1, 2, 3)) if m] in (
        [b"one", b"again"],
        [b"one", b"two", b"again"],
    )


def test_group_commit_one_fsync_per_sync() -> None:
    disk = MemDisk()
    s = FileStore("/st", disk=disk)
    base = disk.fsyncs
    for i in range(200):
        s.store("a", None, b"x" * 100, i)
    s.remove(5)
    s.purge(upto_seq=10)
    assert disk.fsyncs == base
    s.sync()
    assert disk.fsyncs == base + 1
    s.sync()  # nothing dirty: no fsync at all
    assert disk.fsyncs == base + 1
    s.store("a", None, b"", 0)
    s.sync()
    assert disk.fsyncs == base + 2
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


def test_reads_in_sequence_through_the_read_ahead_buffer_return_what_was_stored(
    tmp_path: Path,
) -> None:
    s = FileStore(tmp_path)
    want = []
    for i in range(200):
        hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else None
        want.append((f"s.{i % 7}", hdr, b"d" * (i % 50), 1000 + i))
        s.store(*want[-1])
    s.sync()  # on disk: read back through the read-ahead buffer, not the write buffer
    for seq, (subject, hdr, data, ts) in enumerate(want, start=1):
        m = s.load(seq)
        assert m is not None
        assert (m.seq, m.subject, m.headers, m.data, m.ts_ns) == (seq, subject, hdr, data, ts)
    assert s.load(201) is None
    s.close()


def test_bit_rot_in_a_record_already_read_ahead_fails_its_load(tmp_path: Path) -> None:
    s = FileStore(tmp_path)
    for i in range(20):
        s.store("a", None, b"record %02d" % i, i)
    s.sync()
    blk = blocks(tmp_path)[-1]
    data = bytearray(blk.read_bytes())
    at = data.index(b"record 10")
    data[at + 3] ^= 0x20
    with open(blk, "r+b") as f:
        f.write(data)
    for seq in range(1, 11):
        m = s.load(seq)  # the first read fetches the whole block ahead, rot included
        assert m is not None and m.data == b"record %02d" % (seq - 1)
    with pytest.raises(StoreCorruption):
        s.load(11)
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


def _prepared_restore(disk: MemDisk) -> list[bytes]:
    """/s holds 3 msgs on "old"; returns a snapshot of a store with 5 on "new"."""
    src = FileStore("/src", disk=disk, block_size=256)
    for i in range(5):
        src.store("new", None, b"%d" % i * 40, i)
    snap = list(src.snapshot())
    src.close()
    s = FileStore("/s", disk=disk, block_size=256)
    for i in range(3):
        s.store("old", None, b"%d" % i * 40, i)
    s.close()
    return snap


def test_restore_at_every_crash_point_leaves_old_or_new_content_whole() -> None:
    """Crash the restore after every disk operation (process death and power loss): the
    store opens with either all of the old content or all of the snapshot's."""
    import random

    for after in range(200):
        for power_loss in (False, True):
            disk = MemDisk()
            snap = _prepared_restore(disk)
            s = FileStore("/s", disk=disk, block_size=256)
            disk.arm_crash(after)
            try:
                s.restore(snap)
                finished = True
            except SimulatedCrash:
                finished = False
            if power_loss:
                disk.crash(random.Random(after))
            else:
                disk.kill_process()
            s = FileStore("/s", disk=disk, block_size=256)
            subjects = s.subjects_state()
            assert subjects in ({"old": 3}, {"new": 5}), (after, power_loss, subjects)
            assert not disk.exists(f"/s/{RESTORE_DIR}")
            s.close()
            if finished and not power_loss:
                assert subjects == {"new": 5}
        if finished:
            return
    raise AssertionError("the restore never finished")


def test_restore_replaces_content_and_survives_restart() -> None:
    disk = MemDisk()
    snap = _prepared_restore(disk)
    s = FileStore("/s", disk=disk, block_size=256)
    s.restore(snap)
    assert s.subjects_state() == {"new": 5}
    s.store("after", None, b"", 9)
    s.close()
    s = FileStore("/s", disk=disk, block_size=256)
    assert s.subjects_state() == {"new": 5, "after": 1}
    assert s.state().last_seq == 6
    assert not disk.exists(f"/s/{RESTORE_DIR}/{RESTORE_DONE}")
    s.close()


def test_a_damaged_snapshot_leaves_the_store_untouched() -> None:
    disk = MemDisk()
    snap = _prepared_restore(disk)
    s = FileStore("/s", disk=disk, block_size=256)
    damaged = b"".join(snap)[:-20]
    with pytest.raises(StoreCorruption):
        s.restore([damaged])
    assert s.subjects_state() == {"old": 3}
    assert not disk.exists(f"/s/{RESTORE_DIR}")
    s.close()


def test_delete_removes_the_message_files(tmp_path: Path) -> None:
    root = tmp_path / "stream"
    s = FileStore(root)
    s.store("a", None, b"", 0)
    s.purge()
    s.close()
    assert root.exists() and blocks(root)
    s = FileStore(root)
    s.delete()
    assert not (root / MSGS_DIR).exists()


def test_begin_sync_runs_the_fsync_on_another_thread(tmp_path: Path) -> None:
    disk = CountingDisk()
    s = FileStore(tmp_path, block_size=4096, disk=disk)
    assert s.begin_sync() is None  # a fresh store is already durable
    for i in range(10):
        s.store("a", None, b"x" * 100, i)
    finish = s.begin_sync()
    assert finish is not None and not s.needs_sync
    assert disk.syncs == []  # the owner thread wrote, it did not sync
    # The owner keeps storing (and rotating blocks) while the worker syncs.
    worker = threading.Thread(target=finish)
    worker.start()
    for i in range(100):
        s.store("b", None, b"y" * 100, i)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert worker.ident in disk.syncs
    assert len(disk.syncs) >= 2  # the worker's, plus rotations of full blocks
    finish = s.begin_sync()
    assert finish is not None
    finish()
    s.close()
    c = FileStore(tmp_path)
    assert c.state().msgs == 110
    c.close()


def test_failed_fsync_poisons_the_store(tmp_path: Path) -> None:
    disk = CountingDisk()
    s = FileStore(tmp_path, disk=disk)
    s.store("a", None, b"", 0)
    finish = s.begin_sync()
    assert finish is not None
    disk.fail_syncs = True
    with pytest.raises(StoreError):
        finish()
    with pytest.raises(StoreError, match="failed"):
        s.store("a", None, b"", 1)
    s.close()  # still releases the directory
    s = FileStore(tmp_path)
    assert s.state().msgs == 1  # the write reached the OS; only its fsync is in doubt
    s.close()


@pytest.mark.parametrize("seed", range(20))
def test_a_new_store_left_to_name_its_block_on_first_sync_keeps_what_that_sync_covered(
    seed: int,
) -> None:
    disk = MemDisk()
    s = FileStore("/s", disk=disk, sync_new=False)
    assert s.needs_sync  # the first block's name is not durable yet
    s.store("a", None, b"kept", 0)
    s.sync()
    s.store("a", None, b"maybe", 1)
    disk.crash(random.Random(seed))  # power loss
    again = FileStore("/s", disk=disk)
    assert again.load(1) is not None and again.load(1).data == b"kept"  # type: ignore[union-attr]
    again.close()
