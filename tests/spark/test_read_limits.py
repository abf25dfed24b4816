"""Streaming read limits (PySpark 4.2+): maxMessagesPerTrigger, minMessagesPerTrigger with
maxTriggerDelay, and Trigger.AvailableNow's fixed target.

The reader-level tests drive the stream reader the way Spark's engine does (latestOffset with
a start offset and a read limit) against a real server, with the trigger-delay clock
replaced; the query-level tests run the same options through Spark itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jetraft.spark import reader as reader_mod
from jetraft.spark.options import parse_read_options
from tests.spark.support import ServerProcess, create_stream, fill, wait_query

pytestmark = pytest.mark.spark

datasource = pytest.importorskip(
    "pyspark.sql.streaming.datasource", reason="read limits need PySpark 4.2+"
)



class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _reader(
    server: ServerProcess, stream: str, monkeypatch: pytest.MonkeyPatch, **options: str
) -> tuple[Any, FakeClock]:
    clock = FakeClock()
    monkeypatch.setattr(reader_mod.JetStreamStreamReader, "clock", staticmethod(clock))
    opts = parse_read_options({"servers": server.url, "stream": stream, **options}, True)
    return reader_mod.stream_reader(opts), clock


def test_min_messages_wait_for_enough_or_the_delay(
    server: ServerProcess, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    fill(server.url, stream_name, 0, 10)
    rdr, clock = _reader(
        server, stream_name, monkeypatch, minMessagesPerTrigger="25", maxTriggerDelay="30s"
    )
    limit = rdr.getDefaultReadLimit()
    assert limit == datasource.ReadMinRows(25)
    start = rdr.initialOffset()
    assert start == {"seq": 1}
    assert rdr.latestOffset(start, limit) == start  # 10 waiting: held back
    clock.now += 29
    assert rdr.latestOffset(start, limit) == start
    fill(server.url, stream_name, 10, 15)
    assert rdr.latestOffset(start, limit) == {"seq": 26}  # 25 waiting: a batch
    # The delay counts from the last batch admitted.
    fill(server.url, stream_name, 25, 3)
    assert rdr.latestOffset({"seq": 26}, limit) == {"seq": 26}
    clock.now += 30
    assert rdr.latestOffset({"seq": 26}, limit) == {"seq": 29}  # delay over: the 3 there are
    # Spark's ReadAllAvailable (used to honour a trigger) overrides the options.
    fill(server.url, stream_name, 28, 2)
    assert rdr.latestOffset({"seq": 29}, datasource.ReadAllAvailable()) == {"seq": 31}
    assert rdr.reportLatestOffset() == {"seq": 31}


def test_max_messages_and_engine_limits_combine(
    server: ServerProcess, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    fill(server.url, stream_name, 0, 50)
    rdr, _ = _reader(server, stream_name, monkeypatch, maxMessagesPerTrigger="20")
    assert rdr.getDefaultReadLimit() == datasource.ReadMaxRows(20)
    assert rdr.latestOffset({"seq": 1}, datasource.ReadMaxRows(20)) == {"seq": 21}
    assert rdr.latestOffset({"seq": 1}, datasource.ReadMaxRows(7)) == {"seq": 8}
    assert rdr.latestOffset({"seq": 41}, datasource.ReadMaxRows(20)) == {"seq": 51}
    assert rdr.latestOffset({"seq": 51}, datasource.ReadMaxRows(20)) == {"seq": 51}
    plain, _ = _reader(server, stream_name, monkeypatch)
    assert plain.getDefaultReadLimit() == datasource.ReadAllAvailable()


def test_available_now_stops_at_what_was_there(
    server: ServerProcess, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    fill(server.url, stream_name, 0, 30)
    rdr, _ = _reader(
        server, stream_name, monkeypatch, maxMessagesPerTrigger="20", minMessagesPerTrigger="15"
    )
    assert isinstance(rdr, datasource.SupportsTriggerAvailableNow)
    rdr.prepareForTriggerAvailableNow()
    fill(server.url, stream_name, 30, 30)  # after the run started: for the next run
    limit = rdr.getDefaultReadLimit()
    assert rdr.latestOffset({"seq": 1}, limit) == {"seq": 21}
    # The minimum never holds back an AvailableNow run (it must end): the last 10 are read.
    assert rdr.latestOffset({"seq": 21}, limit) == {"seq": 31}
    assert rdr.latestOffset({"seq": 31}, limit) == {"seq": 31}
    assert rdr.latestOffset({"seq": 21}, datasource.ReadAllAvailable()) == {"seq": 31}


def test_initial_offset_is_resolved_once(
    server: ServerProcess, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark asks a fresh query for its initial offset twice in its first trigger (to build
    # batch 0, then again just before planning its partitions): a "latest" start must not
    # move with the stream in between, or what was published meanwhile is never read.
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    fill(server.url, stream_name, 0, 10)
    rdr, _ = _reader(server, stream_name, monkeypatch, startingOffsets="latest")
    assert rdr.initialOffset() == {"seq": 11}
    everything = datasource.ReadAllAvailable()
    assert rdr.latestOffset({"seq": 11}, everything) == {"seq": 11}  # nothing yet
    fill(server.url, stream_name, 10, 5)
    assert rdr.initialOffset() == {"seq": 11}
    assert rdr.latestOffset({"seq": 11}, everything) == {"seq": 16}
    assert [(p.start, p.end) for p in rdr.partitions({"seq": 11}, {"seq": 16})] == [(11, 15)]


def test_available_now_query_looks_at_the_stream_three_times(
    server: ServerProcess, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The calls Spark's driver makes for a fresh Trigger.AvailableNow query, in its order;
    # each look at the stream is a round trip from the query's driver-side process.
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    fill(server.url, stream_name, 0, 20)
    looks = []
    real = reader_mod.wire.stream_state

    async def counted(*args: Any) -> Any:
        looks.append(args[1])
        return await real(*args)

    monkeypatch.setattr(reader_mod.wire, "stream_state", counted)
    rdr, _ = _reader(server, stream_name, monkeypatch)
    rdr.prepareForTriggerAvailableNow()
    fill(server.url, stream_name, 20, 5)  # after the start: for the next run
    limit = rdr.getDefaultReadLimit()
    start = rdr.initialOffset()
    assert rdr.latestOffset(start, limit) == {"seq": 21}
    assert rdr.reportLatestOffset() == {"seq": 26}
    assert rdr.initialOffset() == start == {"seq": 1}
    assert sum(p.end - p.start + 1 for p in rdr.partitions(start, {"seq": 21})) == 20
    assert rdr.latestOffset({"seq": 21}, limit) == {"seq": 21}
    assert rdr.reportLatestOffset() == {"seq": 26}
    # Was 8: the start, AvailableNow's target, each initial offset and each report.
    assert looks == [stream_name] * 3
    # A report with no latestOffset before it looks for itself.
    fill(server.url, stream_name, 25, 1)
    assert rdr.reportLatestOffset() == {"seq": 27}
    assert len(looks) == 4


def _memory_query(
    spark: Any, server: ServerProcess, stream: str, name: str, ckpt: Path, **opts: str
) -> Any:
    df = spark.readStream.format("jetstream").option("servers", server.url)
    for key, value in {"stream": stream, **opts}.items():
        df = df.option(key, value)
    return (
        df.load()
        .select("sequence")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="100 milliseconds")
        .start()
    )




def _rows(spark: Any, name: str) -> list[int]:
    return sorted(r["sequence"] for r in spark.sql(f"select sequence from {name}").collect())


def test_query_holds_small_batches_until_the_minimum(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    name = f"minrows_{stream_name.lower()}"
    query = _memory_query(
        spark, server, stream_name, name, tmp_path / "ckpt",
        minMessagesPerTrigger="40", maxTriggerDelay="1h",
    )  # fmt: skip
    try:
        fill(server.url, stream_name, 0, 30)

        def saw_thirty_without_reading() -> bool:
            # A trigger ran, saw the 30 messages (reportLatestOffset) and admitted none.
            return any(
                json.loads(p["sources"][0].get("latestOffset") or "null") == {"seq": 31}
                and p["numInputRows"] == 0
                for p in query.recentProgress
            )

        wait_query(saw_thirty_without_reading, query)
        assert _rows(spark, name) == []
        seqs = fill(server.url, stream_name, 30, 30)
        wait_query(lambda: len(_rows(spark, name)) == 60, query)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert _rows(spark, name) == list(range(1, 31)) + seqs
    assert all(size >= 40 for size in sizes), sizes


def test_query_reads_a_quiet_stream_after_the_delay(
    spark: Any, server: ServerProcess, stream_name: str, tmp_path: Path
) -> None:
    create_stream(server.url, stream_name, [f"{stream_name.lower()}.>"], allow_direct=True)
    seqs = fill(server.url, stream_name, 0, 7)
    name = f"delay_{stream_name.lower()}"
    query = _memory_query(
        spark, server, stream_name, name, tmp_path / "ckpt",
        minMessagesPerTrigger="1000", maxTriggerDelay="1s",
    )  # fmt: skip
    try:
        wait_query(lambda: len(_rows(spark, name)) == 7, query)
    finally:
        query.stop()
    assert _rows(spark, name) == seqs

