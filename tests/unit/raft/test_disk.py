"""The storage seam: OsDisk and MemDisk agree on the Protocol; MemDisk crashes honestly."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from jetraft.raft.disk import Disk, MemDisk, OsDisk, SimulatedCrash


@pytest.fixture(params=["mem", "os"])
def disk_dir(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Disk, str]:
    if request.param == "mem":
        return MemDisk(), "data/g"
    return OsDisk(), str(tmp_path / "data" / "g")


def test_protocol_round_trip(disk_dir: tuple[Disk, str]) -> None:
    disk, d = disk_dir
    disk.makedirs(d)
    disk.makedirs(d)  # idempotent
    assert disk.list(d) == []
    p = os.path.join(d, "a")
    f = disk.open_append(p)
    f.write(b"hello ")
    f.write(b"world")
    assert f.tell() == 11
    f.sync()
    f.truncate(5)
    f.write(b"!")
    f.sync()
    f.close()
    assert disk.read(p) == b"hello!"
    assert disk.size(p) == 6
    g = disk.open_append(p)  # reopening appends at the end
    assert g.tell() == 6
    g.write(b"?")
    g.close()
    assert disk.read(p) == b"hello!?"
    disk.write_atomic(os.path.join(d, "b"), b"one")
    disk.write_atomic(os.path.join(d, "b"), b"two")
    assert disk.read(os.path.join(d, "b")) == b"two"
    assert disk.list(d) == ["a", "b"]
    disk.rename(p, os.path.join(d, "c"))
    assert not disk.exists(p) and disk.exists(os.path.join(d, "c"))
    disk.remove(os.path.join(d, "b"))
    disk.sync_dir(d)
    assert disk.list(d) == ["c"]
    with pytest.raises(FileNotFoundError):
        disk.read(os.path.join(d, "b"))


def _synced_file(disk: MemDisk, path: str, data: bytes) -> None:
    f = disk.open_append(path)
    f.write(data)
    f.sync()
    f.close()
    disk.sync_dir(os.path.dirname(path))


def test_synced_data_survives_every_crash() -> None:
    for seed in range(100):
        disk = MemDisk()
        disk.makedirs("d")
        _synced_file(disk, "d/f", b"durable")
        f = disk.open_append("d/f")
        f.write(b"-volatile")
        disk.crash(random.Random(seed))
        content = disk.read("d/f")
        assert content.startswith(b"durable")
        assert len(content) <= len(b"durable-volatile")


def test_unsynced_appends_survive_as_prefix_or_torn() -> None:
    outcomes = set()
    for seed in range(300):
        disk = MemDisk()
        disk.makedirs("d")
        _synced_file(disk, "d/f", b"base")
        f = disk.open_append("d/f")
        f.write(b"AAAA")
        f.write(b"BBBB")
        disk.crash(random.Random(seed))
        tail = disk.read("d/f")[4:]
        assert len(tail) <= 8
        if tail in (b"", b"AAAA", b"AAAABBBB"):
            outcomes.add(tail)
        elif b"AAAABBBB".startswith(tail):
            outcomes.add(b"cut")
        else:  # a torn write read back with zeros or garbage after its surviving part
            outcomes.add(b"garbage")
            assert len(tail) in (4, 8)
            if len(tail) == 8:
                assert tail.startswith(b"AAAA")
    assert outcomes == {b"", b"AAAA", b"AAAABBBB", b"cut", b"garbage"}


def test_crash_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[tuple[str, bytes]]:
        disk = MemDisk()
        disk.makedirs("d")
        for i in range(5):
            f = disk.open_append(f"d/f{i}")
            f.write(bytes(range(50)) * (i + 1))
            if i % 2:
                f.sync()
        disk.crash(random.Random(seed))
        return [(n, disk.read(f"d/{n}")) for n in disk.list("d")]

    assert run(7) == run(7)
    assert any(run(7) != run(s) for s in range(8, 20))


def test_names_need_sync_dir() -> None:
    created, removed = set(), set()
    for seed in range(60):
        disk = MemDisk()
        disk.makedirs("d")
        _synced_file(disk, "d/old", b"x")
        f = disk.open_append("d/new")
        f.write(b"y")
        f.sync()  # data durable, the name is not
        disk.remove("d/old")
        disk.crash(random.Random(seed))
        created.add(disk.exists("d/new"))
        removed.add(not disk.exists("d/old"))
        if disk.exists("d/old"):
            assert disk.read("d/old") == b"x"
        if disk.exists("d/new"):
            assert disk.read("d/new") == b"y"
    assert created == {True, False} and removed == {True, False}
    disk = MemDisk()
    disk.makedirs("d")
    f = disk.open_append("d/new")
    f.write(b"y")
    f.sync()
    disk.sync_dir("d")
    disk.crash(random.Random(1))
    assert disk.read("d/new") == b"y"


def test_write_atomic_is_whole_even_when_interrupted() -> None:
    seen = set()
    for after in range(8):
        for seed in range(10):
            disk = MemDisk()
            disk.makedirs("d")
            disk.write_atomic("d/s", b"old-content")
            disk.arm_crash(after)
            try:
                disk.write_atomic("d/s", b"new")
            except SimulatedCrash:
                pass
            else:
                disk.disarm()
            disk.crash(random.Random(seed))
            content = disk.read("d/s")
            assert content in (b"old-content", b"new")
            seen.add(content)
    assert seen == {b"old-content", b"new"}
    disk = MemDisk()
    disk.makedirs("d")
    disk.write_atomic("d/s", b"v1")
    disk.crash(random.Random(3))
    assert disk.read("d/s") == b"v1"  # durable on return


def test_armed_crash_stops_everything_until_crash() -> None:
    disk = MemDisk()
    disk.makedirs("d")
    f = disk.open_append("d/f")
    disk.arm_crash(1)
    f.write(b"a")
    with pytest.raises(SimulatedCrash):
        f.sync()
    with pytest.raises(SimulatedCrash):
        disk.remove("d/f")
    disk.crash(random.Random(0))
    with pytest.raises(ValueError):
        f.write(b"b")  # handles from before the crash are dead
    assert disk.open_handles == 0


def test_corrupt_flips_a_durable_byte() -> None:
    disk = MemDisk()
    disk.makedirs("d")
    _synced_file(disk, "d/f", b"abc")
    disk.corrupt("d/f", 1)
    assert disk.read("d/f") == b"a\x9dc"
    disk.crash(random.Random(0))
    assert disk.read("d/f") == b"a\x9dc"
    with pytest.raises(IndexError):
        disk.corrupt("d/f", 3)


def test_handle_counter() -> None:
    disk = MemDisk()
    disk.makedirs("d")
    a = disk.open_append("d/a")
    b = disk.open_append("d/b")
    assert disk.open_handles == 2
    a.close()
    a.close()
    assert disk.open_handles == 1
    b.close()
    assert disk.open_handles == 0
