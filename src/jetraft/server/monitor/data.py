"""What the monitoring data is: nats-server's /varz, /connz, /subsz, /routez, /jsz,
/accountz and statsz bodies, built from the live server.

How the data is served lives elsewhere: ``http.py`` (the monitoring port) and ``sysreq.py``
(``$SYS.REQ.SERVER.*`` requests in the system account) call the same builders. A builder takes
its options as a mapping of names to strings, the query-string form; the system requests
translate their JSON options into it.
"""

from __future__ import annotations

import collections
import os
import resource
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from jetraft.config import ServerConfig
from jetraft.jetstream.models import format_time
from jetraft.protocol.subjects import is_literal, subject_matches
from jetraft.server.core.accounts import AccountStats, Subscription
from jetraft.server.core.auth import Authenticator
from jetraft.server.core.client_conn import ClientConnection, ServerStats
from jetraft.server.core.import_mapping import accountz_fields

if TYPE_CHECKING:  # a server without JetStream or routes does not load their modules
    from jetraft.server.cluster.route_conn import PeerInfo
    from jetraft.server.js.manager import JetStreamManager

Query = Mapping[str, str]


class MeshSource(Protocol):
    @property
    def port(self) -> int: ...

    def routez(self) -> list[dict[str, Any]]: ...

    def peers(self) -> list[PeerInfo]: ...


class MonitoredServer(Protocol):
    """What the monitoring data is read from (``server.Server`` provides it)."""

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
    def jetstream(self) -> JetStreamManager | None: ...

    @property
    def mesh(self) -> MeshSource | None: ...

    def totals(self) -> AccountStats: ...

    def info_version(self) -> str: ...

    def package_version(self) -> str: ...

    def advertised_client_urls(self) -> list[str]: ...


_CLOSED_KEPT = 1000
_TRUE = ("1", "true", "detail")


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


def _sub_detail(sub: Subscription, cid: int) -> dict[str, Any]:
    """One subscription as /connz?subs=detail shows it (nats-server's SubDetail)."""
    out: dict[str, Any] = {"subject": sub.subject}
    if sub.queue:
        out["qgroup"] = sub.queue
    out["sid"] = sub.sid
    out["msgs"] = sub.delivered
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    out["cid"] = cid
    return out


def flag(q: Query, name: str) -> bool:
    return q.get(name, "").lower() in _TRUE


def int_param(q: Query, name: str, default: int) -> int:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"invalid {name} {raw!r}")
    return int(raw)


def _js_enabled(js: JetStreamManager, account: str) -> bool:
    if js.clustered is not None:
        return account in js.clustered.apis
    return account in js.accounts


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


