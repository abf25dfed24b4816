"""The example pipeline (examples/spark): ORDERS -> per-minute aggregates -> Parquet files and
the ORDERS_SUMMARY stream, run with availableNow against one checkpoint, twice."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import nats.js.errors
import pytest

from tests.spark.support import ServerProcess, run, stream_messages

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "spark"
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
WATERMARK_DELAY = timedelta(minutes=1)

# (minute, region) -> (orders, revenue); minute as epoch seconds of the window start.
Aggregates = dict[tuple[int, str], tuple[int, Decimal]]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytest.importorskip("pyspark")  # the example imports it; without the spark extra, skip
pipeline = _load("orders_pipeline")
publisher = _load("publish_orders")


def _orders(first_id: int, times: list[timedelta], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        publisher.order(
            order_id=f"o-{first_id + i}",
            region=rng.choice(publisher.REGIONS),
            amount=round(rng.uniform(1, 200), 2),
            moment=T0 + offset,
        )
        for i, offset in enumerate(times)
    ]


def _event_time(order: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(order["time"])


def _expected(accepted: list[dict[str, Any]], watermark: datetime) -> Aggregates:
    """Per (minute, region) count and total of the orders, for the minutes the watermark has
    closed (the minute's end at or before it)."""
    totals: dict[tuple[int, str], list[Any]] = defaultdict(lambda: [0, Decimal("0")])
    for order in accepted:
        at = _event_time(order)
        minute = at.replace(second=0, microsecond=0)
        if minute + timedelta(minutes=1) <= watermark:
            key = (int(minute.timestamp()), order["region"])
            totals[key][0] += 1
            totals[key][1] += Decimal(str(order["amount"]))
    return {key: (count, revenue) for key, (count, revenue) in totals.items()}


def _parquet_rows(spark: Any, out: Path) -> list[tuple[int, str, int, Decimal]]:
    df = spark.read.parquet(str(out / "parquet")).selectExpr(
        "cast(minute as long) as minute", "region", "orders", "revenue"
    )
    return sorted((r["minute"], r["region"], r["orders"], r["revenue"]) for r in df.collect())


def _rows(expected: Aggregates) -> list[tuple[int, str, int, Decimal]]:
    return sorted((m, region, n, revenue) for (m, region), (n, revenue) in expected.items())


def _summary(url: str) -> list[tuple[int, str, int, Decimal]]:
    """ORDERS_SUMMARY as rows; checks each message's subject and Nats-Msg-Id on the way."""
    rows = []
    for msg in stream_messages(url, "ORDERS_SUMMARY"):
        body = json.loads(msg.data, parse_float=Decimal)
        minute = int(datetime.fromisoformat(body["minute"]).timestamp())
        assert msg.subject == f"orders_summary.{body['region']}"
        assert msg.headers["Nats-Msg-Id"] == f"summary:{body['region']}:{minute}"
        rows.append((minute, body["region"], body["orders"], Decimal(body["revenue"])))
    return sorted(rows)


def _delete_streams(url: str, names: list[str]) -> None:
    async def _do() -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(timeout=10)
            for name in names:
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await js.delete_stream(name)
        finally:
            await nc.close()

    run(_do())


def test_orders_pipeline_closed_minutes_once(
    spark: Any, server: ServerProcess, tmp_path: Path
) -> None:
    _delete_streams(server.url, ["ORDERS", "ORDERS_SUMMARY"])  # the example's fixed names
    out = tmp_path / "orders-out"

    # Run 1: orders every 15 s from 12:00:00 to 12:05:45, then one at 12:06:30 that moves the
    # watermark to 12:05:30: minutes 12:00-12:04 close, 12:05 and 12:06 stay open.
    first = _orders(0, [timedelta(seconds=15 * i) for i in range(24)], seed=1)
    first += _orders(100, [timedelta(minutes=6, seconds=30)], seed=2)
    assert run(publisher.publish_orders(server.url, first)) == len(first)
    pipeline.run_pipeline(spark, server.url, str(out), available_now=True, timeout_seconds=300)

    watermark_1 = max(map(_event_time, first)) - WATERMARK_DELAY
    expected_1 = _expected(first, watermark_1)
    assert {m for m, _ in expected_1} == {
        int((T0 + timedelta(minutes=k)).timestamp()) for k in range(5)
    }
    assert _parquet_rows(spark, out) == _rows(expected_1)
    assert _summary(server.url) == _rows(expected_1)

    # Run 2, from the checkpoint: an order for the closed minute 12:03 (late: dropped), one
    # for the still open 12:05, orders from 12:06:00 to 12:08:40, and one at 12:10:15 that
    # moves the watermark to 12:09:15: minutes 12:05-12:08 close.
    late = _orders(200, [timedelta(minutes=3, seconds=10)], seed=3)
    on_time = _orders(300, [timedelta(minutes=5, seconds=50)], seed=4)
    on_time += _orders(400, [timedelta(minutes=6, seconds=20 * i) for i in range(9)], seed=5)
    on_time += _orders(500, [timedelta(minutes=10, seconds=15)], seed=6)
    assert _event_time(late[0]) < watermark_1 < min(map(_event_time, on_time))
    assert run(publisher.publish_orders(server.url, late + on_time)) == len(late + on_time)
    pipeline.run_pipeline(spark, server.url, str(out), available_now=True, timeout_seconds=300)

    watermark_2 = max(map(_event_time, on_time)) - WATERMARK_DELAY
    expected_2 = _expected(first + on_time, watermark_2)
    new_minutes = {m for m, _ in expected_2} - {m for m, _ in expected_1}
    assert new_minutes == {int((T0 + timedelta(minutes=k)).timestamp()) for k in range(5, 9)}
    # Run 1's rows unchanged (the late order did not reopen 12:03), the new minutes once each.
    assert {k: v for k, v in expected_2.items() if k[0] not in new_minutes} == expected_1
    assert _parquet_rows(spark, out) == _rows(expected_2)
    assert _summary(server.url) == _rows(expected_2)
