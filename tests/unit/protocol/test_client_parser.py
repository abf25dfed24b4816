"""The sans-I/O client parser: every operation, split at every byte, and fuzzed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.protocol.client import (
    PING,
    PONG,
    ClientParser,
    Connect,
    EventCollector,
    ProtocolError,
    Pub,
    PubBatch,
    Sub,
    Unsub,
    encode_msg,
)

STREAM = (
    b'CONNECT {"verbose":false,"echo":true}\r\n'
    b"PUB foo 5\r\nhello\r\n"
    b"pub foo.bar _INBOX.1 0\r\n\r\n"
    b"HPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"HPUB h r 18 18\r\nNATS/1.0\r\nA: b\r\n\r\n\r\n"
    b"SUB foo.* 1\r\nsub bar q 2\r\nUNSUB 1\r\nUNSUB 2 10\r\nPING\r\npong\r\n"
    b"PUB\ttabbed  3\r\nabc\r\n"
)
EXPECTED = [
    Connect({"verbose": False, "echo": True}),
    Pub("foo", None, None, b"hello"),
    Pub("foo.bar", "_INBOX.1", None, b""),
    Pub("h", None, b"NATS/1.0\r\n\r\n", b"hi"),
    Pub("h", "r", b"NATS/1.0\r\nA: b\r\n\r\n", b""),
    Sub("foo.*", None, "1"),
    Sub("bar", "q", "2"),
    Unsub("1", None),
    Unsub("2", 10),
    PING,
    PONG,
    Pub("tabbed", None, None, b"abc"),
]


def parse(chunks: list[bytes], **limits: int) -> list[object]:
    sink = EventCollector()
    parser = ClientParser(sink, **limits)
    for chunk in chunks:
        parser.feed(chunk)
    return list(sink.events)


def test_whole_stream() -> None:
    assert parse([STREAM]) == EXPECTED


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_any_split_gives_the_same_events(step: int) -> None:
    assert parse([STREAM[i : i + step] for i in range(0, len(STREAM), step)]) == EXPECTED


def test_every_split_point() -> None:
    for cut in range(len(STREAM) + 1):
        assert parse([STREAM[:cut], STREAM[cut:]]) == EXPECTED


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"PUB foo 2000\r\n", "Maximum Payload Violation"),
        (b"NOPE\r\n", "Unknown Protocol Operation"),
        (b"PUB foo\r\n", "Unknown Protocol Operation"),
        (b"PUB foo -1\r\n", "Unknown Protocol Operation"),
        (b"HPUB foo 10 5\r\n", "Unknown Protocol Operation"),
        (b"PUB foo 1\r\nab\r\n", "Unknown Protocol Operation"),
        (b"CONNECT {not json}\r\n", "Unknown Protocol Operation"),
        (b"UNSUB\r\n", "Unknown Protocol Operation"),
        (b"SUB a\r\n", "Unknown Protocol Operation"),
        (b"PINGX\r\n", "Unknown Protocol Operation"),
        (b"SUB " + b"x" * 200, "maximum control line exceeded"),
    ],
)
def test_violations(data: bytes, text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse([data], max_control_line=128, max_payload=1024)
    assert info.value.text == text


def test_body_split_across_many_chunks() -> None:
    payload = bytes(range(256)) * 100
    frame = b"PUB big %d\r\n" % len(payload) + payload + b"\r\nPING\r\n"
    chunks = [frame[i : i + 1000] for i in range(0, len(frame), 1000)]
    assert parse(chunks, max_payload=1 << 20) == [Pub("big", None, None, payload), PING]


def test_encode_msg_frames() -> None:
    assert encode_msg("a", "1", None, b"hi") == b"MSG a 1 2\r\nhi\r\n"
    assert encode_msg("a", "1", "r", b"") == b"MSG a 1 r 0\r\n\r\n"
    assert encode_msg("a", "1", None, b"x", b"NATS/1.0\r\n\r\n") == (
        b"HMSG a 1 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
    )


def _feed_all(chunks: list[bytes]) -> None:
    sink = EventCollector()
    parser = ClientParser(sink, max_control_line=256, max_payload=4096)
    try:
        for chunk in chunks:
            parser.feed(chunk)
    except ProtocolError as exc:
        assert exc.text in {
            "Unknown Protocol Operation",
            "Maximum Payload Violation",
            "maximum control line exceeded",
        }
    for ev in sink.events:
        assert isinstance(ev, (Connect, Pub, Sub, Unsub, type(PING), type(PONG)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_random_bytes_only_raise_protocol_errors(chunks: list[bytes]) -> None:
    _feed_all(chunks)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, len(STREAM) - 1),
    st.binary(min_size=1, max_size=8),
    st.integers(1, 40),
)
def test_mutated_protocol_only_raises_protocol_errors(pos: int, junk: bytes, step: int) -> None:
    mutated = STREAM[:pos] + junk + STREAM[pos + len(junk) :]
    _feed_all([mutated[i : i + step] for i in range(0, len(mutated), step)])


class Recorder:
    """Records like EventCollector, pausing at CONNECT when asked. It wraps one rather than
    subclassing it: in the mypyc build EventCollector is a compiled class, which Python code
    cannot subclass."""

    def __init__(self, pause_at_connect: bool = False) -> None:
        self.inner = EventCollector()
        self.events = self.inner.events
        self.pause_at_connect = pause_at_connect

    def on_connect(self, options: dict[str, object]) -> bool:
        self.inner.on_connect(options)
        return self.pause_at_connect

    def on_pubs(self, batch: PubBatch) -> None:
        self.inner.on_pubs(batch)

    def on_sub(self, subject: str, queue: str | None, sid: str) -> None:
        self.inner.on_sub(subject, queue, sid)

    def on_unsub(self, sid: str, max_msgs: int | None) -> None:
        self.inner.on_unsub(sid, max_msgs)

    def on_ping(self) -> None:
        self.inner.on_ping()

    def on_pong(self) -> None:
        self.inner.on_pong()


def test_connect_can_pause_until_resumed() -> None:
    sink = Recorder(pause_at_connect=True)
    parser = ClientParser(sink)
    parser.feed(b"CONNECT {}\r\nPUB a 1\r\nx\r\n")
    assert sink.events == [Connect({})] and parser.paused
    parser.feed(b"PING\r\n")
    assert sink.events == [Connect({})]
    parser.resume()
    assert sink.events == [Connect({}), Pub("a", None, None, b"x"), PING]


def test_pause_and_resume_at_every_split_point() -> None:
    stream = b"CONNECT {}\r\nPUB a 1\r\nx\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n"
    expected = [Connect({}), Pub("a", None, None, b"x"), Pub("h", None, b"NATS/1.0\r\n\r\n", b"hi"),
                PING]
    for cut in range(len(stream) + 1):
        sink = Recorder(pause_at_connect=True)
        parser = ClientParser(sink)
        parser.feed(stream[:cut])
        parser.feed(stream[cut:])
        assert parser.paused
        parser.resume()
        assert sink.events == expected, cut


def test_publishes_before_a_violation_are_handed_over() -> None:
    sink = EventCollector()
    parser = ClientParser(sink)
    with pytest.raises(ProtocolError):
        parser.feed(b"PUB a 1\r\nx\r\nPUB b 1\r\ny\r\nNOPE\r\nPUB c 1\r\nz\r\n")
    assert sink.events == [Pub("a", None, None, b"x"), Pub("b", None, None, b"y")]


def test_publishes_arrive_in_one_batch_per_run_of_publishes() -> None:
    batches: list[list[int]] = []

    class Counting(Recorder):
        def on_pubs(self, batch: PubBatch) -> None:
            # Consecutive publishes with the same control line form one run.
            starts = batch.starts
            batches.append([starts[r + 1] - starts[r] for r in range(len(batch.lines))])
            super().on_pubs(batch)

    sink = Counting()
    parser = ClientParser(sink)
    parser.feed(
        b"PUB a 1\r\nx\r\nPUB a 1\r\ny\r\nPUB a 1\r\nz\r\nPUB b 2\r\nzz\r\nPUB a 1\r\nv\r\n"
        b"PING\r\nPUB a 1\r\nw\r\n"
    )
    assert batches == [[3, 1, 1], [1]]
    assert [ev.payload for ev in sink.events if isinstance(ev, Pub)] == [
        b"x", b"y", b"z", b"zz", b"v", b"w"
    ]


def test_refused_headers_make_hpub_a_violation_even_when_seen_before() -> None:
    sink = EventCollector()
    parser = ClientParser(sink)
    frame = b"HPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    parser.feed(frame)
    parser.refuse_headers()
    with pytest.raises(ProtocolError) as info:
        parser.feed(frame)
    assert info.value.text == "Unknown Protocol Operation"
    assert sink.events == [Pub("h", None, b"NATS/1.0\r\n\r\n", b"hi")]


@st.composite
def publish_streams(draw: st.DrawFn) -> tuple[bytes, list[Pub]]:
    """Publishes with few distinct control lines (so that lines repeat), payloads that may
    hold protocol text, and some other operations between them."""
    out: list[bytes] = []
    events: list[Pub] = []
    payloads = st.sampled_from([b"", b"x", b"PUB a 1\r\n", b"\r\nPUB a 1\r\nx", b"ab"])
    for _ in range(draw(st.integers(0, 30))):
        if draw(st.integers(0, 9)) == 0:
            out.append(b"PING\r\n")
            continue
        subject = draw(st.sampled_from(["a", "b.c"]))
        payload = draw(payloads)
        term = draw(st.sampled_from([b"\r\n", b"\n"]))
        out.append(b"PUB %s %d%s%s\r\n" % (subject.encode(), len(payload), term, payload))
        events.append(Pub(subject, None, None, payload))
    return b"".join(out), events


@settings(max_examples=300, deadline=None)
@given(publish_streams(), st.lists(st.integers(0, 400), max_size=6))
def test_repeated_lines_parse_alike_at_any_split(
    stream: tuple[bytes, list[Pub]], cuts: list[int]
) -> None:
    data, expected = stream
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    got = [ev for ev in parse(chunks) if isinstance(ev, Pub)]
    assert got == expected


@pytest.mark.parametrize(
    "line",
    [
        b"PUB foo 5",
        b"PUB foo.bar _INBOX.1 0",
        b"pub foo r 12",
        b"PUB foo\tbar 5",  # a tab separates subject and reply
        b"PUB foo bar\t5",
        b"PUB\tfoo 5",
        b"PUB foo  5",  # two spaces
        b"PUB foo 05",  # the MSG line says 5
        b"PUB foo 0",
        b"PUB f\xc3\xa9 r\xc3\xa9 3",  # UTF-8 names
        b"PUB $JS.ACK.S.C.1.2.3.1764000000000000000.7 4",
        b"PUB $JS.ACK.S.C.1.2.3.1764000000000000000.7 _INBOX.x.1 4",
        b"PUB $JS.ACK.S.C.1.2.3.1764000000000000000.7\t_INBOX.x.1 4",
        b"PUB a\x0bb\x0cc 4",  # VT and FF are not separators: nats-server keeps them
        b"PUB \xf4\x84\x8f\x8b\x0b\xf4\x87\x9c\xb7 r 4",  # non-ASCII with a VT
    ],
)
def test_publish_lines_parse_alike_whatever_the_spacing(line: bytes) -> None:
    """Every way of writing a PUB line gives the publish its tokens say, and a subscriber's
    MSG line with the canonical size; the same line twice in a row (or an ack subject,
    which is never cached) parses the same the second time."""
    tokens = [t for t in re.split(rb"[ \t]+", line) if t]  # nats-server's separators
    n = int(tokens[-1])
    frame = line + b"\r\n" + b"x" * n + b"\r\n"
    h = EventCollector()
    ClientParser(h).feed(frame * 2)
    args = tokens[1:]
    subject, reply = args[0].decode(), (args[1].decode() if len(args) == 3 else None)
    assert h.events == [Pub(subject, reply, None, b"x" * n)] * 2
    lines = _Lines()
    ClientParser(lines).feed(frame * 2)
    tail = (f" {reply}" if reply else "") + f" {n}\r\n"
    assert {line[4] for line in lines.lines} == {tail.encode()}


class _Lines:
    """A handler that keeps the parsed PUB lines (not a subclass of EventCollector, which
    the compiled build cannot subclass)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str | None, int, int, bytes]] = []

    def on_pubs(self, batch: PubBatch) -> None:
        self.lines.extend(batch.lines)

    def on_connect(self, options: dict[str, object]) -> bool:
        return False

    def on_sub(self, subject: str, queue: str | None, sid: str) -> None: ...
    def on_unsub(self, sid: str, max_msgs: int | None) -> None: ...
    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...


