"""JetStream administration latency: stream and consumer create/delete, jetraft beside
nats-server, the same nats-py client for both.

    python -m benchmarks.js_admin [--streams N] [--parallel P] [--storage file|memory]
                                  [--only jetraft|nats-server|nats-server-always]
                                  [--phase create]

One server at a time (``benchmarks.js_publish.start_server``: file storage, jetraft fsyncs
before every reply that confirms a change). Phases, each timed from the client:

* create: N ``add_stream`` calls one after the other (nats.py's
  ``test_jsm_stream_management_with_offset`` does 300 of these);
* create xP: N more, P requests in flight at a time (several clients administering at once);
* consumer: one durable pull consumer on each of the first N streams, one after the other;
* delete: every stream deleted, one after the other.

Printed: milliseconds per operation (mean and 95th percentile), the server's CPU per
operation (utime+stime from /proc), and the 99th percentile of another client's PING/PONG
round trips meanwhile (what blocking work on the server's event loop costs everyone else).
Timing is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NATS

from benchmarks.common import cpu_seconds, free_port, load_summary, machine_summary
from benchmarks.js_publish import SERVERS, start_server

Op = Callable[[int], Awaitable[object]]


async def _timed(op: Op, count: int, parallel: int) -> list[float]:
    """Run ``op(0..count-1)`` with at most ``parallel`` in flight; each one's latency (s)."""
    lat: list[float] = []
    sem = asyncio.Semaphore(parallel)

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            await op(i)
            lat.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(i) for i in range(count)))
    return lat


_RTTS: list[float] = []


async def _ping_rtts(port: int) -> None:
    """Another client meanwhile: PING/PONG round trips, one after the other, into _RTTS
    (how long the server's event loop leaves other clients waiting)."""
    nc = NATS()
    await nc.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    try:
        while True:
            t0 = time.perf_counter()
            await nc.flush()
            _RTTS.append(time.perf_counter() - t0)
            await asyncio.sleep(0.001)
    finally:
        await nc.close()


async def run_phases(
    port: int, pid: int, n: int, parallel: int, storage: str, only: str = ""
) -> dict[str, str]:
    nc = NATS()
    await nc.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    js = nc.jetstream(timeout=30)

    def create(prefix: str) -> Op:
        def op(i: int) -> Awaitable[object]:
            return js.add_stream(name=f"{prefix}{i}", subjects=[f"{prefix}.{i}"], storage=storage)

        return op

    def consumer(i: int) -> Awaitable[object]:
        return js.add_consumer(f"S{i}", durable_name="C", ack_policy="explicit")

    def delete(i: int) -> Awaitable[object]:
        return js.delete_stream(f"S{i}" if i < n else f"P{i - n}")

    phases: list[tuple[str, Op, int, int]] = [
        ("create", create("S"), n, 1),
        (f"create x{parallel}", create("P"), n, parallel),
        ("consumer", consumer, n, 1),
        ("delete", delete, 2 * n, 1),
    ]
    out: dict[str, str] = {}
    try:
        for name, op, count, par in phases:
            if only and name != only:
                continue
            cpu0 = cpu_seconds(pid)
            t0 = time.perf_counter()
            pinger = asyncio.ensure_future(_ping_rtts(port))
            lat = await _timed(op, count, par)
            wall = time.perf_counter() - t0
            pinger.cancel()
            rtts = sorted(await asyncio.gather(pinger, return_exceptions=True) and _RTTS)
            _RTTS.clear()
            cpu_ms = 1e3 * (cpu_seconds(pid) - cpu0) / count
            p95 = statistics.quantiles(lat, n=20)[-1] * 1e3
            ping = f"  other client's PING p99 {1e3 * rtts[int(len(rtts) * 0.99)]:6.2f} ms"
            out[name] = (
                f"{1e3 * statistics.fmean(lat):7.2f} ms mean {p95:7.2f} ms p95 "
                f"{count / wall:8.0f} op/s  server CPU {cpu_ms:5.2f} ms/op" + ping
            )
    finally:
        await nc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--storage", choices=("file", "memory"), default="file")
    ap.add_argument("--only", choices=SERVERS, action="append")
    ap.add_argument("--phase", default="", help="run only this phase (e.g. create)")
    args = ap.parse_args()
    print(machine_summary())
    for kind in args.only or SERVERS:
        store = tempfile.mkdtemp(prefix=f"jsadmin-{kind}-")
        port = free_port()
        proc = start_server(kind, port, store)
        try:
            phases = run_phases(
                port, proc.pid, args.streams, args.parallel, args.storage, args.phase
            )
            rows = asyncio.run(phases)
        finally:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(store, ignore_errors=True)
        print(f"{kind} ({args.storage}, {args.streams} streams; {load_summary()})")
        for name, row in rows.items():
            print(f"  {name:<12}{row}")


if __name__ == "__main__":
    main()
