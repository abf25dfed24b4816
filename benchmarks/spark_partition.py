"""One Spark partition's read outside Spark: the connector's and the server's CPU per row.

    python -m benchmarks.spark_partition [--msgs 200000] [--server jetraft|nats-server]
                                         [--rounds 3] [--mode direct|consumer]

Starts a server (file storage), fills a stream with ``--msgs`` 128-byte messages, then reads
the whole range as one partition with the connector's own ``read_partition`` (the code a
Spark worker runs, Arrow batches included) ``--rounds`` times. Prints per round the CPU per
row of this process (the connector: its loop thread and the thread building Arrow batches)
and of the server process (from /proc), and the rate. Without Spark's JVM and workers in the
way these move far less than ``spark_bench``'s columns on a shared machine; against
nats-server the client column is the connector alone.

Not a test: numbers depend on the machine; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time

from benchmarks.common import (
    cpu_seconds,
    free_port,
    js_server,
    load_summary,
    machine_summary,
    wait_port,
)


async def _fill(url: str, n: int, size: int) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="PART", subjects=["part.>"], allow_direct=True)
    payload = b"x" * size
    for start in range(0, n, 1000):
        batch = range(start, min(n, start + 1000))
        await asyncio.gather(*[js.publish(f"part.{i % 16}", payload) for i in batch])
    await nc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--msgs", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--server", choices=["jetraft", "nats-server"], default="jetraft")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=["direct", "consumer"], default="direct")
    args = ap.parse_args()

    from jetraft.spark import reader
    from jetraft.spark.options import parse_read_options

    print(machine_summary())
    port = free_port()
    store = tempfile.mkdtemp(prefix="spark-partition-")
    proc = js_server(args.server, port, store)
    try:
        wait_port(port)
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_fill(url, args.msgs, args.size))
        opts = parse_read_options({"stream": "PART", "servers": url}, streaming=False)
        part = reader.JetStreamPartition(0, 1, args.msgs, args.mode)
        for _ in range(args.rounds):
            srv0, cli0, t0 = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            rows = sum(b.num_rows for b in reader.read_partition(opts, part))
            srv1, cli1, t1 = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            if rows != args.msgs:
                raise RuntimeError(f"read {rows} rows, expected {args.msgs}")
            print(
                f"{args.server} {args.mode}: connector {(cli1 - cli0) / rows * 1e6:.2f} us/row, "
                f"server {(srv1 - srv0) / rows * 1e6:.2f} us/row, {rows / (t1 - t0):,.0f} rows/s"
                f" ({load_summary()})"
            )
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
