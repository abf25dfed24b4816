"""A clustered file stream's snapshot for a follower far behind: built and restored whole
in memory (the former form) against spooled to a file and read back a piece at a time.

    python -m benchmarks.snapshot_spool [--mb 200] [--size 16384] [--dir PATH]

One FileStore of about ``--mb`` MB (messages of ``--size`` bytes). For each form: the time
to build the snapshot (on the leader this runs on the event loop), the time to restore it
into a fresh store (on the follower, also on the loop), and the peak of memory allocated by
Python meanwhile (tracemalloc: the bytes objects, lists and buffers; the page cache and the
store's index are not counted). Also the time to open (recover) the store, which a replica
now spends in a worker thread rather than on the loop.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import msgspec

from benchmarks.common import machine_summary
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.types import SnapshotBytes
from jetraft.server.js.clustered.stream_file import read_snapshot, spool_snapshot
from jetraft.server.js.clustered.stream_replica import _Snapshot

CFG = StreamConfig(name="S", subjects=("s",))


def _head(chunks: list[bytes]) -> _Snapshot:
    return _Snapshot(CFG, 0, chunks, [], "", [], 1)


def _measure(what: Callable[[], object]) -> tuple[float, float, object]:
    tracemalloc.start()
    t0 = time.perf_counter()
    out = what()
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return dt, peak / 1e6, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="snapbench-", dir=args.dir)
    try:
        src = FileStore(os.path.join(root, "src"), checkpoints=True)
        payload = os.urandom(args.size)
        for _ in range(args.mb * 1_000_000 // args.size):
            src.store("s", None, payload, time.time_ns())
        src.checkpoint(1, b"")  # a checkpointed store keeps what its last CKPT covers
        src.close()
        t0 = time.perf_counter()
        src = FileStore(os.path.join(root, "src"), checkpoints=True)
        opened_s = time.perf_counter() - t0
        print(machine_summary())
        print(f"stream: {src.state().msgs} messages, {src.state().bytes / 1e6:.0f} MB; "
              f"opening (recovering) its store took {opened_s:.2f} s (a replica does it in a "
              "worker thread)")

        def whole_build() -> bytes:
            return msgspec.msgpack.encode(_head(list(src.snapshot())))

        def spool_build() -> SnapshotBytes:
            return spool_snapshot(Path(root), _head([]), src.snapshot())

        for name, build in (("in memory", whole_build), ("spooled", spool_build)):
            dt, peak, data = _measure(build)
            print(f"{name:10} build   {dt:6.2f} s  peak {peak:7.1f} MB")
            assert isinstance(data, bytes) or hasattr(data, "read")
            dst = FileStore(os.path.join(root, f"dst-{name[0]}"), checkpoints=True)

            def restore(data: SnapshotBytes = data, dst: FileStore = dst) -> None:
                snap, chunks = read_snapshot(data)
                dst.restore(chunks, (snap.index, b""))

            del data
            dt, peak, _ = _measure(restore)
            print(f"{name:10} restore {dt:6.2f} s  peak {peak:7.1f} MB")
            assert dst.state().msgs == src.state().msgs
            dst.close()
        src.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
