"""A TCP proxy in front of one server's route listener, for network partitions.

Each node of a test cluster dials its peers from its own loopback address, so the proxy
knows which node a connection comes from. ``cut`` partitions it from some nodes:

* ``hold`` (a silent partition, what a real network does): bytes from and to a cut node
  are held back, not lost, as TCP keeps retransmitting; ``heal`` lets them through. A link
  that holds more than ``max_held`` bytes is closed, as TCP gives up eventually. New
  connections from a cut node are accepted and held too.
* ``reset``: connections from a cut node are closed at once and new ones refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    src: str
    client_w: asyncio.StreamWriter
    server_w: asyncio.StreamWriter
    held_up: list[bytes] = field(default_factory=list)  # client -> server
    held_down: list[bytes] = field(default_factory=list)  # server -> client
    held_bytes: int = 0
    closed: bool = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in (self.client_w, self.server_w):
            with contextlib.suppress(Exception):
                w.close()


class RouteProxy:
    def __init__(
        self, host: str, port: int, target_host: str, target_port: int, max_held: int = 64 << 20
    ) -> None:
        self.host, self.port = host, port
        self.target = (target_host, target_port)
        self.max_held = max_held
        self._cut: dict[str, str] = {}  # source address -> mode
        self._links: set[_Link] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepted = 0  # connections dialed through the proxy so far

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def cut(self, sources: set[str], mode: str = "hold") -> None:
        assert mode in ("hold", "reset")
        for s in sources:
            self._cut[s] = mode
        if mode == "reset":
            for link in list(self._links):
                if link.src in sources:
                    link.close()

    def heal(self, sources: set[str] | None = None) -> None:
        for s in list(self._cut) if sources is None else sources:
            self._cut.pop(s, None)
        for link in list(self._links):
            if link.closed or link.src in self._cut:
                continue
            for chunk in link.held_up:
                link.server_w.write(chunk)
            for chunk in link.held_down:
                link.client_w.write(chunk)
            link.held_up.clear()
            link.held_down.clear()
            link.held_bytes = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        src = str(peer[0]) if isinstance(peer, tuple) else ""
        self.accepted += 1
        if self._cut.get(src) == "reset":
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        link = _Link(src, writer, up_w)
        self._links.add(link)
        for coro in (self._pump(link, reader, up_w, True), self._pump(link, up_r, writer, False)):
            task = asyncio.ensure_future(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool
    ) -> None:
        try:
            while not link.closed:
                data = await reader.read(65536)
                if not data:
                    break
                if link.src in self._cut:
                    (link.held_up if up else link.held_down).append(data)
                    link.held_bytes += len(data)
                    if link.held_bytes > self.max_held:
                        break
                    continue
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            link.close()
            self._links.discard(link)
