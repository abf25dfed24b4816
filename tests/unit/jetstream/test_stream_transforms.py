"""Stream subject_transform and republish: config checks and the state machine (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.lone_id_publish import takes_lone_ids
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.stream import (
    PubAck,
    StoreBatch,
    StoreMsg,
    Stream,
    UpdateConfig,
    nats_headers,
)
from jetraft.jetstream.stream_config import (
    RePublish,
    StreamConfig,
    SubjectTransform,
    decode_request,
    from_wire,
    normalise,
    to_wire,
)
from jetraft.protocol.headers import encode_headers

S = 1_000_000_000
T0 = 1_700_000_000 * S


def cfg_of(**kw: Any) -> StreamConfig:
    return normalise(decode_request(json.dumps({"name": "S", **kw}).encode()))


def error_of(**kw: Any) -> tuple[int, str]:
    with pytest.raises(ApiError) as exc:
        cfg_of(**kw)
    return exc.value.err_code, exc.value.description


# --- config ------------------------------------------------------------------------------


def test_transform_and_republish_round_trip_through_the_wire() -> None:
    cfg = cfg_of(
        subjects=["in.*"],
        subject_transform={"src": "in.*", "dest": "t.$1"},
        republish={"dest": "rp.>", "headers_only": True},
    )
    assert cfg.subject_transform == SubjectTransform("in.*", "t.$1")
    assert cfg.republish == RePublish(">", "rp.>", True)  # an empty source is '>'
    wire = to_wire(cfg)
    assert wire["subject_transform"] == {"src": "in.*", "dest": "t.$1"}
    assert wire["republish"] == {"src": ">", "dest": "rp.>", "headers_only": True}
    keys = list(wire)
    assert keys.index("subject_transform") < keys.index("republish") < keys.index("allow_direct")
    assert from_wire(json.dumps(wire).encode()) == cfg


def test_implicit_republish() -> None:
    cfg = cfg_of(subjects=["in.>"], subject_transform={"src": "in.>", "dest": "t.>"},
                 republish={"src": ">", "dest": ">"})
    assert cfg.republish == RePublish("t.>", "t.>")
    # Only when the transform's source is the stream's only subject: otherwise a cycle.
    assert error_of(subjects=["in.>", "x"], subject_transform={"src": "in.>", "dest": "t.>"},
                    republish={"src": ">", "dest": ">"}) == (
        10052, "stream configuration for republish destination forms a cycle")


def test_config_errors() -> None:
    assert error_of(subject_transform={"src": "a.>.b", "dest": "x"}) == (
        10155, "stream transform source: invalid subject a.>.b")
    assert error_of(subject_transform={"src": "a.*", "dest": "x.{{split(1)}}"}) == (
        10156, "stream transform: invalid mapping destination: not enough arguments passed "
        "to the function in {{split(1)}}")
    assert error_of(subject_transform={"src": "", "dest": "x"}) == (
        10156, "stream transform: invalid subject")
    assert error_of(subjects=["a.*"], republish={"src": "a.*", "dest": "a.x"}) == (
        10052, "stream configuration for republish destination forms a cycle")
    assert error_of(subjects=["a.*"], republish={"src": "a.*", "dest": "b.{{bad(1)}}"}) == (
        10052, "stream configuration for republish with transform from 'a.*' to "
        "'b.{{bad(1)}}' not valid")
    assert error_of(republish={"dest": "x.>"}, pedantic=True) == (
        10157, "pedantic mode: republish source can not be empty")
    # Transforms inside sources are checked with the source's own codes.
    code, _ = error_of(sources=[{"name": "X", "subject_transforms": [{"src": "a.*",
                                                                     "dest": "y.$2"}]}])
    assert code == 10146


def test_empty_transform_destination_means_none() -> None:
    cfg = cfg_of(subjects=["a"], subject_transform={"src": "a", "dest": ""})
    assert cfg.input_transform() is None


# --- the state machine ---------------------------------------------------------------------


def make(**kw: Any) -> tuple[Stream, list[tuple[str, bytes, bytes]]]:
    stream = Stream(cfg_of(**kw), MemoryStore(), created_ns=T0)
    out: list[tuple[str, bytes, bytes]] = []
    stream.republisher = lambda subj, hdr, data: out.append((subj, hdr, data))
    return stream, out


def stored(stream: Stream) -> list[str]:
    first, last = stream.store.bounds()
    msgs = (stream.store.load(seq) for seq in range(first, last + 1))
    return [m.subject for m in msgs if m is not None]


def pub(stream: Stream, subject: str, data: bytes = b"x", ts: int = T0,
        hdr: bytes | None = None) -> PubAck:
    ack = stream.apply(StoreMsg(subject, "r", hdr, data, ts))
    assert isinstance(ack, PubAck) and ack.error is None, ack
    return ack


def test_transform_applies_before_checks_and_store() -> None:
    stream, _ = make(subjects=["in.*"], subject_transform={"src": "in.*", "dest": "t.$1"},
                     max_msgs_per_subject=1)
    pub(stream, "in.a", b"1")
    pub(stream, "in.a", b"2")
    pub(stream, "in.b", b"3")
    assert stored(stream) == ["t.a", "t.b"]
    assert stream.store.last_seq_for_subject("t.a") == 2
    # Expected-last-subject-sequence looks at the stored subject.
    hdr = encode_headers({"Nats-Expected-Last-Subject-Sequence": "2"})
    assert pub(stream, "in.a", b"4", hdr=hdr).seq == 4
    assert takes_lone_ids(stream) is False


def test_random_destination_is_the_same_on_every_replica() -> None:
    kw: dict[str, Any] = {"subjects": ["in"],
                          "subject_transform": {"src": "in", "dest": "r.{{random(1000)}}"}}
    entries = [StoreMsg("in", "", None, b"x", T0 + i) for i in range(20)]
    subjects = []
    for _ in range(2):
        stream, _ = make(**kw)
        stream.apply_batch(StoreBatch(entries))
        subjects.append(stored(stream))
    assert subjects[0] == subjects[1]
    assert len(set(subjects[0])) > 1


def test_republish_headers_and_last_sequence() -> None:
    stream, out = make(subjects=["a.*"], republish={"src": "a.*", "dest": "b.$1"})
    pub(stream, "a.x", b"one", hdr=encode_headers({"Mine": "1"}))
    pub(stream, "a.y", b"two")
    pub(stream, "a.x", b"three")
    assert [(s, d) for s, _, d in out] == [("b.x", b"one"), ("b.y", b"two"), ("b.x", b"three")]
    h = [nats_headers(hdr) for _, hdr, _ in out]
    assert out[0][1].startswith(b"NATS/1.0\r\nMine: 1\r\n") and out[0][1].endswith(b"\r\n\r\n")
    assert [x["nats-last-sequence"] for x in h] == ["0", "0", "1"]
    assert [x["nats-sequence"] for x in h] == ["1", "2", "3"]
    assert h[0]["nats-stream"] == "S" and h[0]["nats-subject"] == "a.x"
    assert h[0]["nats-time-stamp"].startswith("2023-11-14T22:13:20")
    assert "nats-msg-size" not in h[0]


def test_republish_headers_only_and_invalid_results() -> None:
    stream, out = make(subjects=["a.*"],
                       republish={"src": "a.*", "dest": "b.{{split(1,-)}}", "headers_only": True})
    pub(stream, "a.p-q", b"12345")
    pub(stream, "a.-", b"1")  # splits into nothing: an invalid subject is not republished
    assert [(s, d) for s, _, d in out] == [("b.p.q", b"")]
    assert nats_headers(out[0][1])["nats-msg-size"] == "5"


def test_no_republisher_no_copies_and_refusals_are_not_republished() -> None:
    stream, out = make(subjects=["a.*"], republish={"dest": "b.>"}, max_msg_size=3)
    stream.republisher = None
    pub(stream, "a.x")
    assert out == []
    stream.republisher = lambda s, h, d: out.append((s, h, d))
    ack = stream.apply(StoreMsg("a.x", "r", None, b"toolong", T0))
    assert isinstance(ack, PubAck) and ack.error is not None
    assert out == []


def test_config_update_switches_transform() -> None:
    stream, out = make(subjects=["a.*"])
    pub(stream, "a.x")
    new = cfg_of(subjects=["a.*"], subject_transform={"src": "a.*", "dest": "z.$1"},
                 republish={"src": "z.>", "dest": "c.>"})
    stream.apply(UpdateConfig(new))
    pub(stream, "a.y")
    stream.apply(UpdateConfig(cfg_of(subjects=["a.*"])))
    pub(stream, "a.z")
    assert stored(stream) == ["a.x", "z.y", "a.z"]
    assert [s for s, _, _ in out] == ["c.y"]


def test_batches_are_transformed_and_republished_like_single_entries() -> None:
    stream, out = make(subjects=["a.*"], subject_transform={"src": "a.*", "dest": "t.$1"},
                       republish={"src": "t.*", "dest": "r.$1"})
    acks = stream.apply_batch(StoreBatch([StoreMsg(f"a.{i}", "", None, b"x", T0 + i)
                                          for i in range(4)]))
    assert [a.seq for a in acks] == [1, 2, 3, 4]
    assert stored(stream) == ["t.0", "t.1", "t.2", "t.3"]
    assert [s for s, _, _ in out] == ["r.0", "r.1", "r.2", "r.3"]
