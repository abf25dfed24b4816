"""Message tracing's pure parts: the header edits, the hot paths' test, the decisions of
``begin`` and the snappy framing of an event."""

from __future__ import annotations

import zlib

from jetraft.protocol.client import PubBatch, pub_line
from jetraft.protocol.headers import encode_headers, parse_headers
from jetraft.server.core import msgtrace
from jetraft.server.core.accounts import Account


def _hdr(**items: str) -> bytes:
    return encode_headers([(k.replace("_", "-"), v) for k, v in items.items()])


def test_set_header_replaces_the_first_or_appends() -> None:
    hdr = _hdr(A="1", Nats_Trace_Dest="t", B="2")
    out = msgtrace.set_header(hdr, "Nats-Trace-Dest", msgtrace.DEST_DISABLED)
    assert parse_headers(out).items == (
        ("A", "1"), ("Nats-Trace-Dest", "trace disabled"), ("B", "2"),
    )  # fmt: skip
    out = msgtrace.set_header(hdr, "Nats-Trace-Hop", "1.2")
    assert parse_headers(out).items[-1] == ("Nats-Trace-Hop", "1.2")
    assert out.endswith(b"\r\n\r\n") and out.startswith(b"NATS/1.0\r\n")


def test_batch_traced_reads_header_blocks_only() -> None:
    traced, quiet = _hdr(Nats_Trace_Dest="t"), _hdr(Nats_T="t")

    def run(subject: str, hdr: bytes | None, bodies: list[bytes]) -> tuple[object, list[bytes]]:
        hdr_len = -1 if hdr is None else len(hdr)
        return pub_line(subject, None, len(bodies[0]), hdr_len), bodies

    def batch(*runs: tuple[object, list[bytes]]) -> PubBatch:
        lines, starts, bodies = [], [0], []
        for line, bs in runs:
            lines.append(line)
            bodies.extend(bs)
            starts.append(len(bodies))
        return PubBatch(lines, starts, bodies)  # type: ignore[arg-type]

    # The marker in a payload is not a trace; a header block without it neither.
    payload_only = run("a", None, [b"Nats-Trace-Dest: t  x"])
    quiet_run = run("b", quiet, [quiet + b"ok", quiet + b"no"])
    assert not msgtrace.batch_traced(batch(payload_only, quiet_run))
    # The second message of a later run is traced.
    mixed = run("c", traced, [traced + b"ok", _hdr(Nats_Trace_Dest="u") + b"ok"])
    assert msgtrace.batch_traced(batch(payload_only, quiet_run, mixed))


def test_begin_decisions() -> None:
    acc = Account("A")
    start = msgtrace.begin(_hdr(Nats_Trace_Dest="tr", X="1"), acc, 40, from_route=False)
    assert start.trace is not None and not start.drop
    assert start.trace.dest == "tr" and not start.trace.only
    assert start.trace.header == {"Nats-Trace-Dest": ["tr"], "X": ["1"]}
    for yes in ("1", "true", "TRUE", "on"):
        start = msgtrace.begin(_hdr(Nats_Trace_Dest="tr", Nats_Trace_Only=yes), acc, 1, False)
        assert start.trace is not None and start.trace.only
    start = msgtrace.begin(_hdr(Nats_Trace_Dest="tr", Nats_Trace_Only="yes"), acc, 1, False)
    assert start.trace is not None and not start.trace.only
    # Disabled: routed as it is, untraced.
    hdr = _hdr(Nats_Trace_Dest=msgtrace.DEST_DISABLED)
    start = msgtrace.begin(hdr, acc, 1, False)
    assert start.trace is None and not start.drop and start.hdr == hdr
    # An invalid destination: no trace; a trace-only message is then delivered to nobody.
    for dest in ("a.*", "a.>", "a..b"):
        assert msgtrace.begin(_hdr(Nats_Trace_Dest=dest), acc, 1, False).drop is False
        only = _hdr(Nats_Trace_Dest=dest, Nats_Trace_Only="true")
        assert msgtrace.begin(only, acc, 1, False).drop is True
    # The old origin-account header disables tracing for good (the destination is rewritten).
    start = msgtrace.begin(_hdr(Nats_Trace_Dest="tr", Nats_Trace_Origin_Account="B"), acc, 1, False)
    assert start.trace is None and not start.drop
    assert parse_headers(start.hdr).get("Nats-Trace-Dest") == msgtrace.DEST_DISABLED
    # The hop id counts only from a route.
    hdr = _hdr(Nats_Trace_Dest="tr", Nats_Trace_Hop="2")
    start = msgtrace.begin(hdr, acc, 1, from_route=True)
    assert start.trace is not None and start.trace.hop == "2"
    assert start.trace.route_egress(7, "n3") == "2.1"
    assert start.trace.route_egress(8, "n4") == "2.2"
    assert msgtrace.begin(hdr, acc, 1, from_route=False).trace.hop == ""  # type: ignore[union-attr]


def test_accept_encoding_picks_the_events_encoding() -> None:
    acc = Account("A")
    for accept, want in (("gzip", "gzip"), ("snappy", "snappy"), ("gzip, s2", "snappy"),
                         ("br", ""), ("", "")):  # fmt: skip
        hdr = (
            _hdr(Nats_Trace_Dest="tr", Accept_Encoding=accept)
            if accept
            else _hdr(Nats_Trace_Dest="tr")
        )
        start = msgtrace.begin(hdr, acc, 1, False)
        assert start.trace is not None and start.trace.encoding == want


def _unframe(framed: bytes) -> bytes:
    """A reader of the snappy framing format for uncompressed chunks, CRCs checked."""
    assert framed[:10] == b"\xff\x06\x00\x00sNaPpY"
    pos, out = 10, b""
    while pos < len(framed):
        kind = framed[pos]
        length = int.from_bytes(framed[pos + 1 : pos + 4], "little")
        chunk = framed[pos + 4 : pos + 4 + length]
        assert kind == 0x01
        crc = msgtrace.crc32c(chunk[4:])
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        assert int.from_bytes(chunk[:4], "little") == masked
        out += chunk[4:]
        pos += 4 + length
    return out


def test_snappy_frames_round_trip() -> None:
    assert msgtrace.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    for data in (b"", b"{}", bytes(range(256)) * 700):
        assert _unframe(msgtrace.snappy_frame(data)) == data
    assert zlib.crc32(b"123456789") != msgtrace.crc32c(b"123456789")
