"""Checkpointed file stores (a clustered file stream's replica): after a crash at any point
the store is exactly the state after its last checkpoint, never partly after, never behind
a checkpoint that was reported durable; replaying the entries after it gives the state of a
replica that never crashed."""

from __future__ import annotations

import random

import msgspec
import pytest

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.store.disk import MemDisk
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.stream import (
    DeleteMsg,
    Entry,
    Purge,
    StoreMsg,
    Stream,
    UpdateConfig,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.disk import SimulatedCrash
from jetraft.server.js.clustered.stream_file import checkpoint_state, stream_at_checkpoint

ROOT = "/replica"
BLOCK = 300  # small: rotations, unlinks and rewrites happen within a few entries
CKPT_EVERY = 3  # entries between checkpoints (each followed by a sync)
CONFIG = StreamConfig(
    name="S", subjects=("a", "b.*"), max_msgs=6, discard="new", max_msgs_per_subject=3,
    duplicate_window=60 * 10**9,
)
SA = StreamAssignment("$G", CONFIG, "S-g", ("a",), 1)


def _hdr(**kv: str) -> bytes:
    return ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kv.items()) + "\r\n").encode()


def _entries() -> list[Entry]:
    out: list[Entry] = []
    ts = 10**18
    for i in range(40):
        ts += 10**6
        subj = ["a", "b.x", "b.y"][i % 3]
        hdr = _hdr(**{"Nats-Msg-Id": f"id{i % 7}"}) if i % 4 == 0 else None
        out.append(StoreMsg(subj, "", hdr, b"%d" % i * 20, ts))
        if i % 9 == 4:
            out.append(Purge("b.x", 0, 1))  # purge keeping one
        if i % 7 == 5:
            out.append(DeleteMsg(0 + i // 2 + 1, no_erase=bool(i % 2)))  # erase or delete
        if i % 11 == 8:
            out.append(StoreMsg("a", "", _hdr(**{"Nats-Expected-Last-Sequence": str(i)}),
                                b"x", ts))
        if i == 20:
            out.append(UpdateConfig(msgspec.structs.replace(CONFIG, max_msgs=8, discard="old")))
        if i == 30:
            out.append(Purge("", 0, 4))
    return out


class _Replica:
    """What FileStreamReplica does with its store, without RAFT around it."""

    def __init__(self, disk: MemDisk) -> None:
        self.store = FileStore(ROOT, disk=disk, block_size=BLOCK, checkpoints=True)
        self.stream, self.index = stream_at_checkpoint(self.store, SA, "")
        self.durable = self.index

    def apply_from(self, entries: list[Entry], start: int) -> None:
        for i in range(start, len(entries)):
            index = i + 1
            if index <= self.index:
                continue
            self.stream.apply(entries[i])
            self.index = index
            if index % CKPT_EVERY == 0:
                self.store.checkpoint(index, checkpoint_state(self.stream))
                finish = self.store.begin_sync()
                if finish is not None:
                    finish()
                self.durable = index
            elif index % 5 == 0:
                # A sync that no checkpoint ends (a close, say): it makes records durable
                # that a crash must still cut, so nothing may be built on them.
                finish = self.store.begin_sync()
                if finish is not None:
                    finish()


def _contents(stream: Stream) -> tuple[object, ...]:
    store = stream.store
    msgs = []
    first, last = store.bounds()
    seq = first
    while seq and seq <= last:
        m = store.load_next(seq)
        if m is None:
            break
        msgs.append((m.seq, m.subject, m.headers, m.data, m.ts_ns))
        seq = m.seq + 1
    return (store.state(), msgs, stream.beside_store(), stream.config)


def test_records_after_the_last_checkpoint_are_cut_on_open() -> None:
    disk = MemDisk()
    s = FileStore(ROOT, disk=disk, block_size=BLOCK, checkpoints=True)
    for i in range(5):
        s.store("a", None, b"m%d" % i, i)
    s.checkpoint(7, b"state-7")
    s.sync()
    for i in range(20):  # several blocks after it, some sealed (synced by rotation)
        s.store("b", None, b"later%d" % i * 5, i)
    s.remove(2)
    s.purge(None, 4, 0)
    s.flush()
    disk.kill_process()
    again = FileStore(ROOT, disk=disk, block_size=BLOCK, checkpoints=True)
    assert again.checkpointed == (7, b"state-7")
    assert again.subjects_state() == {"a": 5}
    assert again.bounds() == (1, 5)
    again.close()


def test_a_store_without_a_checkpoint_opens_empty() -> None:
    disk = MemDisk()
    s = FileStore(ROOT, disk=disk, block_size=BLOCK, checkpoints=True)
    for i in range(10):
        s.store("a", None, b"m%d" % i * 10, i)
    s.sync()
    disk.kill_process()
    again = FileStore(ROOT, disk=disk, block_size=BLOCK, checkpoints=True)
    assert again.checkpointed is None
    assert again.state().msgs == 0


def _reference(entries: list[Entry]) -> list[tuple[object, ...]]:
    """The contents of an uncrashed replica after each entry (index 0: before any)."""
    r = _Replica(MemDisk())
    out = [_contents(r.stream)]
    for k in range(len(entries)):
        r.apply_from(entries[: k + 1], k)
        out.append(_contents(r.stream))
    return out


@pytest.mark.parametrize("power_loss", [False, True])
def test_crash_at_every_point_then_replay_matches_an_uncrashed_replica(power_loss: bool) -> None:
    entries = _entries()
    want = _reference(entries)
    finished = False
    after = 0
    while not finished:
        disk = MemDisk()
        r = _Replica(disk)
        disk.arm_crash(after)
        try:
            r.apply_from(entries, 0)
            finished = True
        except SimulatedCrash:
            pass
        durable = r.durable
        if power_loss:
            disk.crash(random.Random(after))
        else:
            disk.kill_process()
        again = _Replica(disk)
        if not power_loss:
            # The process died with a checkpoint written but not synced; the open that
            # found it reports it durable, so a power loss right after must keep it.
            held = again.index
            again.store.abandon()
            disk.crash(random.Random(after))
            again = _Replica(disk)
            assert again.index == held, (after, again.index, held)
        # Never behind what was reported durable (the RAFT log may be compacted up to it),
        # and after a process death (nothing lost) exactly at the last checkpoint written.
        assert again.index >= durable, (after, again.index, durable)
        assert _contents(again.stream) == want[again.index], (after, again.index)
        again.apply_from(entries, again.index)
        assert _contents(again.stream) == want[-1], after
        again.store.close()
        after += 1
    assert after > 50  # the sequence did cross many disk operations
