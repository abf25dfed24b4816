"""The stream state machine driven through apply(), on the memory store."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.lone_id_publish import store_lone_id, takes_lone_ids
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.stream import (
    ConsumerAck,
    DeleteMsg,
    Expire,
    OpResult,
    PubAck,
    Purge,
    StoreBatch,
    StoreMsg,
    Stream,
    UpdateConfig,
    decode_entry,
    encode_entry,
    lone_msg_id,
    lone_msg_id_in,
    nats_headers,
    parse_ttl_s,
)
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.headers import encode_headers

S = 1_000_000_000
T0 = 1_700_000_000 * S


def make(**kw: object) -> Stream:
    kw.setdefault("subjects", ("s.>",))
    cfg = StreamConfig(name="S", **kw)  # type: ignore[arg-type]
    return Stream(cfg, MemoryStore(), created_ns=T0)


def pub(
    stream: Stream,
    subject: str = "s.a",
    data: bytes = b"x",
    ts: int = T0,
    reply: str = "r",
    **headers: str,
) -> PubAck:
    hdr = encode_headers({k.replace("_", "-"): v for k, v in headers.items()}) if headers else None
    result = stream.apply(StoreMsg(subject, reply, hdr, data, ts))
    assert isinstance(result, PubAck)
    return result


def err_code(ack: PubAck | OpResult) -> int | None:
    return None if ack.error is None else ack.error.err_code


def test_store_and_puback_body() -> None:
    s = make()
    ack = pub(s)
    assert (ack.seq, ack.duplicate, ack.error) == (1, False, None)
    assert json.loads(ack.body()) == {"stream": "S", "seq": 1}
    assert s.store.state().msgs == 1
    assert pub(s).seq == 2


def test_error_body_shape() -> None:
    s = make(sealed=True)
    body = json.loads(pub(s).body())
    assert body == {
        "error": {
            "code": 400,
            "err_code": 10109,
            "description": "invalid operation on sealed stream",
        },
        "stream": "S",
        "seq": 0,
    }


def test_dedupe_within_window_and_after() -> None:
    s = make(duplicate_window=2 * S)
    first = pub(s, Nats_Msg_Id="a")
    dup = pub(s, ts=T0 + S, Nats_Msg_Id="a")
    assert (dup.seq, dup.duplicate) == (first.seq, True)
    assert json.loads(dup.body()) == {"stream": "S", "seq": 1, "duplicate": True}
    assert s.store.state().msgs == 1
    later = pub(s, ts=T0 + 3 * S, Nats_Msg_Id="a")
    assert (later.seq, later.duplicate) == (2, False)


def test_expected_stream_and_last_sequence() -> None:
    s = make()
    assert err_code(pub(s, Nats_Expected_Stream="OTHER")) == 10060
    assert err_code(pub(s, Nats_Expected_Stream="S")) is None
    bad = pub(s, Nats_Expected_Last_Sequence="5")
    assert bad.error is not None and bad.error.description == "wrong last sequence: 1"
    assert err_code(pub(s, Nats_Expected_Last_Sequence="1")) is None
    assert err_code(pub(s, Nats_Expected_Last_Sequence="abc")) == 10071
    assert s.store.state().msgs == 2


def test_expected_last_subject_sequence() -> None:
    s = make()
    assert pub(s, "s.k", Nats_Expected_Last_Subject_Sequence="0").seq == 1
    again = pub(s, "s.k", Nats_Expected_Last_Subject_Sequence="0")
    assert again.error is not None
    assert (again.error.err_code, again.error.description) == (10071, "wrong last sequence: 1")
    assert pub(s, "s.other", Nats_Expected_Last_Subject_Sequence="0").seq == 2
    assert pub(s, "s.k", Nats_Expected_Last_Subject_Sequence="1").seq == 3
    # The -Subject variant checks another subject's last sequence.
    via = pub(
        s,
        "s.z",
        Nats_Expected_Last_Subject_Sequence="2",
        Nats_Expected_Last_Subject_Sequence_Subject="s.other",
    )
    assert via.seq == 4
    assert err_code(pub(s, "s.z", Nats_Expected_Last_Subject_Sequence_Subject="s.k")) == 10193


def test_expected_last_msg_id() -> None:
    s = make()
    pub(s, Nats_Msg_Id="one")
    bad = pub(s, Nats_Expected_Last_Msg_Id="zero")
    assert bad.error is not None
    assert (bad.error.err_code, bad.error.description) == (10070, "wrong last msg ID: one")
    assert pub(s, Nats_Expected_Last_Msg_Id="one").seq == 2
    # The message without an id reset the last id.
    assert err_code(pub(s, Nats_Expected_Last_Msg_Id="one")) == 10070


def test_rollups() -> None:
    s = make()
    denied = pub(s, Nats_Rollup="sub")
    assert denied.error is not None
    assert (denied.error.err_code, denied.error.description) == (10111, "rollup not permitted")
    s = make(allow_rollup_hdrs=True)
    for subject in ("s.a", "s.a", "s.b", "s.b"):
        pub(s, subject)
    assert pub(s, "s.a", Nats_Rollup="sub").seq == 5
    assert s.store.subjects_state() == {"s.a": 1, "s.b": 2}
    assert err_code(pub(s, "s.a", Nats_Rollup="nope")) == 10111
    assert pub(s, "s.c", Nats_Rollup="all").seq == 6
    assert s.store.state().msgs == 1


def test_max_msg_size_counts_headers() -> None:
    s = make(max_msg_size=10)
    assert err_code(pub(s, data=b"x" * 10)) is None
    assert err_code(pub(s, data=b"x" * 11)) == 10054
    assert err_code(pub(s, data=b"x", Nats_Msg_Id="id")) == 10054


def test_discard_new_limits() -> None:
    s = make(discard="new", max_msgs=1)
    pub(s)
    full = pub(s)
    assert full.error is not None
    assert (full.error.code, full.error.err_code) == (503, 10077)
    assert full.error.description == "maximum messages exceeded"
    s = make(discard="new", max_msgs_per_subject=1, discard_new_per_subject=True)
    pub(s, "s.a")
    per = pub(s, "s.a")
    assert per.error is not None
    assert per.error.description == "maximum messages per subject exceeded"
    assert pub(s, "s.b").seq == 2


def test_discard_old_keeps_newest() -> None:
    s = make(max_msgs=2)
    for _ in range(5):
        pub(s)
    st = s.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (2, 4, 5)


def test_sealed_deny_delete_deny_purge() -> None:
    s = make(deny_delete=True, deny_purge=True)
    pub(s)
    deleted = s.apply(DeleteMsg(1))
    assert deleted.error is not None and deleted.error.description == "message delete not permitted"
    purged = s.apply(Purge())
    assert purged.error is not None
    assert (purged.error.err_code, purged.error.description) == (
        10110,
        "stream purge not permitted",
    )
    s.apply(UpdateConfig(msgspec.structs.replace(s.config, sealed=True)))
    assert err_code(pub(s)) == 10109
    assert err_code(s.apply(Purge())) == 10109


def test_delete_msg() -> None:
    s = make()
    pub(s)
    pub(s)
    pub(s)
    assert s.apply(DeleteMsg(1)) == OpResult(True, 1)
    again = s.apply(DeleteMsg(1))  # below the first sequence now
    assert again.error is not None and again.error.description == "no message found"
    pub(s)
    assert s.apply(DeleteMsg(3)) == OpResult(True, 1)
    interior = s.apply(DeleteMsg(3))  # a hole between live messages
    assert interior.error is not None
    assert (interior.error.err_code, interior.error.description) == (10043, "sequence 3 not found")
    beyond = s.apply(DeleteMsg(9))
    assert beyond.error is not None and beyond.error.description == "stream store EOF"
    assert s.store.state().msgs == 2


def test_purge_forms() -> None:
    s = make()
    for subject in ("s.a", "s.b", "s.a", "s.b", "s.a"):
        pub(s, subject)
    assert s.apply(Purge(filter="s.a", keep=1)) == OpResult(True, 2)
    assert s.store.subjects_state() == {"s.a": 1, "s.b": 2}
    assert s.apply(Purge(seq=4)).count == 1  # removes seq 2 (s.b); 4 and 5 stay
    assert s.apply(Purge()).count == 2
    st = s.store.state()
    assert (st.msgs, st.last_seq) == (0, 5)
    assert pub(s).seq == 6


def test_max_age_expiry_by_entry_time() -> None:
    s = make(max_age=10 * S)
    pub(s, ts=T0)
    pub(s, ts=T0 + 5 * S)
    assert s.next_expiry_ns() == T0 + 10 * S
    assert s.apply(Expire(T0 + 9 * S)).count == 0
    assert s.apply(Expire(T0 + 11 * S)).count == 1
    assert s.next_expiry_ns() == T0 + 15 * S
    assert s.apply(Expire(T0 + 16 * S)).count == 1
    assert s.next_expiry_ns() is None


def test_message_ttl() -> None:
    s = make()
    assert err_code(pub(s, Nats_TTL="5")) == 10166
    assert err_code(pub(s, Nats_TTL="abc")) == 10165
    s = make(allow_msg_ttl=True)
    pub(s, ts=T0, Nats_TTL="2s")
    pub(s, ts=T0, Nats_TTL="never")
    pub(s, ts=T0)
    assert s.next_expiry_ns() == T0 + 2 * S
    assert s.apply(Expire(T0 + 3 * S)).count == 1
    assert s.store.state().msgs == 2
    assert err_code(pub(s, Nats_TTL="500ms")) == 10165


@pytest.mark.parametrize("file_store", [False, True])
def test_ttl_never_outlives_max_age_and_travels_in_the_replica_state(file_store: bool) -> None:
    def stream() -> Stream:
        cfg = StreamConfig(name="S", subjects=("s.>",), allow_msg_ttl=True, max_age=10 * S)
        store = FileStore(tempfile.mkdtemp()) if file_store else MemoryStore()
        return Stream(cfg, store, created_ns=T0)

    def publish(s: Stream) -> None:
        pub(s, ts=T0)
        pub(s, ts=T0, Nats_TTL="never")
        pub(s, ts=T0 + S)
        pub(s, ts=T0 + 2 * S, Nats_TTL="never")
        pub(s, ts=T0 + 20 * S)

    s = stream()
    publish(s)
    # The next expiry is the oldest message max_age may take, not a kept one at the front.
    assert s.next_expiry_ns() == T0 + 10 * S
    assert s.apply(Expire(T0 + 15 * S)).count == 2
    assert [m.seq for m in s._scan(1)] == [2, 4, 5]
    assert s.next_expiry_ns() == T0 + 30 * S  # not a busy loop on seqs 2 and 4
    # A replica's snapshot or checkpoint carries the "never" set: one rebuilt from it, its
    # store holding the same messages, decides the same.
    other = stream()
    publish(other)
    other.store.expire(T0 + 15 * S, {2, 4})  # the same store, the state beside it empty:
    other.reload(other.config, [], "", [])
    assert other.apply(Expire(T0 + 16 * S)).count == 2  # without the set, 2 and 4 go
    other = stream()
    publish(other)
    other.store.expire(T0 + 15 * S, {2, 4})
    dedupe, last_id, ttl = s.beside_store()
    other.reload(other.config, dedupe, last_id, ttl)
    s.apply(Expire(T0 + 40 * S))
    other.apply(Expire(T0 + 40 * S))
    assert [m.seq for m in other._scan(1)] == [m.seq for m in s._scan(1)] == [2, 4]


def test_parse_ttl() -> None:
    assert parse_ttl_s("10") == 10
    assert parse_ttl_s("1m30s") == 90
    assert parse_ttl_s("never") == -1
    for bad in ("-1", "x", "0.5s", "1d"):
        with pytest.raises(ApiError) as exc:
            parse_ttl_s(bad)
        assert exc.value.err_code == 10165


@dataclass
class FakeConsumer:
    name: str
    filters: tuple[str, ...] = ()
    acked: set[int] = field(default_factory=set)

    def needs_ack(self, seq: int, subject: str) -> bool:
        if self.filters and not any(f == subject for f in self.filters):
            return False
        return seq not in self.acked


def test_interest_retention() -> None:
    s = make(retention="interest")
    nobody = pub(s, "s.a")
    assert nobody.seq == 1 and s.store.state().msgs == 0  # no interest: sequence burned
    c1, c2 = FakeConsumer("c1"), FakeConsumer("c2", ("s.b",))
    s.add_consumer(c1)
    s.add_consumer(c2)
    pub(s, "s.a")  # 2: c1 only
    pub(s, "s.b")  # 3: both
    c1.acked.add(2)
    s.on_consumer_ack(2)
    assert s.store.load(2) is None
    c1.acked.add(3)
    s.on_consumer_ack(3)
    assert s.store.load(3) is not None  # c2 still needs it
    s.remove_consumer("c2")
    assert s.store.load(3) is None


def test_workqueue_removes_on_ack() -> None:
    s = make(retention="workqueue")
    s.add_consumer(FakeConsumer("w"))
    pub(s)
    pub(s)
    s.apply(ConsumerAck(1))
    assert s.store.load(1) is None and s.store.load(2) is not None


def test_observers_hear_changes() -> None:
    events: list[tuple[str, object]] = []

    class Obs:
        def on_stored(self, seq: int, subject: str) -> None:
            events.append(("stored", seq))

        def on_removed(self, seqs: list[int]) -> None:
            events.append(("removed", list(seqs)))

        def on_purged(self, first_seq: int, filter_subject: str) -> None:
            events.append(("purged", first_seq))

    s = make(max_msgs=1)
    s.add_observer(Obs())
    last: list[int] = []
    s.add_listener(last.append)
    pub(s)
    pub(s)
    s.apply(Purge())
    assert events == [("stored", 1), ("removed", [1]), ("stored", 2), ("purged", 3)]
    assert last == [1, 2]
    # One that says it has nothing to do per stored message hears only the rest (each
    # removal twice: both observers hear it).
    events.clear()
    quiet = Obs()
    s.add_observer(quiet, stores=False)
    pub(s)
    pub(s)
    assert events == [("stored", 3), ("removed", [3]), ("removed", [3]), ("stored", 4)]
    s.remove_observer(quiet)
    events.clear()
    pub(s)
    assert events == [("removed", [4]), ("stored", 5)]


def test_recover_rebuilds_dedupe_and_last_msg_id() -> None:
    s = make(duplicate_window=60 * S)
    pub(s, ts=T0, Nats_Msg_Id="a")
    pub(s, ts=T0 + S, Nats_Msg_Id="b")
    restarted = Stream(s.config, s.store, T0)
    restarted.recover()
    assert restarted.last_msg_id == "b"
    dup = pub(restarted, ts=T0 + 2 * S, Nats_Msg_Id="a")
    assert (dup.seq, dup.duplicate) == (1, True)


def test_entries_roundtrip() -> None:
    cfg = StreamConfig(name="S", subjects=("a",))
    entries = [
        StoreMsg("a", "r", b"NATS/1.0\r\n\r\n", b"d", 5),
        StoreMsg("a", "", None, b"", 6),
        Purge("a", 0, 2),
        DeleteMsg(3, True),
        UpdateConfig(cfg),
        Expire(7),
        ConsumerAck(9),
    ]
    for entry in entries:
        assert decode_entry(encode_entry(entry)) == entry


ops = st.one_of(
    st.builds(
        lambda subj, mid, dt: ("pub", subj, mid, dt),
        st.sampled_from(["s.a", "s.b", "s.c"]),
        st.sampled_from(["", "m1", "m2", "m3"]),
        st.integers(0, 3),
    ),
    st.builds(lambda keep: ("purge", keep), st.integers(0, 2)),
    st.builds(lambda seq: ("del", seq), st.integers(1, 20)),
    st.builds(lambda dt: ("expire", dt), st.integers(0, 5)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(ops, max_size=40))
def test_replicas_applying_the_same_entries_agree(script: list[tuple[object, ...]]) -> None:
    """Determinism: the same entries give the same answers and the same store."""
    entries = []
    now = T0
    for op in script:
        if op[0] == "pub":
            _, subj, mid, dt = op
            now += int(dt) * S  # type: ignore[call-overload]
            hdr = encode_headers({"Nats-Msg-Id": str(mid)}) if mid else None
            entries.append(StoreMsg(str(subj), "r", hdr, b"x", now))
        elif op[0] == "purge":
            entries.append(Purge("s.a", 0, int(op[1])))  # type: ignore[call-overload]
        elif op[0] == "del":
            entries.append(DeleteMsg(int(op[1])))  # type: ignore[call-overload]
        else:
            entries.append(Expire(now + int(op[1]) * S))  # type: ignore[call-overload]

    def run() -> tuple[list[object], object, dict[str, int]]:
        s = make(max_age=4 * S, duplicate_window=2 * S, max_msgs_per_subject=3)
        answers = [s.apply(decode_entry(encode_entry(e))) for e in entries]
        return answers, s.store.state(), s.store.subjects_state()

    assert run() == run()


_header_names = st.sampled_from(
    [
        "Nats-Msg-Id",
        "Nats-Expected-Stream",
        "Nats-Expected-Last-Sequence",
        "Nats-Expected-Last-Subject-Sequence",
        "Nats-Expected-Last-Subject-Sequence-Subject",
        "Nats-Expected-Last-Msg-Id",
        "Nats-Rollup",
        "Nats-TTL",
        "nats-ttl",
        "X-Other",
    ]
)
# Header values as clients could send them: numbers, words, unicode digits that str.isdigit()
# accepts but int() does not ("²"), wildcards, whitespace.
_header_values = st.one_of(
    st.sampled_from(
        ["0", "1", "2", "-1", "²", "\u0661\u0662", "never", "1h", "0.5s", "sub", "all", "s.>"]
    ),
    st.sampled_from(["²", "³", "¹0", "1²"]),
    st.integers(-5, 2**64 + 5).map(str),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=":"),
        max_size=12,
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    headers=st.lists(st.tuples(_header_names, _header_values), min_size=1, max_size=4),
    subject=st.sampled_from(["s.a", "s.b.c"]),
    flags=st.fixed_dictionaries(
        {
            "allow_rollup_hdrs": st.booleans(),
            "allow_msg_ttl": st.booleans(),
            "discard": st.sampled_from(["old", "new"]),
            "max_msgs_per_subject": st.sampled_from([-1, 1]),
            "retention": st.sampled_from(["limits", "interest", "workqueue"]),
        }
    ),
)
def test_fuzzed_publish_headers_always_get_a_puback(
    headers: list[tuple[str, str]], subject: str, flags: dict[str, object]
) -> None:
    """Whatever Nats-* headers a publisher sends, apply answers with a PubAck (stored or an
    API error) and never raises: the publisher must always hear back."""
    s = make(**flags)
    pub(s, "s.a", Nats_Msg_Id="m1")
    hdr = encode_headers([(name, value.strip()) for name, value in headers])
    result = s.apply(StoreMsg(subject, "r", hdr, b"payload", T0 + S))
    assert isinstance(result, PubAck) and result.reply == "r"
    if result.error is None:
        assert result.seq >= 1
    else:
        assert result.seq == 0 and result.error.err_code > 10000
    json.loads(result.body())  # the answer is valid JSON
    # The stream is still usable afterwards.
    after = s.apply(StoreMsg("s.z", "r2", None, b"x", T0 + 2 * S))
    assert isinstance(after, PubAck)


def test_non_ascii_digits_in_sequence_headers_never_match() -> None:
    """nats-server parses these headers as ASCII numbers; anything else never matches."""
    s = make(allow_msg_ttl=True)
    pub(s)
    for name in ("Nats_Expected_Last_Sequence", "Nats_Expected_Last_Subject_Sequence"):
        for value in ("²", "¹", "\u0661"):
            ack = pub(s, **{name: value})
            assert err_code(ack) == 10071, (name, value)
    assert err_code(pub(s, Nats_TTL="²")) == 10165


def test_publish_at_the_end_of_the_sequence_space_is_refused() -> None:
    """A purge may move the stream to the last uint64 sequence (as nats-server allows); the
    publish after that gets an error PubAck instead of crashing the store."""
    s = make()
    pub(s)
    result = s.apply(Purge("", 2**64 - 2, 0))
    assert isinstance(result, OpResult) and result.ok
    assert pub(s).seq == 2**64 - 2
    refused = pub(s)
    assert err_code(refused) == 10077 and refused.seq == 0
    assert s.store.state().msgs == 1
    # Emptying the stream leaves first = last + 1, still a uint64.
    assert isinstance(s.apply(Purge()), OpResult)
    assert s.store.state().first_seq == 2**64 - 1
    assert err_code(pub(s)) == 10077


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id:abc \r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id: \r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id: a\r\nNats-Expected-Stream: S\r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id: a\r\nnats-msg-id: b\r\n\r\n",
        b"NATS/1.0\r\nNATS-MSG-ID: x\r\nFoo: y\r\n\r\n",
        b"NATS/1.0 503\r\n\r\n",
    ],
)
def test_nats_headers_lone_msg_id_shortcut_agrees_with_the_general_parse(block: bytes) -> None:
    # The general parse, written out: every Nats-* line, names lower-cased, first one wins.
    want: dict[str, str] = {}
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        key = name.strip().decode().lower()
        if sep and key.startswith("nats-") and key not in want:
            want[key] = value.strip().decode()
    assert nats_headers(block) == want


_BLOCK_PARTS = [
    b"NATS/1.0", b"\r\n", b"Nats-Msg-Id:", b" ", b"abc", b"\xc3", b"Foo: y", b"\r", b"\t", b"\x0c"
]


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_BLOCK_PARTS), max_size=9),
    payload=st.sampled_from([b"", b"\r\n", b"x\r\n\r\n", b"Nats-Msg-Id: z\r\n\r\n"]),
    cut=st.integers(-3, 3),
)
@example(parts=[b"Nats-Msg-Id:", b" ", b"abc"], payload=b"x\r\n\r\n", cut=0)
@example(parts=[b"Nats-Msg-Id:", b"\xc3"], payload=b"", cut=0)
@example(parts=[b"Nats-Msg-Id:", b"abc"], payload=b"Nats-Msg-Id: z\r\n\r\n", cut=-2)
@example(parts=[b"Nats-Msg-Id:", b" ", b" ", b"abc", b"\t"], payload=b"", cut=0)
@example(parts=[b"Nats-Msg-Id:", b" "], payload=b"", cut=0)
@example(parts=[b"Nats-Msg-Id:", b"\r", b"abc"], payload=b"", cut=0)
def test_lone_msg_id_in_a_body_is_that_of_its_header_block(
    parts: list[bytes], payload: bytes, cut: int
) -> None:
    """The publish path reads the id from the body (header block and payload as one), with
    the header length the HPUB line gave, which may be anything up to the body's length."""
    block = b"NATS/1.0\r\n" + b"".join(parts) + b"\r\n\r\n"
    body = block + payload
    hdr_len = max(0, min(len(body), len(block) + cut))
    assert lone_msg_id_in(body, hdr_len) == lone_msg_id(body[:hdr_len])


