"""The commit queue: group commit, ordering, failures, two-phase rounds, lazy mode, ending,
and the request barrier (``jetraft.server.js.commit``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from jetraft.server.js.commit import (
    Barrier,
    CommitAbandoned,
    CommitClosed,
    CommitQueue,
    Prepared,
    collect,
    note_job,
)


class Store:
    """A fake persistent thing: ``applied`` grows on the loop; a commit copies it and its
    job (held back by ``gate`` when set) makes the copy ``durable``."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.durable: list[int] = []
        self.prepares = 0
        self.gate: threading.Event | None = None
        self.fail: BaseException | None = None
        self.incomplete = 0  # how many next prepares report complete=False

    def prepare(self) -> Prepared:
        self.prepares += 1
        if self.fail is not None:
            raise self.fail
        snapshot = list(self.applied)
        gate = self.gate
        complete = self.incomplete == 0
        self.incomplete = max(self.incomplete - 1, 0)

        def job() -> None:
            if gate is not None:
                gate.wait(5)
            self.durable = snapshot

        return Prepared(job, complete)


def recorder() -> tuple[list[tuple[str, BaseException | None]], Callable[[str], Callable]]:
    seen: list[tuple[str, BaseException | None]] = []

    def cb(tag: str) -> Callable[[BaseException | None], None]:
        return lambda exc: seen.append((tag, exc))

    return seen, cb


async def until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_callbacks_wait_for_a_commit_that_covers_them() -> None:
    store = Store()
    store.gate = threading.Event()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    store.applied.append(1)
    q.touch()
    q.after_durable(cb("a"))
    await until(lambda: store.prepares == 1)
    # While the first commit is held back, more changes and waiters arrive.
    store.applied.append(2)
    q.touch()
    q.after_durable(cb("b"))
    await asyncio.sleep(0.05)  # bounded negative wait: nothing may be answered yet
    assert seen == []
    store.gate.set()
    await until(lambda: len(seen) == 2)
    assert seen == [("a", None), ("b", None)]
    assert store.durable == [1, 2]
    assert store.prepares == 2  # one commit for a, one covering everything after it
    await q.drain()


async def test_one_commit_covers_everything_of_a_loop_turn() -> None:
    store = Store()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    for i in range(100):
        store.applied.append(i)
        q.touch()
        q.after_durable(cb(str(i)))
    await until(lambda: len(seen) == 100)
    assert [tag for tag, _ in seen] == [str(i) for i in range(100)]
    assert store.prepares == 1 and q.commits == 1
    await q.drain()


async def test_a_failed_commit_is_reported_to_everyone_it_covered() -> None:
    store = Store()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    store.fail = OSError("disk on fire")
    q.touch()
    q.after_durable(cb("a"))
    await until(lambda: len(seen) == 1)
    assert seen[0][0] == "a" and isinstance(seen[0][1], OSError)
    await q.drain()


async def test_a_failing_job_is_reported() -> None:
    q = CommitQueue("t", lambda: Prepared(_raise))
    seen, cb = recorder()
    q.after_durable(cb("a"))
    await until(lambda: len(seen) == 1)
    assert isinstance(seen[0][1], RuntimeError)
    await q.drain()


def _raise() -> None:
    raise RuntimeError("fsync failed")


async def test_an_incomplete_round_holds_its_callbacks_for_exactly_one_more() -> None:
    store = Store()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    store.incomplete = 1
    q.touch()
    q.after_durable(cb("a"))
    await until(lambda: len(seen) == 1)
    assert store.prepares == 2  # the second round ran although nothing else changed
    # Endless incomplete rounds still answer each callback after two.
    store.incomplete = 100
    for tag in "bcd":
        q.touch()
        q.after_durable(cb(tag))
        await until(lambda t=tag: (t, None) in seen)  # type: ignore[misc]
    assert [t for t, _ in seen] == ["a", "b", "c", "d"]
    store.incomplete = 0
    await q.drain()


async def test_changes_nobody_waits_for_are_committed_lazily() -> None:
    store = Store()
    q = CommitQueue("t", store.prepare, lazy_delay_s=0.05)
    store.applied.append(1)
    q.touch()
    await asyncio.sleep(0.01)
    assert store.prepares == 0  # not yet: the delay has not passed
    await until(lambda: store.durable == [1])
    seen, cb = recorder()
    store.applied.append(2)
    q.touch()
    q.after_durable(cb("now"))  # someone waits: no delay
    await until(lambda: len(seen) == 1)
    assert store.durable == [1, 2]
    await q.drain()


