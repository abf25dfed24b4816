"""The I/O side of the RAFT runtime: blocking jobs run on worker threads, or on the
loop's own thread while recent jobs were fast (runtime.INLINE_JOB_S)."""

from __future__ import annotations

import asyncio
import threading

from jetraft.raft.runtime import INLINE_JOB_S, IoWorker


async def test_jobs_go_to_a_thread_until_they_prove_fast_and_back_after_a_slow_one() -> None:
    io = IoWorker(asyncio.get_running_loop())
    try:
        seen = [io.inline]  # a new runtime knows nothing of its disk: threads
        for _ in range(40):
            io.note_job_s(INLINE_JOB_S / 10)
        seen.append(io.inline)
        io.note_job_s(INLINE_JOB_S * 100)  # one slow fsync
        seen.append(io.inline)
        for _ in range(40):
            io.note_job_s(INLINE_JOB_S / 10)
        seen.append(io.inline)
        assert seen == [False, True, False, True]
    finally:
        io.close()


async def test_a_job_run_inline_runs_on_the_callers_thread_and_reports_its_error() -> None:
    io = IoWorker(asyncio.get_running_loop())
    try:
        assert io.run_inline(threading.get_ident) == (threading.get_ident(), None)
        boom = OSError(5, "EIO")

        def fail() -> None:
            raise boom

        assert io.run_inline(fail) == (None, boom)
        assert io.jobs_inline == 2
    finally:
        io.close()


async def test_a_submitted_job_runs_on_a_worker_thread_and_is_timed() -> None:
    io = IoWorker(asyncio.get_running_loop())
    loop = asyncio.get_running_loop()
    got: asyncio.Future[tuple[object, BaseException | None]] = loop.create_future()
    try:
        before = io.job_s
        io.submit(threading.get_ident, lambda r, e: got.set_result((r, e)))
        result, error = await asyncio.wait_for(got, 10)
        assert error is None and result != threading.get_ident()
        assert io.jobs_run == 1 and io.job_s != before
    finally:
        io.close()

