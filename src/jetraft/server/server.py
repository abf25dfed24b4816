"""The server: listeners, the client registry, message routing within an account, keep-alive."""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import ssl
import time
from pathlib import Path
from typing import Any

import jetraft
from jetraft.config import ServerConfig
from jetraft.jetstream.api_types import API_LEVEL
from jetraft.protocol import client as proto
from jetraft.server.cluster.mesh import RouteMesh
from jetraft.server.core.accounts import Account, AccountStats
from jetraft.server.core.auth import Authenticator
from jetraft.server.core.client_conn import ClientConnection, ServerStats
from jetraft.server.core.imports import ResponseRelay, install_imports
from jetraft.server.core.router import Router, totals
from jetraft.server.core.startup import check_store_dir, listen_error
from jetraft.server.core.tls import make_server_context, peer_certificate, pinned_ok
from jetraft.server.core.user_info import UserInfoResponder
from jetraft.server.monitor import MonitorData, MonitorServer, SystemRequests

log = logging.getLogger("jetraft.server")

# INFO's and /varz's ``version`` is the nats-server feature level jetraft implements, not the
# package version (that one is in ``go``): clients gate features on it (nats-py needs >= 2.9
# for the named consumer API; 2.12 gates atomic batch publish, message schedules, counters and
# mirror promotion, which jetraft refuses). It follows the JetStream API level served, which is
# what nats-server ties to each release: level 1 is 2.11.
_VERSION_OF_API_LEVEL = {1: "2.11.0", 2: "2.12.0"}
NATS_COMPAT_VERSION = _VERSION_OF_API_LEVEL[API_LEVEL]
INTERNAL_ACCOUNT = "$JSC"
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def new_server_id() -> str:
    # Shaped like nats-server's public nkey ids: 'N' plus 55 base32 characters.
    return "N" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(55))


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.server_id = new_server_id()
        self.name = config.server_name or self.server_id
        self.auth = Authenticator(config)
        self.stats = ServerStats()
        self.clients: dict[int, ClientConnection] = {}
        self.start_time = time.time()
        self._next_cid = 1
        self.router = Router(random.Random())
        self._servers: list[asyncio.AbstractServer] = []
        self._ping_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self.tls_context: ssl.SSLContext | None = None
        if config.tls is not None:
            self.tls_context = make_server_context(config.tls)
        self.client_port = config.port
        self.monitoring = MonitorData(self)  # the data; served over HTTP and $SYS requests
        self.monitor: MonitorServer | None = None  # the HTTP endpoint, when configured
        self.sys_requests = SystemRequests(self, self.monitoring)
        self.in_lame_duck = False
        self._upgrade_after_info = False
        self._tasks: set[asyncio.Future[None]] = set()  # strong refs to background tasks
        self._loop: asyncio.AbstractEventLoop | None = None
        self.jetstream: Any = None  # JetStreamManager when cfg.jetstream is set
        self.mesh: RouteMesh | None = None  # the routes, when cfg.cluster is set
        # Traffic between servers (JetStream cluster requests) lives in an account of its
        # own that no client can bind to.
        self.internal_account = Account(INTERNAL_ACCOUNT)
        # Client URLs (host:port) of the servers we have routes to; the route layer owns it.
        self.route_client_urls: list[str] = []
        self.import_relays: dict[str, ResponseRelay] = {}  # by exporting account

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        if cfg.cluster is not None:
            self.mesh = RouteMesh(self)
            try:
                await self.mesh.start()
            except OSError as exc:
                raise listen_error("routes", cfg.cluster.host, cfg.cluster.port, exc) from None
        # After the mesh listens to local interest: the response relays' interest is
        # announced to the other servers.
        self.import_relays = install_imports(self.router, self.auth.accounts, cfg.accounts)
        responder = UserInfoResponder(self.router, self.trace_server_info)
        for account in self.auth.accounts.values():
            responder.install(account)
        if cfg.jetstream is not None:
            check_store_dir(Path(cfg.jetstream.store_dir) / "jetstream")
            from jetraft.server.js.manager import JetStreamManager

            self.jetstream = JetStreamManager(self)
            await self.jetstream.start()
        self.sys_requests.start()
        # Port -1 asks for any free port (nats-server's RANDOM_PORT).
        port = 0 if cfg.port < 0 else cfg.port
        # handshake_first: TLS starts before INFO (nats-py's tls_handshake_first); otherwise
        # INFO goes out in clear text and the client upgrades.
        handshake_first = self.tls_context is not None and cfg.tls is not None and (
            cfg.tls.handshake_first
        )
        try:
            srv = await self._loop.create_server(
                self._new_client,
                cfg.host,
                port,
                reuse_address=True,
                backlog=1024,
                ssl=self.tls_context if handshake_first else None,
            )
        except OSError as exc:
            raise listen_error("client connections", cfg.host, cfg.port, exc) from None
        self._upgrade_after_info = self.tls_context is not None and not handshake_first
        self._servers.append(srv)
        if port == 0 and srv.sockets:
            self.client_port = srv.sockets[0].getsockname()[1]
        log.info("Listening for client connections on %s:%d", cfg.host, self.client_port)
        if cfg.http_port != 0:
            self.monitor = MonitorServer(self.monitoring)
            http_host = cfg.http_host or cfg.host
            try:
                await self.monitor.start(http_host, max(cfg.http_port, 0))
            except OSError as exc:
                raise listen_error("monitoring", http_host, cfg.http_port, exc) from None
        self._ping_task = asyncio.create_task(self._ping_loop())
        log.info("Server is ready (id %s, name %s)", self.server_id, self.name)

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        for srv in self._servers:
            srv.close()
        if self._ping_task is not None:
            self._ping_task.cancel()
        if self.monitor is not None:
            await self.monitor.stop()
        self.sys_requests.stop()
        if self.jetstream is not None:
            await self.jetstream.stop()
        if self.mesh is not None:
            await self.mesh.stop()
        for conn in list(self.clients.values()):
            conn.close("Server Shutdown")
        for srv in self._servers:
            await srv.wait_closed()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def lame_duck(self) -> None:
        """Lame duck mode (SIGUSR2): stop accepting, tell clients, close them gradually, stop.

        Clients get an async INFO with ``ldm: true`` so they can reconnect elsewhere; then,
        after the grace period, connections are closed spread over ``lame_duck_duration``.
        """
        cfg = self.config
        self.in_lame_duck = True
        for srv in self._servers:
            srv.close()
        if self.mesh is not None:
            self.mesh.broadcast_info()  # peers stop advertising our client URL
        if self.jetstream is not None:
            await self.jetstream.lame_duck()
        for conn in list(self.clients.values()):
            if conn.connected and not conn.closed:
                info = self.info_for(conn)
                info["ldm"] = True
                # Where to go instead: the other servers (nothing when alone).
                info["connect_urls"] = list(self.route_client_urls)
                conn.enqueue(proto.encode_info(info))
        grace_s = cfg.lame_duck_grace_period_ns / 1e9
        duration_s = max(cfg.lame_duck_duration_ns / 1e9 - grace_s, 0.0)
        await asyncio.sleep(grace_s)
        clients = list(self.clients.values())
        pause_s = min(duration_s / len(clients), 1.0) if clients else 0.0
        for conn in clients:
            conn.close("Server Shutdown")
            if pause_s:
                await asyncio.sleep(pause_s)
        await self.stop()

    # --- clients ---------------------------------------------------------------------------

    def _new_client(self) -> ClientConnection:
        cid = self._next_cid
        self._next_cid += 1
        return ClientConnection(self, cid)

    def client_opened(self, conn: ClientConnection) -> None:
        cfg = self.config
        if len(self.clients) >= cfg.max_connections:
            conn.fatal("maximum connections exceeded")
            return
        self.clients[conn.cid] = conn
        self.stats.total_connections += 1
        if self.tls_context is not None and not self._upgrade_after_info and (
            not self._pinned_ok(conn)
        ):
            return  # handshake-first: the TLS session is already up
        info = proto.encode_info(self.info_for(conn))
        if self.auth.required:
            timeout = cfg.auth_timeout_ns / 1e9
            conn.start_auth_timer(timeout)
        if not self._upgrade_after_info:
            conn.enqueue(info)
            return
        task = asyncio.ensure_future(self._upgrade_tls(conn, info))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _upgrade_tls(self, conn: ClientConnection, info: bytes) -> None:
        assert self.tls_context is not None and conn.transport is not None
        tls = self.config.tls
        timeout = tls.timeout_s if tls is not None else 2.0
        # INFO goes out in the same loop step that starts the handshake: the client answers
        # INFO with its TLS hello, and had INFO left a step earlier, the hello could reach
        # the plain-text parser first (seen under uvloop: -ERR and a failed handshake).
        conn.enqueue(info)
        conn.flush()
        try:
            new = await self.loop.start_tls(
                conn.transport,
                conn,
                self.tls_context,
                server_side=True,
                ssl_handshake_timeout=timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            log.debug("TLS handshake failed for client %d: %s", conn.cid, exc)
            conn.close("TLS Handshake Error")
            return
        if new is None:
            conn.close("TLS Handshake Error")
            return
        conn.transport = new
        self._pinned_ok(conn)

    def _pinned_ok(self, conn: ClientConnection) -> bool:
        """``pinned_certs``: a client whose certificate key is not pinned is dropped right after
        the handshake, as nats-server does (no -ERR: the TLS session itself is refused)."""
        tls = self.config.tls
        if tls is None or not tls.pinned_certs:
            return True
        if pinned_ok(peer_certificate(conn.transport), tls.pinned_certs):
            return True
        log.debug("client %d: certificate not pinned", conn.cid)
        conn.close("TLS Handshake Error")
        return False

    def info_for(self, conn: ClientConnection) -> dict[str, Any]:
        cfg = self.config
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": f"jetraft {jetraft.__version__}",
            "host": cfg.host,
            "port": self.client_port,
            "headers": True,
            "max_payload": cfg.max_payload,
            "client_id": conn.cid,
            "client_ip": conn.host,
            "api_lvl": API_LEVEL,  # the JetStream API level served (nats-server 2.11+)
        }
        if self.auth.required:
            info["auth_required"] = True
        if conn.nonce:
            info["nonce"] = conn.nonce
        if self.tls_context is not None:
            info["tls_required"] = True
            if cfg.tls is not None and cfg.tls.verify:
                info["tls_verify"] = True
        if cfg.jetstream is not None:
            info["jetstream"] = True
        if cfg.cluster is not None and cfg.cluster.name:
            info["cluster"] = cfg.cluster.name
        urls = self.connect_urls(conn)
        if urls:
            info["connect_urls"] = urls
        return info

    def connect_urls(self, conn: ClientConnection) -> list[str]:
        """Client URLs of the cluster, this server included, for INFO ``connect_urls``.

        Empty while no route is up, as nats-server: a lone server advertises nothing, since
        clients add every advertised URL they do not already hold (compared by netloc, so
        ``127.0.0.1:4222`` is new to a pool holding ``user:pass@127.0.0.1:4222``) and would
        then retry a credential-less copy of the one server they know.
        """
        cluster = self.config.cluster
        if not self.route_client_urls or (cluster is not None and cluster.no_advertise):
            return []
        return [f"{self._advertise_host(conn)}:{self.client_port}", *self.route_client_urls]

    def advertised_client_urls(self) -> list[str]:
        """The cluster's client URLs as INFO advertises them, without a connection to tailor
        the host to (/varz ``connect_urls``); empty on a lone server."""
        cluster = self.config.cluster
        if not self.route_client_urls or (cluster is not None and cluster.no_advertise):
            return []
        return [*self.own_client_urls()[:1], *self.route_client_urls]

    def _advertise_host(self, conn: ClientConnection) -> str:
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            transport = conn.transport
            sock = transport.get_extra_info("sockname") if transport is not None else None
            if isinstance(sock, tuple):
                return str(sock[0])
        return host

    # --- the cluster's view of this server (mesh.ClusterHost) ------------------------------

    def account_named(self, name: str) -> Account | None:
        if name == INTERNAL_ACCOUNT:
            return self.internal_account
        return self.auth.accounts.get(name)

    def own_client_urls(self) -> list[str]:
        cfg = self.config
        if cfg.client_advertise:
            return [cfg.client_advertise]
        return [f"{cfg.host}:{self.client_port}"]

    def jetstream_enabled(self) -> bool:
        return self.config.jetstream is not None

    def lame_duck_mode(self) -> bool:
        return self.in_lame_duck

    def trace_server_info(self) -> dict[str, Any]:
        return self.sys_requests.server_info()

    def route_client_urls_changed(self, urls: list[str]) -> None:
        """Servers joined or left: clients that understand async INFO hear the new URLs."""
        self.route_client_urls = urls
        if self.config.cluster is not None and self.config.cluster.no_advertise:
            return
        for conn in list(self.clients.values()):
            if conn.connected and not conn.closed and conn.protocol >= 1:
                conn.enqueue(proto.encode_info(self.info_for(conn)))

    def client_bound(self, conn: ClientConnection) -> None:
        conn.account.num_connections += 1

    def client_closed(self, conn: ClientConnection) -> None:
        if self.clients.pop(conn.cid, None) is None:
            return
        if conn.connected:
            conn.account.num_connections -= 1
        conn.remove_all_subs()
        self.monitoring.remember_closed(conn)

    def totals(self) -> AccountStats:
        return totals(list(self.auth.accounts.values()))

    # --- keep-alive ------------------------------------------------------------------------

    async def _ping_loop(self) -> None:
        interval = self.config.ping_interval_ns / 1e9
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            for conn in list(self.clients.values()):
                if conn.closed:
                    continue
                if conn.pings_out >= self.config.ping_max:
                    conn.fatal("Stale Connection")
                    continue
                # A client that just talked to us is alive; nats-server skips the PING too.
                if now - conn.last_activity < interval / 2 and conn.pings_out == 0:
                    continue
                conn.pings_out += 1
                conn.enqueue(proto.PING_FRAME)

    # --- introspection ---------------------------------------------------------------------

    @staticmethod
    def info_version() -> str:
        return NATS_COMPAT_VERSION

    @staticmethod
    def package_version() -> str:
        return jetraft.__version__
