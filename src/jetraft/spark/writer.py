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
from jetraft.spark._publoops import as_bytes, id_headers, payload_list
from jetraft.spark.codec import encode_header_block, row_msg_id, source_msg_id
from jetraft.spark.options import OptionError, WriteOptions
from jetraft.spark.publish import Publisher

log = logging.getLogger("jetraft.spark")



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


def _clean(value: str) -> str:
    """A header value as ``encode_header_block`` writes it (no CR/LF, no outer spaces)."""
    return value.replace("\r", " ").replace("\n", " ").strip()


# Columns of one chunk of rows: name -> values (Python objects, as Arrow's to_pylist gives).
Columns = dict[str, list[Any]]


class _Encoder:
    """Turns chunks of rows (as columns) into subjects, header blocks and payloads, each
    header block carrying the row's Nats-Msg-Id."""

    def __init__(self, opts: WriteOptions, owner: str, batch: str, partition: int):
        self.opts = opts
        self.owner = owner
        self.batch = batch
        self.partition = partition
        self._row_prefix = _clean(row_msg_id(owner, batch, partition, 0)[:-1]).encode()
        extra = b""
        if opts.expected_stream:
            extra = f"Nats-Expected-Stream: {_clean(opts.expected_stream)}\r\n".encode()
        self._extra = extra
        self._subjects: dict[Any, bytes] = {}

    def msg_ids(self, cols: Columns, first: int, n: int) -> list[str] | None:
        """Per-row ids where a row names its own (msgIdColumn, or stream and sequence);
        None when every row takes its row-index id (the fast, common case)."""
        col = self.opts.msg_id_column
        own = cols.get(col) if col is not None else None
        streams, seqs = cols.get("stream"), cols.get("sequence")
        if own is None and (streams is None or seqs is None):
            return None
        ids: list[str] = []
        for i in range(n):
            if own is not None and own[i] is not None:
                ids.append(str(own[i]))
            elif streams is not None and seqs is not None and streams[i] is not None and (
                seqs[i] is not None
            ):
                ids.append(source_msg_id(str(streams[i]), int(seqs[i])))
            else:
                ids.append(row_msg_id(self.owner, self.batch, self.partition, first + i))
        return ids

    def subjects(self, cols: Columns, first: int, n: int) -> list[bytes]:
        if self.opts.subject:
            return [self.opts.subject.encode()] * n
        values = cols.get("subject") or [None] * n
        cache = self._subjects
        out: list[bytes] = []
        for i, value in enumerate(values):
            subject = cache.get(value)
            if subject is None:
                if not value:
                    raise ValueError(
                        f"row {first + i} of partition {self.partition} has no subject"
                    )
                subject = cache[value] = as_bytes(value)
            out.append(subject)
        return out

    def headers(self, cols: Columns, first: int, n: int) -> list[bytes]:
        ids = self.msg_ids(cols, first, n)
        user = cols.get("headers")
        extra = self._extra
        if ids is None and user is None:
            return id_headers(self._row_prefix, first, n, extra)
        out: list[bytes] = []
        for i in range(n):
            msg_id = (
                ids[i]
                if ids is not None
                else row_msg_id(self.owner, self.batch, self.partition, first + i)
            )
            items = _header_items(user[i]) if user is not None else []
            if items:
                items.append(("Nats-Msg-Id", msg_id))
                if self.opts.expected_stream:
                    items.append(("Nats-Expected-Stream", self.opts.expected_stream))
                out.append(encode_header_block(items))
            else:
                out.append(b"NATS/1.0\r\nNats-Msg-Id: %s\r\n%s\r\n" % (
                    _clean(msg_id).encode(), extra
                ))
        return out

    def encode(
        self, cols: Columns, first: int, n: int
    ) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """(subjects, header blocks, payloads) for rows ``first .. first + n - 1``."""
        data = cols.get("data")
        payloads = [b""] * n if data is None else payload_list(data)
        return self.subjects(cols, first, n), self.headers(cols, first, n), payloads


