"""ORDERS stream -> per-minute aggregation -> Parquet files and the ORDERS_SUMMARY stream.

    python examples/spark/orders_pipeline.py [--servers URLS] [--master local[2]]
        [--out ./orders-out] [--available-now] [--timeout-seconds N]

Runs in Spark local mode by default; ``--master spark://host:7077`` (or yarn, k8s://...) runs
the same code on a cluster (``pip install 'jetraft[spark]'`` on every node). Two streaming
queries share one source definition:

- ``parquet``: per (minute, region) count and revenue, appended to ``<out>/parquet`` once the
  watermark (1 minute) closes a window;
- ``summary``: the same rows as JSON messages on ``orders_summary.<region>`` in the
  ORDERS_SUMMARY stream, each with the Nats-Msg-Id ``summary:<window start>:<region>``.

Positions are kept in ``<out>/checkpoints/*``: stop the pipeline at any point and start it
again, and every order is counted once. ``--available-now`` processes what is in the stream
and stops (windows still open at the end wait for later runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import jetraft.spark

ORDER_SCHEMA = "order_id string, customer string, region string, amount double"


async def _ensure_summary_stream(servers: str, replicas: int) -> None:
    nc = await nats.connect(servers.split(","))
    js = nc.jetstream(timeout=10)
    try:
        await js.stream_info("ORDERS_SUMMARY")
    except NotFoundError:
        await js.add_stream(
            StreamConfig(
                name="ORDERS_SUMMARY",
                subjects=["orders_summary.>"],
                allow_direct=True,
                num_replicas=replicas,
            )
        )
    await nc.close()


def build_session(master: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("jetraft-orders-pipeline")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    jetraft.spark.register(spark)
    return spark


def per_minute(spark: SparkSession, servers: str) -> Any:
    orders = (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("stream", "ORDERS")
        .option("subjects", "orders.>")
        .option("maxMessagesPerTrigger", "50000")
        .load()
        .select(
            "timestamp",
            F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("order"),
        )
        .select("timestamp", "order.*")
    )
    return (
        orders.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "1 minute"), "region")
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue"))
        .select(
            F.col("window.start").alias("minute"),
            "region",
            "orders",
            "revenue",
        )
    )


def start_queries(agg: Any, servers: str, out: str, available_now: bool) -> list[Any]:
    trigger = {"availableNow": True} if available_now else {"processingTime": "5 seconds"}
    parquet = (
        agg.writeStream.format("parquet")
        .outputMode("append")
        .option("path", os.path.join(out, "parquet"))
        .option("checkpointLocation", os.path.join(out, "checkpoints", "parquet"))
        .trigger(**trigger)
        .queryName("parquet")
        .start()
    )
    minute_text = F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
    summary = (
        agg.select(
            F.concat(F.lit("orders_summary."), F.col("region")).alias("subject"),
            F.to_json(F.struct(minute_text.alias("minute"), "region", "orders", "revenue")).alias(
                "data"
            ),
            F.concat_ws(":", F.lit("summary"), minute_text, F.col("region")).alias("msg_id"),
        )
        .writeStream.format("jetstream")
        .outputMode("append")
        .option("servers", servers)
        .option("stream", "ORDERS_SUMMARY")
        .option("msgIdColumn", "msg_id")
        .option("checkpointLocation", os.path.join(out, "checkpoints", "summary"))
        .trigger(**trigger)
        .queryName("summary")
        .start()
    )
    return [parquet, summary]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--servers",
        default="nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
        help="comma-separated server URLs (default: the local three-node cluster)",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", default="./orders-out")
    parser.add_argument("--replicas", type=int, default=1, help="for ORDERS_SUMMARY if created")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--timeout-seconds", type=float, default=None)
    args = parser.parse_args()

    asyncio.run(_ensure_summary_stream(args.servers, args.replicas))
    spark = build_session(args.master)
    queries = start_queries(
        per_minute(spark, args.servers), args.servers, args.out, args.available_now
    )
    try:
        if args.available_now:
            for query in queries:
                query.awaitTermination(args.timeout_seconds)
        else:
            spark.streams.awaitAnyTermination(args.timeout_seconds)
    finally:
        for query in queries:
            query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
