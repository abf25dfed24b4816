"""Servers on loopback for integration tests, driven by the real nats-py client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import pytest

from jetraft.config import parse_config
from jetraft.server.server import Server

ServerFactory = Callable[..., Awaitable[Server]]


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    """Start servers in the test's event loop from config text.

    Port -1 picks a free port, as in nats-server.
    """
    started: list[Server] = []

    async def make(conf: str = "", *, http: bool = False) -> Server:
        text = "listen: 127.0.0.1:-1\n" + ("http: 127.0.0.1:-1\n" if http else "")
        text += conf
        server = Server(parse_config(text))
        await server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        await server.stop()


@pytest.fixture
async def server(make_server: ServerFactory) -> Server:
    return await make_server()


def url(server: Server) -> str:
    return f"nats://127.0.0.1:{server.client_port}"


async def connect(server: Server, **kwargs: Any) -> nats.NATS:
    kwargs.setdefault("allow_reconnect", False)
    kwargs.setdefault("connect_timeout", 2)
    return await nats.connect(url(server), **kwargs)


async def wait_for(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll a condition on the loop until it holds; fail with ``what`` after the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.01)
