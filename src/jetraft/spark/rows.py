"""The source's schema and the Arrow record batches handed to Spark (no sockets).

Spark checks a returned RecordBatch against the declared schema by column names and reads it
with the Arrow types Spark maps its own types to (timestamp[us, UTC], map<string, list>), so
the batches are built with exactly those types.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jetraft.spark.codec import parse_header_block, subject_matches, user_headers
from jetraft.spark.fetch import Chunk

HEADERS_TYPE = MapType(StringType(), ArrayType(StringType(), True), True)
_ARROW_HEADERS = pa.map_(pa.string(), pa.list_(pa.string()))
_ARROW_TS = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of ``source_schema``, nullability included (Spark 4.2+ checks it)."""
    fields = [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("timestamp", _ARROW_TS, nullable=False),
        pa.field("data", pa.binary()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _ARROW_HEADERS))
    return pa.schema(fields)


_ARROW_SCHEMAS = {flag: arrow_schema(flag) for flag in (False, True)}


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("stream", StringType(), False),
        StructField("subject", StringType(), False),
        StructField("sequence", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("data", BinaryType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


def subject_filter(subjects: tuple[str, ...]) -> Callable[[bytes], bool] | None:
    """Client-side filter for several subject filters (one is applied by the server); the
    answer is remembered per subject (streams have few distinct subjects per filter)."""
    if len(subjects) <= 1:
        return None
    seen: dict[bytes, bool] = {}

    def keep(subject: bytes) -> bool:
        hit = seen.get(subject)
        if hit is None:
            text = subject.decode("utf-8", "replace")
            hit = any(subject_matches(p, text) for p in subjects)
            if len(seen) < 100_000:
                seen[subject] = hit
        return hit

    return keep


def _times(chunk: Chunk) -> pa.Array:
    """Whole-column conversions in Arrow: epoch ns ints, or RFC 3339 text (bytes)."""
    if chunk.times_are_ns:
        ns = pa.array(chunk.times, type=pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    else:
        text = pa.array(chunk.times, type=pa.binary()).cast(pa.string())
        ns = text.cast(pa.timestamp("ns", tz="UTC"))
    return ns.cast(_ARROW_TS, safe=False)


def _headers(raw: list[bytes | None]) -> pa.Array:
    values: list[list[tuple[str, list[str]]] | None] = []
    for block in raw:
        if not block:
            values.append(None)
            continue
        parsed = user_headers(parse_header_block(block))
        values.append(list(parsed.items()) if parsed else None)
    return pa.array(values, type=_ARROW_HEADERS)


def _select(chunk: Chunk, keep: Callable[[bytes], bool]) -> Chunk:
    out = Chunk(times_are_ns=chunk.times_are_ns)
    for i, subject in enumerate(chunk.subjects):
        if keep(subject):
            out.seqs.append(chunk.seqs[i])
            out.subjects.append(subject)
            out.times.append(chunk.times[i])
            out.data.append(chunk.data[i])
            out.headers.append(chunk.headers[i])
    return out


def to_record_batch(
    chunk: Chunk,
    stream: str,
    include_headers: bool,
    keep: Callable[[bytes], bool] | None = None,
) -> pa.RecordBatch | None:
    """Arrow batch for a chunk (after the optional client-side subject filter); None if empty."""
    if keep is not None:
        chunk = _select(chunk, keep)
    n = len(chunk)
    if n == 0:
        return None
    arrays = [
        pa.array([stream] * n, type=pa.string()),
        pa.array(chunk.subjects, type=pa.binary()).cast(pa.string()),  # checks the UTF-8
        pa.array(chunk.seqs, type=pa.int64()),
        _times(chunk),
        pa.array(chunk.data, type=pa.binary()),
    ]
    if include_headers:
        arrays.append(_headers(chunk.headers))
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMAS[include_headers])
