"""The route protocol's frames: round trips, frames split anywhere, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.protocol import route as rp

HDR = b"NATS/1.0\r\n\r\n"


def _frames() -> list[tuple[bytes, object]]:
    return [
        (rp.encode_info({"server_id": "A", "routes": [{"id": "B"}]}),
         rp.Info({"server_id": "A", "routes": [{"id": "B"}]})),
        (rp.encode_connect({"user": "u", "pass": "p"}), rp.Connect({"user": "u", "pass": "p"})),
        (rp.PING_FRAME, rp.Ping()),
        (rp.PONG_FRAME, rp.Pong()),
        (rp.encode_err("nope"), rp.Err("nope")),
        (rp.encode_sub("$G", "foo.>", "q", 3), rp.RSub("$G", "foo.>", "q", 3)),
        (rp.encode_unsub("$G", "foo.>", None), rp.RUnsub("$G", "foo.>", None)),
        (
            rp.encode_msg("$G", "a.b", "_INBOX.1", None, ["q1", "q2"], b"NATS/1.0\r\n\r\n", b"x"),
            rp.RMsg("$G", "a.b", "_INBOX.1", None, ["q1", "q2"], b"NATS/1.0\r\n\r\n", b"x"),
        ),
        (
            rp.encode_msgs("$G", "a.b", None, [(-1, 2), (12, 1)], [b"x", b"y", HDR + b"z"]),
            rp.RMsgs("$G", "a.b", None, [(-1, 2), (12, 1)], [b"x", b"y", HDR + b"z"]),
        ),
        (
            rp.encode_pubs("$G", [("$JS.ACK.S.C.1.1.1.9.0", None, -1, 2),
                                  ("$JS.ACK.S.C.1.2.2.9.0", "_INBOX.r.1", 12, 1)],
                           [b"", b"", HDR + b"z"]),
            rp.RPubs("$G", [("$JS.ACK.S.C.1.1.1.9.0", None, -1, 2),
                            ("$JS.ACK.S.C.1.2.2.9.0", "_INBOX.r.1", 12, 1)],
                     [b"", b"", HDR + b"z"]),
        ),
        (rp.encode_answers("$G", ["_INBOX.a.1", "_INBOX.b.2"], [b'{"seq":1}', b""]),
         rp.RAnswers("$G", ["_INBOX.a.1", "_INBOX.b.2"], [b'{"seq":1}', b""])),
        (rp.encode_raft([("S-1", b"\x01\x02"), ("_meta_", b"")]),
         rp.RaftBatch([("S-1", b"\x01\x02"), ("_meta_", b"")])),
    ]


def test_every_frame_round_trips() -> None:
    parser = rp.RouteParser()
    for frame, event in _frames():
        assert parser.feed(frame) == [event]


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=30))
def test_frames_split_at_any_point_decode_the_same(cuts: list[int]) -> None:
    stream = b"".join(f for f, _ in _frames())
    parser = rp.RouteParser()
    out: list[object] = []
    pos = 0
    for cut in cuts:
        out += parser.feed(stream[pos : pos + cut])
        pos += cut
    out += parser.feed(stream[pos:])
    assert out == [e for _, e in _frames()]


def test_oversized_and_unknown_frames_are_protocol_errors() -> None:
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser(max_frame=10).feed(rp.encode_info({"x": "y" * 20}))
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser().feed(b"\x00\x00\x00\x01\x63")
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser().feed(b"\x00\x00\x00\x03" + bytes([rp.OP_SUB]) + b"\xc1\xc1")


@pytest.mark.parametrize(
    ("runs", "bodies"),
    [
        ([(-1, 3)], [b"a", b"b"]),  # more counted than sent
        ([(-1, 1)], [b"a", b"b"]),  # bodies left over
        ([(-1, 0), (-1, 1)], [b"a"]),  # an empty run
        ([(-1, 2)], [b"a", b"bb"]),  # one run, two sizes
        ([(5, 1)], [b"abc"]),  # header larger than the message
        ([(0, 1)], [b"abc"]),  # an empty header block is sent as none
    ],
)
def test_inconsistent_msgs_frames_are_protocol_errors(
    runs: list[tuple[int, int]], bodies: list[bytes]
) -> None:
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser().feed(rp.encode_msgs("$G", "a", None, runs, bodies))


@pytest.mark.parametrize(
    ("runs", "bodies"),
    [
        ([("a", None, -1, 3)], [b"a", b"b"]),  # more counted than sent
        ([("a", None, -1, 1)], [b"a", b"b"]),  # bodies left over
        ([("a", None, -1, 2)], [b"a", b"bb"]),  # one run, two sizes
        ([("a", "r", 5, 1)], [b"abc"]),  # header larger than the message
    ],
)
def test_inconsistent_pubs_frames_are_protocol_errors(
    runs: list[tuple[str, str | None, int, int]], bodies: list[bytes]
) -> None:
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser().feed(rp.encode_pubs("$G", runs, bodies))


def test_answers_frames_with_more_subjects_than_bodies_are_protocol_errors() -> None:
    with pytest.raises(rp.RouteProtocolError):
        rp.RouteParser().feed(rp.encode_answers("$G", ["a", "b"], [b"x"]))
