"""Batch and streaming writers of the ``jetstream`` sink.

Exactly once rests on two things:

1. Every row gets a deterministic Nats-Msg-Id: the source position (``stream:sequence``) when
   the rows carry ``stream`` and ``sequence`` columns (stream-to-stream pipelines), a column
   named by ``msgIdColumn``, or else ``<query or write id>:<batch>:<partition>:<row>``. A
   retried task or a re-run micro-batch republishes the same ids, and the stream stores each
   id once within its duplicate window. Row-index ids assume the partition's rows come in
   the same order when recomputed (true for a micro-batch replayed from a jetstream source).
2. Committed batches are recorded in a KV bucket (``commitBucket``, default
   ``jetraft_spark_commits``): a batch id at or below the recorded one is skipped, so a replay
   older than the duplicate window publishes nothing.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

try:  # PySpark 4.1+: streaming writers can take Arrow batches instead of Row objects
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    HAS_STREAM_ARROW = True
except ImportError:  # pragma: no cover - PySpark 4.0
    HAS_STREAM_ARROW = False

from jetraft.spark import commits, loop
from jetraft.spark.codec import encode_header_block, row_msg_id, source_msg_id
from jetraft.spark.options import OptionError, WriteOptions
from jetraft.spark.publish import OutMsg, Publisher

log = logging.getLogger("jetraft.spark")

SEND_CHUNK = 1000


@dataclass(frozen=True)
class JetStreamCommit(WriterCommitMessage):  # type: ignore[misc, unused-ignore]
    """What one task reports to the driver's commit."""

    owner: str  # query id (streaming) or write id (batch)
    batch_id: int
    partition: int
    published: int
    duplicates: int
    skipped: bool


