"""Carrying out the meta group's changes on this server's replicas
(``server.js.clustered.replicas.ReplicaKeeper``): which changes are replays on restart."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from jetraft.jetstream.meta import StreamAssignment, StreamChanged
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.server.js.clustered.replicas import ReplicaKeeper


class _Meta:
    def __init__(self) -> None:
        self.applied_index = 0


class _Js:
    """The parts of ClusteredJetStream the keeper uses for changes that do not concern
    this server (assignments naming other servers only)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server_name = "a"
        self.meta = _Meta()
        self.streams: dict[Any, Any] = {}
        self.consumers: dict[Any, Any] = {}
        self.leaving: dict[Any, Any] = {}


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
