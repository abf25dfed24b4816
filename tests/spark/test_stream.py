"""Structured Streaming: checkpointed offsets, restarts, rate limits, server restarts, and the
stream-to-stream pipeline with replayed micro-batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import (
    ServerProcess,
    create_stream,
    fill,
    run,
    stream_messages,
    wait_query,
)

pytestmark = pytest.mark.spark


def _source(spark: Any, server: ServerProcess, stream: str, **opts: str) -> Any:
    reader = (
        spark.readStream.format("jetstream").option("servers", server.url).option("stream", stream)
    )
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()


def _to_parquet(df: Any, out: Path, checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.select("sequence", "subject", "data")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def _sequences(spark: Any, out: Path) -> list[int]:
    if not (out / "_spark_metadata").exists():
        return []
    df = spark.read.schema("sequence long, subject string, data binary").parquet(str(out))
    return sorted(r["sequence"] for r in df.collect())



def test_available_now_restart_every_message_once(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    first = fill(server.url, stream_name, 0, 300)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _to_parquet(_source(spark, server, stream_name), out, ckpt, availableNow=True).awaitTermination(
        120
    )
    assert _sequences(spark, out) == first
    second = fill(server.url, stream_name, 300, 200)
    # Restart from the checkpoint: only the new messages are read.
    _to_parquet(_source(spark, server, stream_name), out, ckpt, availableNow=True).awaitTermination(
        120
    )
    assert _sequences(spark, out) == first + second
    # A restart with nothing new adds nothing.
    _to_parquet(_source(spark, server, stream_name), out, ckpt, availableNow=True).awaitTermination(
        120
    )
    assert _sequences(spark, out) == first + second


def test_max_messages_per_trigger(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    seqs = fill(server.url, stream_name, 0, 250)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = _source(spark, server, stream_name, maxMessagesPerTrigger="100")
    query = _to_parquet(df, out, ckpt, processingTime="100 milliseconds")

    def sizes() -> list[int]:
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    try:
        # A batch's files are visible a moment before Spark posts its progress: wait for both.
        wait_query(lambda: _sequences(spark, out) == seqs and sum(sizes()) >= 250, query, 90)
    finally:
        query.stop()
    assert sizes() == [100, 100, 50]




def test_server_restart_during_query(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    before = fill(server.url, stream_name, 0, 200)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = _to_parquet(
        _source(spark, server, stream_name), out, ckpt, processingTime="200 milliseconds"
    )
    try:
        wait_query(lambda: _sequences(spark, out) == before, query, 90)
        server.stop()
        server.start()
        after = fill(server.url, stream_name, 200, 200)
        wait_query(lambda: _sequences(spark, out) == before + after, query, 120)
        assert query.isActive
    finally:
        query.stop()


@pytest.mark.parametrize("bucket", ["jetraft_spark_commits", ""], ids=["kv", "dedupe-only"])
def test_stream_to_stream_replay_is_exactly_once(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path, bucket: str
) -> None:
    src, dst = stream_name, stream_name + "OUT"
    create_stream(server.url, src, [f"{src.lower()}.>"], allow_direct=True)
    create_stream(server.url, dst, [f"{dst.lower()}.>"], allow_direct=True)
    seqs = fill(server.url, src, 0, 300)
    ckpt = tmp_path / "ckpt"

    def run_once() -> tuple[int, str]:
        df = _source(spark, server, src).selectExpr(
            "stream", "sequence", f"concat('{dst.lower()}.', subject) as subject", "data"
        )
        query = (
            df.writeStream.format("jetstream")
            .option("servers", server.url)
            .option("checkpointLocation", str(ckpt))
            .option("commitBucket", bucket)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return sum(p["numInputRows"] for p in query.recentProgress), str(query.id)

    rows, query_id = run_once()
    assert rows == 300
    if bucket:  # the sink recorded the committed batch under the query's own id
        assert _kv_value(server.url, bucket, f"q.{query_id}") == b"0"
    # Forget that the last micro-batch was committed: Spark replays it on restart.
    commits = sorted((ckpt / "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (ckpt / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    assert run_once()[0] == 300  # the whole batch was read and handed to the sink again
    msgs = stream_messages(server.url, dst)
    assert sorted(m.data for m in msgs) == sorted(f"e{i}".encode() for i in range(300))
    assert sorted(int(m.headers["Nats-Msg-Id"].split(":")[1]) for m in msgs) == seqs


def _kv_value(url: str, bucket: str, key: str) -> bytes | None:
    import nats

    async def _do() -> bytes | None:
        nc = await nats.connect(url)
        try:
            kv = await nc.jetstream().key_value(bucket)
            return (await kv.get(key)).value
        finally:
            await nc.close()

    return run(_do())
