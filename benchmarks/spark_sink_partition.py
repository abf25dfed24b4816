"""One Spark partition's write outside Spark: the connector's and the server's CPU per row.

    python -m benchmarks.spark_sink_partition [--msgs 200000] [--size 128] [--rounds 3]
                                              [--server jetraft|nats-server] [--batch 10000]
                                              [--window 1000]

Starts a server (file storage, a stream with the default two-minute duplicate window), then
writes ``--msgs`` rows of ``--size`` bytes as one partition ``--rounds`` times with the
connector's own batch-sink code (``writer.publish_columns`` fed Arrow batches of ``--batch``
rows, Spark's default ``maxRecordsPerBatch``: what a Spark worker runs, Arrow conversion,
Nats-Msg-Id headers, PubAck checks and all). Each round has its own write id, so every row
is new to the stream. Prints per round the CPU per row of this process (the connector: the
calling thread and its loop thread) and of the server process (from /proc), and the rate.
Without Spark's JVM and workers in the way these move far less than ``spark_bench``'s
columns on a shared machine.

Not a test: numbers depend on the machine; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator

from benchmarks.common import (
    cpu_seconds,
    free_port,
    js_server,
    load_summary,
    machine_summary,
    wait_port,
)


async def _create(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name="SINK", subjects=["sink.>"])
    await nc.close()


def _batches(n: int, size: int, rows: int) -> list[object]:
    """Arrow batches shaped as ``spark_bench``'s sink input: a subject column and ``size``
    bytes of data per row (a row number, padded)."""
    import pyarrow as pa

    pad = b"x" * max(0, size - 8)
    out: list[object] = []
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        data = [b"%08d%s" % (i, pad) for i in range(start, stop)]
        subjects = ["sink.data"] * (stop - start)
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.array(subjects, pa.string()), pa.array(data, pa.binary())],
                names=["subject", "data"],
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--msgs", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--server", choices=["jetraft", "nats-server"], default="jetraft")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=10_000, help="rows per Arrow batch")
    ap.add_argument("--window", type=int, default=1000, help="the maxPendingAcks option")
    args = ap.parse_args()

    from jetraft.spark import loop, writer
    from jetraft.spark.options import parse_write_options

    print(machine_summary())
    port = free_port()
    store = tempfile.mkdtemp(prefix="spark-sink-partition-")
    proc = js_server(args.server, port, store)
    try:
        wait_port(port)
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_create(url))
        opts = parse_write_options(
            {"servers": url, "commitBucket": "", "maxPendingAcks": str(args.window)}
        )
        batches = _batches(args.msgs, args.size, args.batch)
        for _ in range(args.rounds):
            encoder = writer._Encoder(opts, uuid.uuid4().hex, "0", 0)
            srv0, cli0, t0 = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            it: Iterator[object] = iter(batches)
            acked, dups = writer.publish_columns(
                opts,
                writer._arrow_columns(it),  # type: ignore[arg-type]
                encoder,
            )
            srv1, cli1, t1 = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            if acked != args.msgs or dups:
                raise RuntimeError(f"{acked} acked ({dups} duplicates), expected {args.msgs}")
            print(
                f"{args.server} sink: connector {(cli1 - cli0) / acked * 1e6:.2f} us/row, "
                f"server {(srv1 - srv0) / acked * 1e6:.2f} us/row, "
                f"{acked / (t1 - t0):,.0f} rows/s ({load_summary()})",
                flush=True,
            )
        loop.close_all()
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
