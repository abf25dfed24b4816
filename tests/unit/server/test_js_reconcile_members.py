"""A leader bringing its group in line with its assignment: it stops waiting for a
learner when the assignment changes, and an idle leader whose group still differs from
its assignment reconciles again (``RaftGroup.reconcile_members``, ``recheck``). Each case
is one the cluster simulator found the server getting wrong (``jetraft.sim.cluster``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.membership import ChangeKind, MembershipChange
from jetraft.server.core.accounts import Account
from jetraft.server.core.router import Router
from jetraft.server.js.clustered import replicas
from jetraft.server.js.clustered.group import RaftGroup
from jetraft.server.js.clustered.replicas import ReplicaKeeper
from jetraft.server.js.clustered.stream_replica import StreamReplica
from tests.unit.server.test_js_group_start import _Host, _Machine


class _ReplicaHost(_Host):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.router = Router()
        self.domain = ""
        self.account = Account("$G")

    def account_named(self, name: str) -> Account | None:
        return self.account if name == "$G" else None

    def stream_leader_changed(self, replica: StreamReplica) -> None:
        pass


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _with_learner(group: RaftGroup, learner: str) -> None:
    node = group.node
    assert node is not None
    core = node.core
    # A leader changes its group once an entry of its term is committed.
    await node.wait_for(lambda: node.is_leader and core.log.term(core.log.committed)
                        == core.term, 5.0)
    await node.change_membership(MembershipChange(ChangeKind.ADD_LEARNER, learner))


async def test_waiting_for_a_learner_stops_when_the_assignment_changes(tmp_path: Path) -> None:
    host = _Host(tmp_path)
    group = RaftGroup(host, "S-R1F-x", _Machine(), ("a",))
    await group.start()
    try:
        await _with_learner(group, "b")  # "b" never answers: it never catches up
        assigned = ["a", "b"]
        step = asyncio.ensure_future(group.reconcile_members(("a", "b"), lambda: assigned))
        await asyncio.sleep(0.2)  # a bounded negative wait: it waits for the learner
        assert not step.done()
        assigned = ["a"]  # scaled back down meanwhile
        # Without looking at the assignment it would wait for "b" for 30 s.
        assert await asyncio.wait_for(step, 10.0)
        assert await group.reconcile_members(("a",), lambda: assigned)  # removes "b"
        assert group.node is not None and group.node.core.membership.learners == ()
    finally:
        await group.stop()


async def test_an_idle_leader_reconciles_a_group_that_still_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replicas, "RECHECK_EVERY_S", 0.05)
    host = _ReplicaHost(tmp_path)
    sa = StreamAssignment("$G", StreamConfig(name="S", subjects=["s"]), "S-R1F-y", ("a",), 1)
    replica = StreamReplica(host, sa, joining=False)
    await replica.start()
    js: Any = type("Js", (), {})()
    js.streams, js.consumers, js.leaving = {replica.key: replica}, {}, {}
    keeper = ReplicaKeeper(js)
    task = asyncio.ensure_future(keeper.recheck_leaders())
    try:
        await _until(lambda: replica.is_leader, "the replica to lead")
        task_done = replica._reconcile_task
        await _until(lambda: task_done is None or task_done.done(), "its first reconcile")
        # A run that ended early left the group unlike its assignment (here: a learner
        # the assignment does not name); nothing else changes: the leader still fixes it.
        await _with_learner(replica.group, "b")
        node = replica.group.node
        assert node is not None
        await _until(lambda: node.core.membership.learners == (), "the learner's removal")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await replica.stop()
