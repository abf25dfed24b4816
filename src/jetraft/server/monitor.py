"""The monitoring HTTP endpoint: /healthz, /varz, /connz, /subsz in nats-server's JSON shapes."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import resource
import ssl
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import msgspec

from jetraft.config import ServerConfig
from jetraft.jetstream.models import format_time
from jetraft.server.core.accounts import AccountStats
from jetraft.server.core.auth import Authenticator
from jetraft.server.core.client_conn import ClientConnection, ServerStats


class JszSource(Protocol):
    def jsz(self, q: Mapping[str, str]) -> dict[str, Any]: ...


class RoutezSource(Protocol):
    @property
    def port(self) -> int: ...

    def routez(self) -> list[dict[str, Any]]: ...


class MonitoredServer(Protocol):
    """What the monitoring endpoints read (``server.Server`` provides it)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def server_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def stats(self) -> ServerStats: ...

    @property
    def clients(self) -> Mapping[int, ClientConnection]: ...

    @property
    def client_port(self) -> int: ...

    @property
    def start_time(self) -> float: ...

    @property
    def tls_context(self) -> ssl.SSLContext | None: ...

    @property
    def jetstream(self) -> JszSource | None: ...

    @property
    def mesh(self) -> RoutezSource | None: ...

    def totals(self) -> AccountStats: ...

    def info_version(self) -> str: ...

    def package_version(self) -> str: ...

log = logging.getLogger("jetraft.monitor")

_CLOSED_KEPT = 1000
_MAX_REQUEST_BYTES = 16 * 1024


def rfc3339(ts: float) -> str:
    """A wall-clock time in seconds as Go's RFC3339Nano in UTC."""
    return format_time(int(ts * 1e9))