class MonitorData:
    """The builders, plus the little state they need that the server does not keep:
    recently closed connections, HTTP request counts and the CPU meter."""

    def __init__(self, server: MonitoredServer) -> None:
        self.server = server
        self._cpu = _CpuMeter()
        self.closed: collections.deque[dict[str, Any]] = collections.deque(maxlen=_CLOSED_KEPT)
        self.http_requests: collections.Counter[str] = collections.Counter()
        self.http_port = 0  # set by the HTTP listener once it is up

    def remember_closed(self, conn: ClientConnection) -> None:
        info = self._conn_info(conn, time.time(), subs=False)
        info["stop"] = rfc3339(time.time())
        info["reason"] = conn.reason or "Client Closed"
        self.closed.append(info)

    # --- /jsz, /routez, /accountz ------------------------------------------------------------

    def jsz(self, q: Query) -> dict[str, Any]:
        js = self.server.jetstream
        if js is None:
            return {"server_id": self.server.server_id, "disabled": True}
        return js.jsz(q)

    def raftz(self, q: Query) -> dict[str, Any]:
        js = self.server.jetstream
        return {} if js is None else js.raftz(q)

    def routez(self, q: Query) -> dict[str, Any]:
        s = self.server
        routes = s.mesh.routez() if s.mesh is not None else []
        return {
            "server_id": s.server_id,
            "server_name": s.name,
            "now": rfc3339(time.time()),
            "num_routes": len(routes),
            "routes": routes,
        }

    def accountz(self, q: Query) -> dict[str, Any]:
        s = self.server
        out: dict[str, Any] = {"server_id": s.server_id, "now": rfc3339(time.time())}
        if s.auth.system_account_name:
            out["system_account"] = s.auth.system_account_name
        name = q.get("acc", "")
        if not name:
            out["accounts"] = sorted(s.auth.accounts)
            return out
        account = s.auth.accounts.get(name)
        if account is None:
            raise ValueError(f"Account {name} does not exist")
        js = s.jetstream
        detail: dict[str, Any] = {
            "account_name": name,
            "update_time": rfc3339(s.start_time),
            "expired": False,
            "complete": True,
            "jetstream_enabled": js is not None and _js_enabled(js, name),
            "leafnode_connections": 0,
            "client_connections": account.num_connections,
            "subscriptions": len(account.sublist),
            "sublist_stats": {
                "num_subscriptions": len(account.sublist),
                "num_cache": account.sublist.cache_size(),
            },
        }
        for acc_cfg in s.config.accounts:
            if acc_cfg.name == name:
                detail.update(accountz_fields(acc_cfg))
        if name == s.auth.system_account_name:
            detail["is_system"] = True
        out["account_detail"] = detail
        return out

    # --- /varz -------------------------------------------------------------------------------

    def varz(self, q: Query) -> dict[str, Any]:
        s = self.server
        cfg = s.config
        st = s.stats
        tot = s.totals()
        now = time.time()
        routes = len(s.mesh.routez()) if s.mesh is not None else 0
        out: dict[str, Any] = {
            "server_id": s.server_id,
            "server_name": s.name,
            "version": s.info_version(),
            "proto": 1,
            "go": f"jetraft {s.package_version()}",
            "host": cfg.host,
            "port": s.client_port,
            "auth_required": s.auth.required,
            "max_connections": cfg.max_connections,
            "ping_interval": int(cfg.ping_interval_ns),
            "ping_max": cfg.ping_max,
            "http_host": cfg.http_host or cfg.host,
            "http_port": self.http_port,
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
            "routes": routes,
            "remotes": routes,
            "leafnodes": 0,
            "in_msgs": tot.in_msgs,
            "out_msgs": tot.out_msgs,
            "in_bytes": tot.in_bytes,
            "out_bytes": tot.out_bytes,
            "slow_consumers": st.slow_consumers,
            "subscriptions": self.subscriptions(),
            "http_req_stats": dict(self.http_requests),
            "system_account": s.auth.system_account_name,
        }
        if s.tls_context is not None:
            out["tls_required"] = True
        if cfg.server_tags:
            out["tags"] = list(cfg.server_tags)
        urls = s.advertised_client_urls()
        if urls:
            out["connect_urls"] = urls
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
        js = self.jetstream_varz()
        if js is not None:
            out["jetstream"] = js
        return out

    def subscriptions(self) -> int:
        return sum(len(a.sublist) for a in self.server.auth.accounts.values())

    def jetstream_varz(self) -> dict[str, Any] | None:
        """/varz's and statsz's ``jetstream`` section: configuration, usage, meta group."""
        js = self.server.jetstream
        if js is None:
            return None
        jsz = js.jsz({})
        config = {k: v for k, v in jsz.get("config", {}).items() if k != "store_dir"}
        stats = {
            k: jsz.get(k, 0)
            for k in (
                "memory", "storage", "reserved_memory", "reserved_storage", "accounts",
                "ha_assets",
            )
        }
        stats["api"] = jsz.get("api", {})
        out: dict[str, Any] = {"config": config, "stats": stats, "limits": jsz.get("limits", {})}
        if "meta_cluster" in jsz:
            out["meta"] = jsz["meta_cluster"]
        return out

    # --- statsz (the $SYS.REQ.SERVER.PING answer) --------------------------------------------

    def statsz(self) -> dict[str, Any]:
        s = self.server
        tot = s.totals()
        out: dict[str, Any] = {
            "start": rfc3339(s.start_time),
            "mem": rss_bytes(),
            "cores": os.cpu_count() or 1,
            "cpu": self._cpu.percent(),
            "connections": len(s.clients),
            "total_connections": s.stats.total_connections,
            "active_accounts": sum(1 for a in s.auth.accounts.values() if a.num_connections),
            "subscriptions": self.subscriptions(),
            "sent": {"msgs": tot.out_msgs, "bytes": tot.out_bytes},
            "received": {"msgs": tot.in_msgs, "bytes": tot.in_bytes},
            "slow_consumers": s.stats.slow_consumers,
        }
        if s.mesh is not None:
            routes = [
                {
                    "rid": r["rid"],
                    "name": r["remote_name"],
                    "sent": {"msgs": r["out_msgs"], "bytes": r["out_bytes"]},
                    "received": {"msgs": r["in_msgs"], "bytes": r["in_bytes"]},
                    "pending": r["pending_size"],
                }
                for r in s.mesh.routez()
            ]
            if routes:
                out["routes"] = routes
        # This server and every server it has a route to: how many answers a PING gets.
        out["active_servers"] = 1 + (len(s.mesh.peers()) if s.mesh is not None else 0)
        js = self.jetstream_varz()
        if js is not None:
            out["jetstream"] = js
        out["gomaxprocs"] = 1
        return out

    # --- /connz, /subsz ---------------------------------------------------------------------

    def connz(self, q: Query) -> dict[str, Any]:
        now = time.time()
        offset = int_param(q, "offset", 0)
        limit = int_param(q, "limit", 1024)
        detail = q.get("subs", "").lower() == "detail"
        subs = flag(q, "subs")
        state = q.get("state", "open")
        if state == "closed":
            conns = list(self.closed)
        elif state in ("open", "any", "all"):
            conns = [
                self._conn_info(c, now, subs, detail) for c in self.server.clients.values()
            ]
            if state != "open":
                conns.extend(self.closed)
        else:
            raise ValueError(f"invalid state {state!r}")
        cid = int_param(q, "cid", 0)
        wanted = {"cid": cid or None, "account": q.get("acc"), "authorized_user": q.get("user")}
        for field_name, value in wanted.items():
            if value:
                conns = [c for c in conns if c.get(field_name) == value]
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

    def _conn_info(
        self, c: ClientConnection, now: float, subs: bool, detail: bool = False
    ) -> dict[str, Any]:
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
        if detail:
            info["subscriptions_list_detail"] = [_sub_detail(s, c.cid) for s in c.subs.values()]
        elif subs:
            info["subscriptions_list"] = sorted(s.subject for s in c.subs.values())
        return info

    def subsz(self, q: Query) -> dict[str, Any]:
        """Counts, and with ``subs`` the clients' subscriptions (``acc`` narrows to one
        account, ``test`` to those a publish on that subject would reach), paged."""
        accounts = self.server.auth.accounts.values()
        offset = int_param(q, "offset", 0)
        limit = int_param(q, "limit", 1024)
        out: dict[str, Any] = {
            "server_id": self.server.server_id,
            "now": rfc3339(time.time()),
            "num_subscriptions": sum(len(a.sublist) for a in accounts),
            "num_cache": sum(a.sublist.cache_size() for a in accounts),
            "total": 0,
            "offset": offset,
            "limit": limit,
        }
        if not flag(q, "subs"):
            return out
        acc, test = q.get("acc", ""), q.get("test", "")
        if test and not is_literal(test):
            raise ValueError(f"invalid test subject {test!r}, must be a literal subject")
        listing = []
        for c in self.server.clients.values():
            if acc and c.account.name != acc:
                continue
            for s in c.subs.values():
                if test and not subject_matches(s.subject, test):
                    continue
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
        out["total"] = len(listing)
        out["subscriptions_list"] = listing[offset : offset + limit]
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
