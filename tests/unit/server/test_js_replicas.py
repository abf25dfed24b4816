"""Carrying out the meta group's changes on this server's replicas
(``server.js.clustered.replicas.ReplicaKeeper``): which changes are replays on restart,
and the life of a replica taken out of its group. Replicas are stand-ins recording what
the keeper does with them; each case is one the cluster simulator found the server
getting wrong (``jetraft.sim.cluster.fixes``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from jetraft.jetstream.meta import MetaState, StreamAssignment, StreamChanged
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.membership import Membership
from jetraft.server.js.clustered import replicas
from jetraft.server.js.clustered.replicas import ReplicaKeeper


class _Meta:
    def __init__(self) -> None:
        self.applied_index = 0
        self.state = MetaState()


class _Js:
    """The parts of ClusteredJetStream the keeper uses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server_name = "a"
        self.meta = _Meta()
        self.streams: dict[Any, Any] = {}
        self.consumers: dict[Any, Any] = {}
        self.leaving: dict[Any, Any] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def raft_dir(self, group: str) -> Path:
        return self.root / "_raft_" / group

    def account_named(self, name: str) -> object:
        return object()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    def serve_direct(self, replica: object) -> None:
        pass


def _elsewhere(name: str) -> StreamChanged:
    sa = StreamAssignment("$G", StreamConfig(name=name), f"S-{name}", ("b", "c"), 1)
    return StreamChanged(("$G", name), None, sa)


def _keeper(js: _Js) -> ReplicaKeeper:
    keeper = ReplicaKeeper(js)  # type: ignore[arg-type]
    keeper.load()
    return keeper


def _replays(keeper: ReplicaKeeper) -> list[bool]:
    out = []
    while not keeper.changes.empty():
        out.append(keeper.changes.get_nowait()[1])
    return out


async def test_entries_replayed_exactly_up_to_the_index_carried_out(tmp_path: Path) -> None:
    js = _Js(tmp_path)
    first = _keeper(js)
    first.meta_changed([_elsewhere("A")], 3)
    first.meta_changed([_elsewhere("B")], 5)
    js.meta.applied_index = 5
    task = asyncio.ensure_future(first.process_changes())
    try:
        for _ in range(200):
            if first.recorded == 5:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert first.recorded == 5
    # The process stops; entries 6 and 7 were applied (committed, in the log) but their
    # changes never carried out. On restart the log replays 1-7: only 1-5 are replays.
    again = _keeper(js)
    for index, name in ((3, "A"), (5, "B"), (6, "C"), (7, "D")):
        again.meta_changed([_elsewhere(name)], index)
    again.meta_changed([_elsewhere("E")], None)  # from a snapshot: in force before
    assert _replays(again) == [True, True, False, False, True]


async def test_without_a_record_nothing_is_a_replay(tmp_path: Path) -> None:
    keeper = _keeper(_Js(tmp_path))
    keeper.meta_changed([_elsewhere("A")], 1)
    assert _replays(keeper) == [False]


# --- the life of a replica taken out of its group --------------------------------------------


class _Core:
    def __init__(self, voters: tuple[str, ...]) -> None:
        self.membership = Membership(voters)
        self.corrupt: str | None = None
        self.in_bootstrap = False


class _Node:
    def __init__(self, voters: tuple[str, ...]) -> None:
        self.core = _Core(voters)


class _Group:
    def __init__(self, name: str, voters: tuple[str, ...]) -> None:
        self.group = name
        self.removed = False
        self.node: _Node | None = _Node(voters)
        self.is_leader = False

    def members(self) -> tuple[str, ...]:
        assert self.node is not None
        return self.node.core.membership.voters


