from __future__ import annotations

import pytest

from jetraft.protocol.headers import HeaderError, encode_headers, header_value, parse_headers
from jetraft.protocol.subjects import (
    filters_overlap,
    is_subset,
    is_valid_filter,
    is_valid_subject,
    subject_matches,
)


@pytest.mark.parametrize("s", ["foo", "foo.bar", "a.b.c.d", "foo*.bar", "$SYS.REQ", "_INBOX.x"])
def test_valid_subjects(s: str) -> None:
    assert is_valid_subject(s) and is_valid_filter(s)


@pytest.mark.parametrize("s", ["", ".", "foo.", ".foo", "foo..bar", "foo bar", "a\tb"])
def test_invalid_everywhere(s: str) -> None:
    assert not is_valid_subject(s) and not is_valid_filter(s)


def test_wildcards_are_filters_not_subjects() -> None:
    assert is_valid_filter("foo.*.bar") and not is_valid_subject("foo.*.bar")
    assert is_valid_filter("foo.>") and not is_valid_filter("foo.>.bar")
    assert is_valid_filter(">") and is_valid_filter("*")


@pytest.mark.parametrize(
    ("f", "s", "ok"),
    [
        ("foo.*", "foo.bar", True),
        ("foo.*", "foo.bar.baz", False),
        ("foo.>", "foo.bar.baz", True),
        ("foo.>", "foo", False),
        (">", "a", True),
        ("*.b", "a.b", True),
        ("foo*", "foox", False),
        ("a.b", "a.b", True),
    ],
)
def test_matching(f: str, s: str, ok: bool) -> None:
    assert subject_matches(f, s) is ok


def test_overlap_and_subset() -> None:
    assert filters_overlap("orders.*", "orders.new")
    assert filters_overlap("orders.>", "*.new.x")
    assert not filters_overlap("orders.*", "orders.a.b")
    assert not filters_overlap("a", "b")
    assert filters_overlap(">", "x.y")
    assert is_subset("orders.new", "orders.*")
    assert is_subset("orders.*", "orders.>")
    assert not is_subset("orders.>", "orders.*")
    assert not is_subset("orders.*", "orders.new")


def test_header_round_trip() -> None:
    block = encode_headers([("A", "1"), ("A", "2"), ("Nats-Msg-Id", "x")])
    h = parse_headers(block)
    assert h.status is None and h.get_all("A") == ["1", "2"] and h.get("nats-msg-id") == "x"
    assert header_value(block, "Nats-Msg-Id") == "x"
    status = encode_headers({"Nats-Subject": "svc"}, status=503)
    assert status == b"NATS/1.0 503\r\nNats-Subject: svc\r\n\r\n"
    assert parse_headers(b"NATS/1.0 408 Request Timeout\r\n\r\n").description == "Request Timeout"
    with pytest.raises(HeaderError):
        parse_headers(b"HTTP/1.1 200\r\n\r\n")
