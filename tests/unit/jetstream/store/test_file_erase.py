"""Secure erase and deferred work in the file store: an erased message's bytes leave the
disk, a crash at any point of the erase leaves a store that opens and never serves the
message once its delete was durable, and blocks below a purge go only after the purge is
durable."""

from __future__ import annotations

import random

import pytest

from jetraft.jetstream.store import FileStore
from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.disk import MemDisk, SimulatedCrash

SECRET = b"top-secret-payload"


def block_bytes(disk: MemDisk, store: FileStore) -> bytes:
    return b"".join(disk.read(p) for p in store.block_files())


def commit(store: FileStore) -> int:
    """What the server's commit queue does: sync rounds until no deferred work is left."""
    rounds = 0
    while True:
        finish = store.begin_sync()
        if finish is not None:
            finish()
        rounds += 1
        if not store.deferred_work:
            return rounds


@pytest.mark.parametrize("sealed", [False, True])
def test_erase_overwrites_the_bytes_and_remove_does_not(sealed: bool) -> None:
    disk = MemDisk()
    cipher = RecordCipher(b"e" * 32) if sealed else None
    s = FileStore("/s", disk=disk, cipher=cipher)
    s.store("a", None, SECRET + b"-1", 1)
    s.store("a", None, SECRET + b"-2", 2)
    s.store("a", None, b"last", 3)
    commit(s)
    assert s.erase(1) and s.remove(2)
    assert not s.erase(1)
    assert commit(s) == 2  # the DEL first, the overwrite in the round after it
    raw = block_bytes(disk, s)
    if not sealed:
        assert SECRET + b"-1" not in raw
        assert SECRET + b"-2" in raw  # no_erase: only removed
    kinds = [k for _, k, *_ in rec.scan(raw)]
    assert rec.KIND_ERASED in kinds
    s.close()
    s = FileStore("/s", disk=disk, cipher=cipher)
    st = s.state(deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq) == (1, 3, 3)
    assert s.load(1) is None and s.load(3) is not None
    s.close()


def test_erasing_the_last_message_keeps_its_sequence() -> None:
    disk = MemDisk()
    s = FileStore("/s", disk=disk)
    s.store("a", None, b"1", 10)
    s.store("a", None, SECRET, 20)
    commit(s)
    s.erase(2)
    commit(s)
    s.close()
    s = FileStore("/s", disk=disk)
    st = s.state()
    assert (st.msgs, st.last_seq, st.last_ts_ns) == (1, 2, 20)
    assert s.store("a", None, b"3", 30)[0] == 3
    s.close()


def test_erase_in_a_sealed_block_and_compaction_after_it() -> None:
    disk = MemDisk()
    s = FileStore("/s", disk=disk, block_size=300)
    for i in range(20):
        s.store("a", None, SECRET + b"%02d" % i, i)
    commit(s)
    first_block = disk.read(s.block_files()[0])
    assert SECRET + b"00" in first_block
    for q in range(1, 6):
        s.erase(q)
    commit(s)
    assert SECRET + b"00" not in block_bytes(disk, s)
    for i in range(40):  # rotations compact the now mostly dead blocks
        s.store("b", None, b"x" * 40, i)
    commit(s)
    state = s.state(deleted=True)
    s.close()
    s = FileStore("/s", disk=disk, block_size=300)
    assert s.state(deleted=True) == state
    assert all(s.load(q) is None for q in range(1, 6))
    s.close()


@pytest.mark.parametrize("power_loss", [False, True])
def test_a_crash_anywhere_in_an_erase_never_corrupts_the_store(power_loss: bool) -> None:
    """Crash after every disk operation of delete + erase rounds; the store always opens,
    never serves damaged data, and once the delete was durable never serves the message."""
    for after in range(60):
        disk = MemDisk()
        s = FileStore("/s", disk=disk)
        for i in range(5):
            s.store("a", None, SECRET + b"%d" % i, i)
        commit(s)
        s.erase(3)
        deleted_durable = False
        disk.arm_crash(after)
        try:
            finish = s.begin_sync()
            assert finish is not None
            finish()
            deleted_durable = True
            commit(s)
            done = True
        except SimulatedCrash:
            done = False
        if power_loss:
            disk.crash(random.Random(after))
        else:
            disk.kill_process()
        s = FileStore("/s", disk=disk)
        for q in (1, 2, 4, 5):
            m = s.load(q)
            assert m is not None and m.data == SECRET + b"%d" % (q - 1)
        m = s.load(3)
        assert m is None or m.data == SECRET + b"2"
        if deleted_durable:
            assert m is None
        s.close()
        if done:
            return
    raise AssertionError("the erase never completed")


def test_torn_erase_is_recognised_but_other_damage_is_not() -> None:
    """A record that fails its checksum is fine only when a durable DEL covers it."""
    disk = MemDisk()
    s = FileStore("/s", disk=disk)
    for i in range(4):
        s.store("a", None, SECRET, i)
    s.remove(2)
    commit(s)
    s.close()
    path = "/s/msgs/blk.00000001.dat"
    data = disk.read(path)
    offs = [off for off, kind, *_ in rec.scan(data) if kind == rec.KIND_MSG]
    disk.corrupt(path, offs[1] + rec.HDR_SIZE + 3)  # inside message 2 (deleted): tolerated
    s = FileStore("/s", disk=disk)
    assert s.state().msgs == 3
    s.close()
    disk.corrupt(path, offs[2] + rec.HDR_SIZE + 3)  # inside message 3 (live): corruption
    with pytest.raises(Exception, match="checksum"):
        FileStore("/s", disk=disk)


@pytest.mark.parametrize("seed", range(30))
def test_blocks_below_a_purge_go_only_once_the_purge_is_durable(seed: int) -> None:
    rng = random.Random(seed)
    disk = MemDisk()
    s = FileStore("/s", disk=disk, block_size=300)
    for i in range(30):
        s.store("a", None, b"m%02d" % i + b"." * 40, i)
    commit(s)
    s.purge(upto_seq=20)
    disk.arm_crash(rng.randrange(12))
    purged = False
    try:
        finish = s.begin_sync()
        if finish is not None:
            finish()
        purged = True
        commit(s)
    except SimulatedCrash:
        pass
    disk.crash(rng)
    s = FileStore("/s", disk=disk, block_size=300)
    st = s.state()
    # Either the purge happened or it did not; never half (some purged blocks gone).
    assert st.first_seq in (1, 20), st
    assert st.msgs == 31 - st.first_seq
    if purged:
        assert st.first_seq == 20
    s.close()