def _maybe_fail(opts: WriteOptions, partition: int, index: int) -> None:
    """Test hook (``_failOnceAtRow``): the first attempt of partition 0 dies at that row,
    after what it published so far is acknowledged; the marker file makes the retry pass."""
    marker = opts.fail_once_marker
    if opts.fail_once_at_row != index or partition != 0 or marker is None:
        return
    if os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write("failed once\n")
    raise RuntimeError(f"injected sink failure at row {index} (_failOnceAtRow)")


def _fail_row(opts: WriteOptions, partition: int) -> int | None:
    """The row at which the test hook fails this task, if it will."""
    marker = opts.fail_once_marker
    if opts.fail_once_at_row is None or partition != 0 or marker is None:
        return None
    return None if os.path.exists(marker) else opts.fail_once_at_row


def publish_columns(
    opts: WriteOptions, chunks: Iterable[tuple[Columns, int]], encoder: _Encoder
) -> tuple[int, int]:
    """Publish every row of every chunk (columns, row count), waiting for all PubAcks;
    returns (acked, duplicates)."""

    async def _start() -> Publisher:
        nc = await loop.connection(opts.conn)
        pub = Publisher(nc, opts.max_pending_acks, opts.ack_timeout_s, opts.max_publish_retries)
        await pub.start()
        return pub

    publisher = loop.run_sync(_start)
    fail_at = _fail_row(opts, encoder.partition)
    try:
        first = 0
        for cols, n in chunks:
            if fail_at is not None and first <= fail_at < first + n:
                # Publish up to and including the failing row, wait for its acks, then die.
                cut = fail_at - first + 1
                part = {name: values[:cut] for name, values in cols.items()}
                msgs = encoder.encode(part, first, cut)
                loop.run_sync(lambda m=msgs: publisher.send(*m))  # type: ignore[misc, unused-ignore]
                loop.run_sync(publisher.flush)
                _maybe_fail(opts, encoder.partition, fail_at)
            msgs = encoder.encode(cols, first, n)
            loop.run_sync(lambda m=msgs: publisher.send(*m))  # type: ignore[misc, unused-ignore]
            first += n
        stats = loop.run_sync(publisher.flush)
        return stats.acked, stats.duplicates
    finally:
        loop.run_sync(publisher.close)


def _arrow_columns(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Columns, int]]:
    """Each Arrow batch as Python lists, one conversion per column (not per row); string
    payloads become UTF-8 bytes inside Arrow."""
    for batch in batches:
        cols: Columns = {}
        for i, name in enumerate(batch.schema.names):
            column = batch.column(i)
            if name == "data" and pa.types.is_string(column.type) | pa.types.is_large_string(
                column.type
            ):
                column = column.cast(pa.binary())
            cols[name] = column.to_pylist()
        if batch.num_rows:
            yield cols, batch.num_rows


def _row_columns(rows: Iterator[Any], chunk_rows: int = 1000) -> Iterator[tuple[Columns, int]]:
    """Spark Row objects (PySpark 4.0's streaming sink) regrouped as column chunks."""
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row.asDict(recursive=True))
        if len(chunk) >= chunk_rows:
            yield _to_columns(chunk), len(chunk)
            chunk = []
    if chunk:
        yield _to_columns(chunk), len(chunk)


def _to_columns(rows: list[dict[str, Any]]) -> Columns:
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


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
        acked, dups = publish_columns(self.opts, _arrow_columns(iterator), encoder)
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
        acked, dups = publish_columns(self.opts, self._columns(iterator), encoder)
        return JetStreamCommit(query_id, batch_id, partition, acked, dups, False)

    def _columns(self, iterator: Iterator[Any]) -> Iterator[tuple[Columns, int]]:
        return _row_columns(iterator)

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

        def _columns(self, iterator: Iterator[Any]) -> Iterator[tuple[Columns, int]]:
            return _arrow_columns(iterator)


def stream_writer(opts: WriteOptions, schema: StructType) -> JetStreamStreamWriter:
    """The streaming sink for this PySpark: the Arrow one where it exists."""
    if HAS_STREAM_ARROW:
        return JetStreamStreamArrowWriter(opts, schema)
    return JetStreamStreamWriter(opts, schema)
