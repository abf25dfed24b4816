"""Commit queues: how a change becomes durable, and how a reply waits for that.

Every change of JetStream state goes through a ``propose`` seam (``StreamRuntime.propose``,
``ConsumerRuntime.propose``) and is applied at once; what makes it *durable* is a
``CommitQueue``, one per stream and one per consumer. The rule for replies that confirm a
change (PubAck, the answer to an ack sent as a request, PURGE, MSG.DELETE, deletes, creates):
they are handed to ``after_durable`` and leave only once a commit that covers the change has
finished. The queue never blocks the event loop:

* ``prepare`` runs on the loop and captures everything applied so far (the file store writes
  its buffer out; a consumer encodes its state); it returns the blocking half (an fsync, an
  atomic file write), which runs in a worker thread;
* one commit runs at a time; whatever is applied meanwhile is covered by the next one, so a
  single fsync serves every change of a loop turn or of the previous fsync (group commit);
* callbacks fire in the order they were registered, each with ``None`` or the exception that
  made the commit fail (the caller tells its requester; nothing is acknowledged that may be
  lost).

A prepare may report ``complete=False``: the work it covers needs one more round (the file
store's secure erase overwrites a record only once its delete record is durable). Callbacks
covered by such a round wait for the round after it, never longer.

Lazy mode (``sync_interval``): callbacks wait only for ``write`` (data handed to the OS, which
survives a process crash), and fsync rounds run on the interval timer (``sync_soon``).

Requests: ``collect()`` opens a ``Barrier`` around the handling of one API request; every
queue touched meanwhile and every job noted with ``note_job`` joins it, and ``Barrier.wait``
calls back once all of them are durable. When clustering replaces the single-server commit,
``CommitQueue`` is where "durable" becomes "committed by the RAFT group and applied": the
seams and the barrier stay as they are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("jetraft.js.commit")

Callback = Callable[[BaseException | None], None]
Job = Callable[[], None]

# Blocking halves of commits (fsyncs, atomic writes) run here. Commits of one queue never
# overlap; a few threads let different streams and consumers sync side by side.
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="js-commit")


class CommitClosed(Exception):
    """The queue was closed or abandoned before the change became durable."""


class CommitAbandoned(CommitClosed):
    """The stream or consumer was deleted before the change became durable: the deletion
    came after the change and supersedes it (an ephemeral consumer whose inactive_threshold
    ran out while its create was syncing, a stream deleted during a purge's sync)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a prepare captured: the blocking half (None: nothing left to make durable) and
    whether the covered changes are durable once it returned (see the module doc)."""

    job: Job | None
    complete: bool = True


_current: contextvars.ContextVar[Barrier | None] = contextvars.ContextVar(
    "jetraft_commit_barrier", default=None
)


class Durable(Protocol):
    """Something whose changes become durable later: a ``CommitQueue`` on one server, a
    RAFT group in a cluster (durable = committed by a quorum)."""

    def touch(self) -> None:
        """Something changed: the request being handled waits for it (``join_request``)."""
        ...

    def after_durable(self, callback: Callback) -> None:
        """``callback(None)`` once every change made before this call is durable, else
        ``callback(exc)``."""
        ...


def join_request(durable: Durable) -> None:
    """The request being handled (if any) waits until ``durable``'s changes are."""
    barrier = _current.get()
    if barrier is not None and durable not in barrier.queues:
        barrier.queues.append(durable)


@dataclass(eq=False, slots=True)
class Barrier:
    """What the handling of one request changed (queues touched, jobs started)."""

    queues: list[Durable] = field(default_factory=list)
    jobs: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.queues and not self.jobs

    def wait(self, callback: Callback) -> None:
        """``callback(None)`` once everything collected is durable, else with the first
        failure. Calls back at once when nothing was collected."""
        remaining = len(self.queues) + len(self.jobs)
        if not remaining:
            callback(None)
            return
        state: dict[str, object] = {"left": remaining, "error": None}

        def one(exc: BaseException | None) -> None:
            if exc is not None and state["error"] is None:
                state["error"] = exc
            left = int(state["left"]) - 1  # type: ignore[call-overload]
            state["left"] = left
            if left == 0:
                err = state["error"]
                callback(err if isinstance(err, BaseException) else None)

        for queue in self.queues:
            queue.after_durable(one)
        for job in self.jobs:
            job.add_done_callback(lambda f: one(_outcome(f)))


def _outcome(fut: asyncio.Future[None]) -> BaseException | None:
    if fut.cancelled():
        return CommitClosed("cancelled")
    return fut.exception()


@contextlib.contextmanager
def collect() -> Iterator[Barrier]:
    """Collect what the code inside changes (see ``Barrier``)."""
    barrier = Barrier()
    token = _current.set(barrier)
    try:
        yield barrier
    finally:
        _current.reset(token)


def note_job(job: Awaitable[None], what: str) -> asyncio.Future[None]:
    """Run ``job`` (a durable change that is not a queue commit, e.g. removing files); the
    request being handled, if any, waits for it. Failures are logged either way."""
    fut = asyncio.ensure_future(job)

    def report(f: asyncio.Future[None]) -> None:
        exc = _outcome(f)
        if exc is not None and not isinstance(exc, CommitClosed):
            log.error("%s failed: %s", what, exc)

    fut.add_done_callback(report)
    barrier = _current.get()
    if barrier is not None:
        barrier.jobs.append(fut)
    return fut


class CommitQueue:
    """Group commit for one thing that persists (a stream's store, a consumer's state).

    ``prepare`` (on the loop) captures the changes applied so far. ``lazy_delay_s``: how long
    a change nobody waits for may wait for its commit (None: the next loop turn). ``write``:
    lazy mode (see the module doc). ``gate``: commits start only once it is done (the files'
    previous owner, a deleted consumer of the same name, finished with them).
    """

    def __init__(
        self,
        name: str,
        prepare: Callable[[], Prepared],
        *,
        lazy_delay_s: float | None = None,
        write: Callable[[], None] | None = None,
        gate: asyncio.Future[None] | None = None,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        self.name = name
        self._prepare = prepare
        self._write = write
        self._lazy_delay_s = lazy_delay_s
        self._gate = gate
        self._executor = executor or POOL
        self._loop = asyncio.get_running_loop()
        self._waiting: list[Callback] = []  # not yet covered by a commit
        self._carry: list[Callback] = []  # satisfied by the next commit that finishes
        self._inflight: list[Callback] = []  # satisfied when the running commit finishes
        self._inflight_carry: list[Callback] = []  # move to _carry when it finishes
        self._dirty = False  # changes not yet covered by a commit
        self._again = False  # a finished commit asked for one more round
        self._sync_wanted = False  # lazy mode: an fsync round was asked for
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Future[None] | None = None
        # Set by the worker thread when the running job returned (with its outcome): the
        # loop may notice it at the next change, before the thread's call back gets a turn.
        self._job_ended = False
        self._job_exc: BaseException | None = None
        self._closed = False
        self.commits = 0  # finished commits that ran a job (tests, monitoring)

    # --- changes and waiters ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lazy(self) -> bool:
        return self._write is not None

    def touch(self) -> None:
        """Something changed; the request being handled (if any) waits for its commit."""
        if self._closed:
            return
        if self._job_ended:
            # The running commit finished while the loop was busy taking changes in: start
            # the next one now rather than after the rest of this loop turn.
            self._collect_job()
        self._dirty = True
        if _current.get() is not None:
            join_request(self)
        if not self._scheduled and self._timer is None:  # else a commit is on its way
            self._commit_later()

    def after_durable(self, callback: Callback) -> None:
        """``callback(None)`` once every change applied before this call is durable (lazy
        mode: written), ``callback(exc)`` if that failed or the queue closed first."""
        if self._closed:
            callback(CommitClosed(f"{self.name} is closed"))
            return
        self._waiting.append(callback)
        if not self._scheduled:
            self._schedule()

    def set_write(self, write: Callable[[], None] | None) -> None:
        """Switch between lazy mode (``write`` given) and durable mode (config updates)."""
        self._write = write

    def sync_soon(self) -> None:
        """Lazy mode's interval timer: start an fsync round (nobody waits for it)."""
        if not self._closed:
            self._sync_wanted = True
            self._schedule()

    # --- running commits ----------------------------------------------------------------------

    def _commit_later(self) -> None:
        if self._lazy_delay_s is None or self._write is not None:
            self._schedule()
        elif self._timer is None and not self._closed:
            self._timer = self._loop.call_later(self._lazy_delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._closed:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        if self._write is not None:
            self._write_out()
            if not self._sync_wanted and not self._again:
                return
        self._start_commit()

    def _write_out(self) -> None:
        """Lazy mode: hand the data to the OS now and answer everyone waiting."""
        waiters, self._waiting = self._waiting, []
        assert self._write is not None
        try:
            self._write()
        except Exception as exc:
            log.error("%s: write failed: %s", self.name, exc)
            self._fire(waiters, exc)
            return
        self._dirty = False
        self._fire(waiters, None)

    def _wanted(self) -> bool:
        if self._write is not None:
            return self._sync_wanted or self._again
        return bool(self._waiting or self._carry or self._dirty or self._again)

    def _start_commit(self) -> bool:
        """Start a commit if one is wanted and none runs; True when a job was started."""
        if self._running is not None or not self._wanted():
            return False
        if self._gate is not None and not self._gate.done():
            self._gate.add_done_callback(lambda _f: self._schedule())
            return False
        take, self._waiting = self._waiting, []
        carry, self._carry = self._carry, []
        self._dirty = self._again = self._sync_wanted = False
        try:
            prepared = self._prepare()
        except Exception as exc:
            log.error("%s: commit failed: %s", self.name, exc)
            self._fire(carry + take, exc)
            return False
        if prepared.complete:
            done, later = carry + take, []
        else:
            done, later = carry, take
            self._again = True
        if prepared.job is None:
            self._fire(done, None)
            self._carry = later + self._carry
            if self._again:
                self._schedule()
            return False
        self._inflight, self._inflight_carry = done, later
        fut: asyncio.Future[None] = self._loop.create_future()
        self._running = fut
        self._executor.submit(self._run_job, prepared.job, fut)
        return True

    def _run_job(self, job: Job, fut: asyncio.Future[None]) -> None:
        """In a worker thread: the blocking half, then straight back to the loop (one
        hand-over, not the two of ``run_in_executor`` and a done callback)."""
        exc: BaseException | None = None
        try:
            job()
        except BaseException as e:  # reported to the waiters, never lost
            exc = e
        self._job_exc = exc
        self._job_ended = True  # after _job_exc: the loop reads them in the other order
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is left to tell
            self._loop.call_soon_threadsafe(self._job_done, fut)

    def _job_done(self, fut: asyncio.Future[None]) -> None:
        if self._running is fut and self._job_ended:  # else touch() collected it already
            self._collect_job()

    def _collect_job(self) -> None:
        fut, exc = self._running, self._job_exc
        self._job_ended, self._job_exc = False, None
        if fut is not None and not fut.done():
            fut.set_result(None)  # drain/abandon only wait for the end; the error goes below
        self._finished(exc)

    def _finished(self, exc: BaseException | None) -> None:
        self._running = None
        inflight, later = self._inflight, self._inflight_carry
        self._inflight, self._inflight_carry = [], []
        failed: list[Callback] = []
        if exc is not None:
            log.error("%s: commit failed: %s", self.name, exc)
            failed, inflight = inflight + later, []
            self._again = False
        else:
            self.commits += 1
            self._carry = later + self._carry
        if not self._closed:
            if self._waiting or self._carry or self._again or self._sync_wanted:
                if self._write is None:
                    # Start the next round before answering this one: the fsync of what
                    # arrived meanwhile runs while the answers are built and sent.
                    self._start_commit()
                else:
                    self._schedule()
            elif self._dirty:
                self._commit_later()
        self._fire(failed, exc)
        self._fire(inflight, None)
        if self._closed:
            rest = self._carry + self._waiting
            self._carry, self._waiting = [], []
            self._fire(rest, CommitClosed(f"{self.name} is closed"))

    @staticmethod
    def _fire(callbacks: list[Callback], exc: BaseException | None) -> None:
        for cb in callbacks:
            try:
                cb(exc)
            except Exception:
                log.exception("commit callback failed")

    # --- ending -------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Shutdown: wait for the running commit, commit whatever is left, answer every
        waiter; the queue is closed afterwards."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._gate is not None and not self._gate.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._gate)
        if self._write is not None and not self._closed:
            self._write_out()
            self._sync_wanted = True
        for _ in range(8):  # two rounds suffice; the bound only guards against a bug
            running = self._running
            if running is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(running)
                continue
            started = not self._closed and self._start_commit()
            if not started and self._running is None and not self._wanted():
                break
        self._close(CommitClosed(f"{self.name} is closed"))

    async def abandon(self) -> None:
        """Stop without committing more (the thing is being deleted): wait for the running
        commit so that nothing is written after this returns; waiters hear CommitClosed."""
        self._close(CommitAbandoned(f"{self.name} was deleted"))
        running = self._running
        if running is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)

    def _close(self, exc: BaseException) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        rest = self._carry + self._waiting
        self._carry, self._waiting = [], []
        self._fire(rest, exc)
