"""The JetStream message store on its own (no server, no network).

    python -m benchmarks.js_store [--msgs N] [--sync1-msgs M] [--dir PATH]

For each payload size (128 B, 1 KiB) and store kind:
  * store: N messages on one subject, ``sync()`` after every 64th message (group commit as
    the server does per batch) and, for the file store, M messages with ``sync()`` after
    every message (the worst case: one fsync per PubAck);
  * scan: ``load_next`` over the whole stream, unfiltered and with a literal filter that
    matches every 10th message (10 subjects interleaved);
  * reopen: closing and opening the file store again (index rebuilt from the blocks).
Then the index memory per message (tracemalloc, payloads excluded for the file store) for a
one-subject stream and a KV-like stream with N distinct subjects.
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
from jetraft.jetstream.store import FileStore, Limits, MemoryStore
from jetraft.jetstream.store._base import BaseStore

SIZES = [128, 1024]


def bench_store(
    make: Callable[[], BaseStore], n: int, size: int, every: int
) -> tuple[float, BaseStore]:
    s = make()
    data = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(n):
        s.store("bench.subject", None, data, i)
        if (i + 1) % every == 0:
            s.sync()
    s.sync()
    return n / (time.perf_counter() - t0), s


def bench_scan(s: BaseStore, filt: str | None) -> float:
    t0 = time.perf_counter()
    seq, count = 0, 0
    while True:
        m = s.load_next(seq + 1, filt)
        if m is None:
            break
        seq = m.seq
        count += 1
    return count / (time.perf_counter() - t0)


def index_bytes_per_msg(make: Callable[[], BaseStore], n: int, distinct: bool) -> float:
    gc.collect()
    tracemalloc.start()
    s = make()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        s.store(f"kv.key{i}" if distinct else "bench.subject", None, b"x" * 128, i)
        if (i + 1) % 4096 == 0:
            s.sync()
    s.sync()
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    s.close()
    return used / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--sync1-msgs", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="where file stores go (default: a temp dir)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="jetraft-store-bench-", dir=args.dir)
    print(machine_summary())
    print(f"store directory: {root}")
    counter = iter(range(1_000_000))

    def file_store() -> BaseStore:
        return FileStore(os.path.join(root, f"s{next(counter)}"))

    try:
        for size in SIZES:
            print(f"\n== payload {size} B ==")
            rate, s = bench_store(MemoryStore, args.msgs, size, 64)
            print(f"memory store   store sync/64  {rate:>10,.0f} msgs/s")
            s.close()
            rate, s = bench_store(file_store, args.msgs, size, 64)
            print(f"file store     store sync/64  {rate:>10,.0f} msgs/s  ({args.msgs} msgs)")
            rate1, s1 = bench_store(file_store, args.sync1_msgs, size, 1)
            print(f"file store     store sync/1   {rate1:>10,.0f} msgs/s  ({args.sync1_msgs} msgs)")
            s1.delete()
            print(f"file store     load_next scan {bench_scan(s, None):>10,.0f} msgs/s")
            assert isinstance(s, FileStore)
            directory = s.directory
            s.close()
            t0 = time.perf_counter()
            s = FileStore(directory)
            reopen_s = time.perf_counter() - t0
            print(f"file store     reopen         {reopen_s * 1e3:>10,.0f} ms ({args.msgs} msgs)")
            s.delete()
            # 10 interleaved subjects, literal filter on one of them (10% of the stream).
            s = file_store()
            data = os.urandom(size)
            for i in range(args.msgs):
                s.store(f"bench.s{i % 10}", None, data, i)
            s.sync()
            rate = bench_scan(s, "bench.s3")
            print(f"file store     filtered scan  {rate:>10,.0f} msgs/s (matches)")
            s.delete()
        print("\n== index memory per message (128 B payloads, tracemalloc) ==")
        for name, make in (("file", file_store), ("memory", MemoryStore)):
            for distinct in (False, True):
                per = index_bytes_per_msg(make, args.msgs, distinct)
                kind = f"{args.msgs} distinct subjects" if distinct else "one subject"
                print(f"{name:<6} store  {kind:<26} {per:>7.1f} B/msg")
        # KV churn with one key never updated: first_seq stays at 1 while only 101 messages
        # are live; the index holds the live ones only.
        s = FileStore(os.path.join(root, "churn"), Limits(max_msgs_per_subject=1))
        s.store("kv.pinned", None, b"x", 0)
        for i in range(args.msgs):
            s.store(f"kv.k{i % 100}", None, b"x" * 128, i)
        s.sync()
        st = s.state()
        print(
            f"file   store  KV churn, {st.msgs} live of {st.last_seq} seqs: index arrays "
            f"{s.index_bytes() / st.msgs:.1f} B/live msg, disk "
            f"{sum(os.path.getsize(p) for p in s.block_files()) / 1024:.0f} KiB"
        )
        s.delete()
        for what, keep in (("deleted", lambda q: q % 100 == 0), ("acked", lambda q: q > 0.99)):
            s = FileStore(os.path.join(root, what))
            for i in range(args.msgs):
                s.store(f"bench.s{i % 10}", None, b"x" * 128, i)
            full = s.index_bytes() / args.msgs
            n = args.msgs
            for q in range(1, n + 1):
                if not keep(q if what == "deleted" else q / n):
                    s.remove(q)
            s.sync()
            st = s.state()
            how = "every 100th kept" if what == "deleted" else "oldest 99% removed in order"
            print(
                f"file   store  {how}: {st.msgs} live of {st.last_seq} seqs, index arrays "
                f"{s.index_bytes() / st.msgs:.1f} B/live msg (full stream: {full:.1f})"
            )
            s.delete()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