def check_input_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail before any task runs when the DataFrame cannot be published."""
    names = set(schema.fieldNames())
    if "data" not in names:
        raise OptionError("the DataFrame to write needs a 'data' column (binary or string)")
    if opts.subject is None and "subject" not in names:
        raise OptionError("the DataFrame needs a 'subject' column, or set the subject option")
    if opts.msg_id_column is not None and opts.msg_id_column not in names:
        raise OptionError(f"msgIdColumn {opts.msg_id_column!r} is not a column")


def check_reachable(opts: WriteOptions) -> None:
    """Connect from the driver once, so a wrong URL or credential fails the write before any
    task runs (the tasks would each fail the same way, after Spark's retries)."""
    loop.run_sync(lambda: loop.connection(opts.conn))


def _as_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def _header_items(value: Any) -> list[tuple[str, str]]:
    if not value:
        return []
    pairs = value.items() if isinstance(value, dict) else value
    items: list[tuple[str, str]] = []
    for name, vals in pairs:
        if isinstance(vals, list | tuple):
            items.extend((str(name), str(v)) for v in vals if v is not None)
        elif vals is not None:
            items.append((str(name), str(vals)))
    return items


class _Encoder:
    """Turns row dicts into OutMsgs with their Nats-Msg-Id."""

    def __init__(self, opts: WriteOptions, owner: str, batch: str, partition: int):
        self.opts = opts
        self.owner = owner
        self.batch = batch
        self.partition = partition

    def msg_id(self, row: dict[str, Any], index: int) -> str:
        col = self.opts.msg_id_column
        if col is not None and row.get(col) is not None:
            return str(row[col])
        if row.get("stream") is not None and row.get("sequence") is not None:
            return source_msg_id(str(row["stream"]), int(row["sequence"]))
        return row_msg_id(self.owner, self.batch, self.partition, index)

    def encode(self, row: dict[str, Any], index: int) -> OutMsg:
        subject = self.opts.subject or row.get("subject")
        if not subject:
            raise ValueError(f"row {index} of partition {self.partition} has no subject")
        items = _header_items(row.get("headers"))
        items.append(("Nats-Msg-Id", self.msg_id(row, index)))
        if self.opts.expected_stream:
            items.append(("Nats-Expected-Stream", self.opts.expected_stream))
        return OutMsg(str(subject), _as_bytes(row.get("data")), encode_header_block(items))


def _maybe_fail(opts: WriteOptions, partition: int, index: int, publisher: Publisher) -> None:
    """Test hook (``_failOnceAtRow``): the first attempt of partition 0 dies at that row,
    after what it published so far is acknowledged; the marker file makes the retry pass."""
    marker = opts.fail_once_marker
    if opts.fail_once_at_row != index or partition != 0 or marker is None:
        return
    if os.path.exists(marker):
        return
    loop.run_sync(publisher.flush)
    with open(marker, "w") as f:
        f.write("failed once\n")
    raise RuntimeError(f"injected sink failure at row {index} (_failOnceAtRow)")


def publish_rows(
    opts: WriteOptions, rows: Iterable[dict[str, Any]], encoder: _Encoder
) -> tuple[int, int]:
    """Publish every row, waiting for all PubAcks; returns (acked, duplicates)."""

    async def _start() -> Publisher:
        nc = await loop.connection(opts.conn)
        pub = Publisher(nc, opts.max_pending_acks, opts.ack_timeout_s, opts.max_publish_retries)
        await pub.start()
        return pub

    publisher = loop.run_sync(_start)
    try:
        chunk: list[OutMsg] = []
        for index, row in enumerate(rows):
            chunk.append(encoder.encode(row, index))
            if len(chunk) >= SEND_CHUNK:
                batch, chunk = chunk, []
                loop.run_sync(lambda b=batch: publisher.send_many(b))  # type: ignore[misc, unused-ignore]
            if opts.fail_once_at_row is not None:
                if chunk:
                    batch, chunk = chunk, []
                    loop.run_sync(lambda b=batch: publisher.send_many(b))  # type: ignore[misc, unused-ignore]
                _maybe_fail(opts, encoder.partition, index, publisher)
        if chunk:
            loop.run_sync(lambda: publisher.send_many(chunk))
        stats = loop.run_sync(publisher.flush)
        return stats.acked, stats.duplicates
    finally:
        loop.run_sync(publisher.close)


def _arrow_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        columns = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        for i in range(batch.num_rows):
            yield {name: values[i] for name, values in columns.items()}


def _partition_id() -> int:
    ctx = TaskContext.get()
    return int(ctx.partitionId()) if ctx is not None else 0


class JetStreamBatchWriter(DataSourceArrowWriter):  # type: ignore[misc, unused-ignore]
    """``df.write.format("jetstream")``. The write id is ``writeId`` (give the same one to a
    re-run of the same job to make it a no-op) or a fresh random id per job."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, opts)
        check_reachable(opts)
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex
        if opts.commit_bucket and opts.write_id:
            loop.run_sync(lambda: commits.ensure_bucket(opts))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> JetStreamCommit:
        partition = _partition_id()
        owner = self.opts.msg_id_prefix or self.write_id
        if self.opts.commit_bucket and self.opts.write_id:
            done = loop.run_sync(lambda: commits.committed(self.opts, "w", self.write_id))
            if done is not None:
                log.warning("write %s already committed; publishing nothing", self.write_id)
                return JetStreamCommit(self.write_id, 0, partition, 0, 0, True)
        encoder = _Encoder(self.opts, owner, "0", partition)
        acked, dups = publish_rows(self.opts, _arrow_rows(iterator), encoder)
        return JetStreamCommit(self.write_id, 0, partition, acked, dups, False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.commit_bucket and self.opts.write_id:
            loop.run_sync(lambda: commits.record(self.opts, "w", self.write_id, 0))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "jetstream write %s aborted; published rows stay (ids dedupe a re-run)", self.write_id
        )


class JetStreamStreamWriter(DataSourceStreamWriter):  # type: ignore[misc, unused-ignore]
    """``df.writeStream.format("jetstream")``: ids from the query id and micro-batch id."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, opts)
        check_reachable(opts)
        self.opts = opts
        if opts.commit_bucket:
            loop.run_sync(lambda: commits.ensure_bucket(opts))

    def write(self, iterator: Iterator[Any]) -> JetStreamCommit:
        ctx = TaskContext.get()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "query"
        batch_text = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "0"
        batch_id = int(batch_text)
        partition = _partition_id()
        if self.opts.commit_bucket:
            last = loop.run_sync(lambda: commits.committed(self.opts, "q", query_id))
            if last is not None and batch_id <= last:
                log.warning("query %s batch %d already committed; skipped", query_id, batch_id)
                return JetStreamCommit(query_id, batch_id, partition, 0, 0, True)
        owner = self.opts.msg_id_prefix or query_id
        encoder = _Encoder(self.opts, owner, batch_text, partition)
        acked, dups = publish_rows(self.opts, self._rows(iterator), encoder)
        return JetStreamCommit(query_id, batch_id, partition, acked, dups, False)

    def _rows(self, iterator: Iterator[Any]) -> Iterator[dict[str, Any]]:
        return (row.asDict(recursive=True) for row in iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        owners = {m.owner for m in messages if isinstance(m, JetStreamCommit)}
        if not self.opts.commit_bucket:
            return
        for owner in owners:
            loop.run_sync(lambda o=owner: commits.record(self.opts, "q", o, batchId))  # type: ignore[misc, unused-ignore]

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "jetstream micro-batch %d aborted; it will be replayed with the same ids", batchId
        )


if HAS_STREAM_ARROW:

    class JetStreamStreamArrowWriter(JetStreamStreamWriter, DataSourceStreamArrowWriter):  # type: ignore[misc, unused-ignore]
        """The streaming sink fed Arrow batches (PySpark 4.1+), as the batch sink is: no Row
        object per row. Same ids, same commits."""

        def _rows(self, iterator: Iterator[Any]) -> Iterator[dict[str, Any]]:
            return _arrow_rows(iterator)


def stream_writer(opts: WriteOptions, schema: StructType) -> JetStreamStreamWriter:
    """The streaming sink for this PySpark: the Arrow one where it exists."""
    if HAS_STREAM_ARROW:
        return JetStreamStreamArrowWriter(opts, schema)
    return JetStreamStreamWriter(opts, schema)
