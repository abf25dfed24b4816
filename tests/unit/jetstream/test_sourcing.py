"""Sourcing and mirroring without a server: config checks and echo, the Nats-Stream-Source
header, how origin messages become copies, positions, and the state machine's part."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.sourcing import (
    SourceStatus,
    build_source_header,
    mirrored_msg,
    parse_source_header,
    recover_positions,
    source_info,
    source_position,
    source_specs,
    sourced_msg,
    start_position,
    stream_ident,
)
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.stream import SOURCED, PubAck, StoreMsg, Stream
from jetraft.jetstream.stream_config import (
    StreamConfig,
    check_update,
    decode_request,
    normalise,
    to_wire,
)
from jetraft.protocol.headers import encode_headers, parse_headers

S = 1_000_000_000
T0 = 1_700_000_000 * S


def cfg_of(**kw: Any) -> StreamConfig:
    return normalise(decode_request(json.dumps({"name": "S", **kw}).encode()))


def error_of(**kw: Any) -> tuple[int, str]:
    with pytest.raises(ApiError) as exc:
        cfg_of(**kw)
    return exc.value.err_code, exc.value.description


# --- config ------------------------------------------------------------------------------


def test_sources_echo_as_nats_server() -> None:
    cfg = cfg_of(sources=[
        {"name": "O", "opt_start_time": "2020-01-02T04:04:05.500+01:00", "filter_subject": "o.>"},
        {"name": "P", "opt_start_seq": 7},
    ])
    wire = to_wire(cfg)
    assert "subjects" not in wire and "duplicate_window" not in wire
    assert wire["sources"] == [
        {"name": "O", "opt_start_time": "2020-01-02T03:04:05.5Z", "filter_subject": "o.>"},
        {"name": "P", "opt_start_seq": 7},
    ]
    assert list(wire).index("sources") == list(wire).index("num_replicas") + 1
    # What is persisted reads back the same.
    assert normalise(decode_request(json.dumps(wire).encode())) == cfg


def test_mirror_echo_and_no_update() -> None:
    cfg = cfg_of(mirror={"name": "O", "opt_start_seq": 3})
    assert to_wire(cfg)["mirror"] == {"name": "O", "opt_start_seq": 3}
    assert check_update(cfg, cfg_of(mirror={"name": "O", "opt_start_seq": 3})).mirror is not None
    with pytest.raises(ApiError) as exc:
        check_update(cfg, cfg_of(mirror={"name": "O"}))
    assert exc.value.err_code == 10055


@pytest.mark.parametrize(("body", "code"), [
    ({"mirror": {"name": "O"}, "subjects": ["a"]}, 10034),
    ({"mirror": {"name": "O"}, "sources": [{"name": "O"}]}, 10031),
    ({"mirror": {"name": "O"}, "first_seq": 2}, 10143),
    ({"mirror": {"name": "O", "filter_subject": "a", "subject_transforms": [
        {"src": "b", "dest": "c"}]}}, 10150),
    ({"mirror": {"name": "O", "subject_transforms": [
        {"src": "a.>", "dest": "x.>"}, {"src": "a.b", "dest": "y"}]}}, 10152),
    ({"mirror": {"name": "a.b"}}, 10142),
    ({"sources": [{"name": "O"}, {"name": "O"}]}, 10140),
    ({"sources": [{"name": ""}]}, 10141),
    ({"sources": [None]}, 10141),
    ({"sources": [{"name": "O", "filter_subject": "a", "subject_transforms": [
        {"src": "b", "dest": "c"}]}]}, 10144),
    ({"sources": [{"name": "O", "subject_transforms": [{"src": "a..b", "dest": "c"}]}]}, 10145),
    ({"sources": [{"name": "O", "subject_transforms": [{"src": "a.*", "dest": "$2"}]}]}, 10146),
    ({"sources": [{"name": "O", "subject_transforms": [
        {"src": "a.>", "dest": "x.>"}, {"src": "a.b", "dest": "y"}]}]}, 10147),
    ({"subjects": ["s"], "mirror_direct": True}, 10052),
    ({"sources": [{"name": "O", "external": {"api": "$JS.x.API"}}]}, 10052),
    ({"mirror": {"name": "O", "external": {"api": "$JS.x.API"}}}, 10052),
    ({"sources": [{"name": "O", "consumer": {"name": "C", "deliver_subject": "d"}}]}, 10052),
])
def test_config_errors(body: dict[str, Any], code: int) -> None:
    assert error_of(**body)[0] == code


def test_sources_same_origin_different_filters_are_distinct() -> None:
    cfg = cfg_of(sources=[{"name": "O", "filter_subject": "a"},
                          {"name": "O", "filter_subject": "b"}])
    assert [s.iname for s in source_specs(cfg)] == ["O a >", "O b >"]


# --- the header --------------------------------------------------------------------------


def test_header_as_nats_server_writes_and_reads_it() -> None:
    # A value nats-server 2.15 wrote (origin O, sequence 1, filter o.>, original o.0).
    assert parse_source_header("O 1 o.> > o.0 TiAN6S1S") == ("O o.> >", 1, "TiAN6S1S")
    assert build_source_header("O o.> >", 1, "o.0", "TiAN6S1S") == "O 1 o.> > o.0 TiAN6S1S"
    assert parse_source_header("O x") is None
    assert parse_source_header("O 5 > >") == ("O > >", 5, "")


def test_ident_is_eight_base62_characters_of_the_creation_time() -> None:
    a = stream_ident("2026-11-24T19:48:28.24603191Z")
    assert len(a) == 8 and a.isalnum()
    assert a == stream_ident("2026-11-24T19:48:28.24603191Z")
    assert a != stream_ident("2026-11-24T19:48:28.24603192Z")


def test_sourced_copy_drops_expectations_and_older_source_header() -> None:
    spec = source_specs(cfg_of(sources=[{"name": "O", "subject_transforms": [
        {"src": "o.*", "dest": "n.$1"}]}]))[0]
    hdr = encode_headers([("Nats-Msg-Id", "x"), ("Nats-Expected-Stream", "O"),
                          ("Nats-Stream-Source", "Z 9 > > q"), ("Nats-Batch-Id", "b"),
                          ("X", "1")])
    e = sourced_msg(spec, 5, "o.a", hdr, b"d", T0, "IDENTabc")
    assert (e.subject, e.data, e.ts_ns, e.seq) == ("n.a", b"d", T0, SOURCED)
    assert e.hdr is not None
    assert parse_headers(e.hdr).items == (
        ("Nats-Msg-Id", "x"), ("X", "1"), ("Nats-Stream-Source", "O 5 o.* n.$1 o.a IDENTabc"),
    )
    assert source_position(e.hdr) == ("O o.* n.$1", 5, "IDENTabc")


def test_mirrored_copy_keeps_sequence_time_and_headers() -> None:
    spec = source_specs(cfg_of(mirror={"name": "O"}))[0]
    e = mirrored_msg(spec, 9, "o.a", encode_headers([("Nats-Expected-Last-Sequence", "3")]),
                     b"d", T0)
    assert (e.subject, e.hdr, e.ts_ns, e.seq) == ("o.a", None, T0, 9)
    kept = encode_headers([("Nats-Msg-Id", "m")])
    assert mirrored_msg(spec, 9, "o.a", kept, b"d", T0).hdr == kept


def test_positions_and_start() -> None:
    hdrs = [encode_headers([("Nats-Stream-Source", v)]) for v in
            ("A 3 > > a i1", "B 7 b > b", "A 2 > > a i1")]
    assert recover_positions(["A > >", "B b >", "C > >"], [None, *hdrs]) == {
        "A > >": ("A > >", 3, "i1"), "B b >": ("B b >", 7, "")
    }
    spec = source_specs(cfg_of(sources=[{"name": "A", "opt_start_seq": 4}]))[0]
    assert start_position(spec, None) == 4
    assert start_position(spec, 9) == 10
    timed = source_specs(cfg_of(sources=[{"name": "A", "opt_start_time": "2020-01-01T00:00:00Z"}]))
    assert start_position(timed[0], None) == -1  # ask the origin by time
    plain = source_specs(cfg_of(sources=[{"name": "A"}]))[0]
    assert start_position(plain, None) == 1


def test_info_members() -> None:
    cfg = cfg_of(sources=[{"name": "A", "filter_subject": "a"}, {"name": "B"}])
    specs = source_specs(cfg)
    status = {specs[0].iname: SourceStatus(specs[0], lag=2, last_seq=5, active_ns=100)}
    assert source_info(cfg, status, 350) == {"sources": [
        {"name": "A", "lag": 2, "seq": 5, "active": 250, "filter_subject": "a"},
        {"name": "B", "lag": 0, "active": -1},
    ]}
    assert source_info(cfg_of(mirror={"name": "M"}), {}, 0) == {
        "mirror": {"name": "M", "lag": 0, "active": -1}
    }


# --- the state machine -------------------------------------------------------------------


def test_stream_drops_a_copy_it_holds_also_after_a_restart() -> None:
    cfg = cfg_of(sources=[{"name": "O"}], subjects=["local"])
    spec = source_specs(cfg)[0]
    store = MemoryStore()
    stream = Stream(cfg, store, created_ns=T0)
    for seq in (1, 2):
        ack = stream.apply(sourced_msg(spec, seq, "o", None, b"x", T0 + seq, ""))
        assert isinstance(ack, PubAck) and ack.error is None and not ack.duplicate
    again = stream.apply(sourced_msg(spec, 2, "o", None, b"x", T0 + 3, ""))
    assert isinstance(again, PubAck) and again.duplicate and stream.last_seq == 2
    # A publish in between; then a new state machine over the same store (a restart).
    stream.apply(StoreMsg("local", "", None, b"p", T0 + 4))
    restarted = Stream(cfg, store, created_ns=T0)
    dup = restarted.apply(sourced_msg(spec, 1, "o", None, b"x", T0 + 5, ""))
    assert isinstance(dup, PubAck) and dup.duplicate
    new = restarted.apply(sourced_msg(spec, 3, "o", None, b"x", T0 + 6, ""))
    assert isinstance(new, PubAck) and new.seq == 4 and not new.duplicate
    # The origin was recreated (another identity): its sequence 1 is a new message.
    again = restarted.apply(sourced_msg(spec, 1, "o", None, b"y", T0 + 7, "NEWIDENT"))
    assert isinstance(again, PubAck) and again.seq == 5 and not again.duplicate


def test_publishers_may_not_set_the_source_header() -> None:
    stream = Stream(cfg_of(subjects=["s"]), MemoryStore(), created_ns=T0)
    hdr = encode_headers([("Nats-Stream-Source", "O 1 > > s")])
    ack = stream.apply(StoreMsg("s", "r", hdr, b"x", T0))
    assert isinstance(ack, PubAck) and ack.error is not None and ack.error.err_code == 10227


def test_mirror_stores_at_the_origin_sequence() -> None:
    cfg = cfg_of(mirror={"name": "O"})
    spec = source_specs(cfg)[0]
    stream = Stream(cfg, MemoryStore(), created_ns=T0)
    for seq in (2, 3, 6):
        ack = stream.apply(mirrored_msg(spec, seq, f"o.{seq}", None, b"x", T0 + seq))
        assert isinstance(ack, PubAck) and ack.seq == seq and not ack.duplicate
    dup = stream.apply(mirrored_msg(spec, 3, "o.3", None, b"x", T0))
    assert isinstance(dup, PubAck) and dup.duplicate
    st = stream.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 2, 6)
    msg = stream.store.load(6)
    assert msg is not None and (msg.subject, msg.ts_ns) == ("o.6", T0 + 6)


def test_cycles_through_sources_and_mirrors_are_refused() -> None:
    from jetraft.jetstream.source_config import check_cycle

    def cfg(text: str) -> StreamConfig:
        return normalise(decode_request(text.encode()))

    existing = {
        "A": cfg('{"name": "A", "subjects": ["a"], "sources": [{"name": "B"}]}'),
        "A2": cfg('{"name": "A2", "subjects": ["a2"], '
                  '"sources": [{"name": "B", "filter_subject": "b"}]}'),
        "MB": cfg('{"name": "MB", "mirror": {"name": "B"}}'),
    }
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle(normalise(decode_request(
            b'{"name": "B", "subjects": ["b"], "sources": [{"name": "A"}]}')), existing.get)
    # nats-server's rule: an edge back into a visited stream whose filter matches none of
    # the subjects of the stream it leaves (A2's subjects are not "b") is no cycle.
    check_cycle(cfg('{"name": "B", "subjects": ["b"], "sources": [{"name": "A2"}]}'),
                existing.get)
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle(normalise(decode_request(b'{"name": "B", "mirror": {"name": "MB"}}')),
                    existing.get)
