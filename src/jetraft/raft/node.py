"""The asyncio host of one RAFT replica: timers, futures and a worker thread for fsync.

All the replica's logic (the Ready contract, proposals, snapshots, removal, storage
errors) lives in driver.Driver, which the simulator runs too; this module only gives it
time and I/O:

- ticks come from the node's own timer, or from a shared `Ticker` that ticks every node
  of the process with one timer (a server hosting hundreds of groups uses one);
- `Driver.process()` runs in one task per node; its blocking jobs (fsync, snapshot
  writes) run in a worker thread so the loop stays responsive, and whatever arrives
  meanwhile goes into the next Ready (group commit: one fsync for all of it);
- each proposal is a future, answered once its entry is applied here, failed when the
  node loses leadership, stops, is removed or fails, or after its deadline
  (ProposalTimeout: outcome unknown).

The state machine contract (StateMachine and DurableStateMachine, defined in driver.py
and exported here): `apply(entry)` sees each committed NORMAL entry in index order and may
read `entry.index`; after a restart the entries after the last snapshot are applied again.
A state machine that keeps its state durably itself implements `durable_index()`: the
node then compacts its log under an external marker (no snapshot bytes), asks
`snapshot()` for the current state only when a follower needs it, requires `restore()`
to be durable on return, never restores from the marker on restart, and the state
machine skips replayed entries whose index it already holds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

from .driver import (
    Applied,
    Driver,
    DurableStateMachine,
    Item,
    NodeFailed,
    NodeRemoved,
    NodeStopped,
    Outcome,
    ProposalTimeout,
    State,
    StateMachine,
)
from .membership import ChangeKind, MembershipChange
from .messages import Message
from .ready import RaftConfig, Role, SoftState
from .ready import Status as CoreStatus
from .storage import LogStore, RecoveredState
from .transport import Transport

__all__ = [
    "Applied",
    "DurableStateMachine",
    "NodeFailed",
    "NodeRemoved",
    "NodeStopped",
    "ProposalTimeout",
    "RaftNode",
    "StateMachine",
    "Ticker",
]


class Ticker:
    """One timer for many nodes: every `interval_s` it ticks each registered node.

    A node's tick only counts time unless it has something to do (a leader's heartbeat,
    an election), so idle followers cost no task switch."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self._nodes: dict[int, RaftNode] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.ticks = 0

    def register(self, node: RaftNode) -> None:
        self._nodes[id(node)] = node
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._fire)

    def unregister(self, node: RaftNode) -> None:
        self._nodes.pop(id(node), None)
        if not self._nodes and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        return len(self._nodes)

    def _fire(self) -> None:
        self.ticks += 1
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._fire)
        for node in list(self._nodes.values()):
            node.tick()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._nodes.clear()


