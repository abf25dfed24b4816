"""The pull waiting queue (statuses, expiry, max_bytes) and the persisted consumer state."""

from __future__ import annotations

import pytest

from jetraft.jetstream import consumer_state
from jetraft.jetstream.acks import parse_nak_delay
from jetraft.jetstream.consumer import Acked, ConsumerCore, Delivered, Start
from jetraft.jetstream.consumer_config import ConsumerConfig, StreamFacts, apply_defaults
from jetraft.jetstream.pull import WaitingRequest, WaitQueue, heartbeat_hdr
from jetraft.protocol.headers import parse_headers

SEC = 1_000_000_000


def req(
    reply: str, n: int = 1, b: int = 0, expires: int = 0, no_wait: bool = False, hb: int = 0
) -> WaitingRequest:
    return WaitingRequest(reply, n, b, expires, no_wait, hb, hb, 0)


def everyone(_: str) -> bool:
    return True


def described(hdr: bytes) -> tuple[int | None, str, dict[str, list[str]]]:
    h = parse_headers(hdr)
    return h.status, h.description, h.as_dict()


def test_requests_take_turns_and_complete_at_batch() -> None:
    q = WaitQueue(max_waiting=2)
    assert q.add(req("a", n=2)) and q.add(req("b"))
    assert not q.add(req("c"))  # full
    got = [q.take(10, 0, everyone)[0] for _ in range(3)]
    assert [w.reply if w else None for w in got] == ["a", "b", "a"]
    assert len(q) == 0
    assert q.take(10, 0, everyone) == (None, [])


def test_expiry_gives_408_with_pending_counts() -> None:
    q = WaitQueue(max_waiting=10)
    q.add(req("a", n=5, b=100, expires=5 * SEC))
    q.take(10, SEC, everyone)
    assert q.process(4 * SEC, False, everyone) == []
    (st,) = q.process(5 * SEC, False, everyone)
    assert st.reply == "a"
    code, desc, items = described(st.hdr)
    assert (code, desc) == (408, "Request Timeout")
    assert items == {"Nats-Pending-Messages": ["4"], "Nats-Pending-Bytes": ["90"]}


def test_no_wait_ends_at_end_of_stream_with_404() -> None:
    q = WaitQueue(max_waiting=10)
    q.add(req("a", n=5, no_wait=True))
    q.add(req("b", n=5, no_wait=True, expires=9 * SEC))
    q.add(req("c", n=5))
    statuses = q.process(SEC, True, everyone)
    assert [(s.reply, described(s.hdr)[:2]) for s in statuses] == [("a", (404, "No Messages"))]
    # A no_wait request with expiry that already got messages also ends at end of stream.
    q.take(1, SEC, everyone)
    statuses = q.process(SEC, True, everyone)
    assert [s.reply for s in statuses] == ["b"]
    assert [w.reply for w in q.reqs] == ["c"]


def test_max_bytes_too_small_gives_409_and_next_request_serves() -> None:
    q = WaitQueue(max_waiting=10)
    q.add(req("small", n=5, b=50))
    q.add(req("big", n=5))
    wr, statuses = q.take(80, 0, everyone)
    assert wr is not None and wr.reply == "big"
    assert [(s.reply, described(s.hdr)[:2]) for s in statuses] == [
        ("small", (409, "Message Size Exceeds MaxBytes"))
    ]


def test_lost_interest_drops_request_silently() -> None:
    q = WaitQueue(max_waiting=10)
    q.add(req("gone"))
    q.add(req("here"))
    wr, statuses = q.take(1, 0, lambda r: r == "here")
    assert wr is not None and wr.reply == "here" and statuses == []


def test_heartbeats_and_deadline() -> None:
    q = WaitQueue(max_waiting=10)
    q.add(WaitingRequest("a", 1, 0, 10 * SEC, False, 2 * SEC, 2 * SEC, 0))
    assert q.next_deadline() == 2 * SEC
    (hb,) = q.heartbeats(2 * SEC, lambda: heartbeat_hdr(3, 7))
    code, desc, items = described(hb.hdr)
    assert (code, desc) == (100, "Idle Heartbeat")
    assert items == {"Nats-Last-Consumer": ["3"], "Nats-Last-Stream": ["7"]}
    assert q.next_deadline() == 4 * SEC


def _core() -> ConsumerCore:
    cfg = apply_defaults(
        ConsumerConfig(durable_name="D", ack_policy="explicit", filter_subject="s.a"),
        StreamFacts(name="S", subjects=("s.>",)),
    )
    core = ConsumerCore("S", "D", cfg, created_ns=42)
    core.apply(Start(1))
    for i in range(1, 4):
        core.apply(Delivered(i, i, 1, i * SEC))
    core.apply(Delivered(4, 2, 2, 9 * SEC))
    core.apply(Acked(1, 1))
    return core


def test_state_round_trip_keeps_floors_and_pending() -> None:
    core = _core()
    blob = consumer_state.encode(consumer_state.snapshot(core))
    back = consumer_state.restore(consumer_state.decode(blob))
    assert back.cfg == core.cfg and back.created_ns == 42
    assert consumer_state.snapshot(back) == consumer_state.snapshot(core)
    assert (back.sseq, back.dseq) == (4, 5)
    assert back.state.redelivered == {2: 1}


@pytest.mark.parametrize("cut", [3, 11, -1])
def test_corrupt_state_is_reported(cut: int) -> None:
    blob = consumer_state.encode(consumer_state.snapshot(_core()))
    bad = blob[:cut] if cut > 0 else blob[:-5] + b"XXXXX"
    with pytest.raises(consumer_state.CorruptState):
        consumer_state.decode(bad)


@pytest.mark.parametrize(
    ("arg", "ns"),
    [
        (b"", None),
        (b'{"delay": 5000000000}', 5 * SEC),
        (b'{"delay": "soon"}', None),
        (b"{broken", None),
        (b"1.5s", 1_500_000_000),
        (b"2m30s", 150 * SEC),
        (b"250ms", 250_000_000),
        (b"10", None),
        (b"5 s", None),
    ],
)
def test_nak_delay_forms(arg: bytes, ns: int | None) -> None:
    assert parse_nak_delay(arg) == ns
