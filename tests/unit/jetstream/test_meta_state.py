"""The meta group's state machine: assignments applied alike everywhere, snapshots."""

from __future__ import annotations

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.meta import (
    AssignConsumer,
    AssignStream,
    ConsumerAssignment,
    ConsumerChanged,
    MetaState,
    RemoveConsumer,
    RemoveStream,
    StreamAssignment,
    StreamChanged,
    decode_entry,
    encode_entry,
)
from jetraft.jetstream.stream_config import StreamConfig


def sa(name: str, peers: tuple[str, ...] = ("n1", "n2", "n3")) -> StreamAssignment:
    return StreamAssignment("$G", StreamConfig(name=name, subjects=(name,)), f"S-{name}",
                            peers, 1)


def ca(stream: str, name: str) -> ConsumerAssignment:
    return ConsumerAssignment("$G", stream, name, ConsumerConfig(name=name), f"C-{name}",
                              ("n1", "n2", "n3"), 2)


def test_entries_round_trip_through_their_encoding() -> None:
    for entry in (AssignStream(sa("A")), RemoveStream("$G", "A"), AssignConsumer(ca("A", "c")),
                  RemoveConsumer("$G", "A", "c")):
        assert decode_entry(encode_entry(entry)) == entry


def test_assign_update_and_remove_report_their_changes() -> None:
    state = MetaState()
    assert state.apply(AssignStream(sa("A"))) == [StreamChanged(("$G", "A"), None, sa("A"))]
    moved = sa("A", ("n1", "n2", "n4"))
    assert state.apply(AssignStream(moved)) == [StreamChanged(("$G", "A"), sa("A"), moved)]
    assert state.apply(AssignConsumer(ca("A", "c")))[0].new == ca("A", "c")
    # A consumer of a stream that is gone is not assigned.
    assert state.apply(AssignConsumer(ca("B", "x"))) == []
    changes = state.apply(RemoveStream("$G", "A"))
    assert changes == [ConsumerChanged(("$G", "A", "c"), ca("A", "c"), None),
                       StreamChanged(("$G", "A"), moved, None)]
    assert not state.streams and not state.consumers


def test_snapshot_restores_the_same_state_and_reports_the_difference() -> None:
    a = MetaState()
    a.apply(AssignStream(sa("A")))
    a.apply(AssignStream(sa("B")))
    a.apply(AssignConsumer(ca("A", "c")))
    b = MetaState()
    b.apply(AssignStream(sa("B", ("n9",))))
    changes = b.restore(a.snapshot())
    assert b.streams == a.streams and b.consumers == a.consumers
    kinds = [(type(c).__name__, c.key) for c in changes]
    assert ("StreamChanged", ("$G", "B")) in kinds and ("StreamChanged", ("$G", "A")) in kinds
    assert ("ConsumerChanged", ("$G", "A", "c")) in kinds
    assert a.assets_of("n1") == (3, 3)
