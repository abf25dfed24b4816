"""The asyncio host of one RAFT replica: timers, futures and a worker thread for fsync.

All the replica's logic (the Ready contract, proposals, snapshots, removal, storage
errors) lives in driver.Driver, which the simulator runs too; this module only gives it
time and I/O:

- ticks come from the node's own timer, or from a shared `Ticker` that ticks every node
  of the process with one timer (a server hosting hundreds of groups uses one);
- `Driver.process()` runs from the loop's shared run queue (runtime.py), once per loop
  turn for every node that has work, without a task of its own; its blocking jobs (fsync,
  snapshot writes) run on the loop's I/O threads so the loop stays responsive, and
  whatever arrives meanwhile goes into the next Ready (group commit: one fsync for it all);
- each proposal is a future, answered once its entry is applied here, failed when the
  node loses leadership, stops, is removed or fails, or after its deadline
  (ProposalTimeout: outcome unknown). Deadlines are checked on the node's ticks (so a
  proposal may outlive its deadline by up to one tick), from a queue in deadline order:
  no timer per proposal.

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
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence

from . import runtime
from .driver import (
    Applied,
    Driver,
    DurableStateMachine,
    Item,
    NodeFailed,
    NodeRemoved,
    NodeStopped,
    Outcome,
    Process,
    ProposalTimeout,
    State,
    StateMachine,
)
from .membership import ChangeKind, MembershipChange
from .messages import Message
from .ready import RaftConfig, Role, SoftState
from .ready import Status as CoreStatus
from .spool import SnapshotSpool
from .storage import LogStore, RecoveredState
from .transport import Transport

log = logging.getLogger("jetraft.raft")

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
        snapshot_spool: Callable[[], SnapshotSpool] | None = None,
    ) -> None:
        """`wal` and `recovered` come from `Wal.open`; without `recovered` the log is new.
        Every `snapshot_entries` applied entries the log is compacted, keeping
        `keep_entries` for followers slightly behind. With a `ticker` the node has no
        timer of its own (tick_interval_s is then only used to report times).
        `proposal_timeout_s` is the default deadline of proposals (None: no deadline).
        `on_removed()` is called once the node learns it was removed from its group,
        `on_error(exc)` when it stopped on a storage error. `snapshot_spool()` makes the
        spool a snapshot received from the leader is collected in (in memory by default;
        see spool.py)."""
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
        self.driver.flush = transport.flush
        self.core = self.driver.core
        if snapshot_spool is not None:
            self.core.snapshot_spool = snapshot_spool
        self._rt: runtime.Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._marked = False  # in the run queue's next pass
        self._gen: Process | None = None  # driver.process() in progress (a job in flight)
        self._waiters: list[asyncio.Future[None]] = []  # wait_for(), woken after progress
        self._stopped: asyncio.Future[None] | None = None  # stop() waits for the Ready
        # Proposals with a deadline, per timeout value: each deque is in deadline order.
        self._deadlines: dict[float, deque[tuple[float, asyncio.Future[Applied]]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._started = False
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        if self.driver.state is State.REMOVED:  # removed before this restart
            self._removed()
            return
        self._rt = runtime.acquire(loop)
        self._started = True
        if self.ticker is not None:
            self.ticker.register(self)
        else:
            self._timer = loop.call_later(self.tick_interval_s, self._on_timer)
        self._mark()

    async def stop(self) -> None:
        """Stop after the Ready in progress (an fsync is never abandoned half way)."""
        self._stopping = True
        self._stop_ticks()
        if self._gen is not None and self._loop is not None:
            self._stopped = self._loop.create_future()
            await self._stopped
        self.driver.stop()
        self._notify()
        if self._rt is not None:
            runtime.release(self._rt)
            self._rt = None

    def _stop_ticks(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.ticker is not None:
            self.ticker.unregister(self)

    def receive(self, msg: Message) -> None:
        """Called by the transport for each message addressed to this node."""
        self.driver.receive(msg)
        if not self._marked:
            self._mark()

    def tick(self) -> None:
        """One tick (called by the node's timer or its Ticker)."""
        if self._deadlines:
            self._expire()
        if self.driver.tick() and not self._marked:
            self._mark()

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
        if self.on_removed is not None:
            self.on_removed()

    def _failed(self, exc: BaseException) -> None:
        self._stop_ticks()
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
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout_s):
            while not predicate():
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters.append(fut)
                await fut

    def caught_up(self) -> bool:
        """Every commit this node has heard of is applied here (see Driver.caught_up)."""
        return self.driver.caught_up()

    def current(self) -> bool:
        """Fit to serve a read: it knows a leader of its term and applied every commit it
        heard of. A replica that has heard from no leader yet (just created, or back from
        a restart or a partition) may hold nothing of what was committed without it, so
        having applied all it heard of proves nothing until a leader has spoken."""
        return self.core.lead != "" and self.driver.caught_up()

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

    def propose_with(self, data: bytes, on_done: Callable[[Outcome], None]) -> None:
        """Queue a proposal whose outcome goes to on_done(Applied | exception), called
        once, synchronously: when the entry is applied here, or when the proposal fails
        (NotLeader or ProposalDropped when leadership is lost, NodeStopped when the node
        stops). No future and no deadline: the cheapest way to propose, for callers that
        answer someone who keeps a deadline of their own (a PubAck to a publisher).
        Raises NotLeader on a follower."""
        if self._stopping:
            raise NodeStopped("node stopped")
        self.driver.propose(data, on_done)
        if not self._marked:
            self._mark()

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
        self._mark()

    def transfer_leadership(self, to: str | None = None) -> str:
        """Start handing leadership to `to` (or the most up-to-date voter)."""
        target = self.core.transfer_leadership(to)
        self._mark()
        return target

    def _enqueue(self, item: Item, timeout_s: float | None) -> asyncio.Future[Applied]:
        if self._stopping:
            raise NodeStopped("node stopped")
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[Applied] = loop.create_future()
        self.driver.propose(item, fut)  # raises NotLeader / NodeStopped
        timeout = self.proposal_timeout_s if timeout_s is None else timeout_s
        if timeout is not None:
            queue = self._deadlines.get(timeout)
            if queue is None:
                queue = self._deadlines[timeout] = deque()
            queue.append((loop.time() + timeout, fut))
        if not self._marked:
            self._mark()
        return fut

    def _expire(self) -> None:
        """Fail the proposals whose deadline passed; forget those already answered (they
        are answered mostly in order, so the queues stay about as long as what is in
        flight)."""
        now = (self._loop or asyncio.get_running_loop()).time()
        for timeout, queue in list(self._deadlines.items()):
            while queue:
                deadline, fut = queue[0]
                if not fut.done():
                    if deadline > now:
                        break
                    fut.set_exception(ProposalTimeout(
                        f"no outcome within {timeout}s; the entry may still be committed"))
                queue.popleft()
            if not queue:
                del self._deadlines[timeout]

    def _done(self, token: object, outcome: Outcome) -> None:
        if not isinstance(token, asyncio.Future):
            assert callable(token)  # propose_with's callback
            try:
                token(outcome)
            except Exception:  # the proposer's bug must not stop the group
                log.exception("RAFT node %s: a proposal's callback failed", self.id)
            return
        if token.done():
            return  # it timed out: the proposer was told the outcome is unknown
        if isinstance(outcome, BaseException):
            token.set_exception(outcome)
        else:
            token.set_result(outcome)

    # ------------------------------------------------------------------ processing
    def _mark(self) -> None:
        """Have the run queue call run_once() in its next pass."""
        if self._rt is None or self._marked:
            return  # not started yet (start() marks it), or already marked
        self._marked = True
        self._rt.mark(self)

    def run_once(self) -> None:
        """The run queue's call: start processing if there is work and no Ready is
        already waiting for its fsync (what arrived meanwhile goes into the next one)."""
        self._marked = False
        if self._gen is not None or self._stopping:
            return
        if self.driver.has_work():
            self._gen = self.driver.process()
            self._resume(None, None)
        else:
            self._notify()

    def _resume(self, reply: object, error: BaseException | None) -> None:
        """Run the driver up to its next blocking job (handed to an I/O thread, which
        calls back here with its outcome) or to the end of its work."""
        gen = self._gen
        assert gen is not None
        try:
            job = gen.send(reply) if error is None else gen.throw(error)
        except StopIteration:
            self._finished()
            return
        except Exception as exc:
            log.exception("RAFT node %s: processing failed; stopping it", self.id)
            self.driver.fail(exc)
            self._finished()
            return
        assert self._rt is not None
        self._rt.io.submit(job, self._job_done)
        self._notify()

    def _job_done(self, result: object, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, Exception):
            error = RuntimeError(f"I/O job ended with {error!r}")
        self._resume(result, error)

    def _finished(self) -> None:
        self._gen = None
        self._notify()
        if self._stopped is not None:
            if not self._stopped.done():
                self._stopped.set_result(None)
        elif self.driver.has_work():
            self._mark()  # something arrived from inside the last Ready (an apply)

    def _notify(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

