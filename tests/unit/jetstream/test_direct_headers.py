"""The header block of a direct-get answer: the one-piece form for messages without headers
must be byte for byte what the general form builds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetraft.jetstream.direct_get import _direct_headers, _pending_tail
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
    block = _direct_headers("ORDERS", msg, _pending_tail(pending, seq - 1))
    assert block == expected
    assert dict(parse_headers(block).items)["Nats-Subject"] == subject
    if ts_ns > 0:
        assert parse_time(format_time(ts_ns)) == ts_ns  # the cached seconds stay exact


_names = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,10}", fullmatch=True)
_values = st.from_regex(r"[ -~]{0,12}", fullmatch=True).map(str.strip)


@given(
    items=st.lists(st.tuples(_names, _values), max_size=4),
    status=st.sampled_from([None, 503]),
    seq=st.integers(1, 2**40),
)
def test_stored_headers_come_first_then_ours(
    items: list[tuple[str, str]], status: int | None, seq: int
) -> None:
    """Stored headers are kept as stored (repeated names and a status line too) and the
    direct-get headers follow: what the general encoder builds from both lists."""
    stored = encode_headers(items, status=status, description="x" if status else "")
    extra = (("Nats-Num-Pending", "3"), ("Nats-Last-Sequence", str(seq - 1)))
    msg = StoredMsg(seq, "a.b", stored, b"payload", 1_700_000_000_123_456_789)
    ours = [
        ("Nats-Stream", "ORDERS"),
        ("Nats-Subject", "a.b"),
        ("Nats-Sequence", str(seq)),
        ("Nats-Time-Stamp", format_time(msg.ts_ns)),
        *extra,
    ]
    block = _direct_headers("ORDERS", msg, _pending_tail(3, seq - 1))
    description = "x" if status else ""
    assert block == encode_headers([*items, *ours], status=status, description=description)
    parsed = parse_headers(block)
    assert parsed.status == status
    assert list(parsed.items) == [*items, *ours]
