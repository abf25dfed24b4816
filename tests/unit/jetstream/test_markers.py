"""Subject delete markers: the stream state machine leaves one where an expiry empties a
subject (max_age or Nats-TTL), and only there. (Compared with nats-server's own markers in
tests/integration/jetstream/test_markers_vs_nats.py.)"""

from __future__ import annotations

import pytest

from jetraft.jetstream.markers import go_duration, is_marker, marker_header
from jetraft.jetstream.stream import Expire, Stream, nats_headers
from tests.unit.jetstream.test_stream import T0, S, make, pub


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (1, "1s"), (59, "59s"), (90, "1m30s"), (3600, "1h0m0s"), (86400, "24h0m0s")],
)
def test_durations_are_written_as_go_writes_them(seconds: int, text: str) -> None:
    assert go_duration(seconds) == text


def test_what_counts_as_a_marker() -> None:
    assert is_marker(marker_header(5))
    assert is_marker(b"NATS/1.0\r\nKV-Operation: PURGE\r\n\r\n")
    assert not is_marker(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n")
    assert not is_marker(b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n")
    assert not is_marker(None)


def _subjects(s: Stream) -> list[tuple[int, str, bool]]:
    out = []
    seq = 1
    while (msg := s.store.load_next(seq)) is not None:
        out.append((msg.seq, msg.subject, is_marker(msg.headers)))
        seq = msg.seq + 1
    return out


def test_an_expiry_that_empties_a_subject_leaves_a_marker_that_expires_in_turn() -> None:
    s = make(allow_msg_ttl=True, allow_rollup_hdrs=True, subject_delete_marker_ttl=3 * S)
    pub(s, "s.alone", ts=T0, Nats_TTL="1s")
    pub(s, "s.two", ts=T0)
    pub(s, "s.two", ts=T0, Nats_TTL="1s")
    res = s.apply(Expire(T0 + 2 * S))
    assert res.count == 2
    assert _subjects(s) == [(2, "s.two", False), (4, "s.alone", True)]
    marker = s.store.load(4)
    assert marker is not None and marker.data == b"" and marker.ts_ns == T0 + 2 * S
    assert nats_headers(marker.headers or b"") == {
        "nats-marker-reason": "MaxAge", "nats-ttl": "3s", "nats-rollup": "sub"}
    assert s.next_expiry_ns() == T0 + 5 * S
    assert s.apply(Expire(T0 + 5 * S)).count == 1  # the marker goes without a marker
    assert _subjects(s) == [(2, "s.two", False)]


def test_max_age_leaves_markers_for_the_subjects_it_empties() -> None:
    s = make(max_age=10 * S, subject_delete_marker_ttl=2 * S, allow_msg_ttl=True,
             allow_rollup_hdrs=True)
    pub(s, "s.a", ts=T0)
    pub(s, "s.b", ts=T0)
    pub(s, "s.b", ts=T0 + 1 * S)
    pub(s, "s.c", ts=T0 + 20 * S)
    assert s.apply(Expire(T0 + 12 * S)).count == 3
    assert _subjects(s) == [(4, "s.c", False), (5, "s.a", True), (6, "s.b", True)]


def test_without_a_marker_ttl_expiry_removes_quietly() -> None:
    s = make(allow_msg_ttl=True)
    pub(s, "s.alone", ts=T0, Nats_TTL="1s")
    assert s.apply(Expire(T0 + 2 * S)).count == 1
    assert _subjects(s) == []


def test_markers_are_the_same_on_every_replica() -> None:
    """Two replicas applying the same entries hold the same messages (markers included)."""
    replicas = [make(allow_msg_ttl=True, allow_rollup_hdrs=True,
                     subject_delete_marker_ttl=1 * S) for _ in range(2)]
    for s in replicas:
        for i in range(6):
            pub(s, f"s.{i % 3}", ts=T0 + i * S, Nats_TTL=f"{1 + i}s")
        for t in range(1, 14):
            s.apply(Expire(T0 + t * S))
    first, second = (_subjects(s) for s in replicas)
    assert first == second
    assert first == []  # every message and then every marker expired
    assert replicas[0].store.state().last_seq == replicas[1].store.state().last_seq > 6
