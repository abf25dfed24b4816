"""The meta group's state machine: assignments applied alike everywhere, snapshots."""

from __future__ import annotations

import msgspec

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
    carried_out,
    decode_entry,
    encode_entry,
    joined_late,
    joins_group,
    placed_at,
    superseded,
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
    placed = msgspec.structs.replace(ca("A", "c"), peers=moved.peers)
    assert state.apply(AssignConsumer(placed))[0].new == placed
    # A consumer of a stream that is gone is not assigned.
    assert state.apply(AssignConsumer(ca("B", "x"))) == []
    changes = state.apply(RemoveStream("$G", "A"))
    assert changes == [ConsumerChanged(("$G", "A", "c"), placed, None),
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


def test_a_snapshot_places_a_stream_before_its_consumers_and_removes_it_after() -> None:
    """A server behind restores a snapshot that moved a stream and its consumer onto it:
    the keeper makes the consumer's replica from the stream's, so the stream's change must
    come first (seed 403); a removed stream goes after its consumers, as apply orders it."""
    behind = MetaState()
    behind.apply(AssignStream(sa("A", ("n1", "n2", "n3"))))
    behind.apply(AssignConsumer(cap("A", "c", ("n1", "n2", "n3"))))
    behind.apply(AssignStream(sa("B")))
    behind.apply(AssignConsumer(ca("B", "d")))
    ahead = MetaState()
    ahead.restore(behind.snapshot())
    ahead.apply(AssignStream(sa("A", ("n2", "n3", "n4"))))  # n1 removed, n4 takes its place
    ahead.apply(RemoveStream("$G", "B"))
    changes = behind.restore(ahead.snapshot())
    order = [(type(c).__name__, c.key) for c in changes]
    assert order.index(("StreamChanged", ("$G", "A"))) < order.index(
        ("ConsumerChanged", ("$G", "A", "c")))
    assert order.index(("ConsumerChanged", ("$G", "B", "d"))) < order.index(
        ("StreamChanged", ("$G", "B")))
    moved = next(c for c in changes if c.key == ("$G", "A", "c"))
    assert moved.new is not None and "n4" in moved.new.peers


def cap(stream: str, name: str, peers: tuple[str, ...], replicas: int = 0
        ) -> ConsumerAssignment:
    cfg = ConsumerConfig(name=name, num_replicas=replicas)
    return ConsumerAssignment("$G", stream, name, cfg, f"C-{name}", peers, 2)


def test_consumers_follow_their_stream_when_its_servers_change() -> None:
    """Found by the cluster simulator (seeds 5 and 9): scaling a stream down left its
    consumers on servers without it, and a meta leader lost between a peer removal's
    stream and consumer proposals left a consumer on the removed server for good."""
    state = MetaState()
    state.apply(AssignStream(sa("A")))
    state.apply(AssignConsumer(cap("A", "all", ("n1", "n2", "n3"))))
    state.apply(AssignConsumer(cap("A", "one", ("n3",), replicas=1)))
    # Peer removal: n3 is replaced by n4 in the stream and in both consumers.
    changes = state.apply(AssignStream(sa("A", ("n1", "n2", "n4"))))
    assert [type(c).__name__ for c in changes] == ["StreamChanged", "ConsumerChanged",
                                                   "ConsumerChanged"]
    assert state.consumers[("$G", "A", "all")].peers == ("n1", "n2", "n4")
    assert state.consumers[("$G", "A", "one")].peers == ("n4",)
    # Scaling down to one server: the following consumer shrinks with it.
    state.apply(AssignStream(sa("A", ("n2",))))
    assert state.consumers[("$G", "A", "all")].peers == ("n2",)
    assert state.consumers[("$G", "A", "one")].peers == ("n2",)
    # And grows back; the one with its own replica count stays at one.
    state.apply(AssignStream(sa("A", ("n2", "n5", "n1"))))
    assert state.consumers[("$G", "A", "all")].peers == ("n2", "n5", "n1")
    assert state.consumers[("$G", "A", "one")].peers == ("n2",)
    # A config change that keeps the servers moves nothing.
    same = StreamAssignment("$G", StreamConfig(name="A", subjects=("A", "B")), "S-A",
                            ("n2", "n5", "n1"), 1)
    assert len(state.apply(AssignStream(same))) == 1


def test_an_assignment_keeps_the_config_its_group_started_with() -> None:
    """Found by the cluster simulator (seed 20): a replica joining after a config update
    replayed the group's first entries under the new config (a smaller max_msg_size
    refused messages the others had stored) and the replicas' streams differed."""
    state = MetaState()
    first = sa("A")
    state.apply(AssignStream(first))
    assert state.streams[("$G", "A")].first_config == first.config
    smaller = StreamConfig(name="A", subjects=("A",), max_msg_size=64)
    state.apply(AssignStream(StreamAssignment("$G", smaller, "S-A", first.peers, 1)))
    now = state.streams[("$G", "A")]
    assert now.config == smaller and now.first_config == first.config
    # Later updates and snapshots keep it.
    state.apply(AssignStream(StreamAssignment("$G", first.config, "S-A", ("n1",), 1)))
    again = MetaState()
    again.restore(state.snapshot())
    assert again.streams[("$G", "A")].first_config == first.config
    # A stream made again (a new group) starts afresh.
    state.apply(RemoveStream("$G", "A"))
    state.apply(AssignStream(StreamAssignment("$G", smaller, "S-A2", first.peers, 3)))
    assert state.streams[("$G", "A")].first_config == smaller


def test_an_update_after_a_delete_does_not_make_the_stream_again() -> None:
    """Found by the cluster simulator (seed 1045): a scale request planned by a meta
    leader that had not applied a delete yet recreated the deleted stream, empty."""
    state = MetaState()
    state.apply(AssignStream(sa("A")))
    state.apply(RemoveStream("$G", "A"))
    assert state.apply(AssignStream(sa("A", ("n1",)), update=True)) == []
    assert not state.streams
    state.apply(AssignStream(sa("A")))  # a create is a create
    assert ("$G", "A") in state.streams
    assert decode_entry(encode_entry(AssignStream(sa("A"), update=True))).update


def test_a_consumer_planned_on_servers_its_stream_left_is_placed_on_the_stream() -> None:
    """Found by the cluster simulator (seed 1519): a meta leader that had not applied a
    peer removal yet placed a new consumer on the removed server."""
    state = MetaState()
    state.apply(AssignStream(sa("A")))
    state.apply(AssignStream(sa("A", ("n2", "n3")), update=True))
    changes = state.apply(AssignConsumer(cap("A", "c", ("n1", "n2", "n3"))))
    assert state.consumers[("$G", "A", "c")].peers == ("n2", "n3")
    assert changes[0].new == state.consumers[("$G", "A", "c")]


def test_placements_record_the_index_that_placed_each_server() -> None:
    """A server that receives the meta state in a snapshot tells by these indexes which
    placements it carried out before it stopped and which were made while it was down."""
    state = MetaState()
    key = ("$G", "A")
    state.apply(AssignStream(sa("A")), 10)
    state.apply(AssignConsumer(ca("A", "c")), 11)
    first = state.streams[key]
    assert [placed_at(first, p) for p in first.peers] == [10, 10, 10]
    assert not joined_late(first, "n2")
    # n3 is replaced by n4 (peer removal) at 20: n4 joins the existing group; the
    # consumer follows its stream at the same index.
    state.apply(AssignStream(sa("A", ("n1", "n2", "n4")), update=True), 20)
    moved = state.streams[key]
    assert [placed_at(moved, p) for p in moved.peers] == [10, 10, 20]
    assert joined_late(moved, "n4") and not joined_late(moved, "n1")
    consumer = state.consumers[("$G", "A", "c")]
    assert placed_at(consumer, "n4") == 20 and placed_at(consumer, "n1") == 11
    # Carried out up to 15: on a snapshot, the n4 placement is new to n4, the n1 one not.
    snap = MetaState()
    changes = {(type(c).__name__, c.key): c for c in snap.restore(state.snapshot())}
    change = changes[("StreamChanged", key)]
    assert carried_out(change, None, 15, "n1") and not carried_out(change, None, 15, "n4")
    assert carried_out(change, None, 20, "n4")
    assert joins_group(change, "n4") and not joins_group(change, "n1")
    # From an entry, the entry's index decides, as before.
    assert not carried_out(change, 16, 15, "n1") and carried_out(change, 15, 15, "n4")


def test_placements_without_a_record_count_as_carried_out() -> None:
    """A snapshot written before placements were recorded, or an assignment kept from one:
    nothing tells, so the replica is taken as one this server had made (if its log is
    gone, it lost it), never as a fresh one."""
    old = sa("A")  # placed == ()
    change = StreamChanged(("$G", "A"), None, old)
    assert carried_out(change, None, 0, "n1") and not joins_group(change, "n1")
    state = MetaState()
    state.streams[("$G", "A")] = old
    state.apply(AssignStream(sa("A", ("n1", "n2", "n4")), update=True), 30)
    moved = state.streams[("$G", "A")]
    assert [placed_at(moved, p) for p in moved.peers] == [0, 0, 30]


def test_a_replayed_assignment_deleted_later_in_the_log_is_superseded() -> None:
    """What the meta state holds after the whole replay decides: the same group (even
    reassigned) is still to be started; one deleted, or deleted and made again as another
    group, is not."""
    state = MetaState()
    first = sa("A")
    state.apply(AssignStream(first))
    state.apply(AssignConsumer(ca("A", "c")))
    assert not superseded(state.streams.get(("$G", "A")), first)
    assert not superseded(state.consumers.get(("$G", "A", "c")), ca("A", "c"))
    state.apply(RemoveConsumer("$G", "A", "c"))
    assert superseded(state.consumers.get(("$G", "A", "c")), ca("A", "c"))
    state.apply(RemoveStream("$G", "A"))
    again = StreamAssignment("$G", first.config, "S-A2", first.peers, 1)
    state.apply(AssignStream(again))
    assert superseded(state.streams.get(("$G", "A")), first)
    assert not superseded(state.streams.get(("$G", "A")), again)