def test_vertical_tab_and_form_feed_stay_inside_sub_and_unsub_tokens() -> None:
    """As nats-server splits: a subscription to a subject holding VT or FF is to that
    subject (a consumer so named is asked for by its name), not a malformed line."""
    assert parse([b"SUB a\x0bb 1\r\nSUB c\x0cd q 2\r\nUNSUB 1\x0bx\r\n"]) == [
        Sub("a\x0bb", None, "1"),
        Sub("c\x0cd", "q", "2"),
        Unsub("1\x0bx", None),
    ]


class _Pubs(_Lines):
    """Parsed PUB lines with their bodies, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[tuple[str, str | None, int, int, bytes], bytes]] = []

    def on_pubs(self, batch: PubBatch) -> None:
        self.got.extend(batch.messages())


@st.composite
def reply_publishes(draw: st.DrawFn) -> list[bytes]:
    """PUB and HPUB frames as JetStream publishers send them (a reply subject of their own
    under an inbox), mixed with lines that only look alike: other spacing, tabs, leading
    zeros, an empty header block, non-ASCII names, dots in the last token."""
    frames = []
    for _ in range(draw(st.integers(1, 25))):
        subject = draw(st.sampled_from([b"a", b"b.c", b"\xc3\xa9", b"a\x0bb"]))
        inbox = draw(
            st.sampled_from([b"_INBOX.x.", b"_INBOX.y.", b"", b"_INBOX.x.1.", b"r\xc3\xa9."])
        )
        token = draw(st.sampled_from([b"1", b"22", b"333", b"z.9", b"\xc3\xa9", b"7\x0bq"]))
        sep = draw(st.sampled_from([b" ", b" ", b" ", b"  ", b"\t"]))
        payload = draw(st.sampled_from([b"", b"x", b"PUB a 1\r\n", b"\r\nHPUB a 1 1\r\n"]))
        zero = draw(st.sampled_from([b"", b"", b"0"]))
        if draw(st.booleans()):
            hdr = draw(
                st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n", b""])
            )
            head = b"HPUB %s %s%s%s%s%d %s%d" % (
                subject, inbox, token, sep, zero, len(hdr), zero, len(hdr) + len(payload)
            )
            frames.append(head + b"\r\n" + hdr + payload + b"\r\n")
        else:
            head = b"PUB %s %s%s%s%s%d" % (subject, inbox, token, sep, zero, len(payload))
            frames.append(head + b"\r\n" + payload + b"\r\n")
    return frames


@settings(max_examples=300, deadline=None)
@given(reply_publishes(), st.lists(st.integers(0, 2000), max_size=4))
def test_publishes_under_one_inbox_parse_as_each_line_alone(
    frames: list[bytes], cuts: list[int]
) -> None:
    """A line that differs from the one before only in the reply's last token and the sizes
    takes a shorter parse (``_stem_pub``); it gives what the same line gives to a parser
    that never saw another (subject, reply, sizes, the subscriber's MSG tail, the body), at
    any split of the input."""
    expected = []
    for frame in frames:
        alone = _Pubs()
        ClientParser(alone).feed(frame)
        expected.extend(alone.got)
    data = b"".join(frames)
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    together = _Pubs()
    parser = ClientParser(together)
    for chunk in chunks:
        parser.feed(chunk)
    assert together.got == expected


def test_a_stem_does_not_outlive_refused_headers() -> None:
    sink = _Pubs()
    parser = ClientParser(sink)
    parser.feed(b"HPUB s _INBOX.x.1 12 12\r\nNATS/1.0\r\n\r\n\r\n")
    parser.refuse_headers()
    with pytest.raises(ProtocolError):
        parser.feed(b"HPUB s _INBOX.x.2 12 12\r\nNATS/1.0\r\n\r\n\r\n")
    assert [line[1] for line, _ in sink.got] == ["_INBOX.x.1"]
