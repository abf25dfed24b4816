"""Helpers for the Spark connector suite: the server process and small nats-py helpers.

``JETRAFT_SPARK_SERVER=jetraft`` (default) runs ``python -m jetraft server``;
``JETRAFT_SPARK_SERVER=nats-server`` runs the nats-server binary (same wire protocol).
The Spark session is started once per session (the JVM takes seconds to start) with
``local[2, 4]``: two worker threads, and a failed task is retried up to 4 times.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import nats
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from tests.ports import free_port as _free_port

T = TypeVar("T")
SERVER_KIND = os.environ.get("JETRAFT_SPARK_SERVER", "jetraft")


def _nats_server_binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    found = str(here) if here.exists() else shutil.which("nats-server")
    if not found:
        pytest.skip("nats-server binary not installed")
    return found


class ServerProcess:
    """A JetStream server on a fixed loopback port and store dir; restartable in place."""

    def __init__(self, kind: str, store_dir: Path) -> None:
        self.kind = kind
        self.port = _free_port()
        self.store_dir = store_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = store_dir.parent / f"{kind}-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        flags = ["-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
        if self.kind == "nats-server":
            return [_nats_server_binary(), *flags]
        return [sys.executable, "-m", "jetraft", "server", *flags]

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until JetStream answers $JS.API.INFO (listening alone is not enough)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_tail()
            if run(self._js_ready()):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.kind} not ready on {self.url}: {self.log_tail()}")

    async def _js_ready(self) -> bool:
        try:
            nc = await nats.connect(self.url, allow_reconnect=False, connect_timeout=1)
        except Exception:
            return False
        try:
            await nc.request("$JS.API.INFO", b"", timeout=1)
            return True
        except Exception:
            return False
        finally:
            await nc.close()

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc)
        self.proc = None

    def log_tail(self) -> str:
        return file_tail(self.log_path)


def end_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a process this suite started; SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def file_tail(path: Path, size: int = 3000) -> str:
    """The end of a server log, for assertion messages ("" when there is none)."""
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


def run(coro: Awaitable[T]) -> T:
    """Run a coroutine from a synchronous test (Spark tests are synchronous)."""
    return asyncio.run(_wrap(coro))


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


async def _with_js(url: str, fn: Callable[[Any, Any], Awaitable[T]]) -> T:
    nc = await nats.connect(url)
    try:
        return await fn(nc, nc.jetstream(timeout=10))
    finally:
        await nc.close()


def create_stream(url: str, name: str, subjects: list[str], **cfg: Any) -> None:
    async def _do(nc: Any, js: Any) -> None:
        await js.add_stream(StreamConfig(name=name, subjects=subjects, **cfg))

    run(_with_js(url, _do))


def publish(
    url: str, items: list[tuple[str, bytes]], headers: list[dict[str, str] | None] | None = None
) -> list[int]:
    """Publish and wait for every PubAck; returns the sequences."""

    async def _do(nc: Any, js: Any) -> list[int]:
        futures = []
        for i, (subject, data) in enumerate(items):
            hdr = headers[i] if headers else None
            futures.append(await js.publish_async(subject, data, headers=hdr))
        acks = await asyncio.gather(*futures)
        return [a.seq for a in acks]

    return run(_with_js(url, _do))


def stream_messages(url: str, name: str) -> list[Any]:
    """Every message in a stream (via STREAM.MSG.GET, sequence by sequence)."""

    async def _do(nc: Any, js: Any) -> list[Any]:
        info = await js.stream_info(name)
        out = []
        seq = max(info.state.first_seq, 1)
        while seq <= info.state.last_seq:
            try:
                msg = await js.get_msg(name, seq)
                out.append(msg)
            except nats.js.errors.NotFoundError:
                pass
            seq += 1
        return out

    return run(_with_js(url, _do))


def delete_msgs(url: str, name: str, seqs: list[int]) -> None:
    async def _do(nc: Any, js: Any) -> None:
        for seq in seqs:
            await js.delete_msg(name, seq)

    run(_with_js(url, _do))


def stream_state(url: str, name: str) -> Any:
    async def _do(nc: Any, js: Any) -> Any:
        return (await js.stream_info(name)).state

    return run(_with_js(url, _do))


def fill(url: str, stream: str, start: int, n: int) -> list[int]:
    """Publish ``e<start>``..``e<start+n-1>`` on ``<stream lower>.e``; returns the sequences."""
    prefix = stream.lower()
    return publish(url, [(f"{prefix}.e", f"e{i}".encode()) for i in range(start, start + n)])


def wait_query(cond: Callable[[], bool], query: Any, timeout_s: float = 90) -> None:
    """Poll ``cond`` while a streaming query runs; fail at once if the query failed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")