class _Stream:
    """A stand-in StreamReplica: what the keeper did with it."""

    made: list[_Stream] = []

    def __init__(self, js: _Js, sa: StreamAssignment, *, joining: bool) -> None:
        self.sa = sa
        self.joining = joining
        self.known: bool | None = None
        self.group = _Group(sa.group, () if joining else sa.peers)
        self.closed = False
        self.destroyed = False
        self.assignments = [sa]
        self.handed_to: list[str | None] = []
        _Stream.made.append(self)

    @classmethod
    async def open(cls, js: _Js, sa: StreamAssignment, *, joining: bool) -> _Stream:
        """As FileStreamReplica.open (which opens the store in a worker thread first)."""
        return cls(js, sa, joining=joining)

    @property
    def key(self) -> tuple[str, str]:
        return (self.sa.account, self.sa.config.name)

    async def start(self, *, known: bool = False) -> None:
        self.known = known
        if known and self.group.node is not None:  # its log holds its configuration
            self.group.node.core.membership = Membership(("a", "b", "c"))

    async def destroy(self) -> None:
        self.closed = self.destroyed = True
        self.group.node = None

    def assignment_changed(self, sa: StreamAssignment) -> None:
        self.sa = sa
        self.assignments.append(sa)

    def serve_direct(self, handler: object) -> None:
        pass

    def step_down(self, preferred: str | None = None) -> str:
        self.handed_to.append(preferred)
        return preferred or ""


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> list[_Stream]:
    monkeypatch.setattr(replicas, "StreamReplica", _Stream)
    monkeypatch.setattr(replicas, "FileStreamReplica", _Stream)
    monkeypatch.setattr(replicas, "LEAVE_CHECK_S", 0.01)
    _Stream.made = []
    return _Stream.made


def _sa(peers: tuple[str, ...], name: str = "S") -> StreamAssignment:
    return StreamAssignment("$G", StreamConfig(name=name), f"S-{name}", peers, 1)


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def _running(js: _Js) -> tuple[ReplicaKeeper, asyncio.Task[None]]:
    keeper = _keeper(js)
    js.keeper = keeper  # type: ignore[attr-defined]
    return keeper, asyncio.ensure_future(keeper.process_changes())


async def _stopped(js: _Js, task: asyncio.Task[None]) -> None:
    for t in [task, *js.tasks]:
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await t


async def _carried_out(keeper: ReplicaKeeper, *changes: StreamChanged) -> None:
    for c in changes:
        keeper.changes.put_nowait((c, False))
    await _until(keeper.changes.empty)
    await asyncio.sleep(0)  # the last one's handling


