"""The sink's encoding of rows into messages, a column at a time (no server, no Spark
session): the header blocks must be byte for byte what the general encoder builds."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jetraft.spark.codec import encode_header_block
from jetraft.spark.options import parse_write_options
from jetraft.spark.writer import _arrow_columns, _Encoder, _row_columns

pytestmark = pytest.mark.spark


def _encoder(**opts: str) -> _Encoder:
    return _Encoder(parse_write_options(opts), "q1", "7", 2)


def _block(*items: tuple[str, str]) -> bytes:
    return encode_header_block(list(items))


def test_row_index_ids_and_expected_stream() -> None:
    enc = _encoder(stream="ORDERS")
    cols: dict[str, list[Any]] = {"subject": ["a.b", "a.c"], "data": [b"x", None]}
    subjects, headers, payloads = enc.encode(cols, 40, 2)
    assert subjects == [b"a.b", b"a.c"]
    assert payloads == [b"x", b""]
    assert headers == [
        _block(("Nats-Msg-Id", "q1:7:2:40"), ("Nats-Expected-Stream", "ORDERS")),
        _block(("Nats-Msg-Id", "q1:7:2:41"), ("Nats-Expected-Stream", "ORDERS")),
    ]


def test_ids_from_columns_fall_back_per_row() -> None:
    enc = _encoder(subject="out.x", msgIdColumn="key")
    cols: dict[str, list[Any]] = {
        "data": ["text", b"bin", 5],
        "key": ["k-1\r\nInjected: yes", None, None],
        "stream": [None, "SRC", None],
        "sequence": [None, 12, None],
    }
    subjects, headers, payloads = enc.encode(cols, 0, 3)
    assert subjects == [b"out.x"] * 3
    assert payloads == [b"text", b"bin", b"5"]
    assert headers == [
        _block(("Nats-Msg-Id", "k-1  Injected: yes")),  # CR/LF never reach the wire
        _block(("Nats-Msg-Id", "SRC:12")),
        _block(("Nats-Msg-Id", "q1:7:2:2")),
    ]


def test_user_headers_keep_every_value_and_come_first() -> None:
    enc = _encoder()
    cols: dict[str, list[Any]] = {
        "subject": ["s", "s"],
        "data": [b"1", b"2"],
        "headers": [{"Trace": ["a", "b"], "Kind": "x"}, None],
    }
    _, headers, _ = enc.encode(cols, 0, 2)
    assert headers[0] == _block(
        ("Trace", "a"), ("Trace", "b"), ("Kind", "x"), ("Nats-Msg-Id", "q1:7:2:0")
    )
    assert headers[1] == _block(("Nats-Msg-Id", "q1:7:2:1"))
    with pytest.raises(ValueError, match="invalid header name"):
        enc.encode({"subject": ["s"], "data": [b""], "headers": [{"bad name": "v"}]}, 0, 1)


def test_rows_without_subject_fail() -> None:
    with pytest.raises(ValueError, match="row 3 of partition 2 has no subject"):
        _encoder().encode({"subject": [None], "data": [b""]}, 3, 1)


def test_arrow_and_row_inputs_give_the_same_columns() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"subject": ["a", "b"], "data": ["é", "x"]},
        schema=pa.schema([("subject", pa.string()), ("data", pa.string())]),
    )
    arrow = list(_arrow_columns(iter([batch])))
    assert arrow == [({"subject": ["a", "b"], "data": ["é".encode(), b"x"]}, 2)]

    class Row(dict[str, Any]):
        def asDict(self, recursive: bool = False) -> dict[str, Any]:  # Spark Row API
            return dict(self)

    rows = list(_row_columns(iter([Row(subject="a", data=b"1"), Row(subject="b")]), 1))
    assert rows == [({"subject": ["a"], "data": [b"1"]}, 1), ({"subject": ["b"]}, 1)]
