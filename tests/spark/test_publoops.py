"""The sink's per-message loops (``spark/_publoops``, compiled in the optional build) against
what they stand for, written out the plain way: the frames a server parses, the PubAcks
matched to the messages in flight, the payloads of every kind of column value."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.spark._publoops import (
    Item,
    as_bytes,
    hpub_frames,
    id_headers,
    payload_list,
    take_acks,
)

PREFIX = b"_INBOX.t."
HPUB = re.compile(rb"HPUB (\S+) (\S+) (\d+) (\d+)\r\n")


def _parse(frames: bytes) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """(subject, reply, header block, payload) of each HPUB frame, as a server reads them."""
    out, pos = [], 0
    while pos < len(frames):
        m = HPUB.match(frames, pos)
        assert m is not None, frames[pos : pos + 80]
        hlen, total = int(m[3]), int(m[4])
        body = frames[m.end() : m.end() + total]
        assert frames[m.end() + total : m.end() + total + 2] == b"\r\n"
        out.append((m[1], m[2], body[:hlen], body[hlen:]))
        pos = m.end() + total + 2
    return out


messages = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"s.b.c"]),
        st.binary(max_size=40).map(lambda b: b"NATS/1.0\r\nX: %s\r\n\r\n" % b.hex().encode()),
        st.binary(max_size=60),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_frames_carry_each_message_under_its_own_token(
    msgs: list[tuple[bytes, bytes, bytes]], data: st.DataObject
) -> None:
    subjects, headers, payloads = (list(c) for c in zip(*msgs, strict=True))
    lo = data.draw(st.integers(0, len(msgs) - 1))
    hi = data.draw(st.integers(lo + 1, len(msgs)))
    budget = data.draw(st.integers(1, 3000))
    inflight: dict[int, Item] = {}
    frames, k, size = hpub_frames(
        subjects, headers, payloads, lo, hi, budget, PREFIX, 41, 9.5, inflight
    )
    # As many as fit the budget, the one that crosses it included, at least one.
    want = 0
    taken = 0
    for i in range(lo, hi):
        want += 1
        taken += len(headers[i]) + len(payloads[i])
        if taken >= budget:
            break
    assert (k, size) == (want, taken)
    sent = _parse(frames)
    assert sent == [
        (subjects[i], PREFIX + b"%d" % (42 + i - lo), headers[i], payloads[i])
        for i in range(lo, lo + k)
    ]
    assert inflight == {
        42 + i - lo: (subjects[i], headers[i], payloads[i], 1, 9.5) for i in range(lo, lo + k)
    }


def test_id_headers_are_the_row_index_blocks() -> None:
    assert id_headers(b"w:0:3:", 98, 3, b"Nats-Expected-Stream: S\r\n") == [
        b"NATS/1.0\r\nNats-Msg-Id: w:0:3:%d\r\nNats-Expected-Stream: S\r\n\r\n" % i
        for i in (98, 99, 100)
    ]


answers = st.lists(
    st.tuples(
        st.integers(0, 12),  # token (not all in flight)
        st.sampled_from(
            [
                b'{"stream":"S","seq":5}',
                b'{"stream":"S","seq":5,"duplicate":true}',
                b'{"error":{"code":503,"err_code":10008,"description":"x"}}',
                b"",  # a bare status
                b"not json",
            ]
        ),
        st.sampled_from([b"", b"NATS/1.0 503\r\n\r\n"]),
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(answers)
def test_acks_are_matched_and_sorted_as_one_by_one(got: list[tuple[int, bytes, bytes]]) -> None:
    inflight: dict[int, Item] = {
        t: (b"s", b"h" * t, b"p" * (2 * t), 1, 0.0) for t in range(1, 10)
    }
    expected_left = dict(inflight)
    acked = dups = size = 0
    others = []
    for token, body, hdr in got:  # the checks written out, one answer at a time
        item = expected_left.pop(token, None)
        if item is None:
            continue
        if body.startswith(b"{") and b'"error"' not in body:
            acked += 1
            dups += b'"duplicate":true' in body
            size += len(item[1]) + len(item[2])
        else:
            others.append((item, hdr, body))
    frames = [(PREFIX + b"%d" % t, b"", hdr, body) for t, body, hdr in got]
    frames.append((PREFIX + b"x", b"", b"", b"{}"))  # not a token: ignored
    run = take_acks(frames, inflight, len(PREFIX))
    assert (run.acked, run.done, run.duplicates, run.size) == (acked, acked, dups, size)
    assert run.others == others
    assert inflight == expected_left


def test_payloads_of_every_column_value() -> None:
    values: list[Any] = [b"a", None, "é", bytearray(b"b"), memoryview(b"c"), 7]
    assert payload_list(values) == [b"a", b"", "é".encode(), b"b", b"c", b"7"]
    assert [as_bytes(v) for v in values] == payload_list(values)
    plain: list[Any] = [b"x", b"y"]
    assert payload_list(plain) is plain  # nothing to convert: no copy
