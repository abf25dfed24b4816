"""The header block of a direct-get answer: the one-piece form for messages without headers
must be byte for byte what the general form builds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from jetraft.jetstream.direct_get import _direct_headers
from jetraft.jetstream.models import format_time, parse_time
from jetraft.jetstream.store.types import StoredMsg
from jetraft.protocol.headers import encode_headers, parse_headers

_subjects = st.from_regex(r"[a-z0-9_-]{1,8}(\.[a-z0-9_-]{1,8}){0,3}", fullmatch=True)


@given(
    subject=_subjects,
    seq=st.integers(1, 2**63),
    ts_ns=st.integers(0, 4_000_000_000 * 10**9),
    pending=st.integers(0, 10**9),
)
def test_plain_message_block_matches_the_general_encoder(
    subject: str, seq: int, ts_ns: int, pending: int
) -> None:
    stream: Any = SimpleNamespace(name="ORDERS")
    extra = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(seq - 1)))
    msg = StoredMsg(seq, subject, None, b"payload", ts_ns)
    expected = encode_headers(
        [
            ("Nats-Stream", "ORDERS"),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", format_time(ts_ns)),
            *extra,
        ]
    )
    block = _direct_headers(stream, msg, extra)
    assert block == expected
    assert dict(parse_headers(block).items)["Nats-Subject"] == subject
    if ts_ns > 0:
        assert parse_time(format_time(ts_ns)) == ts_ns  # the cached seconds stay exact
