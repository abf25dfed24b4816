"""Batch and streaming readers of the ``jetstream`` source.

Planning (bounds, offsets, partitions) runs on the driver; ``read()`` runs in executors on a
pickled copy of the reader, so readers hold only options and plain numbers, and open their
connection lazily through the per-process cache in ``loop``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from jetraft.spark import fetch, loop, planning, wire
from jetraft.spark.fetch import Chunk, DataLossError, RangeSpec
from jetraft.spark.options import OptionError, Position, ReadOptions
from jetraft.spark.rows import subject_filter, to_record_batch

try:  # PySpark 4.2+: streaming read limits (admission control) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_READ_LIMITS = True
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    HAS_READ_LIMITS = False

log = logging.getLogger("jetraft.spark")

ARROW_ROWS = 16_384
# Runs of ARROW_ROWS rows a partition's read may hold ready before its consumer takes them.
PREFETCH_RUNS = 3


class JetStreamPartition(InputPartition):  # type: ignore[misc, unused-ignore]
    """One contiguous range of sequences; ``mode`` is "direct" or "consumer"."""

    def __init__(self, index: int, start: int, end: int, mode: str) -> None:
        super().__init__(index)
        self.index = index
        self.start = start
        self.end = end
        self.mode = mode

    def __repr__(self) -> str:
        return f"JetStreamPartition({self.index}, {self.start}..{self.end}, {self.mode})"


@dataclass(frozen=True, slots=True)
class Bounds:
    start: int  # first sequence to read
    end: int  # last sequence to read (inclusive); end < start means nothing
    mode: str


def _mode(opts: ReadOptions, state: wire.StreamState) -> str:
    if opts.read_mode == "direct" and not state.allow_direct:
        raise OptionError(f"readMode=direct, but stream {opts.stream} does not allow direct get")
    if opts.read_mode == "auto":
        return "direct" if state.allow_direct else "consumer"
    return opts.read_mode


async def _stream_state(opts: ReadOptions) -> wire.StreamState:
    nc = await loop.connection(opts.conn)
    try:
        return await wire.stream_state(nc, opts.stream, opts.conn.request_timeout_s)
    except wire.StreamNotFound:
        raise OptionError(
            f"stream {opts.stream!r} not found on {', '.join(opts.conn.servers)}"
        ) from None


async def _resolve_start(opts: ReadOptions, pos: Position, state: wire.StreamState) -> int:
    """The first sequence a position designates (may be last_seq + 1: nothing yet)."""
    earliest = max(state.first_seq, 1)
    if pos.kind == "earliest":
        return earliest
    if pos.kind == "latest":
        return state.last_seq + 1
    if pos.kind == "sequence":
        if pos.value < earliest and state.messages > 0:
            text = (
                f"startingSequence {pos.value} is before the first sequence {earliest} of "
                f"stream {opts.stream} (those messages were removed)"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to start at the first")
            log.warning("%s; starting at %d", text, earliest)
            return earliest
        return pos.value
    nc = await loop.connection(opts.conn)
    seq = await wire.first_seq_at_or_after(nc, opts.stream, pos.value, opts.conn.request_timeout_s)
    return state.last_seq + 1 if seq is None else seq


async def _resolve_end(opts: ReadOptions, state: wire.StreamState) -> int:
    pos = opts.ending
    if pos.kind == "sequence":
        return min(pos.value, state.last_seq)
    if pos.kind == "timestamp":
        nc = await loop.connection(opts.conn)
        seq = await wire.first_seq_at_or_after(
            nc, opts.stream, pos.value, opts.conn.request_timeout_s
        )
        return min(state.last_seq, (state.last_seq + 1 if seq is None else seq) - 1)
    return state.last_seq


async def resolve_bounds(opts: ReadOptions) -> Bounds:
    state = await _stream_state(opts)
    start = await _resolve_start(opts, opts.starting, state)
    end = await _resolve_end(opts, state)
    return Bounds(start, end, _mode(opts, state))


def _partitions(opts: ReadOptions, start: int, end: int, mode: str) -> list[JetStreamPartition]:
    ranges = planning.split_ranges(start, end, opts.min_partitions, opts.max_records_per_partition)
    return [JetStreamPartition(r.index, r.start, r.end, mode) for r in ranges]


def _read_planned(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, JetStreamPartition):
        # Nothing was planned (an empty stream or range): Spark reads one partition of its
        # own then, with no range, and it has no rows.
        return iter(())
    return read_partition(opts, partition)


def _merge(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    out = Chunk(times_are_ns=chunks[0].times_are_ns)
    for c in chunks:
        out.extend(c)
    return out


def read_partition(opts: ReadOptions, part: JetStreamPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches for one partition, in sequence order. Runs in an executor.

    The wire side runs ahead on the process's loop thread (``_Prefetch``): its requests stay
    in flight while this thread builds Arrow batches and Spark consumes them, and the two
    threads meet once per batch of ``ARROW_ROWS`` rows, not once per answer.
    """
    spec = RangeSpec(
        stream=opts.stream,
        start=part.start,
        end=part.end,
        filter_subject=opts.subjects[0] if len(opts.subjects) == 1 else None,
        filter_subjects=opts.subjects,
        batch=opts.fetch_batch,
        timeout_s=opts.conn.request_timeout_s,
        max_retries=opts.max_read_retries,
        fail_on_data_loss=opts.fail_on_data_loss,
    )
    keep = subject_filter(opts.subjects)
    prefetch = _Prefetch(opts, spec, part.mode)
    try:
        while True:
            chunk = prefetch.next()
            if chunk is None:
                return
            batch = to_record_batch(chunk, opts.stream, opts.include_headers, keep)
            if batch is not None:
                yield batch
    finally:
        prefetch.close()


