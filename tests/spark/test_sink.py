"""The sink: every row once in the target stream, also across task failures and re-runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tests.spark.support import ServerProcess, create_stream, stream_messages, stream_state

pytestmark = pytest.mark.spark


def _frame(spark: Any, prefix: str, n: int, partitions: int) -> Any:
    return spark.range(0, n, 1, partitions).select(
        F.concat(F.lit(f"{prefix}."), (F.col("id") % 4).cast("string")).alias("subject"),
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("data"),
    )


def _writer(df: Any, server: ServerProcess, **opts: str) -> Any:
    writer = df.write.format("jetstream").mode("append").option("servers", server.url)
    for key, value in opts.items():
        writer = writer.option(key, value)
    return writer


def _datas(server: ServerProcess, stream: str) -> list[bytes]:
    return sorted(m.data for m in stream_messages(server.url, stream))


def test_batch_write_with_headers(spark: Any, server: ServerProcess, stream_name: str) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"], allow_direct=True)
    df = _frame(spark, prefix, 500, 3).withColumn(
        "headers",
        F.create_map(F.lit("Tag"), F.array(F.lit("x"), F.col("data"))),
    )
    _writer(df, server, stream=stream_name).save()
    assert _datas(server, stream_name) == sorted(f"row-{i}".encode() for i in range(500))
    back = (
        spark.read.format("jetstream")
        .option("servers", server.url)
        .option("stream", stream_name)
        .option("includeHeaders", "true")
        .option("endingSequence", "3")
        .load()
        .collect()
    )
    assert all(r["headers"]["Tag"] == ["x", bytes(r["data"]).decode()] for r in back)
    assert all(len(r["headers"]["Nats-Msg-Id"]) == 1 for r in back)


def test_injected_task_failure_still_exactly_once(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"])
    marker = tmp_path / "failed-once"
    df = _frame(spark, prefix, 400, 2)
    _writer(df, server, _failOnceAtRow="120", _failOnceMarker=str(marker)).save()
    assert marker.exists(), "the injected failure did not happen"
    assert _datas(server, stream_name) == sorted(f"row-{i}".encode() for i in range(400))


def test_rerun_with_write_id_is_skipped(
    spark: Any, server: ServerProcess, stream_name: str
) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"])
    df = _frame(spark, prefix, 200, 2)
    _writer(df, server, writeId=f"job-{stream_name}").save()
    _writer(df, server, writeId=f"job-{stream_name}").save()  # skipped via the commit bucket
    _writer(df, server, writeId=f"job-{stream_name}", commitBucket="").save()  # deduped
    assert stream_state(server.url, stream_name).messages == 200


def test_sink_needs_subject_and_data(spark: Any, server: ServerProcess) -> None:
    df = spark.range(3).select(F.col("id").cast("string").alias("data"))
    with pytest.raises(Exception, match="needs a 'subject' column"):
        _writer(df, server).save()
    with pytest.raises(Exception, match="needs a 'data' column"):
        _writer(spark.range(3), server, subject="x.y").save()


def test_msg_id_column_dedupes_rows(spark: Any, server: ServerProcess, stream_name: str) -> None:
    prefix = stream_name.lower()
    create_stream(server.url, stream_name, [f"{prefix}.>"])
    df = _frame(spark, prefix, 90, 2).withColumn(
        "key", F.concat(F.lit("k"), (F.monotonically_increasing_id() % 30).cast("string"))
    )
    ids = {r["key"] for r in df.select("key").collect()}
    _writer(df, server, msgIdColumn="key", commitBucket="").save()
    msgs = stream_messages(server.url, stream_name)
    assert sorted(m.headers["Nats-Msg-Id"] for m in msgs) == sorted(ids)
