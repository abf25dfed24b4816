"""The connector's bulk wire paths without a server: the replacement protocol parser, the
direct-get and pull-consumer collectors, and the publisher's PubAck handling."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.errors import ProtocolError

from jetraft.spark import fetch
from jetraft.spark.bulkparse import BulkParser, Frame
from jetraft.spark.publish import Publisher, PublishError, check_subject

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def _main() -> T:
        return await factory()

    return asyncio.run(_main())


class FakeNc:
    """Records what the parser hands to nats-py's client methods, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None
    ) -> None:
        self.calls.append(("msg", sid, subject, reply, data, hdr))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_err(self, text: str) -> None:
        self.calls.append(("err", text))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.calls.append(("info", info))


def _msg(subject: str, sid: int, data: bytes, reply: str = "", hdr: bytes = b"") -> bytes:
    r = f" {reply}" if reply else ""
    if hdr:
        head = f"HMSG {subject} {sid}{r} {len(hdr)} {len(hdr) + len(data)}\r\n".encode()
        return head + hdr + data + b"\r\n"
    return f"MSG {subject} {sid}{r} {len(data)}\r\n".encode() + data + b"\r\n"


HDR = b"NATS/1.0\r\nA: 1\r\n\r\n"
WIRE = b"".join(
    [
        b'INFO {"server_id":"x"}\r\n',
        _msg("a.b", 7, b"one", hdr=HDR),
        _msg("a.c", 7, b"two\r\nwith CRLF", reply="r.1"),
        b"PING\r\n",
        _msg("z", 3, b"plain", reply="inbox.9"),
        _msg("a.d", 7, b""),
        b"+OK\r\n",
        _msg("z", 3, b"h", hdr=HDR),
        _msg("a.e", 7, b"three"),
        b"PONG\r\n-ERR 'Authorization Violation'\r\n",
    ]
)
EXPECTED = [
    ("info", {"server_id": "x"}),
    ("bulk", [(b"a.b", b"", HDR, b"one"), (b"a.c", b"r.1", b"", b"two\r\nwith CRLF")]),
    ("ping",),
    ("msg", 3, b"z", b"inbox.9", b"plain", None),
    ("bulk", [(b"a.d", b"", b"", b"")]),
    ("msg", 3, b"z", b"", b"h", HDR),
    ("bulk", [(b"a.e", b"", b"", b"three")]),
    ("pong",),
    ("err", "'authorization violation'"),
]


def _parser() -> tuple[BulkParser, FakeNc]:
    nc = FakeNc()
    parser = BulkParser(nc)
    parser.sinks[7] = lambda frames: nc.calls.append(("bulk", list(frames)))
    return parser, nc