async def test_lazy_mode_answers_after_the_write_and_syncs_when_asked() -> None:
    store = Store()
    store.gate = threading.Event()
    writes: list[list[int]] = []
    q = CommitQueue("t", store.prepare, write=lambda: writes.append(list(store.applied)))
    seen, cb = recorder()
    store.applied.append(1)
    q.touch()
    q.after_durable(cb("a"))
    await until(lambda: len(seen) == 1)
    assert writes[-1] == [1] and store.prepares == 0
    q.sync_soon()
    await until(lambda: store.prepares == 1)
    # An fsync held back does not hold back lazy answers.
    store.applied.append(2)
    q.touch()
    q.after_durable(cb("b"))
    await until(lambda: len(seen) == 2)
    assert writes[-1] == [1, 2]
    store.gate.set()
    await q.drain()
    assert store.durable == [1, 2]


async def test_drain_waits_for_the_running_commit_and_answers_everyone() -> None:
    store = Store()
    store.gate = threading.Event()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    store.applied.append(1)
    q.after_durable(cb("a"))
    await until(lambda: store.prepares == 1)
    store.applied.append(2)
    q.touch()
    q.after_durable(cb("b"))
    drain = asyncio.ensure_future(q.drain())
    await asyncio.sleep(0.05)  # bounded negative wait: the held commit blocks the drain
    assert not drain.done() and seen == []
    store.gate.set()
    await drain
    assert seen == [("a", None), ("b", None)]
    assert store.durable == [1, 2]
    late, late_cb = recorder()
    q.after_durable(late_cb("late"))
    assert isinstance(late[0][1], CommitClosed) and not isinstance(late[0][1], CommitAbandoned)


async def test_abandon_writes_nothing_more() -> None:
    store = Store()
    store.gate = threading.Event()
    q = CommitQueue("t", store.prepare)
    seen, cb = recorder()
    store.applied.append(1)
    q.after_durable(cb("a"))
    await until(lambda: store.prepares == 1)
    store.applied.append(2)
    q.touch()
    q.after_durable(cb("b"))
    abandon = asyncio.ensure_future(q.abandon())
    await asyncio.sleep(0.05)  # bounded negative wait: the running commit must finish first
    assert not abandon.done()
    store.gate.set()
    await abandon
    assert store.durable == [1] and store.prepares == 1
    # The waiter of the change that did not sync hears that a deletion superseded it (the
    # API answers such a change as made), unlike a queue closed without a deletion.
    assert seen[0] == ("b", seen[0][1]) and isinstance(seen[0][1], CommitAbandoned)
    assert seen[1] == ("a", None)


async def test_a_gate_delays_commits_until_it_is_done() -> None:
    store = Store()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    q = CommitQueue("t", store.prepare, gate=gate)
    seen, cb = recorder()
    q.touch()
    q.after_durable(cb("a"))
    await asyncio.sleep(0.05)  # bounded negative wait: the gate holds the commit back
    assert store.prepares == 0
    gate.set_result(None)
    await until(lambda: len(seen) == 1)
    await q.drain()


async def test_the_barrier_collects_touched_queues_and_jobs() -> None:
    s1, s2 = Store(), Store()
    s2.gate = threading.Event()
    q1, q2 = CommitQueue("1", s1.prepare), CommitQueue("2", s2.prepare)
    job_done = asyncio.Event()

    async def job() -> None:
        await job_done.wait()

    with collect() as barrier:
        q1.touch()
        q2.touch()
        q1.touch()
        note_job(job(), "test job")
    q3 = CommitQueue("3", Store().prepare)
    q3.touch()  # outside: not collected
    assert barrier.queues == [q1, q2] and len(barrier.jobs) == 1
    seen, cb = recorder()
    barrier.wait(cb("reply"))
    await asyncio.sleep(0.05)  # bounded negative wait: q2's commit and the job are held
    assert seen == []
    s2.gate.set()
    job_done.set()
    await until(lambda: len(seen) == 1)
    assert seen == [("reply", None)]
    for q in (q1, q2, q3):
        await q.drain()


async def test_the_barrier_reports_the_first_failure() -> None:
    async def failing() -> None:
        raise OSError("cannot remove")

    with collect() as barrier:
        note_job(failing(), "test removal")
    seen, cb = recorder()
    barrier.wait(cb("reply"))
    await until(lambda: len(seen) == 1)
    assert isinstance(seen[0][1], OSError)
    empty = Barrier()
    empty.wait(cb("empty"))
    assert seen[-1] == ("empty", None)


@pytest.mark.parametrize("lazy", [False, True])
async def test_a_closed_queue_refuses_waiters(lazy: bool) -> None:
    store = Store()
    q = CommitQueue("t", store.prepare, write=(lambda: None) if lazy else None)
    await q.drain()
    seen, cb = recorder()
    q.after_durable(cb("x"))
    assert isinstance(seen[0][1], CommitClosed)
