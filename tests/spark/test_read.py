"""Batch reads: exactly the published messages, with filters, bounds, gaps and bad options."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F

from jetraft.spark.codec import encode_header_block
from jetraft.spark.loop import JetClient
from tests.spark.support import (
    ServerProcess,
    create_stream,
    delete_msgs,
    publish,
    run,
)

pytestmark = pytest.mark.spark


def _read(spark: Any, server: ServerProcess, stream: str, **opts: str) -> Any:
    reader = spark.read.format("jetstream").option("servers", server.url).option("stream", stream)
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df: Any) -> list[tuple[str, int, bytes]]:
    return sorted(
        (r["subject"], r["sequence"], bytes(r["data"]))
        for r in df.select("subject", "sequence", "data").collect()
    )


@pytest.fixture
def orders(server: ServerProcess, stream_name: str) -> tuple[str, list[tuple[str, int, bytes]]]:
    """600 messages on three subjects; returns (stream, [(subject, seq, data)])."""
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"], allow_direct=True)
    items = [(f"{prefix}.{('a', 'b', 'c')[i % 3]}.{i}", f"m{i}".encode()) for i in range(600)]
    seqs = publish(server.url, items)
    return stream_name, [(s, q, d) for (s, d), q in zip(items, seqs, strict=True)]


def test_batch_read_equals_published(spark: Any, server: ServerProcess, orders: Any) -> None:
    stream, published = orders
    df = _read(spark, server, stream, minPartitions="4", maxRecordsPerPartition="100")
    assert df.rdd.getNumPartitions() == 6
    assert _rows(df) == sorted(published)
    assert df.schema.fieldNames() == ["stream", "subject", "sequence", "timestamp", "data"]
    assert {r["stream"] for r in df.select("stream").distinct().collect()} == {stream}


def test_subject_filters(spark: Any, server: ServerProcess, orders: Any) -> None:
    stream, published = orders
    prefix = stream.lower()
    one = _read(spark, server, stream, subjects=f"{prefix}.a.*")
    assert _rows(one) == sorted(p for p in published if p[0].startswith(f"{prefix}.a."))
    two = _read(spark, server, stream, subjects=f"{prefix}.b.*, {prefix}.c.>", minPartitions="3")
    assert _rows(two) == sorted(p for p in published if not p[0].startswith(f"{prefix}.a."))


def test_sequence_bounds(spark: Any, server: ServerProcess, orders: Any) -> None:
    stream, published = orders
    df = _read(spark, server, stream, startingSequence="101", endingSequence="250")
    assert _rows(df) == sorted(p for p in published if 101 <= p[1] <= 250)


def test_time_bounds(spark: Any, server: ServerProcess, orders: Any) -> None:
    stream, published = orders
    micros = {
        r["sequence"]: r["us"]
        for r in _read(spark, server, stream)
        .select("sequence", F.unix_micros("timestamp").alias("us"))
        .collect()
    }
    assert sorted(micros) == [p[1] for p in published]
    boundary = micros[300]  # stored ns time truncated to us: msg 300 is at or after it
    after = _read(spark, server, stream, startingTimestamp=_iso(boundary))
    assert {r[1] for r in _rows(after)} == {s for s, us in micros.items() if us >= boundary}
    before = _read(spark, server, stream, endingTimestamp=_iso(boundary))
    assert {r[1] for r in _rows(before)} == {s for s, us in micros.items() if us < boundary}
    ms = _read(spark, server, stream, startingTimestamp=str(boundary // 1000))
    assert {r[1] for r in _rows(ms)} >= {s for s, us in micros.items() if us >= boundary}


def _iso(epoch_us: int) -> str:
    from datetime import UTC, datetime, timedelta

    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=epoch_us)
    return when.isoformat().replace("+00:00", "Z")


def test_gaps_and_data_loss(spark: Any, server: ServerProcess, orders: Any) -> None:
    stream, published = orders
    delete_msgs(server.url, stream, [5, 6, 7, 300, 600])
    df = _read(spark, server, stream, maxRecordsPerPartition="150")
    assert _rows(df) == sorted(p for p in published if p[1] not in (5, 6, 7, 300, 600))
    _purge_below(server.url, stream, 101)
    with pytest.raises(Exception, match=r"failOnDataLoss"):
        _read(spark, server, stream, startingSequence="50").count()
    skipped = _read(spark, server, stream, startingSequence="50", failOnDataLoss="false")
    assert [r[1] for r in sorted(_rows(skipped), key=lambda r: r[1])][:2] == [101, 102]


def _purge_below(url: str, stream: str, seq: int) -> None:
    import nats

    async def _do() -> None:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().purge_stream(stream, seq=seq)
        finally:
            await nc.close()

    run(_do())


def test_empty_stream_and_empty_range_read_no_rows(
    spark: Any, server: ServerProcess, stream_name: str
) -> None:
    """No messages to read plans no partitions; Spark then hands the reader a placeholder
    partition of its own, which must read as nothing rather than fail."""
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    assert _read(spark, server, stream_name).count() == 0
    assert _read(spark, server, stream_name, readMode="consumer").count() == 0


def test_consumer_mode_without_direct_get(
    spark: Any, server: ServerProcess, stream_name: str
) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"], allow_direct=False)
    items = [(f"{prefix}.{i % 2}", f"c{i}".encode()) for i in range(300)]
    seqs = publish(server.url, items)
    delete_msgs(server.url, stream_name, [10, 11])
    expected = sorted((s, q, d) for (s, d), q in zip(items, seqs, strict=True) if q not in (10, 11))
    df = _read(spark, server, stream_name, minPartitions="2", fetchBatch="64")
    assert _rows(df) == expected
    only = _read(spark, server, stream_name, subjects=f"{prefix}.1", readMode="consumer")
    assert _rows(only) == [e for e in expected if e[0] == f"{prefix}.1"]


def test_headers_keep_every_value(spark: Any, server: ServerProcess, stream_name: str) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"], allow_direct=True)
    block = encode_header_block([("Trace", "a"), ("Trace", "b"), ("Kind", "order")])

    async def _do() -> None:
        nc = JetClient()
        await nc.connect(server.url)
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish_with_header_block(f"{prefix}.h", inbox, block, b"with")
            await sub.next_msg(timeout=5)
            await nc.publish(f"{prefix}.h", b"without", reply=inbox)
            await sub.next_msg(timeout=5)
        finally:
            await nc.close()

    run(_do())
    rows = _read(spark, server, stream_name, includeHeaders="true").orderBy("sequence").collect()
    assert rows[0]["headers"] == {"Trace": ["a", "b"], "Kind": ["order"]}
    assert rows[1]["headers"] is None


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"stream": "NO_SUCH_STREAM"}, r"stream 'NO_SUCH_STREAM' not found"),
        ({"startingSequence": "abc"}, r"startingSequence must be an integer"),
        ({"startingSequence": "0"}, r"startingSequence must be >= 1"),
        ({"startingSequence": "9", "endingSequence": "3"}, r"ending position 3 is before"),
        ({"startingOffsets": "middle"}, r"startingOffsets must be earliest or latest"),
        ({"servers": "nats://127.0.0.1:1"}, r"cannot connect to nats://127.0.0.1:1"),
        ({"stream": ""}, r"option stream is required"),
    ],
)
def test_bad_options_fail_before_the_job(
    spark: Any, server: ServerProcess, orders: Any, opts: dict[str, str], message: str
) -> None:
    stream, _ = orders
    group = f"bad-{abs(hash(message))}"
    spark.sparkContext.setJobGroup(group, "bad options")
    try:
        merged = {"servers": server.url, "stream": stream, **opts}
        reader = spark.read.format("jetstream")
        for key, value in merged.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception, match=message):
            reader.load().count()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
