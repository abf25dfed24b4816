"""ORDERS stream -> per-minute aggregation -> Parquet files and the ORDERS_SUMMARY stream.

    python examples/spark/orders_pipeline.py [--servers URLS] [--master URL]
        [--out ./orders-out] [--available-now] [--timeout-seconds N]

Runs in Spark local mode (``local[*]``) by default; ``--master spark://host:7077`` (or yarn,
k8s://...) runs the same code on a cluster (``pip install 'jetraft[spark]'`` on every node,
``--out`` on storage every node can reach). Orders are JSON messages on ``orders.<region>``:

    {"order_id": "o-17", "customer": "c-3", "region": "eu", "amount": 12.5,
     "time": "2025-06-01T12:00:05.250Z"}

``time`` is the order's event time. Two streaming queries share one aggregation, per
(minute of ``time``, region): the number of orders and their total amount. A minute is
written once, when it is closed: when the watermark (the latest order time seen, minus
one minute) has passed its end. An order that arrives after its minute was closed is
dropped. The outputs:

- ``<out>/parquet``: Parquet files, one row per closed (minute, region);
- the ORDERS_SUMMARY stream: the same rows as JSON messages on ``orders_summary.<region>``,
  each with the Nats-Msg-Id ``summary:<region>:<minute as epoch seconds>``.

Positions are kept in ``<out>/checkpoints/*``: stop the pipeline at any point and start it
again, and every order is counted once, every closed minute written once. By default the
pipeline runs until stopped (Ctrl-C); ``--available-now`` processes what is in the stream,
writes the minutes this closes, and stops (minutes still open wait for a later run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

import jetraft.spark

ORDERS_STREAM = "ORDERS"
SUMMARY_STREAM = "ORDERS_SUMMARY"
ORDER_SCHEMA = (
    "order_id string, customer string, region string, amount decimal(10,2), time timestamp"
)
WATERMARK_DELAY = "1 minute"


def build_session(master: str | None) -> SparkSession:
    """A session for the CLI; without ``master`` Spark's own default applies (``local[*]``,
    or the master ``spark-submit`` was given)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("jetraft-orders-pipeline")
    if master:
        builder = builder.master(master)
    spark = (
        builder.config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")  # times in the summary JSON are UTC
        .getOrCreate()
    )
    jetraft.spark.register(spark)
    return spark


def read_orders(spark: SparkSession, servers: str) -> DataFrame:
    """The ORDERS stream as a streaming DataFrame of parsed orders."""
    return (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("stream", ORDERS_STREAM)
        .option("subjects", "orders.>")
        .option("maxMessagesPerTrigger", "50000")
        .load()
        .select(F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("order"))
        .select("order.*")
    )


def per_minute(orders: DataFrame) -> DataFrame:
    """Count and total amount per (minute, region): minute, region, orders, revenue."""
    return (
        orders.withWatermark("time", WATERMARK_DELAY)
        .groupBy(F.window("time", "1 minute"), "region")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"))
        .select(F.col("window.start").alias("minute"), "region", "orders", "revenue")
    )


def start_queries(
    per_minute_df: DataFrame, servers: str, out: str, available_now: bool = False
) -> list[StreamingQuery]:
    """Start the Parquet and the ORDERS_SUMMARY queries."""
    out = out.rstrip("/")
    trigger = {"availableNow": True} if available_now else {"processingTime": "5 seconds"}
    parquet = (
        per_minute_df.writeStream.format("parquet")
        .outputMode("append")
        .option("path", f"{out}/parquet")
        .option("checkpointLocation", f"{out}/checkpoints/parquet")
        .trigger(**trigger)
        .queryName("orders_parquet")
        .start()
    )
    # A closed minute always yields the same id, so the stream stores it once even when
    # Spark replays a micro-batch.
    msg_id = F.format_string("summary:%s:%d", F.col("region"), F.col("minute").cast("long"))
    summary = (
        per_minute_df.select(
            F.concat(F.lit("orders_summary."), F.col("region")).alias("subject"),
            F.to_json(F.struct("minute", "region", "orders", "revenue")).alias("data"),
            msg_id.alias("msg_id"),
        )
        .writeStream.format("jetstream")
        .outputMode("append")
        .option("servers", servers)
        .option("stream", SUMMARY_STREAM)
        .option("msgIdColumn", "msg_id")
        .option("checkpointLocation", f"{out}/checkpoints/summary")
        .trigger(**trigger)
        .queryName("orders_summary")
        .start()
    )
    return [parquet, summary]


async def ensure_summary_stream(servers: str, replicas: int = 1) -> None:
    nc = await nats.connect(servers.split(","))
    try:
        js = nc.jetstream(timeout=10)
        try:
            await js.stream_info(SUMMARY_STREAM)
        except NotFoundError:
            await js.add_stream(
                StreamConfig(
                    name=SUMMARY_STREAM,
                    subjects=["orders_summary.>"],
                    allow_direct=True,
                    num_replicas=replicas,
                )
            )
    finally:
        await nc.close()


def run_pipeline(
    spark: SparkSession,
    servers: str,
    out: str,
    available_now: bool = False,
    timeout_seconds: int | None = None,
    replicas: int = 1,
) -> None:
    """Run both queries in ``spark`` (with ``jetraft.spark`` registered).

    Continuous: until a query fails (raised), Ctrl-C or ``timeout_seconds``. With
    ``available_now``: until both queries have processed everything in ORDERS; raises
    TimeoutError if that takes longer than ``timeout_seconds``.
    """
    asyncio.run(ensure_summary_stream(servers, replicas))
    queries = start_queries(per_minute(read_orders(spark, servers)), servers, out, available_now)
    try:
        if available_now:
            for query in queries:
                if timeout_seconds is None:
                    query.awaitTermination()
                elif not query.awaitTermination(timeout_seconds):
                    raise TimeoutError(f"query {query.name} still running")
        else:
            spark.streams.resetTerminated()  # only these queries' ends count
            spark.streams.awaitAnyTermination(timeout_seconds)
    finally:
        for query in queries:
            query.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--servers",
        default="nats://127.0.0.1:4222",
        help="comma-separated server URLs (default: the local server of `make run`)",
    )
    parser.add_argument(
        "--master", default=None, help="Spark master (default: local[*], or spark-submit's)"
    )
    parser.add_argument("--out", default="./orders-out", help="Parquet files and checkpoints")
    parser.add_argument("--replicas", type=int, default=1, help="for ORDERS_SUMMARY if created")
    parser.add_argument(
        "--available-now", action="store_true", help="process what is in ORDERS, then stop"
    )
    parser.add_argument("--timeout-seconds", type=int, default=None)
    args = parser.parse_args()

    spark = build_session(args.master)
    try:
        run_pipeline(
            spark,
            args.servers,
            args.out,
            available_now=args.available_now,
            timeout_seconds=args.timeout_seconds,
            replicas=args.replicas,
        )
    except KeyboardInterrupt:
        pass
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
