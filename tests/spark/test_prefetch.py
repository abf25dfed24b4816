"""A partition's read runs ahead of its consumer on the loop thread (``reader._Prefetch``):
rows in order and complete, errors raised where the rows are taken, a bounded lead, and an
early stop that closes the read. No server: the wire read is replaced by a fake."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest

from jetraft.spark import fetch, loop, reader
from jetraft.spark.fetch import Chunk
from jetraft.spark.options import parse_read_options

CHUNK = 1000


def _chunk(first: int, n: int) -> Chunk:
    seqs = list(range(first, first + n))
    return Chunk(
        seqs=seqs,
        subjects=[b"s.a"] * n,
        times=[b"2026-01-01T00:00:00Z"] * n,
        data=[b"%d" % s for s in seqs],
        headers=[None] * n,
    )


class FakeRead:
    """Stands in for fetch.read_direct: ``total`` rows in chunks, optionally failing after
    ``fail_after`` chunks; counts what was pulled and whether it was closed."""

    def __init__(self, total: int | None, fail_after: int | None = None) -> None:
        self.total = total
        self.fail_after = fail_after
        self.pulled = 0
        self.closed = threading.Event()

    async def __call__(self, nc: Any, spec: fetch.RangeSpec) -> AsyncIterator[Chunk]:
        try:
            first = spec.start
            while self.total is None or first <= self.total:
                if self.fail_after is not None and self.pulled >= self.fail_after:
                    raise fetch.DataLossError("sequences removed before they were read")
                n = CHUNK if self.total is None else min(CHUNK, self.total - first + 1)
                self.pulled += 1
                yield _chunk(first, n)
                first += n
        finally:
            self.closed.set()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    async def _connection(opts: Any) -> object:
        return object()

    monkeypatch.setattr(loop, "connection", _connection)
    yield


def _partition_rows(
    read: FakeRead, end: int, monkeypatch: pytest.MonkeyPatch
) -> Generator[Any, None, None]:
    monkeypatch.setattr(fetch, "read_direct", read)
    opts = parse_read_options({"stream": "S"}, streaming=False)
    yield from reader.read_partition(opts, reader.JetStreamPartition(0, 1, end, "direct"))


def test_rows_arrive_complete_and_in_order(fake: None, monkeypatch: pytest.MonkeyPatch) -> None:
    total = 3 * reader.ARROW_ROWS + 123
    batches = list(_partition_rows(FakeRead(total), total, monkeypatch))
    seqs = [s for b in batches for s in b.column("sequence").to_pylist()]
    assert seqs == list(range(1, total + 1))
    # Whole runs of at least ARROW_ROWS rows, the rest in the last batch.
    assert all(b.num_rows >= reader.ARROW_ROWS for b in batches[:-1])


def test_an_error_of_the_read_is_raised_to_the_consumer(
    fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = FakeRead(None, fail_after=40)
    with pytest.raises(fetch.DataLossError, match="removed"):
        for _ in _partition_rows(read, 10**9, monkeypatch):
            pass
    assert read.closed.wait(5)


def test_the_read_runs_ahead_a_bounded_way_and_stops_when_closed(
    fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = FakeRead(None)  # endless
    rows = _partition_rows(read, 10**9, monkeypatch)
    first = next(rows)
    assert first.column("sequence")[0].as_py() == 1
    runs_ahead = reader.PREFETCH_RUNS + 2  # those waiting, the one taken, one being merged
    bound = runs_ahead * (reader.ARROW_ROWS // CHUNK + 1)
    # A bounded negative wait: given time, the producer still must not pass its bound.
    threading.Event().wait(0.3)
    assert read.pulled <= bound
    rows.close()
    assert read.closed.wait(5)
