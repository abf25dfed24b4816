"""The header block of a direct-get answer: the one-piece form for messages without headers
must be byte for byte what the general form builds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetraft.jetstream import direct_get
from jetraft.jetstream.api_types import RawReply
from jetraft.jetstream.direct_get import _direct_headers, _pending_tail, direct_answer
from jetraft.jetstream.models import format_time, parse_time
from jetraft.jetstream.msg_get import MsgGetRequest
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.store.types import StoredMsg
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.stream_config import StreamConfig
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


def _reference_batch(
    store: MemoryStore, start: int, batch: int, limit_bytes: int, no_hdr: bool
) -> list[RawReply]:
    """A batch answer built the plain way: one load_next and one _direct_headers per message."""
    out: list[RawReply] = []
    msg = store.load_next(start)
    if msg is None:
        return out
    pending = store.num_pending(start, None)
    sent = sent_bytes = last = 0
    while msg is not None:
        pending = max(pending - 1, 0)
        hdr = None if no_hdr else _direct_headers("ORDERS", msg, _pending_tail(pending, last))
        out.append(RawReply(hdr, msg.data))
        last, sent = msg.seq, sent + 1
        sent_bytes += len(msg.subject) + len(msg.headers or b"") + len(msg.data)
        if sent >= batch or sent_bytes >= limit_bytes:
            break
        msg = store.load_next(msg.seq + 1)
    eob = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last)))
    out.append(RawReply(encode_headers(eob, status=204, description="EOB"), b""))
    return out


@given(
    msgs=st.lists(
        st.tuples(_subjects, st.booleans(), st.binary(max_size=40), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    start=st.integers(0, 45),
    batch=st.integers(1, 50),
    limit_bytes=st.sampled_from([1, 30, 200, 64 * 1024 * 1024]),
    no_hdr=st.booleans(),
    run=st.sampled_from([1, 3, 256]),
)
def test_batch_answers_match_one_load_per_message(
    msgs: list[tuple[str, bool, bytes, bool]],
    start: int,
    batch: int,
    limit_bytes: int,
    no_hdr: bool,
    run: int,
) -> None:
    """A batch loads runs of messages and formats plain ones in one piece: the answers are
    byte for byte those of one load and one general header block per message (stored
    headers, deleted sequences, byte and count bounds included)."""
    store = MemoryStore()
    stored_hdr = encode_headers([("X-Key", "v")])
    for i, (subject, with_hdr, data, delete) in enumerate(msgs):
        seq, _ = store.store(subject, stored_hdr if with_hdr else None, data, 10**18 + i * 7919)
        if delete:
            store.remove(seq)
    want = _reference_batch(store, max(start, 1), batch, limit_bytes, no_hdr)
    req = MsgGetRequest(seq=start, batch=batch, no_hdr=no_hdr)
    saved = direct_get._RUN_MSGS
    direct_get._RUN_MSGS = run  # runs end inside the batch too
    try:
        stream = Stream(StreamConfig(name="ORDERS", subjects=(">",)), store, created_ns=1)
        got = direct_answer(stream, req, None, None, limit_bytes)
        answers = got if isinstance(got, RawReply) else list(got)
    finally:
        direct_get._RUN_MSGS = saved
    if not want:
        assert isinstance(answers, RawReply) and answers.hdr is not None
        assert b" 404 " in answers.hdr
        return
    assert answers == want


def test_batch_answers_across_store_runs() -> None:
    """A batch longer than one store run (and in the compiled build, where the run length
    cannot be patched): deleted sequences at and around the run boundaries, stored headers
    on some messages, answers byte for byte as one load per message gives them."""
    store = MemoryStore()
    hdr = encode_headers([("X-Key", "v")])
    for i in range(700):
        store.store(f"s.{i % 5}", hdr if i % 7 == 0 else None, b"%d" % i, 10**18 + i * 1_000)
    for seq in (1, 2, 256, 257, 258, 512, 513, 600):
        store.remove(seq)
    stream = Stream(StreamConfig(name="ORDERS", subjects=(">",)), store, created_ns=1)
    for start, batch in ((1, 1000), (200, 300), (255, 2), (3, 510)):
        want = _reference_batch(store, start, batch, 64 * 1024 * 1024, False)
        got = direct_answer(stream, MsgGetRequest(seq=start, batch=batch), None, None)
        assert not isinstance(got, RawReply)
        assert list(got) == want
