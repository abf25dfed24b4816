"""The RAFT write-ahead log on its own (no raft, no network).

    python -m benchmarks.raft_wal [--seconds S] [--dir PATH] [--groups N]

* append + sync on real files (OsDisk): entries of 128 B and 1 KiB, 1 / 16 / 128 entries
  per sync (each sync also writes a new hard state, as a raft Ready does): entries/s, MB/s of
  payload, fsyncs/s. Each case runs for about S seconds.
* the same on MemDisk: the CPU cost of the WAL itself (encoding, buffering), no fsync.
* recovery: opening a log of 100k 128 B entries (replay and checksum of every record).
* N open Wal instances (one group each): Python memory (tracemalloc) and file descriptors.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable

from benchmarks.common import machine_summary
from jetraft.raft.disk import Disk, MemDisk, OsDisk
from jetraft.raft.types import Entry, EntryKind, HardState
from jetraft.raft.wal import Wal

SIZES = [128, 1024]
BATCHES = [1, 16, 128]


def bench_appends(
    make_disk: Callable[[], Disk], root: str, size: int, batch: int, seconds: float
) -> tuple[float, float, float]:
    """Returns (entries/s, payload MB/s, syncs/s)."""
    disk = make_disk()
    path = os.path.join(root, f"append-{size}-{batch}")
    wal, _ = Wal.open(disk, path, segment_bytes=8 * 1024 * 1024)
    payload = os.urandom(size)
    index, syncs = 1, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        wal.append([Entry(1, index + k, EntryKind.NORMAL, payload) for k in range(batch)])
        index += batch
        wal.set_hard_state(HardState(1, "n1", index - 1))
        wal.sync()
        syncs += 1
        if syncs % 8 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    wal.close()
    if isinstance(disk, OsDisk):
        shutil.rmtree(path, ignore_errors=True)
    n = index - 1
    return n / elapsed, n * size / elapsed / 1e6, syncs / elapsed


def bench_recovery(root: str, n: int) -> tuple[float, int]:
    disk = OsDisk()
    path = os.path.join(root, "recovery")
    wal, _ = Wal.open(disk, path)
    payload = os.urandom(128)
    for i in range(1, n + 1, 1000):
        wal.append([Entry(1, j, EntryKind.NORMAL, payload) for j in range(i, i + 1000)])
        wal.sync()
    wal.close()
    t0 = time.perf_counter()
    wal, rec = Wal.open(disk, path)
    elapsed = time.perf_counter() - t0
    assert len(rec.entries) == n
    wal.close()
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed, len([s for s in os.listdir(root)])


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def bench_groups(root: str, groups: int) -> tuple[float, int]:
    """Bytes of Python memory per open Wal (100 synced entries each) and fds opened."""
    disk = OsDisk()
    payload = os.urandom(128)
    gc.collect()
    fds0 = open_fds()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    wals = []
    for g in range(groups):
        wal, _ = Wal.open(disk, os.path.join(root, "groups", f"g{g}"))
        wal.append([Entry(1, i, EntryKind.NORMAL, payload) for i in range(1, 101)])
        wal.set_hard_state(HardState(1, "n1", 100))
        wal.sync()
        wals.append(wal)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(s.size_diff for s in after.compare_to(before, "filename"))
    fds = open_fds() - fds0
    for wal in wals:
        wal.close()
    return used / groups, fds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="per append case")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--recovery-entries", type=int, default=100_000)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="jetraft-wal-bench-", dir=args.dir)
    try:
        print(machine_summary())
        print(f"directory: {root}")
        print()
        header = (
            f"{'disk':7} {'entry':>6} {'batch':>5} {'entries/s':>11} {'MB/s':>8} {'fsyncs/s':>9}"
        )
        print(header)
        print("-" * len(header))
        for name, make in (("OsDisk", OsDisk), ("MemDisk", MemDisk)):
            for size in SIZES:
                for batch in BATCHES:
                    eps, mbps, sps = bench_appends(make, root, size, batch, args.seconds)
                    label = f"{sps:9.0f}" if name == "OsDisk" else f"{'-':>9}"
                    print(f"{name:7} {size:>6} {batch:>5} {eps:11.0f} {mbps:8.1f} {label}")
        print()
        rate, _ = bench_recovery(root, args.recovery_entries)
        print(f"recovery: {args.recovery_entries} entries of 128 B replayed at {rate:,.0f}/s")
        per_group, fds = bench_groups(root, args.groups)
        print(
            f"{args.groups} open Wal instances (100 entries each): "
            f"{per_group / 1024:.1f} KiB of Python memory per group, {fds} file descriptors"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
