"""How the monitoring data is served over HTTP: the monitoring port's endpoints, each a
builder of ``data.py`` (or ``health.py``) fed with the query string."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from jetraft.server.monitor.data import MonitorData, Query
from jetraft.server.monitor.health import healthz

log = logging.getLogger("jetraft.monitor")

_MAX_REQUEST_BYTES = 16 * 1024
_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    500: "Internal Server Error", 503: "Service Unavailable",
}


class MonitorServer:
    def __init__(self, data: MonitorData) -> None:
        self.data = data
        self._srv: asyncio.AbstractServer | None = None
        self.port = 0
        self._routes: dict[str, Callable[[Query], dict[str, Any]]] = {
            "/": self.root,
            "/healthz": self.healthz,
            "/varz": data.varz,
            "/connz": data.connz,
            "/subsz": data.subsz,
            "/subscriptionsz": data.subsz,
            "/jsz": data.jsz,
            "/routez": data.routez,
            "/raftz": data.raftz,
            "/accountz": data.accountz,
        }

    @property
    def closed(self) -> Any:
        return self.data.closed

    async def start(self, host: str, port: int) -> None:
        self._srv = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        self.port = self._srv.sockets[0].getsockname()[1] if self._srv.sockets else port
        self.data.http_port = self.port
        log.info("Starting http monitor on %s:%d", host, self.port)

    async def stop(self) -> None:
        if self._srv is not None:
            self._srv.close()
            await self._srv.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        status, body = self._respond(head[:_MAX_REQUEST_BYTES])
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    def _respond(self, head: bytes) -> tuple[int, bytes]:
        try:
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        except ValueError:
            return 400, b'{"error":"bad request"}'
        if method not in ("GET", "HEAD"):
            return 405, b'{"error":"method not allowed"}'
        url = urlsplit(target)
        handler = self._routes.get(url.path.rstrip("/") or "/")
        if handler is None:
            return 404, b'{"error":"not found"}'
        self.data.http_requests[url.path] += 1
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            out = handler(query)
        except ValueError as exc:
            return 400, msgspec.json.encode({"error": str(exc)})
        # The health check's status travels as the HTTP status, not in the body.
        status = out.pop("status_code", 200) if handler == self.healthz else 200
        return status, msgspec.json.encode(out)

    def root(self, q: Query) -> dict[str, Any]:
        return {"endpoints": sorted(k for k in self._routes if k != "/")}

    def healthz(self, q: Query) -> dict[str, Any]:
        return healthz(self.data.server, q)