async def test_a_leaving_replica_goes_only_once_its_group_let_it_go(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        first, out = _sa(("a", "b", "c")), _sa(("b", "c"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, first))
        replica = streams[0]
        await _carried_out(keeper, StreamChanged(("$G", "S"), first, out))
        assert js.leaving[("$G", "S")] is replica
        # The newest configuration in its log leaves it out, not yet committed (that entry
        # may still be lost): it stays, and goes once the removal took effect.
        assert replica.group.node is not None
        replica.group.node.core.membership = Membership(("b", "c"))
        await asyncio.sleep(0.3)  # a bounded negative wait: many turns of its leave loop
        assert not replica.destroyed
        replica.group.removed = True
        await _until(lambda: replica.destroyed)
        assert ("$G", "S") not in js.leaving
    finally:
        await _stopped(js, task)


async def test_a_leaving_leader_follows_the_newest_assignment(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        first = _sa(("a", "b", "c"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, first))
        replica = streams[0]
        out1, out2 = _sa(("b", "c")), _sa(("c", "d"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), first, out1),
                           StreamChanged(("$G", "S"), out1, out2))
        assert replica.sa == out2  # still leaving: it reconciles towards the newest
        replica.group.is_leader = True
        # It hands leadership to a voter of that assignment ("b" is leaving too).
        await _until(lambda: bool(replica.handed_to))
        assert replica.handed_to[0] == "c"
    finally:
        await _stopped(js, task)


async def test_a_leaving_leader_with_no_wanted_voter_keeps_leading(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        first = _sa(("a", "b"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, first),
                           StreamChanged(("$G", "S"), first, _sa(("d",))))
        replica = streams[0]
        replica.group.is_leader = True
        await asyncio.sleep(0.1)  # several turns of its leave loop
        assert replica.handed_to == []  # its reconcile task adds "d", then hands over
    finally:
        await _stopped(js, task)


async def test_assigned_again_after_its_group_let_it_go_joins_fresh(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        first, out = _sa(("a", "b", "c")), _sa(("b", "c"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, first),
                           StreamChanged(("$G", "S"), first, out))
        old = streams[0]
        old.group.removed = True
        old.group.node = None  # stopped for good as removed (its loop may not have run)
        back = _sa(("b", "c", "a"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), out, back))
        await _until(lambda: len(streams) == 2)
        fresh = streams[1]
        assert old.destroyed and js.streams[("$G", "S")] is fresh
        assert fresh.joining and fresh.known is False
    finally:
        await _stopped(js, task)


async def test_a_replica_let_go_while_assigned_here_again_is_replaced(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    # Assigned here again before the removal was applied: the removal then stops the
    # replica for good, and the group's leader would wait for it as a learner forever.
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, _sa(("a", "b", "c"))))
        old = streams[0]
        old.group.removed = True
        await _until(lambda: len(streams) == 2)
        assert old.destroyed and js.streams[("$G", "S")] is streams[1]
        assert streams[1].joining
    finally:
        await _stopped(js, task)


async def test_a_restart_starts_a_leftover_replica_as_leaving(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    # The process stopped while its replica of S was on its way out: the group may still
    # count it as a voter, so it serves again until the group lets it go.
    js = _Js(tmp_path)
    js.raft_dir("S-S").mkdir(parents=True)
    js.raft_dir("S-T").mkdir(parents=True)
    out = _sa(("b", "c"))
    js.meta.state.streams[("$G", "S")] = out
    keeper, task = await _running(js)
    try:
        mine = _sa(("a", "b"), "T")
        await _carried_out(keeper, StreamChanged(("$G", "T"), None, mine))
        await _until(lambda: len(streams) == 2)
        leftover = next(r for r in streams if r.sa.group == "S-S")
        assert js.leaving[("$G", "S")] is leftover
        assert leftover.known is True and leftover.joining
        assert js.streams[("$G", "T")].sa == mine
        leftover.group.removed = True
        await _until(lambda: leftover.destroyed)
    finally:
        await _stopped(js, task)


async def test_a_stream_deleted_while_its_replica_here_is_leaving_takes_it_along(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    js = _Js(tmp_path)
    keeper, task = await _running(js)
    try:
        first, out = _sa(("a", "b", "c")), _sa(("b", "c"))
        await _carried_out(keeper, StreamChanged(("$G", "S"), None, first),
                           StreamChanged(("$G", "S"), first, out))
        replica = streams[0]
        assert js.leaving[("$G", "S")] is replica
        await _carried_out(keeper, StreamChanged(("$G", "S"), out, None))
        await _until(lambda: replica.destroyed)
        assert ("$G", "S") not in js.leaving
    finally:
        await _stopped(js, task)


async def test_a_replay_of_a_stream_deleted_later_in_the_log_starts_no_replica(
    tmp_path: Path, streams: list[_Stream]
) -> None:
    """On restart the meta group replays its log; a stream (or consumer) created and
    deleted since its last snapshot is no longer in the meta state when the keeper gets to
    its creation. Its replica used to be started anyway, as a known group without a log
    (a damaged replica repairing from peers that no longer run the group), until the
    replayed deletion destroyed it. The deletion still removes what is left on disk."""
    js = _Js(tmp_path)
    gone = _sa(("a", "b", "c"), name="GONE")
    kept = _sa(("a", "b", "c"), name="KEPT")
    js.meta.state.streams[("$G", "KEPT")] = kept  # the state after the whole replay
    leftover = js.raft_dir(gone.group)
    leftover.mkdir(parents=True)
    keeper, task = await _running(js)
    try:
        for change in (StreamChanged(("$G", "GONE"), None, gone),
                       StreamChanged(("$G", "KEPT"), None, kept),
                       StreamChanged(("$G", "GONE"), gone, None)):
            keeper.changes.put_nowait((change, True))
        await _until(keeper.changes.empty)
        await _until(lambda: not leftover.exists())
        assert [s.sa.config.name for s in streams] == ["KEPT"]
        assert streams[0].known is True
    finally:
        await _stopped(js, task)