def test_the_lone_id_reading_strips_what_bytes_strip_does() -> None:
    from jetraft.jetstream import publish_headers as ph

    assert len(ph.LONE_MSG_ID) == ph._LONE_AT
    assert [c for c in range(256) if ph._blank(c)] == [
        c for c in range(256) if not bytes([c]).strip()
    ]


# --- store_lone_id: the lone Nats-Msg-Id fast path decides as apply() does ------------------


def _lone(msg_id: str) -> bytes:
    return b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % msg_id.encode()


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "", " d "]), st.integers(0, 3 * S)),
        max_size=25,
    ),
    window_s=st.sampled_from([0, 1, 120]),
    max_msg_size=st.sampled_from([-1, 60]),
    data_len=st.sampled_from([1, 40]),
)
def test_store_lone_id_decides_as_apply(
    ops: list[tuple[str, int]], window_s: int, max_msg_size: int, data_len: int
) -> None:
    """Same sequences, duplicates, refusals (left to apply), dedupe window and last id, and
    the same stored messages, whether publishes go through apply() or store_lone_id()."""
    kw = {"duplicate_window": window_s * S, "max_msg_size": max_msg_size}
    by_apply, fast = make(**kw), make(**kw)
    assert takes_lone_ids(fast)
    data = b"x" * data_len
    ts = T0
    for msg_id, step in ops:
        ts += step
        hdr = _lone(msg_id)
        want = by_apply.apply(StoreMsg("s.a", "r", hdr, data, ts))
        assert isinstance(want, PubAck)
        got = store_lone_id(fast, "s.a", hdr + data, len(hdr), msg_id.strip(), ts)
        if got == 0:  # a refusal: apply() answers it, nothing was changed
            assert want.error is not None
            again = fast.apply(StoreMsg("s.a", "r", hdr, data, ts))
            assert isinstance(again, PubAck) and again.error == want.error
        else:
            assert want.error is None
            assert (abs(got), got < 0) == (want.seq, want.duplicate)
        assert fast.beside_store() == by_apply.beside_store()
    assert fast.store.state() == by_apply.store.state()