class RaftNode:
    def __init__(
        self,
        node_id: str,
        peers: Sequence[str],
        core_config: RaftConfig,
        wal: LogStore,
        transport: Transport,
        state_machine: StateMachine,
        tick_interval_s: float = 0.1,
        rng: random.Random | None = None,
        *,
        recovered: RecoveredState | None = None,
        learners: Sequence[str] = (),
        snapshot_entries: int = 8192,
        keep_entries: int = 1024,
        ticker: Ticker | None = None,
        proposal_timeout_s: float | None = None,
        on_removed: Callable[[], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        bootstrap_size: int = 0,
    ) -> None:
        """`wal` and `recovered` come from `Wal.open`; without `recovered` the log is new.
        Every `snapshot_entries` applied entries the log is compacted, keeping
        `keep_entries` for followers slightly behind. With a `ticker` the node has no
        timer of its own (tick_interval_s is then only used to report times).
        `proposal_timeout_s` is the default deadline of proposals (None: no deadline).
        `on_removed()` is called once the node learns it was removed from its group,
        `on_error(exc)` when it stopped on a storage error."""
        self.id = node_id
        self.wal = wal
        self.transport = transport
        self.sm = state_machine
        self.tick_interval_s = ticker.interval_s if ticker is not None else tick_interval_s
        self.ticker = ticker
        self.proposal_timeout_s = proposal_timeout_s
        self.on_removed = on_removed
        self.on_error = on_error
        self.driver = Driver(
            node_id, peers, core_config, wal, state_machine, transport.send, self._done,
            rng or random.Random(), recovered=recovered, learners=learners,
            snapshot_entries=snapshot_entries, keep_entries=keep_entries,
            bootstrap_size=bootstrap_size,
        )
        self.driver.on_removed = self._removed
        self.driver.on_error = self._failed
        self.core = self.driver.core
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.driver.state is State.REMOVED:  # removed before this restart
            self._removed()
            return
        self._task = loop.create_task(self._run(), name=f"raft-{self.id}")
        if self.ticker is not None:
            self.ticker.register(self)
        else:
            self._timer = loop.call_later(self.tick_interval_s, self._on_timer)
        self._wake.set()

    async def stop(self) -> None:
        """Stop after the Ready in progress (an fsync is never abandoned half way)."""
        self._stopping = True
        self._stop_ticks()
        self._wake.set()
        if self._task is not None:
            await self._task
        self.driver.stop()

    def _stop_ticks(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.ticker is not None:
            self.ticker.unregister(self)

    def receive(self, msg: Message) -> None:
        """Called by the transport for each message addressed to this node."""
        self.driver.receive(msg)
        self._wake.set()

    def tick(self) -> None:
        """One tick (called by the node's timer or its Ticker)."""
        if self.driver.tick():
            self._wake.set()

    def set_bootstrap_peers(self, peers: Sequence[str]) -> None:
        """The servers a group that is still bootstrapping may ask for votes."""
        self.core.set_bootstrap_peers(peers)

    def subscribe(self, callback: Callable[[SoftState], None]) -> None:
        """callback(soft_state) on each change of leader, role or term."""
        self.driver.on_soft_state.append(callback)

    def _on_timer(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.tick_interval_s, self._on_timer)
        self.tick()

    def _removed(self) -> None:
        self._stop_ticks()
        self._wake.set()
        if self.on_removed is not None:
            self.on_removed()

    def _failed(self, exc: BaseException) -> None:
        self._stop_ticks()
        self._wake.set()
        if self.on_error is not None:
            self.on_error(exc)

    # ------------------------------------------------------------------ queries
    @property
    def leader(self) -> str:
        return self.core.lead

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER and self.driver.running

    @property
    def state(self) -> State:
        """running, stopped, removed (from its group) or failed (storage error)."""
        return self.driver.state

    @property
    def fsyncs(self) -> int:
        return self.driver.fsyncs

    @property
    def readies(self) -> int:
        return self.driver.readies

    def status(self) -> CoreStatus:
        """Term, commit, applied; on the leader, for each peer: match index, lag
        (committed entries it lacks) and how many ticks ago it was last heard from
        (times tick_interval_s for seconds). Cheap: no I/O, no copies of the log."""
        return self.core.status()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait until predicate() holds, re-checking after each Ready; TimeoutError."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._progress.wait()

    def caught_up(self) -> bool:
        """Every commit this node has heard of is applied here (see Driver.caught_up)."""
        return self.driver.caught_up()

    async def wait_for_leader(self, timeout_s: float) -> str:
        await self.wait_for(lambda: self.core.lead != "", timeout_s)
        return self.core.lead

    # ------------------------------------------------------------------ API
    def propose_nowait(
        self, data: bytes, *, timeout_s: float | None = None
    ) -> asyncio.Future[Applied]:
        """Queue a proposal; the future resolves once it is applied here. Raises
        NotLeader (naming the leader, to forward to) on a follower. The future fails
        with ProposalTimeout after timeout_s (default: the node's proposal_timeout_s),
        with ProposalDropped/NotLeader if this node loses leadership first, NodeStopped
        (NodeRemoved, NodeFailed) if it stops: it never hangs."""
        return self._enqueue(data, timeout_s)

    async def propose(self, data: bytes, *, timeout_s: float | None = None) -> Applied:
        return await self._enqueue(data, timeout_s)

    async def change_membership(
        self, change: MembershipChange, *, timeout_s: float | None = None
    ) -> int:
        """Propose one membership change; returns its index once applied here."""
        return (await self._enqueue(change, timeout_s)).index

    async def add_member(self, node_id: str, *, timeout_s: float = 30.0) -> None:
        """Add node_id as a learner, wait until it has caught up, then promote it."""
        await self.change_membership(MembershipChange(ChangeKind.ADD_LEARNER, node_id))
        await self.wait_for(lambda: self.core.learner_caught_up(node_id), timeout_s)
        await self.change_membership(MembershipChange(ChangeKind.PROMOTE, node_id))

    async def remove_member(self, node_id: str) -> int:
        return await self.change_membership(MembershipChange(ChangeKind.REMOVE, node_id))

    def campaign(self) -> None:
        """Start an election now instead of after an election timeout (the preferred
        first leader of a new group: nobody else has a log, so it wins at once)."""
        self.core.campaign()
        self._wake.set()

    def transfer_leadership(self, to: str | None = None) -> str:
        """Start handing leadership to `to` (or the most up-to-date voter)."""
        target = self.core.transfer_leadership(to)
        self._wake.set()
        return target

    def _enqueue(self, item: Item, timeout_s: float | None) -> asyncio.Future[Applied]:
        if self._stopping:
            raise NodeStopped("node stopped")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Applied] = loop.create_future()
        self.driver.propose(item, fut)  # raises NotLeader / NodeStopped
        deadline = self.proposal_timeout_s if timeout_s is None else timeout_s
        if deadline is not None:
            handle = loop.call_later(deadline, _expire, fut, deadline)
            fut.add_done_callback(lambda _f: handle.cancel())
        self._wake.set()
        return fut

    def _done(self, token: object, outcome: Outcome) -> None:
        assert isinstance(token, asyncio.Future)
        if token.done():
            return  # it timed out: the proposer was told the outcome is unknown
        if isinstance(outcome, BaseException):
            token.set_exception(outcome)
        else:
            token.set_result(outcome)

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        driver = self.driver
        while not self._stopping and driver.running:
            await self._wake.wait()
            self._wake.clear()
            if driver.has_work():
                await self._process()
            ev, self._progress = self._progress, asyncio.Event()
            ev.set()
        ev, self._progress = self._progress, asyncio.Event()
        ev.set()

    async def _process(self) -> None:
        gen = self.driver.process()
        reply: object = None
        error: BaseException | None = None
        while True:
            try:
                job = gen.throw(error) if error is not None else gen.send(reply)
            except StopIteration:
                return
            reply, error = None, None
            try:
                reply = await asyncio.to_thread(job)
            except Exception as exc:  # handed to the driver, which stops the node
                error = exc


def _expire(fut: asyncio.Future[Applied], deadline: float) -> None:
    if not fut.done():
        fut.set_exception(ProposalTimeout(
            f"no outcome within {deadline}s; the entry may still be committed"))

