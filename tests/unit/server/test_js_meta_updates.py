"""The meta leader proposes a change of an existing stream as an update
(``AssignStream(update=True)``), so that a delete ordered before it wins: a peer removal
planned before a delete was applied must not make the stream again, empty, after it
(found by the cluster simulator: ``jetraft.sim.cluster.fixes``, updates_marked)."""

from __future__ import annotations

import random
from typing import Any

from jetraft.jetstream.meta import (
    AssignStream,
    MetaEntry,
    MetaState,
    RemoveStream,
    StreamAssignment,
)
from jetraft.jetstream.placement import ServerFacts
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.server.core.accounts import Account
from jetraft.server.js.clustered import meta_api


class _Meta:
    def __init__(self, state: MetaState) -> None:
        self.state = state
        self.proposed: list[MetaEntry] = []

    async def propose(self, entry: MetaEntry) -> list[Any]:
        self.proposed.append(entry)
        return []


class _Js:
    def __init__(self, state: MetaState) -> None:
        self.meta = _Meta(state)
        self.cluster_name = "C1"
        self.domain = ""
        self.rng = random.Random(1)
        self.config = type("Cfg", (), {"unique_tag": ""})()

    def server_facts(self) -> list[ServerFacts]:
        return [ServerFacts(n, "C1") for n in ("a", "b", "c", "d")]


class _Api:
    def __init__(self, js: _Js) -> None:
        self.js = js
        self.account = Account("$G")


async def test_a_peer_removal_planned_before_a_delete_does_not_bring_the_stream_back() -> None:
    state = MetaState()
    sa = StreamAssignment("$G", StreamConfig(name="S", num_replicas=3), "S-R3F-x",
                          ("a", "b", "c"), 1)
    state.apply(AssignStream(sa))
    js = _Js(state)
    got = await meta_api._peer_remove(_Api(js), "$JS.API.STREAM.PEER.REMOVE.S", "",  # type: ignore[arg-type]
                                      b'{"peer":"c"}')
    assert got["success"]
    (entry,) = js.meta.proposed
    assert isinstance(entry, AssignStream) and entry.update
    assert "c" not in entry.sa.peers
    # The delete was ordered first: the removal, applied after it, makes nothing.
    state.apply(RemoveStream("$G", "S"))
    state.apply(entry)
    assert ("$G", "S") not in state.streams
