"""A clustered file stream's replica (FileStreamReplica): it restarts from its store's last
checkpoint, skips the replayed entries it holds, and a restored snapshot is durable and
marked with the driver's index."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgspec
import pytest

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.store.types import StoreCorruption
from jetraft.jetstream.stream import (
    DeleteMsg,
    Purge,
    StoreBatch,
    StoreMsg,
    UpdateConfig,
    encode_entry,
)
from jetraft.jetstream.stream import (
    Entry as StreamEntry,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.spool import FileSnapshotData
from jetraft.raft.types import Entry, EntryKind, whole
from jetraft.server.js.clustered import stream_file
from jetraft.server.js.clustered.stream_file import FileStreamReplica
from jetraft.server.js.clustered.stream_replica import StreamReplica
from tests.unit.server.test_js_replica_streams import _Host

CFG = StreamConfig(name="S", subjects=("s.*",), max_msgs_per_subject=2, discard="new",
                   max_msgs=7, duplicate_window=10**12)
SA = StreamAssignment("$G", CFG, "S-R3F-f", ("a", "b", "c"), 1)


def _hdr(msg_id: str) -> bytes:
    return f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()


def _log() -> list[Entry]:
    es: list[StreamEntry | StoreBatch] = []
    for i in range(30):
        es.append(StoreBatch([StoreMsg(f"s.{(i + k) % 4}", "", _hdr(f"m{(i + k) % 9}"),
                                       b"%d" % i, 10**15 + i) for k in range(3)]))
        if i % 6 == 2:
            es.append(Purge("s.1", 0, 1))
        if i % 7 == 3:
            es.append(DeleteMsg(i + 1))
        if i == 15:
            es.append(UpdateConfig(msgspec.structs.replace(CFG, max_msgs=12)))
    return [Entry(1, k + 1, EntryKind.NORMAL, encode_entry(e)) for k, e in enumerate(es)]


def _contents(r: StreamReplica) -> object:
    store = r.stream.store
    msgs = []
    seq = store.bounds()[0]
    while True:
        m = store.load_next(seq) if seq else None
        if m is None:
            break
        msgs.append((m.seq, m.subject, m.headers, m.data, m.ts_ns))
        seq = m.seq + 1
    return store.state(), msgs, r.stream.beside_store(), r.stream.config


async def _settled(r: FileStreamReplica) -> None:
    for _ in range(500):
        if r._sync is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the store sync never finished")


def _crash(r: FileStreamReplica) -> None:
    """The process dies: nothing more is written (no last checkpoint, no close)."""
    store = r.stream.store
    assert isinstance(store, FileStore)
    store.abandon()


@pytest.fixture(autouse=True)
def _often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_file, "CKPT_MSGS", 10)
    monkeypatch.setattr(stream_file, "CKPT_ENTRIES", 4)


async def test_a_restart_resumes_after_its_checkpoint_and_skips_what_it_holds(
    tmp_path: Path,
) -> None:
    entries = _log()
    reference = FileStreamReplica(_Host(tmp_path / "ref"), SA, joining=False)  # no crash
    for e in entries:
        reference.apply(e)
    host = _Host(tmp_path / "file")
    r = FileStreamReplica(host, SA, joining=False)
    for e in entries[:25]:
        r.apply(e)
    await _settled(r)
    held = r.durable_index()
    assert 0 < held <= 25
    _crash(r)
    again = FileStreamReplica(host, SA, joining=False)
    assert again.applied_index == again.durable_index() >= held
    resumed = again.applied_index
    # The log replays everything after its own (older) snapshot: what the store holds is
    # skipped, the rest applied on top.
    results = [again.apply(e) for e in entries]
    assert all(res is None for res in results[:resumed])
    assert all(res is not None for res in results[resumed:])
    assert _contents(again) == _contents(reference)
    await again.stop()
    await reference.stop()


async def test_a_clean_stop_checkpoints_so_nothing_is_replayed(tmp_path: Path) -> None:
    host = _Host(tmp_path)
    r = FileStreamReplica(host, SA, joining=False)
    for e in _log():
        r.apply(e)
    want = _contents(r)
    await r.stop()
    again = FileStreamReplica(host, SA, joining=False)
    assert again.applied_index == len(_log())
    assert _contents(again) == want
    await again.stop()


async def test_a_restored_snapshot_is_durable_at_its_index(tmp_path: Path) -> None:
    leader = FileStreamReplica(_Host(tmp_path / "leader"), SA, joining=False)
    for e in _log():
        leader.apply(e)
    data = leader.snapshot()
    host = _Host(tmp_path / "follower")
    follower = FileStreamReplica(host, SA, joining=True)
    follower.apply(_log()[0])
    follower.restore(data)
    assert follower.durable_index() == follower.applied_index == len(_log())
    _crash(follower)  # right after restore returned: it must all be on disk
    again = FileStreamReplica(host, SA, joining=True)
    assert again.applied_index == len(_log())
    assert _contents(again) == _contents(leader)
    await leader.stop()
    await again.stop()


async def test_a_snapshot_is_spooled_to_a_file_and_restored_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader writes the snapshot it sends to an (unnamed) spool file in the group's
    directory; the follower reads the records back in pieces, whatever their size."""
    monkeypatch.setattr(stream_file, "READ_CHUNK", 7)  # pieces cut records anywhere
    leader = FileStreamReplica(_Host(tmp_path / "leader"), SA, joining=False)
    for e in _log():
        leader.apply(e)
    leader.group.dir.mkdir(parents=True, exist_ok=True)
    data = leader.snapshot()
    assert isinstance(data, FileSnapshotData)
    assert [p.name for p in leader.group.dir.iterdir()] == ["stream"]  # nothing named
    snap, pieces = stream_file.read_snapshot(data)
    assert snap.index == len(_log()) and snap.chunks == []
    assert {len(p) for p in pieces} == {7} | {len(data) % 7 or 7} - {0}
    follower = FileStreamReplica(_Host(tmp_path / "follower"), SA, joining=True)
    follower.restore(data)
    assert _contents(follower) == _contents(leader)
    await leader.stop()
    await follower.stop()


