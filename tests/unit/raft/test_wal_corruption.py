"""Damage on disk: torn tails are cut quietly, everything else is reported and kept aside."""

from __future__ import annotations

import random

from jetraft.raft.disk import MemDisk
from jetraft.raft.types import Entry, HardState
from jetraft.raft.wal import Wal
from jetraft.raft.wal_format import encode_entry, encode_hard_state
from tests.unit.raft.test_wal import Env, ents, env, reopen, snap

__all__ = ["env"]  # the fixture, parametrized over MemDisk and OsDisk

# Every segment starts with the hard state (with the end of the log: empty at first).
HEAD = len(encode_hard_state(HardState(), (0, 0)))


def offset_of(entries: list[Entry], index: int) -> int:
    """Offset of entry ``index`` in a first segment holding ``entries`` from its start."""
    return HEAD + sum(len(encode_entry(e)) for e in entries if e.index < index)


def test_torn_tail_is_cut_silently(env: Env) -> None:
    wal, _ = env.open()
    wal.append(ents(1, 10))
    wal.set_hard_state(HardState(1, "a", 8))
    wal.sync()
    wal.close()
    (seg,) = env.segments()
    good = env.disk.read(env.path(seg))
    hs = encode_hard_state(HardState(1, "a", 8), (10, 1))
    half_record = encode_entry(ents(11, 11)[0])[:30]
    for tail in (half_record, b"\x00" * 100, encode_entry(ents(11, 11)[0])[:-1]):
        env.append_raw(seg, tail)
        wal, rec = env.open()
        assert rec.corrupt is None
        assert rec.entries == ents(1, 10) and rec.hard_state == HardState(1, "a", 8)
        # The torn bytes are gone; the open ended the log with the hard state again.
        data = env.disk.read(env.path(seg))
        rest = data[len(good):]
        assert data.startswith(good) and rest and rest == hs * (len(rest) // len(hs))
        wal.close()
    wal, _ = env.open()
    wal.append(ents(11, 12))
    wal.sync()
    _wal, rec = reopen(env, wal)
    assert rec.entries == ents(1, 12) and rec.corrupt is None


def test_bad_record_followed_by_valid_ones_is_corruption(env: Env) -> None:
    wal, _ = env.open()
    wal.append(ents(1, 20))
    wal.set_hard_state(HardState(1, "a", 15))
    wal.sync()
    wal.set_hard_state(HardState(2, "b", 15))  # after the damage: still recovered
    wal.sync()
    wal.close()
    (seg,) = env.segments()
    bad = offset_of(ents(1, 20), 8)
    env.flip(seg, bad + 20)  # inside the payload of entry 8
    wal, rec = env.open()
    assert rec.entries == ents(1, 7)
    assert rec.corrupt is not None
    assert seg in rec.corrupt and f"offset {bad}" in rec.corrupt
    assert "checksum" in rec.corrupt
    assert rec.hard_state == HardState(2, "b", 15)
    assert (wal.first_index, wal.last_index) == (1, 7)
    # Nothing was deleted: the damaged segment is kept aside, the good part continues.
    assert seg + ".corrupt" in env.files()
    assert seg not in env.segments()
    wal.append(ents(8, 9, term=2))
    wal.sync()
    wal, rec = reopen(env, wal)
    assert rec.entries == ents(1, 7) + ents(8, 9, term=2)
    assert rec.corrupt is not None and "offset" in rec.corrupt  # reported until cleared
    assert rec.hard_state == HardState(2, "b", 15)
    wal.clear_corruption()
    _wal, rec = reopen(env, wal)
    assert rec.corrupt is None and rec.entries == ents(1, 7) + ents(8, 9, term=2)
    assert seg + ".corrupt" in env.files()


def test_damaged_length_field_is_not_mistaken_for_a_torn_tail(env: Env) -> None:
    wal, _ = env.open()
    wal.append(ents(1, 20))
    wal.sync()
    wal.close()
    (seg,) = env.segments()
    env.flip(seg, offset_of(ents(1, 20), 5) + 7)  # high byte of the length: runs past EOF
    _wal, rec = env.open()
    assert rec.entries == ents(1, 4)
    assert rec.corrupt is not None and "valid records follow" in rec.corrupt


def test_bad_record_in_an_earlier_segment_is_corruption(env: Env) -> None:
    wal, _ = env.open(segment_bytes=300)
    for i in range(1, 41, 4):
        wal.append(ents(i, i + 3))
        wal.sync()
    wal.close()
    segs = env.segments()
    assert len(segs) >= 3
    first = segs[0]
    env.flip(first, env.disk.size(env.path(first)) - 1)  # the crc of its last record
    wal, rec = env.open(segment_bytes=300)
    assert rec.corrupt is not None and first in rec.corrupt
    assert "not the last segment" in rec.corrupt
    assert rec.entries == ents(1, len(rec.entries)) and 0 < len(rec.entries) < 40
    assert all(s + ".corrupt" in env.files() for s in segs)
    # The node repairs from its leader: its appends continue the surviving prefix.
    nxt = len(rec.entries) + 1
    wal.append(ents(nxt, 40))
    wal.sync()
    _wal, rec = reopen(env, wal, 300)
    assert rec.entries == ents(1, 40)


def test_corrupt_snapshot_is_reported_and_kept(env: Env) -> None:
    wal, _ = env.open(segment_bytes=300)
    for i in range(1, 41, 4):
        wal.append(ents(i, i + 3))
        wal.sync()
    wal.save_snapshot(snap(30, 1, b"x" * 100))
    wal.close()
    name = "snap-00000000000000000030.snap"
    env.flip(name, 50)
    wal, rec = env.open(segment_bytes=300)
    assert rec.corrupt is not None and name in rec.corrupt and "checksum" in rec.corrupt
    assert rec.snapshot is None
    assert rec.entries == []  # 1..~28 were compacted: nothing contiguous from 1 is left
    assert "missing" in rec.corrupt
    assert name + ".corrupt" in env.files()  # never deleted
    wal.save_snapshot(snap(40, 1))  # repaired by a snapshot from the leader
    wal.clear_corruption()
    _wal, rec = reopen(env, wal, 300)
    assert rec.corrupt is None and rec.snapshot == snap(40, 1)
    assert name + ".corrupt" in env.files()


def test_missing_segment_is_reported(env: Env) -> None:
    wal, _ = env.open(segment_bytes=300)
    for i in range(1, 41, 4):
        wal.append(ents(i, i + 3))
        wal.sync()
    wal.close()
    segs = env.segments()
    env.disk.remove(env.path(segs[1]))
    wal, rec = env.open(segment_bytes=300)
    assert rec.corrupt is not None and "missing" in rec.corrupt
    survivors = len(rec.entries)
    assert rec.entries == ents(1, survivors) and survivors < 40
    assert wal.last_index == survivors
    wal.append(ents(survivors + 1, survivors + 2, term=2))
    wal.sync()
    _wal, rec = reopen(env, wal, 300)
    assert rec.entries == ents(1, survivors) + ents(survivors + 1, survivors + 2, term=2)


def test_crash_while_repairing_corruption() -> None:
    """Repair writes (marker, copy, renames) crash at every point: never lose the prefix,
    never stop reporting the corruption."""
    for after in range(12):
        for seed in range(5):
            disk = MemDisk()
            wal, _ = Wal.open(disk, "g", segment_bytes=400)
            for i in range(1, 31, 5):
                wal.append(ents(i, i + 4))
                wal.set_hard_state(HardState(i, "v", i))
                wal.sync()
            wal.close()
            segs = [n for n in disk.list("g") if n.endswith(".wal")]
            disk.corrupt(f"g/{segs[-1]}", HEAD + 10)
            disk.arm_crash(after)
            try:
                Wal.open(disk, "g", segment_bytes=400)
            except Exception:
                disk.crash(random.Random(seed))
            else:
                disk.disarm()
            wal, rec = Wal.open(disk, "g", segment_bytes=400)
            assert rec.corrupt is not None
            assert rec.hard_state == HardState(26, "v", 26)
            n = len(rec.entries)
            assert rec.entries == ents(1, n) and n >= 20
            wal.append(ents(n + 1, n + 3, term=9))
            wal.sync()
            wal.close()
            _wal, rec = Wal.open(disk, "g", segment_bytes=400)
            assert rec.entries == ents(1, n) + ents(n + 1, n + 3, term=9)


def test_any_flipped_byte_is_reported_or_only_costs_the_last_record() -> None:
    """Flip one byte anywhere: recovery never fails, never returns a wrong entry, and
    either reports corruption or lost at most the final record (indistinguishable from a
    torn write: the known limit of any log that cuts torn tails)."""
    rng = random.Random(42)
    written = ents(1, 60)
    hard_states = [HardState(t, "v", t) for t in range(1, 13)]
    reported_none = 0
    for _ in range(300):
        disk = MemDisk()
        wal, _ = Wal.open(disk, "g", segment_bytes=700)
        for k, i in enumerate(range(1, 61, 5)):
            wal.append(written[i - 1 : i + 4])
            wal.set_hard_state(hard_states[k])
            wal.sync()
        wal.close()
        segs = [n for n in disk.list("g") if n.endswith(".wal")]
        name = rng.choice(segs)
        disk.corrupt(f"g/{name}", rng.randrange(disk.size(f"g/{name}")))
        _wal, rec = Wal.open(disk, "g", segment_bytes=700)
        assert rec.entries == written[: len(rec.entries)]
        assert rec.hard_state in hard_states
        if rec.corrupt is None:  # only the final record (here a hard state) may go
            reported_none += 1
            assert name == segs[-1]
            assert len(rec.entries) == 60 and rec.hard_state in hard_states[-2:]
    assert reported_none < 30  # almost every flip is reported


def test_damage_to_the_newest_record_loses_nothing() -> None:
    """The newest record is always a copy of the hard state (each batch ends with two):
    a byte flipped in it after it was durable looks like a torn write and is cut, and
    neither an acknowledged entry nor the vote goes with it."""
    for batch in ("entries", "vote"):
        disk = MemDisk()
        wal, _ = Wal.open(disk, "/g")
        wal.append(ents(1, 5))
        wal.set_hard_state(HardState(1, "a", 3))
        wal.sync()
        if batch == "entries":
            wal.append(ents(6, 8))  # the hard state does not change in this batch
        else:
            wal.set_hard_state(HardState(2, "b", 3))  # a new vote, nothing else
        wal.sync()
        wal.close()
        (seg,) = [n for n in disk.list("/g") if n.startswith("seg-")]
        size = disk.size(f"/g/{seg}")
        hs_len = len(encode_hard_state(HardState(2, "b", 3), (8, 1)))
        for offset in range(size - hs_len, size):
            copy = MemDisk()
            copy.makedirs("/g")
            f = copy.open_append(f"/g/{seg}")
            f.write(disk.read(f"/g/{seg}"))
            f.sync()
            copy.sync_dir("/g")
            copy.corrupt(f"/g/{seg}", offset)
            _wal, rec = Wal.open(copy, "/g")
            assert rec.corrupt is None, (batch, offset)
            if batch == "entries":
                assert rec.entries == ents(1, 8) and rec.hard_state == HardState(1, "a", 3)
            else:
                assert rec.entries == ents(1, 5) and rec.hard_state == HardState(2, "b", 3)


def test_corruption_keeps_the_end_of_the_log_the_replica_acknowledged(env: Env) -> None:
    """Entries after the damage are lost, but the hard-state records (read from behind
    it) say where the log ended: the bound on what this replica acknowledged, which its
    vote rule needs. Repairs and restarts keep it until the corruption is cleared."""
    wal, _ = env.open()
    wal.append(ents(1, 20))
    wal.set_hard_state(HardState(1, "a", 15))
    wal.sync()
    wal.append(ents(21, 30, term=2))
    wal.sync()
    wal.close()
    (seg,) = env.segments()
    env.flip(seg, offset_of(ents(1, 20), 8) + 20)  # inside entry 8
    wal, rec = env.open()
    assert rec.corrupt is not None and rec.entries == ents(1, 7)
    assert rec.acked_tail == (30, 2)
    wal.append(ents(8, 9, term=2))  # repaired in part: the records now end lower
    wal.sync()
    wal.close()
    wal, rec = env.open()
    assert rec.corrupt is not None and rec.acked_tail == (30, 2)
    wal.append(ents(10, 40, term=3))  # past what it acknowledged then: raised
    wal.sync()
    wal.close()
    wal, rec = env.open()
    assert rec.acked_tail == (40, 3)
    wal.clear_corruption()
    wal.close()
    wal, rec = env.open()
    assert rec.corrupt is None and rec.acked_tail is None
    wal.close()


def test_damage_reported_before_the_end_was_kept_tells_no_end(env: Env) -> None:
    """A CORRUPT marker without ACKED (damage found by a version that kept no end): the
    records written since name the repaired log's end, maybe below what was
    acknowledged, so no end is claimed."""
    wal, _ = env.open()
    wal.append(ents(1, 10))
    wal.sync()
    wal.mark_corrupt("damage found earlier")
    wal.close()
    _wal, rec = env.open()
    assert rec.corrupt == "damage found earlier" and rec.acked_tail is None


def test_entries_behind_the_damage_raise_the_acknowledged_end(env: Env) -> None:
    """Both hard-state copies after the last batch are damaged, and an entry of the
    batch: the batch's surviving entry still says how far the log reached, so the bound
    on what the replica acknowledged is not taken from an older hard state."""
    wal, _ = env.open()
    wal.append(ents(1, 5))
    wal.set_hard_state(HardState(1, "a", 3))
    wal.sync()
    wal.append(ents(6, 7))
    wal.sync()
    wal.close()
    (seg,) = env.segments()
    written = ents(1, 7)
    hs_len = len(encode_hard_state(HardState(1, "a", 3), (7, 1)))
    size = env.disk.size(env.path(seg))
    env.flip(seg, offset_of(written, 6) + 5)  # entry 6
    env.flip(seg, size - 2 * hs_len + 5)  # first copy after the batch
    env.flip(seg, size - hs_len + 5)  # second copy
    wal, rec = env.open()
    assert rec.corrupt is not None and rec.entries == ents(1, 5)
    assert rec.acked_tail == (7, 1)
    wal.close()