class _Prefetch:
    """A partition's read, driven on the loop thread ahead of its consumer.

    Chunks are merged into runs of at least ``ARROW_ROWS`` rows and handed over through a
    thread-safe queue; at most ``PREFETCH_RUNS`` runs wait unconsumed, which bounds memory
    (a few megabytes) while the wire never waits for the consumer's turn. An error of the
    read is raised in the consumer's thread; closing early cancels the read and waits for its
    clean-up (its inbox unsubscribed, a consumer deleted).
    """

    def __init__(self, opts: ReadOptions, spec: RangeSpec, mode: str) -> None:
        self.opts = opts
        self.spec = spec
        self.mode = mode
        self.out: queue.SimpleQueue[tuple[Chunk | None, BaseException | None]] = (
            queue.SimpleQueue()
        )
        self.room = asyncio.Semaphore(PREFETCH_RUNS)
        self.finished = threading.Event()
        self.future = loop.submit(self._produce())

    async def _produce(self) -> None:
        try:
            nc = await loop.connection(self.opts.conn)
            read = fetch.read_direct if self.mode == "direct" else fetch.read_consumer
            gen = read(nc, self.spec)
            pending: list[Chunk] = []
            rows = 0
            try:
                async for chunk in gen:
                    if not len(chunk):
                        continue
                    pending.append(chunk)
                    rows += len(chunk)
                    if rows >= ARROW_ROWS:
                        await self.room.acquire()
                        self.out.put((_merge(pending), None))
                        pending, rows = [], 0
            finally:
                aclose = getattr(gen, "aclose", None)
                if aclose is not None:
                    await aclose()
            if pending:
                self.out.put((_merge(pending), None))
            self.out.put((None, None))
        except BaseException as exc:  # cancelled too: the consumer must never wait forever
            self.out.put((None, exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.finished.set()

    def next(self) -> Chunk | None:
        """The next run of rows; None at the end of the range."""
        chunk, exc = self.out.get()
        if exc is not None:
            raise exc
        if chunk is not None:
            loop.call_soon(self.room.release)
        return chunk

    def close(self) -> None:
        if not self.finished.is_set():
            self.future.cancel()
            self.finished.wait(self.spec.timeout_s + 5)


class JetStreamBatchReader(DataSourceReader):  # type: ignore[misc, unused-ignore]
    """``spark.read.format("jetstream")``: bounds are fixed when the reader is created."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.bounds = loop.run_sync(lambda: resolve_bounds(opts))

    def partitions(self) -> list[JetStreamPartition]:
        b = self.bounds
        return _partitions(self.opts, b.start, b.end, b.mode)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_planned(self.opts, partition)


class JetStreamStreamReader(DataSourceStreamReader):  # type: ignore[misc, unused-ignore]
    """``spark.readStream.format("jetstream")``: offsets ``{"seq": next sequence}``.

    On PySpark 4.2+ Spark passes each batch's start offset and a read limit to
    ``latestOffset`` (admission control): ``getDefaultReadLimit`` reports the trigger options,
    and ``ReadAllAvailable`` (which Spark may pass to honour a trigger) overrides them.
    PySpark 4.0/4.1 call ``latestOffset()`` with no arguments; then the reader remembers where
    the next batch starts itself (the initial offset, or the end of the last batch planned or
    committed) and applies ``maxMessagesPerTrigger`` from there; ``minMessagesPerTrigger``
    is refused there, since it needs read limits.

    Spark runs this on the driver in a Python process of its own per query and calls it once
    or more per trigger; each look at the stream is a server round trip. The stream as the
    reader found it when the query started serves the initial offset and AvailableNow's
    target, and the initial offset is resolved once (Spark asks for it again when it plans
    the first batch: a second look at a growing stream would move a "latest" or timestamp
    start past messages the first batch was admitted with). ``reportLatestOffset``, which
    Spark calls right after ``latestOffset``, answers from the look ``latestOffset`` took.
    """

    # The clock that times maxTriggerDelay; tests replace it.
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, opts: ReadOptions) -> None:
        if opts.min_messages_per_trigger is not None and not HAS_READ_LIMITS:
            raise OptionError(
                "option minMessagesPerTrigger needs PySpark 4.2 or newer (streaming read "
                f"limits); this is PySpark {pyspark.__version__}"
            )
        self.opts = opts
        state = loop.run_sync(lambda: _stream_state(opts))
        self.mode = _mode(opts, state)
        self._opened = state  # the stream when the query started
        self._initial: int | None = None
        self._seen: wire.StreamState | None = None  # the last latestOffset's look, unreported
        self.admission = planning.Admission(
            opts.max_messages_per_trigger,
            opts.min_messages_per_trigger,
            opts.max_trigger_delay_s,
        )
        self._cursor: int | None = None
        self._target: int | None = None  # Trigger.AvailableNow: never read past this
        self._last_admitted = self.clock()

    def _initial_seq(self) -> int:
        if self._initial is None:
            state = self._opened
            self._initial = loop.run_sync(
                lambda: _resolve_start(self.opts, self.opts.starting, state)
            )
        return self._initial

    def _latest_next(self) -> int:
        state = self._seen = loop.run_sync(lambda: _stream_state(self.opts))
        latest = state.last_seq + 1
        return latest if self._target is None else min(latest, self._target)

    def initialOffset(self) -> dict[str, int]:
        seq = self._initial_seq()
        if self._cursor is None:
            self._cursor = seq
        return planning.offset(seq)

    def getDefaultReadLimit(self) -> Any:
        if not HAS_READ_LIMITS:  # pragma: no cover - Spark only asks where they exist
            return None
        if self.opts.min_messages_per_trigger is not None:
            return ReadMinRows(self.opts.min_messages_per_trigger)
        if self.opts.max_messages_per_trigger is not None:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, int]:
        if start is None:
            return self._latest_offset_without_limits()
        lo = planning.offset_seq(start, "start offset")
        admission = self._admission_for(limit)
        now = self.clock()
        end = admission.end(lo, self._latest_next(), now - self._last_admitted)
        if end > lo:
            self._last_admitted = now
        return planning.offset(end)

    def _admission_for(self, limit: Any) -> planning.Admission:
        """The trigger options, narrowed by the limit Spark passed for this batch."""
        if limit_all(limit):
            return planning.Admission()  # Spark honours a trigger: everything available
        max_rows = self.admission.max_rows
        min_rows = self.admission.min_rows
        if HAS_READ_LIMITS and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows if max_rows is None else min(max_rows, limit.max_rows)
        elif HAS_READ_LIMITS and isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if self._target is not None:
            min_rows = None  # Trigger.AvailableNow must end: a minimum never holds it back
        return planning.Admission(max_rows, min_rows, self.admission.max_delay_s)

    def _latest_offset_without_limits(self) -> dict[str, int]:
        if self.opts.min_messages_per_trigger is not None:
            # Only a Spark without admission control calls this form: never ignore silently.
            raise OptionError(
                "option minMessagesPerTrigger needs Spark's streaming read limits "
                f"(PySpark 4.2 or newer); this is PySpark {pyspark.__version__}"
            )
        if self._cursor is None:
            # PySpark 4.0 asks a fresh query for the latest offset before the initial one,
            # and a restarted query plans its last logged batch first (partitions() sets the
            # cursor), so an unknown cursor means a fresh query: it starts at the initial one.
            self._cursor = self._initial_seq()
        end = planning.capped_end(
            self._cursor, self._latest_next(), self.opts.max_messages_per_trigger
        )
        return planning.offset(end)

    def reportLatestOffset(self) -> dict[str, int]:
        state, self._seen = self._seen, None
        if state is None:
            state = loop.run_sync(lambda: _stream_state(self.opts))
        return planning.offset(state.last_seq + 1)

    def prepareForTriggerAvailableNow(self) -> None:
        # What was in the stream when the query started is the whole run; later publishes
        # wait for the next run.
        self._target = self._opened.last_seq + 1

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[JetStreamPartition]:
        lo = planning.offset_seq(start, "start offset")
        hi = planning.offset_seq(end, "end offset")
        self._cursor = max(hi, self._cursor or 0)
        return _partitions(self.opts, lo, hi - 1, self.mode)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_planned(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to release on the server: positions live in Spark's checkpoint only.
        seq = planning.offset_seq(end, "committed offset")
        self._cursor = max(seq, self._cursor or 0)


def limit_all(limit: Any) -> bool:
    """Spark asked for everything available, whatever the options say."""
    return HAS_READ_LIMITS and isinstance(limit, ReadAllAvailable)


if HAS_READ_LIMITS:

    class JetStreamAvailableNowReader(JetStreamStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc, unused-ignore]
        """The stream reader with Spark's Trigger.AvailableNow hook (PySpark 4.2+)."""


def stream_reader(opts: ReadOptions) -> JetStreamStreamReader:
    """The stream reader for this PySpark: with the AvailableNow hook where it exists."""
    if HAS_READ_LIMITS:
        return JetStreamAvailableNowReader(opts)
    return JetStreamStreamReader(opts)