async def test_a_snapshot_of_the_whole_in_memory_form_is_still_restored(
    tmp_path: Path,
) -> None:
    """A leader of an earlier version sends the msgpack form (records inside)."""
    leader = FileStreamReplica(_Host(tmp_path / "leader"), SA, joining=False)
    for e in _log():
        leader.apply(e)
    old = StreamReplica.snapshot(leader)
    assert isinstance(old, bytes) and not old.startswith(stream_file.SPOOL_MAGIC)
    follower = FileStreamReplica(_Host(tmp_path / "follower"), SA, joining=True)
    follower.restore(old)
    assert follower.applied_index == len(_log())
    assert _contents(follower) == _contents(leader)
    await leader.stop()
    await follower.stop()


async def test_a_truncated_snapshot_is_refused_and_the_store_kept(tmp_path: Path) -> None:
    leader = FileStreamReplica(_Host(tmp_path / "leader"), SA, joining=False)
    for e in _log():
        leader.apply(e)
    leader.group.dir.mkdir(parents=True, exist_ok=True)
    full = whole(leader.snapshot())
    follower = FileStreamReplica(_Host(tmp_path / "follower"), SA, joining=True)
    for e in _log()[:3]:
        follower.apply(e)
    before = _contents(follower)
    for cut in (3, len(stream_file.SPOOL_MAGIC) + 6, len(full) - 5):
        with pytest.raises(StoreCorruption):
            follower.restore(full[:cut])
    assert _contents(follower) == before
    await leader.stop()
    await follower.stop()


async def test_the_store_is_opened_in_a_worker_thread_while_the_loop_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recovering a large store reads every block: FileStreamReplica.open does it in a
    worker thread, and the replica exists only once its store is open."""
    host = _Host(tmp_path)
    r = FileStreamReplica(host, SA, joining=False)
    for e in _log():
        r.apply(e)
    want = _contents(r)
    await r.stop()
    loop_turned = threading.Event()
    threads: list[int] = []
    real_open = stream_file.open_replica_store

    def slow_open(directory: Path, name: str) -> FileStore:
        threads.append(threading.get_ident())
        # Returns only once the loop ran a callback: an open on the loop would time out.
        assert loop_turned.wait(10), "the loop did not run while the store was opened"
        return real_open(directory, name)

    monkeypatch.setattr(stream_file, "open_replica_store", slow_open)
    asyncio.get_running_loop().call_soon(loop_turned.set)
    again = await FileStreamReplica.open(host, SA, joining=False)
    assert threads and threads[0] != threading.get_ident()
    assert again.applied_index == len(_log()) and _contents(again) == want
    await again.stop()


async def test_a_store_opened_for_a_cancelled_caller_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    opened: list[FileStore] = []
    real_open = stream_file.open_replica_store

    def slow_open(directory: Path, name: str) -> FileStore:
        assert release.wait(10)
        store = real_open(directory, name)
        opened.append(store)
        return store

    monkeypatch.setattr(stream_file, "open_replica_store", slow_open)
    task = asyncio.ensure_future(FileStreamReplica.open(_Host(tmp_path), SA, joining=False))
    await asyncio.sleep(0)
    task.cancel()  # the server stops while the store is being opened
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    for _ in range(1000):
        if opened and opened[0]._closed:
            break
        await asyncio.sleep(0.01)
    assert opened and opened[0]._closed  # released: the directory can be opened again
    monkeypatch.setattr(stream_file, "open_replica_store", real_open)
    again = await FileStreamReplica.open(_Host(tmp_path), SA, joining=False)
    await again.stop()
