"""What every RaftNode of one event loop shares: a run queue and its I/O threads.

A server hosts hundreds of groups. Giving each its own asyncio task, wake-up Event and
`asyncio.to_thread` per Ready made an idle server spend most of its CPU on task switches
(every heartbeat woke a task on the leader and one on each follower). Instead:

- a node with work marks itself; once per loop turn the run queue processes every marked
  node in one callback, synchronously up to its first blocking job (most Readys of an idle
  group have none: a heartbeat and its answer need no fsync);
- blocking jobs (fsync, snapshot writes) of every node go to a few long-lived worker
  threads (`IoWorker`); results come back to the loop in batches: one loop wake-up for
  all the jobs that finished while the loop was busy.

Jobs of one node run one at a time (its Driver waits for each); jobs of different nodes
may run at the same time, each fsync on its own file. The runtime is created
with the first node of a loop and torn down (its threads ended) with the last.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("jetraft.raft")

Job = Callable[[], object]
JobDone = Callable[[object, BaseException | None], None]


class Runnable(Protocol):
    def run_once(self) -> None:
        """Do the work that made this node mark itself (called from the run queue)."""


class IoWorker:
    """Long-lived threads that run blocking jobs and hand each outcome back to the event
    loop, on the loop's thread. Outcomes that finish while an earlier batch is still
    waiting for the loop join that batch (one cross-thread wake-up for all of them).

    Threads are started as jobs find none free, up to `max_threads`: fsyncs of different
    files that run at the same time share the file system's journal commits (on ext4 a
    few concurrent fdatasyncs complete several times faster than the same ones in turn),
    which matters when many groups persist at once (start-up, elections, busy streams)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, name: str = "raft-io", max_threads: int = 8
    ) -> None:
        self._loop = loop
        self._name = name
        self._max_threads = max_threads
        self._jobs: queue.SimpleQueue[tuple[Job, JobDone] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._outcomes: list[tuple[JobDone, object, BaseException | None]] = []
        self._posted = False
        self._threads: list[threading.Thread] = []
        self._free = 0  # threads waiting for a job
        self.jobs_run = 0

    def submit(self, job: Job, done: JobDone) -> None:
        """Run job() on a worker thread; done(result, error) is called on the loop after."""
        self._jobs.put((job, done))
        if self._free == 0 and len(self._threads) < self._max_threads:
            t = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def close(self) -> None:
        """End the threads after the jobs already submitted (their outcomes still arrive
        if the loop runs)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        lock = self._lock
        while True:
            with lock:
                self._free += 1
            item = self._jobs.get()
            with lock:
                self._free -= 1
            if item is None:
                return
            job, done = item
            result: object = None
            error: BaseException | None = None
            try:
                result = job()
            except BaseException as exc:  # handed to the node's driver, which decides
                error = exc
            with lock:
                self.jobs_run += 1
                self._outcomes.append((done, result, error))
                if self._posted:
                    continue
                self._posted = True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                return

    def _deliver(self) -> None:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
            self._posted = False
        for done, result, error in outcomes:
            try:
                done(result, error)
            except Exception:
                log.exception("RAFT: handling the outcome of an I/O job failed")


class Runtime:
    """The run queue and I/O worker of one event loop (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.io = IoWorker(loop)
        self._marked: list[Runnable] = []
        self._scheduled = False
        self.users = 0

    def mark(self, node: Runnable) -> None:
        """Run node.run_once() in the next pass (the caller keeps it from being marked
        twice in one pass)."""
        self._marked.append(node)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        nodes, self._marked = self._marked, []
        for node in nodes:
            try:
                node.run_once()
            except Exception:  # one group's bug must not stop every other group
                log.exception("RAFT: processing a node failed")


_runtimes: dict[asyncio.AbstractEventLoop, Runtime] = {}


def acquire(loop: asyncio.AbstractEventLoop) -> Runtime:
    rt = _runtimes.get(loop)
    if rt is None:
        rt = _runtimes[loop] = Runtime(loop)
    rt.users += 1
    return rt


def release(rt: Runtime) -> None:
    rt.users -= 1
    if rt.users <= 0 and _runtimes.get(rt.loop) is rt:
        del _runtimes[rt.loop]
        rt.io.close()
