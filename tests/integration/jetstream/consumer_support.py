"""Fixtures and helpers for the consumer integration tests.

``JETRAFT_VS_NATS=1`` runs the same tests against a real nats-server subprocess instead of an
in-process jetraft server, to check that the tests assert what nats-server really does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from tests.ports import free_port as _free_port

VS_NATS = bool(os.environ.get("JETRAFT_VS_NATS"))


def nats_server_binary() -> str:
    return shutil.which("nats-server") or os.path.join(
        os.path.dirname(sys.executable), "nats-server"
    )


async def _wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.02)
    raise RuntimeError(f"nothing listening on {port}")


@pytest.fixture
async def js_url(tmp_path: Path) -> AsyncIterator[str]:
    """A JetStream-enabled server's client URL."""
    if VS_NATS:
        port = _free_port()
        proc = subprocess.Popen(
            [
                nats_server_binary(),
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
                "-js",
                "-sd",
                str(tmp_path / "js"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await _wait_port(port)
            yield f"nats://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)
        return
    from jetraft.config import parse_config
    from jetraft.server.server import Server

    text = 'listen: 127.0.0.1:-1\njetstream { store_dir: "%s" }\n' % (tmp_path / "js")
    server = Server(parse_config(text))
    await server.start()
    try:
        yield f"nats://127.0.0.1:{server.client_port}"
    finally:
        await server.stop()


@pytest.fixture
async def nc(js_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(js_url, allow_reconnect=False, connect_timeout=2)
    yield conn
    await conn.close()


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0, interval_s: float = 0.02
) -> None:
    """Poll an async condition until it holds (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval_s)


class Inbox:
    """A subscription that collects raw messages (status messages included)."""

    def __init__(self, nc: nats.NATS) -> None:
        self.nc = nc
        self.subject = nc.new_inbox()
        self.msgs: list[Msg] = []
        self._event = asyncio.Event()
        self.sub: Any = None

    async def start(self) -> Inbox:
        self.sub = await self.nc.subscribe(self.subject, cb=self._cb)
        return self

    async def _cb(self, msg: Msg) -> None:
        self.msgs.append(msg)
        self._event.set()

    async def wait(self, n: int, timeout_s: float = 5.0) -> list[Msg]:
        deadline = time.monotonic() + timeout_s
        while len(self.msgs) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {len(self.msgs)} messages, wanted {n}")
            self._event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), left)
        return self.msgs[:n]


def status_of(msg: Msg) -> tuple[str, str] | None:
    """(status code, description) of a status message, None for a data message."""
    if not msg.headers or "Status" not in msg.headers:
        return None
    return msg.headers["Status"], msg.headers.get("Description", "")


async def pull(nc: nats.NATS, stream: str, consumer: str, body: bytes, inbox: Inbox) -> None:
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox.subject)


async def _on_nats_server(
    args: list[str], port: int, scenario: Callable[[str], Awaitable[Any]]
) -> Any:
    proc = subprocess.Popen(
        [nats_server_binary(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await _wait_port(port)
        return await scenario(f"nats://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)


async def _on_jetraft(conf: str, scenario: Callable[[str], Awaitable[Any]]) -> Any:
    from jetraft.config import parse_config
    from jetraft.server.server import Server

    server = Server(parse_config(conf))
    await server.start()
    try:
        return await scenario(f"nats://127.0.0.1:{server.client_port}")
    finally:
        await server.stop()


async def on_both_servers(
    tmp_path: Path, scenario: Callable[[str], Awaitable[Any]]
) -> tuple[Any, Any]:
    """Differential tests: ``scenario(url)`` on a real nats-server, then on an in-process
    jetraft server, each with JetStream in a directory of its own; (theirs, ours)."""
    port = _free_port()
    args = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "nats")]
    theirs = await _on_nats_server(args, port, scenario)
    ours = await _on_jetraft(
        f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp_path / "jetraft"}" }}\n', scenario
    )
    return theirs, ours


async def on_both_configs(
    tmp_path: Path, conf: str, scenario: Callable[[str], Awaitable[Any]]
) -> tuple[Any, Any]:
    """``on_both_servers`` with a configuration of the test's: ``conf`` is formatted with
    each server's ``port`` and JetStream ``store`` directory; (theirs, ours)."""
    port = _free_port()
    path = tmp_path / "nats.conf"
    path.write_text(conf.format(port=port, store=tmp_path / "nats"))
    theirs = await _on_nats_server(["-c", str(path)], port, scenario)
    ours = await _on_jetraft(conf.format(port=-1, store=tmp_path / "jetraft"), scenario)
    return theirs, ours
