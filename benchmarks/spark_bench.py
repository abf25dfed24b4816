"""Spark connector throughput, jetraft beside nats-server, same Spark session and load.

    python -m benchmarks.spark_bench [--msgs 1000000] [--size 128] [--partitions 4]
                                     [--master local[2]] [--only jetraft|nats-server]

For each server (file storage, default settings, a fresh store): a stream BENCH with
``allow_direct``; then

- sink: ``spark.range(N)`` as rows (subject, 128-byte data) written with
  ``df.write.format("jetstream")``: every row acknowledged (PubAck) before the job ends.
  Rate = N / job time.
- read: ``spark.read.format("jetstream").load().count()`` over the N stored messages (batched
  direct get, Arrow batches), run twice; the better run is reported (the first also starts
  the Python workers). Rate = N / job time.

Not a test: numbers depend on the machine; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.common import free_port, machine_summary, wait_port

SERVERS = ["jetraft", "nats-server"]


def start_server(kind: str, port: int, store: str) -> subprocess.Popen[bytes]:
    flags = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store]
    if kind == "jetraft":
        cmd = [sys.executable, "-m", "jetraft", "server", *flags]
    else:
        binary = shutil.which("nats-server") or os.path.join(
            os.path.dirname(sys.executable), "nats-server"
        )
        cmd = [binary, *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def create_stream(url: str) -> None:
    import nats
    from nats.js.api import StreamConfig

    async def _do() -> None:
        deadline = time.monotonic() + 20
        while True:
            nc = await nats.connect(url)
            try:
                await nc.jetstream().add_stream(
                    StreamConfig(name="BENCH", subjects=["bench.>"], allow_direct=True)
                )
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                await nc.close()
            await asyncio.sleep(0.1)

    asyncio.run(_do())


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    import jetraft.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("jetraft-spark-bench")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jetraft.spark.register(spark)
    return spark


def bench_one(spark: Any, kind: str, args: argparse.Namespace) -> dict[str, float]:
    from pyspark.sql import functions as F

    store = tempfile.mkdtemp(prefix=f"spark-bench-{kind}-")
    port = free_port()
    proc = start_server(kind, port, store)
    url = f"nats://127.0.0.1:{port}"
    try:
        create_stream(url)
        pad = "x" * (args.size - 8)
        df = spark.range(0, args.msgs, 1, args.partitions).select(
            F.lit("bench.data").alias("subject"),
            F.concat(F.lpad(F.col("id").cast("string"), 8, "0"), F.lit(pad))
            .cast("binary")
            .alias("data"),
        )
        t0 = time.perf_counter()
        (
            df.write.format("jetstream")
            .mode("append")
            .option("servers", url)
            .option("commitBucket", "")
            .save()
        )
        sink_s = time.perf_counter() - t0
        reads = []
        for _ in range(2):
            t0 = time.perf_counter()
            count = (
                spark.read.format("jetstream")
                .option("servers", url)
                .option("stream", "BENCH")
                .option("minPartitions", str(args.partitions))
                .load()
                .count()
            )
            reads.append(time.perf_counter() - t0)
            if count != args.msgs:
                raise AssertionError(f"{kind}: read {count} rows, expected {args.msgs}")
        return {"sink": args.msgs / sink_s, "read": args.msgs / min(reads)}
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(store, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msgs", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", choices=SERVERS)
    args = parser.parse_args(argv)
    kinds = [args.only] if args.only else SERVERS
    spark = spark_session(args.master)
    results = {kind: bench_one(spark, kind, args) for kind in kinds}
    spark.stop()
    print(machine_summary())
    print(
        f"spark {args.master}, {args.msgs:,} messages x {args.size} B, {args.partitions} partitions"
    )
    print(f"{'server':<12} {'sink rows/s':>14} {'read rows/s':>14}")
    for kind, r in results.items():
        print(f"{kind:<12} {r['sink']:>14,.0f} {r['read']:>14,.0f}")
    if len(results) == 2:
        j, n = results["jetraft"], results["nats-server"]
        print(f"{'ratio j/n':<12} {j['sink'] / n['sink']:>14.2f} {j['read'] / n['read']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
