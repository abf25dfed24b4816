"""The meta group on this server: every JetStream server of the cluster is a member.

Its state (``jetstream.meta.MetaState``) is the set of stream and consumer assignments;
applying an entry tells the host which local replicas to start, reshape or stop. Its leader
owns the JetStream API's creates, updates and deletes and the placement of new groups.

Membership: on first start the group only knows how many servers it is meant for (the
configured routes, at least two, or more JetStream servers if more are connected) and
bootstraps as soon as a majority of that many can elect a leader ("after two servers are
running you'll be ready to use JetStream"). From then on the leader adds every JetStream
server that connects and is not yet a member (as a learner, promoted once caught up);
``SERVER.REMOVE`` takes one out for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from jetraft.jetstream.meta import Change, MetaEntry, MetaState, decode_entry, encode_entry
from jetraft.raft.node import NodeStopped
from jetraft.raft.ready import NotLeader, ProposalDropped, RaftError, Role, SoftState
from jetraft.raft.types import Entry
from jetraft.server.js.clustered.group import GroupHost, RaftGroup

log = logging.getLogger("jetraft.js.meta")

META_GROUP = "_meta_"
PROPOSE_TIMEOUT_S = 5.0


class MetaHost(GroupHost, Protocol):
    def meta_changed(self, changes: list[Change], index: int | None) -> None:
        """Assignments changed by the entry at ``index`` (None: a snapshot installed or
        recovered); the host tells those it carried out before this start (replays)."""
        ...

    def meta_leader_changed(self, leader: str) -> None: ...


class MetaUnavailable(Exception):
    """No meta leader here (or it changed while waiting): JetStream is not available."""


class MetaGroup:
    def __init__(self, host: MetaHost, expected_size: int) -> None:
        self.host = host
        self.state = MetaState()
        self.expected_size = expected_size
        self.group = RaftGroup(
            host, META_GROUP, self, (), bootstrap_size=expected_size, on_role=self._on_role
        )
        self.js_servers: dict[str, bool] = {}  # known JetStream servers -> online
        self._member_task: asyncio.Task[None] | None = None
        self._leader = ""
        # The last leader this server knew of and its term, and since when it knows none
        # (a follower that misses a few heartbeats loses its leader for a moment while the
        # leader goes on answering: see ``leaderless_for``).
        self.last_leader: tuple[str, int] = ("", 0)
        self._lost_at: float | None = time.monotonic()
        self.listeners: list[Callable[[str], None]] = []
        self._campaigned_with = 0  # servers seen at our last first campaign (see below)

    async def start(self) -> None:
        await self.group.start()
        self._refresh_bootstrap()

    async def stop(self) -> None:
        if self._member_task is not None:
            self._member_task.cancel()
        await self.group.stop()

    # --- the state machine (raft.node.StateMachine) ------------------------------------------

    def apply(self, entry: Entry) -> object:
        changes = self.state.apply(decode_entry(entry.data), entry.index)
        if changes:
            self.host.meta_changed(changes, entry.index)
        return changes

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        changes = self.state.restore(data)
        if changes:
            self.host.meta_changed(changes, None)

    @property
    def applied_index(self) -> int:
        """The last entry applied here: every change up to it was given to the host."""
        node = self.group.node
        return node.driver.applied if node is not None else 0

    # --- leadership --------------------------------------------------------------------------

    @property
    def leader(self) -> str:
        return self.group.leader

    @property
    def is_leader(self) -> bool:
        return self.group.is_leader

    def _on_role(self, ss: SoftState) -> None:
        if ss.leader:
            self._lost_at = None
            if (ss.leader, ss.term) != self.last_leader:
                log.info("JetStream cluster new metadata leader: %s", ss.leader)
                self.last_leader = (ss.leader, ss.term)
        elif self._lost_at is None:
            self._lost_at = time.monotonic()
        if ss.leader != self._leader:
            self._leader = ss.leader
            self.host.meta_leader_changed(ss.leader)
        if ss.role is Role.LEADER:
            self._schedule_membership()

    def leaderless_for(self) -> float:
        """How long this server has known no meta leader (0 while it knows one)."""
        return 0.0 if self._lost_at is None else time.monotonic() - self._lost_at

    async def propose(self, entry: MetaEntry) -> list[Change]:
        """Propose as leader and wait until applied here; MetaUnavailable otherwise."""
        node = self.group.node
        if node is None or not node.is_leader:
            raise MetaUnavailable("not the meta leader")
        try:
            fut = node.propose_nowait(encode_entry(entry))
            applied = await asyncio.wait_for(fut, PROPOSE_TIMEOUT_S)
        except (NotLeader, ProposalDropped, NodeStopped, TimeoutError) as exc:
            raise MetaUnavailable(str(exc) or type(exc).__name__) from None
        result = applied.result
        return result if isinstance(result, list) else []

    def step_down(self, preferred: str | None = None) -> str:
        node = self.group.node
        if node is None or not node.is_leader:
            raise MetaUnavailable("not the meta leader")
        try:
            return node.transfer_leadership(preferred)
        except RaftError as exc:
            raise MetaUnavailable(str(exc)) from None

    # --- servers -----------------------------------------------------------------------------

    def server_seen(self, name: str, online: bool) -> None:
        """A JetStream server connected (online) or went away."""
        self.js_servers[name] = online
        self._refresh_bootstrap()
        if online and self.is_leader:
            self._schedule_membership()

    def _refresh_bootstrap(self) -> None:
        node = self.group.node
        if node is None:
            return
        online = [n for n, up in self.js_servers.items() if up]
        node.set_bootstrap_peers(online)
        core = node.core
        if core.in_bootstrap:
            # More JetStream servers than we were told to expect: count them all.
            core.bootstrap_size = max(core.bootstrap_size, len(online) + 1)
            self._maybe_campaign_first(online)

    def _maybe_campaign_first(self, online: list[str]) -> None:
        """A new cluster: the server with the smallest name campaigns as soon as it sees
        enough servers to be elected, instead of after an election timeout (half a second
        or more of a cold start). The others wait for their timeouts as usual, so if it is
        down or its campaign fails, one of them is elected a little later; a campaign is
        always safe, at worst it is lost (it tries again as more servers come: the first
        ones may not have started their own meta group yet)."""
        node = self.group.node
        if node is None or len(online) <= self._campaigned_with:
            return
        core = node.core
        if core.term != 0 or core.lead or (online and min(online) < self.host.server_name):
            return
        if len(online) + 1 < core.bootstrap_size // 2 + 1:
            return
        self._campaigned_with = len(online)
        node.campaign()

    def members(self) -> tuple[str, ...]:
        node = self.group.node
        if node is None:
            return ()
        m = node.core.membership
        return (*m.voters, *m.learners)

    def _schedule_membership(self) -> None:
        if self._member_task is None or self._member_task.done():
            self._member_task = asyncio.ensure_future(self._add_missing_members())

    async def _add_missing_members(self) -> None:
        """Leader: every connected JetStream server becomes a member, one at a time."""
        while True:
            node = self.group.node
            if node is None or not node.is_leader:
                return
            members = set(self.members())
            missing = sorted(n for n, up in self.js_servers.items() if up and n not in members)
            if not missing:
                return
            name = missing[0]
            try:
                log.info("JetStream cluster: adding %s to the metadata group", name)
                await node.add_member(name, timeout_s=10.0)
            except (RaftError, ValueError, TimeoutError) as exc:
                log.debug("adding %s to the meta group: %s", name, exc)
                await asyncio.sleep(0.2)

    async def remove_server(self, name: str) -> None:
        node = self.group.node
        if node is None or not node.is_leader:
            raise MetaUnavailable("not the meta leader")
        try:
            await asyncio.wait_for(node.remove_member(name), PROPOSE_TIMEOUT_S)
        except (RaftError, ValueError, TimeoutError) as exc:
            raise MetaUnavailable(str(exc)) from None
        self.js_servers.pop(name, None)