def test_streams_with_more_checks_do_not_take_lone_ids() -> None:
    assert not takes_lone_ids(make(sealed=True))
    assert not takes_lone_ids(make(retention="interest"))
    assert not takes_lone_ids(make(discard="new"))
    assert takes_lone_ids(make(retention="limits", discard="old"))


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["s.a", "s.b"]),
                st.sampled_from(["", "", "m1", "m2"]),  # a Nats-Msg-Id header, or none
                st.integers(0, 12),  # payload size
            ),
            max_size=10,
        ),
        max_size=5,
    ),
    flags=st.fixed_dictionaries(
        {
            "max_msg_size": st.sampled_from([-1, 8]),
            "max_msgs": st.sampled_from([-1, 4]),
            "discard": st.sampled_from(["old", "new"]),
            "duplicate_window": st.sampled_from([0, 60 * S]),
        }
    ),
    file=st.booleans(),
)
@example(  # plain publishes after one with a Nats-Msg-Id: they forget it (last_msg_id)
    batches=[[("s.a", "m1", 1)], [("s.a", "", 1), ("s.b", "", 2)]],
    flags={"max_msg_size": -1, "max_msgs": -1, "discard": "old", "duplicate_window": 0},
    file=False,
)
def test_a_batch_applies_as_its_publishes_one_by_one(
    batches: list[list[tuple[str, str, int]]], flags: dict[str, object], file: bool
) -> None:
    """apply_batch (a clustered leader's StoreBatch entry) stores the same messages, gives
    the same answers and tells observers the same as applying each publish alone, whether
    its publishes take the common case (stored in one run) or not."""
    entries = [
        [
            StoreMsg(subj, f"r{i}", encode_headers({"Nats-Msg-Id": mid}) if mid else None,
                     b"x" * size, T0 + i)
            for i, (subj, mid, size) in enumerate(batch)
        ]
        for batch in batches
    ]

    def run(batched: bool, answers: bool = True) -> tuple[list[list[PubAck]], object]:
        with tempfile.TemporaryDirectory() as d:
            store = FileStore(d) if file else MemoryStore()
            s = Stream(StreamConfig(name="S", subjects=("s.>",), **flags),  # type: ignore[arg-type]
                       store, created_ns=T0)
            heard: list[tuple[int, str]] = []
            s.add_listener(lambda seq: heard.append((seq, "")))
            acks: list[list[PubAck]] = []
            for msgs in entries:
                if batched:
                    acks.append(s.apply_batch(StoreBatch(msgs), answers=answers))
                else:
                    acks.append([s.apply(m) for m in msgs])  # type: ignore[misc]
            loaded = [store.load(seq) for seq in range(1, store.last_seq + 1)]
            out = (store.state(), store.subjects_state(), loaded, heard, s.last_msg_id)
            store.close()
            return acks, out

    one_by_one = run(batched=False)
    assert run(batched=True) == one_by_one
    # A follower's apply leaves the answers out (all or nothing), the rest is the same.
    acks, out = run(batched=True, answers=False)
    assert out == one_by_one[1]
    assert all(got in ([], want) for got, want in zip(acks, one_by_one[0], strict=True))


def test_request_info_of_an_import_is_not_stored() -> None:
    """A publish that came through a service import carries the requester's account in
    Nats-Request-Info; nats-server stores the message without it (and the other headers)."""
    s = make()
    info = '{"acc":"B"}'
    pub(s, "s.a", Nats_Request_Info=info)
    pub(s, "s.b", Nats_Request_Info=info, Nats_Msg_Id="m1", X="1")
    only = s.store.load(1)
    both = s.store.load(2)
    assert only is not None and only.headers is None
    assert both is not None and both.headers == encode_headers({"Nats-Msg-Id": "m1", "X": "1"})
    assert pub(s, "s.c", Nats_Request_Info=info, Nats_Msg_Id="m1").duplicate