def go_duration(seconds: float) -> str:
    """Uptime the way nats-server prints it: 1d2h3m4s."""
    total = int(seconds)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    out = ""
    if days:
        out += f"{days}d"
    if days or hours:
        out += f"{hours}h"
    if days or hours or minutes:
        out += f"{minutes}m"
    return out + f"{secs}s"


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _CpuMeter:
    """CPU percent since the previous reading (like nats-server's pse sampling)."""

    def __init__(self) -> None:
        self._last_wall = time.monotonic()
        self._last_cpu = time.process_time()

    def percent(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        dwall, dcpu = wall - self._last_wall, cpu - self._last_cpu
        self._last_wall, self._last_cpu = wall, cpu
        return round(100.0 * dcpu / dwall, 2) if dwall > 0 else 0.0


class MonitorServer:
    def __init__(self, server: MonitoredServer) -> None:
        self.server = server
        self._srv: asyncio.AbstractServer | None = None
        self._cpu = _CpuMeter()
        self.closed: collections.deque[dict[str, Any]] = collections.deque(maxlen=_CLOSED_KEPT)
        self.requests: collections.Counter[str] = collections.Counter()
        self.port = 0
        self._routes = {
            "/": self.root,
            "/healthz": self.healthz,
            "/varz": self.varz,
            "/connz": self.connz,
            "/subsz": self.subsz,
            "/subscriptionsz": self.subsz,
            "/jsz": self.jsz,
            "/routez": self.routez,
        }

    async def start(self, host: str, port: int) -> None:
        self._srv = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        self.port = self._srv.sockets[0].getsockname()[1] if self._srv.sockets else port
        log.info("Starting http monitor on %s:%d", host, self.port)

    async def stop(self) -> None:
        if self._srv is not None:
            self._srv.close()
            await self._srv.wait_closed()

    def remember_closed(self, conn: ClientConnection) -> None:
        info = self._conn_info(conn, time.time(), subs=False)
        info["stop"] = rfc3339(time.time())
        info["reason"] = conn.reason or "Client Closed"
        self.closed.append(info)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        status, body = self._respond(head[:_MAX_REQUEST_BYTES])
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request"}
        writer.write(
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
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
        self.requests[url.path] += 1
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            return 200, msgspec.json.encode(handler(query))
        except ValueError as exc:
            return 400, msgspec.json.encode({"error": str(exc)})

    # --- endpoints -------------------------------------------------------------------------

    def root(self, q: dict[str, str]) -> dict[str, Any]:
        return {"endpoints": sorted(k for k in self._routes if k != "/")}

    def healthz(self, q: dict[str, str]) -> dict[str, Any]:
        return {"status": "ok"}

    def jsz(self, q: dict[str, str]) -> dict[str, Any]:
        js = self.server.jetstream
        if js is None:
            return {"server_id": self.server.server_id, "disabled": True}
        out: dict[str, Any] = js.jsz(q)
        return out

    def varz(self, q: dict[str, str]) -> dict[str, Any]:
        s = self.server
        cfg = s.config
        st = s.stats
        tot = s.totals()
        now = time.time()
        out: dict[str, Any] = {
            "server_id": s.server_id,
            "server_name": s.name,
            "version": s.info_version(),
            "proto": 1,
            "go": f"jetraft {s.package_version()}",
            "host": cfg.host,
            "port": s.client_port,
            "auth_required": s.auth.required,
            "tls_required": s.tls_context is not None,
            "max_connections": cfg.max_connections,
            "ping_interval": int(cfg.ping_interval_ns),
            "ping_max": cfg.ping_max,
            "http_host": cfg.http_host or cfg.host,
            "http_port": self.port,
            "auth_timeout": cfg.auth_timeout_ns / 1e9,
            "max_control_line": cfg.max_control_line,
            "max_payload": cfg.max_payload,
            "max_pending": cfg.max_pending,
            "start": rfc3339(s.start_time),
            "now": rfc3339(now),
            "uptime": go_duration(now - s.start_time),
            "mem": rss_bytes(),
            "cores": os.cpu_count() or 1,
            "gomaxprocs": 1,
            "cpu": self._cpu.percent(),
            "connections": len(s.clients),
            "total_connections": st.total_connections,
            "routes": len(s.mesh.routez()) if s.mesh is not None else 0,
            "remotes": len(s.mesh.routez()) if s.mesh is not None else 0,
            "leafnodes": 0,
            "in_msgs": tot.in_msgs,
            "out_msgs": tot.out_msgs,
            "in_bytes": tot.in_bytes,
            "out_bytes": tot.out_bytes,
            "slow_consumers": st.slow_consumers,
            "subscriptions": sum(len(a.sublist) for a in s.auth.accounts.values()),
            "http_req_stats": dict(self.requests),
            "system_account": s.auth.system_account_name,
        }
        if cfg.server_tags:
            out["tags"] = list(cfg.server_tags)
        if cfg.cluster is not None:
            cl = cfg.cluster
            out["cluster"] = {
                "name": cl.name,
                "addr": cl.host,
                "cluster_port": s.mesh.port if s.mesh is not None else cl.port,
                "auth_timeout": cl.auth_timeout_s or 2.0,
                "urls": [u.split("://", 1)[-1].rsplit("@", 1)[-1] for u in cl.routes],
                "tls_required": cl.tls is not None,
                "tls_verify": cl.tls is not None and cl.tls.verify,
            }
        return out

    def routez(self, q: dict[str, str]) -> dict[str, Any]:
        s = self.server
        routes = s.mesh.routez() if s.mesh is not None else []
        return {
            "server_id": s.server_id,
            "server_name": s.name,
            "now": rfc3339(time.time()),
            "num_routes": len(routes),
            "routes": routes,
        }

    def connz(self, q: dict[str, str]) -> dict[str, Any]:
        now = time.time()
        offset = _int_param(q, "offset", 0)
        limit = _int_param(q, "limit", 1024)
        subs = q.get("subs", "") in ("1", "true", "detail")
        state = q.get("state", "open")
        if state == "closed":
            conns = list(self.closed)
        elif state in ("open", "any", "all"):
            conns = [self._conn_info(c, now, subs) for c in self.server.clients.values()]
            if state != "open":
                conns.extend(self.closed)
        else:
            raise ValueError(f"invalid state {state!r}")
        sort = q.get("sort", "cid")
        if sort not in _SORT_KEYS:
            raise ValueError(f"invalid sorting option {sort!r}")
        key, reverse = _SORT_KEYS[sort]
        conns.sort(key=lambda c: c.get(key, 0), reverse=reverse)
        page = conns[offset : offset + limit]
        return {
            "server_id": self.server.server_id,
            "now": rfc3339(now),
            "num_connections": len(page),
            "total": len(conns),
            "offset": offset,
            "limit": limit,
            "connections": page,
        }

    def _conn_info(self, c: ClientConnection, now: float, subs: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "cid": c.cid,
            "kind": "Client",
            "type": "nats",
            "ip": c.host,
            "port": c.port,
            "start": rfc3339(c.start),
            "last_activity": rfc3339(c.last_activity),
            "uptime": go_duration(now - c.start),
            "idle": go_duration(now - c.last_activity),
            "pending_bytes": c.pending_bytes(),
            "in_msgs": c.in_msgs,
            "out_msgs": c.out_msgs,
            "in_bytes": c.in_bytes,
            "out_bytes": c.out_bytes,
            "subscriptions": len(c.subs),
            "name": c.name,
            "lang": c.lang,
            "version": c.version,
            "account": c.account.name,
        }
        if c.user is not None:
            info["authorized_user"] = c.user.name
        if subs:
            info["subscriptions_list"] = sorted(s.subject for s in c.subs.values())
        return info

    def subsz(self, q: dict[str, str]) -> dict[str, Any]:
        accounts = self.server.auth.accounts.values()
        out: dict[str, Any] = {
            "server_id": self.server.server_id,
            "now": rfc3339(time.time()),
            "num_subscriptions": sum(len(a.sublist) for a in accounts),
            "num_cache": sum(a.sublist.cache_size() for a in accounts),
        }
        if q.get("subs", "") in ("1", "true", "detail"):
            listing = []
            for c in self.server.clients.values():
                for s in c.subs.values():
                    item: dict[str, Any] = {
                        "account": c.account.name,
                        "subject": s.subject,
                        "sid": s.sid,
                        "msgs": s.delivered,
                        "cid": c.cid,
                    }
                    if s.queue:
                        item["qgroup"] = s.queue
                    listing.append(item)
            out["subscriptions_list"] = listing
        return out


_SORT_KEYS: dict[str, tuple[str, bool]] = {
    "cid": ("cid", False),
    "start": ("start", False),
    "subs": ("subscriptions", True),
    "pending": ("pending_bytes", True),
    "msgs_to": ("out_msgs", True),
    "msgs_from": ("in_msgs", True),
    "bytes_to": ("out_bytes", True),
    "bytes_from": ("in_bytes", True),
    "last": ("last_activity", True),
    "idle": ("last_activity", False),
    "uptime": ("start", False),
    "stop": ("stop", True),
    "reason": ("reason", False),
}


def _int_param(q: dict[str, str], name: str, default: int) -> int:
    raw = q.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise ValueError(f"invalid {name} {raw!r}")
    return int(raw)