def _merged(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Consecutive bulk runs joined: where a read ends splits a run, nothing else may."""
    out: list[tuple[Any, ...]] = []
    for call in calls:
        if call[0] == "bulk" and out and out[-1][0] == "bulk":
            out[-1] = ("bulk", out[-1][1] + call[1])
        else:
            out.append(call)
    return out


def test_parser_keeps_wire_order_whole_buffer() -> None:
    parser, nc = _parser()
    run(lambda: parser.parse(WIRE))
    assert nc.calls == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_parser_any_read_boundaries(size: int) -> None:
    parser, nc = _parser()

    async def feed() -> None:
        for i in range(0, len(WIRE), size):
            await parser.parse(WIRE[i : i + size])

    run(feed)
    assert _merged(nc.calls) == EXPECTED


def test_large_payload_arrives_in_pieces() -> None:
    parser, nc = _parser()
    big = bytes(range(256)) * 4000
    wire = _msg("big", 7, big) + _msg("after", 7, b"x")

    async def feed() -> None:
        for i in range(0, len(wire), 32768):
            await parser.parse(wire[i : i + 32768])

    run(feed)
    assert _merged(nc.calls) == [("bulk", [(b"big", b"", b"", big), (b"after", b"", b"", b"x")])]


def test_a_failing_sink_does_not_stop_the_connection() -> None:
    parser, nc = _parser()

    def boom(frames: list[Frame]) -> None:
        raise RuntimeError("bug in a sink")

    parser.sinks[5] = boom
    run(lambda: parser.parse(_msg("x", 5, b"lost") + _msg("y", 7, b"kept") + b"PING\r\n"))
    assert nc.calls == [("bulk", [(b"y", b"", b"", b"kept")]), ("ping",)]


def test_reset_drops_what_was_buffered() -> None:
    parser, nc = _parser()
    whole = _msg("a", 7, b"0123456789")
    run(lambda: parser.parse(whole[:15]))
    parser.reset()  # a reconnect: the rest of that frame will never come
    run(lambda: parser.parse(_msg("b", 7, b"new")))
    assert nc.calls == [("bulk", [(b"b", b"", b"", b"new")])]


@pytest.mark.parametrize(
    "line", [b"MSG a notanumber 3\r\nabc\r\n", b"HMSG a 1 2\r\n", b"BOGUS stuff\r\n"]
)
def test_malformed_input_is_a_protocol_error(line: bytes) -> None:
    parser, _ = _parser()
    with pytest.raises(ProtocolError):
        run(lambda: parser.parse(line))


def test_frames_before_a_malformed_line_are_handed_on_first() -> None:
    parser, nc = _parser()
    wire = _msg("a", 7, b"kept") + b"PING\r\n" + _msg("b", 7, b"too") + b"MSG x y z\r\n"
    with pytest.raises(ProtocolError):
        run(lambda: parser.parse(wire))
    assert nc.calls == [
        ("bulk", [(b"a", b"", b"", b"kept")]),
        ("ping",),
        ("bulk", [(b"b", b"", b"", b"too")]),
    ]


_ITEM = st.one_of(
    st.tuples(
        st.sampled_from([3, 7, 8]),  # 7 and 8 have bulk sinks, 3 goes to nats-py
        st.sampled_from(["a", "b.c", "_INBOX.x.1"]),
        st.binary(max_size=40),
        st.sampled_from(["", "r.1"]),
        st.sampled_from([b"", HDR, b"NATS/1.0 204 EOB\r\n\r\n"]),
    ),
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n"]),
)


@given(items=st.lists(_ITEM, max_size=12), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_parser_hands_on_any_wire_in_order(items: list[Any], cuts: list[int]) -> None:
    """Any mix of messages for bulk sinks and for nats-py and control lines, read in any
    pieces: each bulk sink gets its frames and nats-py everything else, all in wire order."""
    nc = FakeNc()
    parser = BulkParser(nc)
    for sid in (7, 8):
        parser.sinks[sid] = lambda frames, sid=sid: nc.calls.append(("bulk", sid, list(frames)))
    wire = b""
    want: list[tuple[Any, ...]] = []
    for item in items:
        if isinstance(item, bytes):
            wire += item
            want.append(("ping",) if item == b"PING\r\n" else ("pong",))
            if item == b"+OK\r\n":
                want.pop()
            continue
        sid, subject, data, reply, hdr = item
        wire += _msg(subject, sid, data, reply=reply, hdr=hdr)
        if sid == 3:
            want.append(("msg", 3, subject.encode(), reply.encode(), data, hdr or None))
        elif want and want[-1][:2] == ("bulk", sid):
            want[-1][2].append((subject.encode(), reply.encode(), hdr, data))
        else:
            want.append(("bulk", sid, [(subject.encode(), reply.encode(), hdr, data)]))
    bounds = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})

    async def feed() -> None:
        for lo, hi in itertools.pairwise(bounds):
            await parser.parse(wire[lo:hi])

    run(feed)
    got: list[tuple[Any, ...]] = []
    for call in nc.calls:  # where a read ends may split a run, nothing else may
        if call[0] == "bulk" and got and got[-1][:2] == call[:2]:
            got[-1] = ("bulk", call[1], got[-1][2] + call[2])
        else:
            got.append(call)
    assert got == want


# -- direct get collector -------------------------------------------------------------------


def _direct(seq: int, subject: str, stored: bytes = b"", order: str = "jetraft") -> Frame:
    base = stored[:-2] if stored else b"NATS/1.0\r\n"
    lines = {
        "Nats-Stream": "S",
        "Nats-Subject": subject,
        "Nats-Sequence": str(seq),
        "Nats-Time-Stamp": f"2026-01-02T03:04:05.{seq:09d}Z",
    }
    keys = list(lines) if order == "jetraft" else sorted(lines)
    hdr = base + b"".join(f"{k}: {lines[k]}\r\n".encode() for k in keys) + b"\r\n"
    return (b"_INBOX.x.1", b"", hdr, f"m{seq}".encode())


def test_collector_reads_columns_and_ends_at_the_status() -> None:
    async def go() -> fetch._Collector:
        col = fetch._Collector(end=3)
        # A stored header that looks like ours must not be taken for the server's.
        stored = b"NATS/1.0\r\nNats-Sequence: 999\r\nKind: x\r\n\r\n"
        frames = [
            _direct(1, "a.b"),
            _direct(2, "a.c", stored, order="other"),
            _direct(3, "a.b"),
            _direct(4, "a.b"),  # beyond the range end: counted, never returned
            (b"_INBOX.x.1", b"", b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 5\r\n\r\n", b""),
            _direct(5, "late"),
        ]
        col.take(frames, 0, 3)
        col.take(frames, 3, len(frames))
        return col

    col = run(go)
    assert col.chunk.seqs == [1, 2, 3]
    assert col.chunk.subjects == [b"a.b", b"a.c", b"a.b"]
    assert col.chunk.times[1] == b"2026-01-02T03:04:05.000000002Z"
    assert col.chunk.data == [b"m1", b"m2", b"m3"]
    assert (col.last, col.count, col.status, col.pending) == (4, 4, 204, 5)
    assert col.done.done()


_NAMES = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "X-Other"]
_VALUES = st.sampled_from(["a.b", "7", "12345", "2026-01-02T03:04:05Z", "x y", ""])


@given(
    stored=st.lists(st.tuples(st.sampled_from(_NAMES), _VALUES), max_size=4),
    ours=st.permutations(_NAMES[:4]),
    seq=st.integers(0, 2**63),
    counters=st.booleans(),
    pad=st.sampled_from(["", " ", "  "]),
)
def test_collector_fast_path_reads_what_the_general_reader_reads(
    stored: list[tuple[str, str]], ours: list[str], seq: int, counters: bool, pad: str
) -> None:
    """However a header block is laid out (stored headers named like ours, our headers in
    any order, batch counters or not, odd spacing), the collector places the message by the
    same subject, sequence and time stamp as the general reader (the last of each name)."""
    values = {
        "Nats-Stream": "S",
        "Nats-Subject": "orders.new",
        "Nats-Sequence": str(seq),
        "Nats-Time-Stamp": "2026-01-02T03:04:05.000000001Z",
    }
    lines = [f"{k}: {v}" for k, v in stored] + [f"{k}:{pad} {values[k]}{pad}" for k in ours]
    if counters:
        lines += ["Nats-Num-Pending: 3", "Nats-Last-Sequence: 9"]
    hdr = ("NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode()
    want = fetch._fields(hdr)

    async def go() -> fetch._Collector:
        col = fetch._Collector(end=2**63)
        col.take([(b"_INBOX.x.1", b"", hdr, b"data")], 0, 1)
        return col

    col = run(go)
    assert want is not None  # our own headers are always there
    assert (col.chunk.subjects, col.chunk.seqs, col.chunk.times) == (
        [want[0]],
        [int(want[1])],
        [want[2]],
    )


# -- pull consumer --------------------------------------------------------------------------


def _delivery(seq: int, pending: int, hdr: bytes = b"") -> Frame:
    reply = f"$JS.ACK.S.C.1.{seq}.{seq}.{1_700_000_000_000_000_000 + seq}.{pending}".encode()
    return (b"orders.new", reply, hdr, f"d{seq}".encode())


def _spec(end: int) -> fetch.RangeSpec:
    return fetch.RangeSpec("S", 1, end, None, (), 10, 2.0, 1, True)


def test_pull_hands_on_what_arrives_while_the_caller_holds_a_chunk() -> None:
    """Deliveries that complete the pull while the reader is busy with the previous chunk
    are still handed on (they were once lost: the pull looked finished on resuming)."""

    async def go() -> list[int]:
        pull = fetch._Pull(end=100, want=6)
        out: list[int] = []
        drain = fetch._drain(None, _spec(100), pull, 1)  # type: ignore[arg-type]
        pull.on_frames([_delivery(1, 5), _delivery(2, 4)])
        first = await drain.__anext__()
        out += first.seqs
        # The reader holds the chunk; the rest of the pull arrives, then a trailing status.
        pull.on_frames([_delivery(3, 3), _delivery(4, 2)])
        pull.on_frames([_delivery(5, 1), _delivery(6, 0)])
        pull.on_frames([(b"_INBOX.p", b"", b"NATS/1.0 409 Batch Completed\r\n\r\n", b"")])
        async for chunk in drain:
            out += chunk.seqs
        assert (pull.received, pull.last, pull.pending, pull.status) == (6, 6, 0, 0)
        return out

    assert run(go) == [1, 2, 3, 4, 5, 6]


def test_pull_statuses_and_heartbeats() -> None:
    async def go() -> fetch._Pull:
        pull = fetch._Pull(end=100, want=10)
        pull.on_frames(
            [
                (b"_INBOX.p", b"", b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", b""),
                _delivery(7, 3),
                (b"_INBOX.p", b"", b"NATS/1.0 404 No Messages\r\n\r\n", b""),
                _delivery(8, 2),  # after the end: not this pull's
            ]
        )
        return pull

    pull = run(go)
    assert (pull.received, pull.last, pull.status, pull.finished) == (1, 7, 404, True)
    assert pull.take().seqs == [7]
    assert fetch._pull_ended_normally(pull)


# -- publisher ------------------------------------------------------------------------------


class FakePubNc:
    """Takes the publisher's frames and lets the test answer them."""

    _max_payload = 1024

    def __init__(self) -> None:
        self.frames = b""
        self.sink: Callable[[list[Frame]], None] | None = None

    def new_inbox(self) -> str:
        return "_INBOX.t"

    async def bulk_subscribe(self, subject: str, sink: Callable[[list[Frame]], None]) -> Any:
        self.sink = sink
        return object()

    async def bulk_unsubscribe(self, sub: Any) -> None:
        self.sink = None

    async def publish_frames(self, frames: bytes) -> None:
        self.frames += frames

    async def flush(self) -> None:
        return

    def sent(self) -> list[tuple[bytes, bytes, bytes]]:
        """(reply, header block, payload) of every HPUB so far."""
        out, pos, buf = [], 0, self.frames
        while pos < len(buf):
            eol = buf.index(b"\r\n", pos)
            _, _, reply, hlen_b, total_b = buf[pos:eol].split()
            start, hlen, total = eol + 2, int(hlen_b), int(total_b)
            out.append((reply, buf[start : start + hlen], buf[start + hlen : start + total]))
            pos = start + total + 2
        return out

    def ack(self, reply: bytes, body: bytes = b"", status: bytes = b"") -> None:
        assert self.sink is not None
        self.sink([(reply, b"", status, body)])


def _ack(seq: int, **extra: Any) -> bytes:
    return json.dumps({"stream": "S", "seq": seq, **extra}, separators=(",", ":")).encode()


def test_publisher_counts_acks_duplicates_and_retries_transient_failures() -> None:
    async def go() -> tuple[Any, list[tuple[bytes, bytes, bytes]]]:
        nc = FakePubNc()
        pub = Publisher(nc, window=10, ack_timeout_s=30, max_retries=3)  # type: ignore[arg-type]
        await pub.start()
        hdrs = [b"NATS/1.0\r\nNats-Msg-Id: %d\r\n\r\n" % i for i in range(4)]
        await pub.send([b"s.a"] * 4, hdrs, [b"p0", b"p1", b"p2", b"p3"])
        first = nc.sent()
        assert [s[2] for s in first] == [b"p0", b"p1", b"p2", b"p3"]
        nc.ack(first[0][0], _ack(1))
        nc.ack(first[1][0], _ack(2, duplicate=True))
        nc.ack(first[2][0], status=b"NATS/1.0 503\r\n\r\n")  # no responders: resent
        nc.ack(first[3][0], _ack(0, error={"code": 503, "err_code": 10008, "description": "x"}))
        nc.ack(first[0][0], _ack(1))  # a second answer to a done attempt: ignored
        while len(nc.sent()) < 6:  # both resent after their backoff, under new tokens
            await asyncio.sleep(0.01)
        again = nc.sent()[4:]
        assert sorted(s[2] for s in again) == [b"p2", b"p3"]
        assert {s[1] for s in again} == {hdrs[2], hdrs[3]}  # same ids: the stream dedupes
        for reply, _, _ in again:
            nc.ack(reply, _ack(9))
        stats = await pub.flush()
        await pub.close()
        return stats, again

    stats, _ = run(go)
    assert (stats.acked, stats.duplicates, stats.retries) == (4, 1, 2)


def test_publisher_fails_on_a_permanent_refusal() -> None:
    async def go() -> None:
        nc = FakePubNc()
        pub = Publisher(nc, window=10, ack_timeout_s=30, max_retries=3)  # type: ignore[arg-type]
        await pub.start()
        await pub.send([b"s.a"], [b"NATS/1.0\r\n\r\n"], [b"p"])
        err = {"code": 400, "err_code": 10060, "description": "expected stream does not match"}
        nc.ack(nc.sent()[0][0], json.dumps({"error": err}).encode())
        await pub.flush()

    with pytest.raises(PublishError, match="expected stream does not match"):
        run(go)


@pytest.mark.parametrize(("window", "max_bytes", "most"), [(4, 1 << 20, 4), (100, 100, 3)])
def test_publisher_window_holds_senders_until_acks_free_room(
    window: int, max_bytes: int, most: int
) -> None:
    """At most ``window`` messages, and about ``max_bytes`` of them (the one that crosses
    the bound still goes), are unacknowledged at any time."""

    async def go() -> list[int]:
        nc = FakePubNc()
        pub = Publisher(nc, window, 30, 0, max_bytes=max_bytes)  # type: ignore[arg-type]
        await pub.start()
        hdr = b"NATS/1.0\r\n\r\n"  # 12 bytes + 28 of payload: 40 per message
        task = asyncio.ensure_future(pub.send([b"s"] * 10, [hdr] * 10, [b"x" * 28] * 10))
        seen = []
        acked = 0
        while not task.done() or acked < 10:
            await asyncio.sleep(0.005)
            sent = nc.sent()
            seen.append(len(sent) - acked)
            for reply, _, _ in sent[acked:]:
                nc.ack(reply, _ack(1))
                acked += 1
        stats = await pub.flush()
        assert stats.acked == 10
        return seen

    assert max(run(go)) == most


@pytest.mark.parametrize("subject", [b"", b"a b", b"a\r\nPUB x 1", b"a..b", b"a.*", b"a.>"])
def test_unpublishable_subjects_are_refused(subject: bytes) -> None:
    with pytest.raises(PublishError):
        check_subject(subject)


def test_oversized_messages_are_refused_before_sending() -> None:
    async def go() -> None:
        nc = FakePubNc()
        pub = Publisher(nc, window=4, ack_timeout_s=30, max_retries=0)  # type: ignore[arg-type]
        await pub.start()
        await pub.send([b"s"], [b"NATS/1.0\r\n\r\n"], [b"x" * 2000])

    with pytest.raises(PublishError, match="exceeds max_payload"):
        run(go)
