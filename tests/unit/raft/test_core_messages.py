"""Message codec: every message type round-trips through bytes; garbage is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.raft.messages import (
    AppendEntries,
    AppendResponse,
    DecodeError,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    decode_message,
    encode_message,
)
from jetraft.raft.types import Entry, EntryKind, Membership, SnapshotMeta

ids = st.text(min_size=1, max_size=12)
ints = st.integers(min_value=0, max_value=2**62)
entries = st.builds(Entry, ints, ints, st.sampled_from(list(EntryKind)), st.binary(max_size=64))
metas = st.builds(SnapshotMeta, ints, ints,
                  st.builds(Membership, st.tuples(ids, ids), st.tuples(ids)))
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(VoteRequest, ints, ids, ids, ints, ints, st.booleans(), st.booleans()),
    st.builds(VoteResponse, ints, ids, ids, st.booleans(), st.booleans()),
    st.builds(AppendEntries, ints, ids, ids, ints, ints,
              st.lists(entries, max_size=5).map(tuple), ints),
    st.builds(AppendResponse, ints, ids, ids, ints, st.booleans(), ints, ints, ints),
    st.builds(Heartbeat, ints, ids, ids, ints),
    st.builds(HeartbeatResponse, ints, ids, ids),
    st.builds(InstallSnapshot, ints, ids, ids, metas, ints, st.binary(max_size=128),
              st.booleans()),
    st.builds(SnapshotResponse, ints, ids, ids, ints, ints),
    st.builds(TimeoutNow, ints, ids, ids),
)


@given(messages)
def test_round_trip(msg: Message) -> None:
    assert decode_message(encode_message(msg)) == msg


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x93\x01\x02\x03", b"\x95\x63\x01\xa1a\xa1b"])
def test_garbage_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_message(data)


def test_batch_is_compact() -> None:
    ents = tuple(Entry(3, i, EntryKind.NORMAL, bytes(128)) for i in range(100))
    raw = encode_message(AppendEntries(3, "n1", "n2", 0, 0, ents, 0))
    assert len(raw) < 100 * (128 + 16)
