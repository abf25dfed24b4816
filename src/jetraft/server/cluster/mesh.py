"""The route mesh: every server of a cluster connected to every other, and what flows on it.

* Dialing: each configured route URL has a solicitor that dials until a route to the server
  behind it is up, waits while it lasts and dials again when it goes (explicit routes
  forever; routes learnt by gossip ``connect_retries`` times, at least a few). A URL that
  turns out to be this server is dropped; one that a connected server advertises is not
  dialed while that route lasts (the server dialed us first).
* Gossip: every INFO lists the routes its sender has; a server dials the ones it lacks, so
  a server configured with one seed route ends up in the full mesh.
* Checks when a route comes up: the cluster name must match ours, the peer's server_name
  must be new (a second server with a name already in the cluster is refused), and when two
  routes to the same server exist (both sides dialed) the one dialed by the server with the
  smaller id is kept, which both sides work out the same way.
* Interest: local subscriptions are counted per (account, subject, queue); the first one
  sends SUB to every route, the last one UNSUB (queue subscriptions also send their member
  count). A route's SUBs become subscriptions owned by the route in the account's sublist.
* Messages: the router forwards to routes (``RouteConnection.forward``); what arrives is
  delivered locally only (``Router.deliver_from_route``).
* RAFT: ``send_raft`` queues a group's message for a server; once per loop turn everything
  queued for one server leaves in one frame, so the heartbeats of all groups between two
  servers travel together.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import random
import ssl
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import jetraft
from jetraft.config import ServerConfig
from jetraft.protocol import route as rp
from jetraft.protocol.client import PubBatch, pub_line, split_body
from jetraft.server.cluster.route_conn import PeerInfo, RouteConnection
from jetraft.server.core import msgtrace
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.auth import password_matches
from jetraft.server.core.router import Router
from jetraft.server.core.tls import make_client_context, make_server_context

log = logging.getLogger("jetraft.cluster")

_RETRY_MIN_S = 0.05
_RETRY_MAX_S = 1.0
_IMPLICIT_RETRIES_MIN = 3
_UNSPECIFIED_HOSTS = ("", "0.0.0.0", "::", "[::]")


class ClusterHost(Protocol):
    """What the mesh needs from its server (``server.Server`` provides it)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def server_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def router(self) -> Router: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def account_named(self, name: str) -> Account | None: ...

    def own_client_urls(self) -> list[str]: ...

    def jetstream_enabled(self) -> bool: ...

    def lame_duck_mode(self) -> bool: ...

    def route_client_urls_changed(self, urls: list[str]) -> None: ...

    def trace_server_info(self) -> dict[str, Any]:
        """The ``server`` block of this server's message trace events."""
        ...


RaftReceiver = Callable[[str, str, bytes], None]  # (from server name, group, message)
PeerListener = Callable[[PeerInfo, bool], None]  # (peer, up)


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


def split_url(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"nats-route://{url}")
    return parts.hostname or "", parts.port or 6222


def url_credentials(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.username or "", parts.password or ""


class RouteMesh:
    def __init__(self, host: ClusterHost) -> None:
        cfg = host.config.cluster
        assert cfg is not None
        self.host = host
        self.cfg = cfg
        self.name = cfg.name
        self.port = cfg.port
        self.routes: dict[str, RouteConnection] = {}  # server id -> the route kept
        self.by_name: dict[str, RouteConnection] = {}
        self.pending: set[RouteConnection] = set()  # dialed or accepted, not ready yet
        self.raft_receiver: RaftReceiver | None = None
        self._peer_listeners: list[PeerListener] = []
        self._local: dict[tuple[str, str, str | None], int] = {}
        self._url_ids: dict[str, str] = {}  # dialed URL -> the server id behind it
        self._soliciting: dict[str, asyncio.Task[None]] = {}
        self._listener: asyncio.AbstractServer | None = None
        self._raft_out: dict[str, list[tuple[str, bytes]]] = {}
        self._raft_flush_scheduled = False
        self._client_urls: list[str] = []
        self._stopping = False
        self._rng = random.Random()
        self._verified: set[bytes] = set()
        self._server_tls = make_server_context(cfg.tls) if cfg.tls is not None else None
        self._client_tls = make_client_context(cfg.tls) if cfg.tls is not None else None
        # Routes leave from the cluster listen address when it is a specific IPv4 one, so
        # peers (and firewalls, and the tests' partitioning proxies) see who dials them.
        self._local_addr = (cfg.host, 0) if _is_ipv4(cfg.host) and cfg.host != "0.0.0.0" else None
        host.router.listener = self

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.host.loop

    @property
    def max_pending(self) -> int:
        return max(self.host.config.max_pending, 64 * 1024 * 1024)

    @property
    def auth_timeout_s(self) -> float:
        return self.cfg.auth_timeout_s or 2.0

    async def start(self) -> None:
        port = 0 if self.cfg.port < 0 else self.cfg.port
        self._listener = await self.loop.create_server(
            lambda: RouteConnection(self, solicited=False),
            self.cfg.host,
            port,
            reuse_address=True,
            ssl=self._server_tls,
        )
        if self._listener.sockets:
            self.port = self._listener.sockets[0].getsockname()[1]
        log.info("Cluster %s: listening for route connections on %s:%d", self.name,
                 self.cfg.host, self.port)
        for url in self.cfg.routes:
            self._solicit(url, explicit=True)

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._soliciting.values()):
            task.cancel()
        for route in [*self.routes.values(), *self.pending]:
            route.close("Server Shutdown")
        for task in list(self._soliciting.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._listener is not None:
            await self._listener.wait_closed()

    def add_peer_listener(self, listener: PeerListener) -> None:
        self._peer_listeners.append(listener)

    def peers(self) -> list[PeerInfo]:
        return [r.peer for r in self.routes.values()]

    # --- dialing -----------------------------------------------------------------------------

    def _solicit(self, url: str, explicit: bool) -> None:
        if url in self._soliciting or self._stopping:
            return
        task = self.loop.create_task(self._dial_loop(url, explicit), name=f"route {url}")
        self._soliciting[url] = task
        task.add_done_callback(lambda _: self._soliciting.pop(url, None))

    async def _dial_loop(self, url: str, explicit: bool) -> None:
        host, port = split_url(url)
        retries = max(self.cfg.connect_retries, _IMPLICIT_RETRIES_MIN)
        failures = 0
        delay = _RETRY_MIN_S
        while not self._stopping:
            sid = self._advertiser_of(url) or self._url_ids.get(url, "")
            if sid == self.host.server_id:
                return  # the URL is this server
            live = self.routes.get(sid) if sid else None
            if live is not None:
                await asyncio.shield(live.done)
                delay = _RETRY_MIN_S
                continue
            if not explicit and sid and sid not in self._known_ids():
                return  # learnt by gossip and no longer advertised by anyone
            conn = RouteConnection(self, solicited=True, url=url)
            try:
                await self.loop.create_connection(
                    lambda c=conn: c,
                    host,
                    port,
                    ssl=self._client_tls,
                    server_hostname="" if self._client_tls else None,
                    local_addr=self._local_addr,
                )
            except (OSError, ssl.SSLError) as exc:
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.debug("route %s: cannot connect (%s)", url, exc)
                if not explicit and failures > retries:
                    return
                await asyncio.sleep(delay * (0.5 + self._rng.random()))
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            self.pending.add(conn)
            await conn.done
            if conn.peer.server_id:
                failures = 0
                delay = _RETRY_MIN_S
            else:
                await asyncio.sleep(delay * (0.5 + self._rng.random()))
                delay = min(delay * 2, _RETRY_MAX_S)

    def _advertiser_of(self, url: str) -> str:
        """The id of a connected server that advertises ``url`` as its route URL, else "".

        A server that dialed us first (we were not listening yet when it started, or our
        own dial failed) is already connected when our retry comes round: dialing it again
        would make a duplicate route, and the duplicate that loses is closed with whatever
        it was carrying, messages included, long after the mesh formed."""
        want = split_url(url)
        for sid, route in self.routes.items():
            advertised = self._peer_route_url(route)
            if advertised and split_url(advertised) == want:
                return sid
        return ""

    def _known_ids(self) -> set[str]:
        ids = set(self.routes)
        for r in self.routes.values():
            ids.update(str(k.get("id", "")) for k in r.peer.known_routes)
        return ids

    # --- handshake (RouteOwner) --------------------------------------------------------------

    def info_fields(self) -> dict[str, Any]:
        host = self.host
        cfg = self.host.config
        fields: dict[str, Any] = {
            "server_id": host.server_id,
            "server_name": host.name,
            "cluster": self.name,
            "version": jetraft.__version__,
            "route_url": self.advertise_url(),
            "connect_urls": [] if self.cfg.no_advertise else host.own_client_urls(),
            "jetstream": host.jetstream_enabled(),
            "tags": list(cfg.server_tags),
            "msg_batches": True,  # MSGS frames (route protocol)
            "answers": True,  # ANSWERS frames (route protocol)
            "pub_runs": True,  # PUBS frames (route protocol)
            "routes": [
                {"id": sid, "name": r.peer.name, "url": self._peer_route_url(r)}
                for sid, r in self.routes.items()
                if self._peer_route_url(r)
            ],
        }
        if host.lame_duck_mode():
            fields["ldm"] = True
        return fields

    def connect_fields(self, route: RouteConnection) -> dict[str, Any]:
        # The dialed URL's credentials, else those of our own cluster authorization.
        user, password = url_credentials(route.url)
        if not user:
            user, password = self.cfg.user, self.cfg.password
        return {
            "user": user,
            "pass": password,
            "cluster": self.name,
            "server_id": self.host.server_id,
            "server_name": self.host.name,
            "tls_required": self._client_tls is not None,
        }

    def check_connect(self, route: RouteConnection, fields: dict[str, Any]) -> str:
        if self.cfg.user:
            user, given = str(fields.get("user", "")), str(fields.get("pass", ""))
            if not hmac.compare_digest(user.encode(), self.cfg.user.encode()) or not (
                self._password_ok(given)
            ):
                return "Authorization Violation"
        return ""

    def _password_ok(self, given: str) -> bool:
        return password_matches(self.cfg.password, given, self._verified)

    def advertise_url(self) -> str:
        if self.cfg.advertise:
            adv = self.cfg.advertise
            return adv if "://" in adv else f"nats-route://{adv}"
        host = self.cfg.host
        if host in _UNSPECIFIED_HOSTS:
            host = ""
        return f"nats-route://{host}:{self.port}" if host else f"nats-route://:{self.port}"

    def _peer_route_url(self, route: RouteConnection) -> str:
        """Where others can dial this peer: its advertised URL, its host filled in from the
        connection when it listens on every interface."""
        url = route.peer.route_url
        if not url:
            return ""
        host, port = split_url(url)
        if host in _UNSPECIFIED_HOSTS:
            host = route.remote_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"nats-route://{host}:{port}"

    def route_info(self, route: RouteConnection, info: PeerInfo, first: bool) -> None:
        if not first:
            if route.ready:
                self._after_change(route)
            return
        if info.server_id == self.host.server_id:
            # A route to ourselves (nats-py's tests list every server, this one included).
            if route.solicited:
                self._url_ids[route.url] = info.server_id
            route.close("Route To Self")
            return
        if route.solicited:
            route.send(rp.encode_connect(self.connect_fields(route)))
            route.send(rp.encode_info(self.info_fields()))
        why = self._refusal(route, info)
        if why:
            log.error("route %r refused: %s", route, why)
            route.close(why, send_err=True)
            return
        if route.solicited:
            self._url_ids[route.url] = info.server_id
        old = self.routes.get(info.server_id)
        if old is not None:
            keep = self._pick(old, route)
            drop = route if keep is old else old
            drop.close("Duplicate Route")
            if keep is old:
                return
        self._ready(route)

    def _refusal(self, route: RouteConnection, info: PeerInfo) -> str:
        if info.cluster != self.name:
            return f"cluster name {info.cluster!r} does not match {self.name!r}"
        if info.name == self.host.name:
            return f"duplicate server name {info.name!r}"
        other = self.by_name.get(info.name)
        if other is not None and other.peer.server_id != info.server_id:
            return f"duplicate server name {info.name!r}"
        return ""

    def _pick(self, a: RouteConnection, b: RouteConnection) -> RouteConnection:
        """Of two routes to the same server, the one dialed by the server with the smaller
        id (both ends decide alike); between two dialed by the same server, the older."""
        me = self.host.server_id

        def dialer(r: RouteConnection) -> str:
            return me if r.solicited else r.peer.server_id

        da, db = dialer(a), dialer(b)
        if da == db:
            return a if a.started <= b.started else b
        return a if da < db else b

    def _ready(self, route: RouteConnection) -> None:
        self.pending.discard(route)
        route.ready = True
        peer = route.peer
        self.routes[peer.server_id] = route
        self.by_name[peer.name] = route
        log.info("Route connection to %s (%s) is up", peer.name, route.remote_host)
        for (acc, subject, queue), count in self._local.items():
            route.send(rp.encode_sub(acc, subject, queue, count if queue else 1))
        for listener in list(self._peer_listeners):
            listener(peer, True)
        self._after_change(route)
        self._broadcast_info()

    def _after_change(self, route: RouteConnection) -> None:
        self._refresh_client_urls()
        for known in route.peer.known_routes:
            sid, url = str(known.get("id", "")), str(known.get("url", ""))
            if sid and url and sid != self.host.server_id and sid not in self.routes:
                self._solicit(url, explicit=False)

    def _broadcast_info(self) -> None:
        frame = rp.encode_info(self.info_fields())
        for r in self.routes.values():
            r.send(frame)

    def broadcast_info(self) -> None:
        """Tell every route what changed about us (lame duck mode)."""
        self._broadcast_info()

    def _refresh_client_urls(self) -> None:
        urls: list[str] = []
        for r in self.routes.values():
            if r.peer.lame_duck:
                continue
            for u in r.peer.client_urls:
                host, _, port = u.rpartition(":")
                if host in _UNSPECIFIED_HOSTS:
                    # It listens on every interface: reach it where its route comes from.
                    u = f"{r.remote_host}:{port}"
                if u not in urls:
                    urls.append(u)
        if urls != self._client_urls:
            self._client_urls = urls
            self.host.route_client_urls_changed(list(urls))

    def route_closed(self, route: RouteConnection) -> None:
        self.pending.discard(route)
        sid = route.peer.server_id
        if not route.ready or self.routes.get(sid) is not route:
            return
        route.ready = False
        del self.routes[sid]
        if self.by_name.get(route.peer.name) is route:
            del self.by_name[route.peer.name]
        router = self.host.router
        for account, sub in route.subs.values():
            router.remove_subscription(account, sub)
        route.subs.clear()
        if not self._stopping:
            log.info("Route connection to %s closed: %s", route.peer.name, route.reason)
        for listener in list(self._peer_listeners):
            listener(route.peer, False)
        self._refresh_client_urls()
        if not self._stopping:
            self._broadcast_info()

    # --- interest ----------------------------------------------------------------------------

    def local_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        key = (account.name, sub.subject, sub.queue)
        count = self._local.get(key, 0) + (1 if added else -1)
        if count <= 0:
            self._local.pop(key, None)
            frame = rp.encode_unsub(account.name, sub.subject, sub.queue)
        else:
            self._local[key] = count
            if sub.queue is None and count > 1:
                return  # plain interest was already announced
            frame = rp.encode_sub(account.name, sub.subject, sub.queue, count if sub.queue else 1)
        for r in self.routes.values():
            r.send(frame)

    def remote_sub(self, route: RouteConnection, rs: rp.RSub) -> None:
        key = (rs.account, rs.subject, rs.queue)
        known = route.subs.get(key)
        if known is not None:
            known[1].weight = max(rs.weight, 1)
            return
        account = self.host.account_named(rs.account)
        if account is None:
            log.debug("route %r: interest in unknown account %s ignored", route, rs.account)
            return
        sub = Subscription(route, rs.subject, rs.queue, "")
        sub.weight = max(rs.weight, 1)
        route.subs[key] = (account, sub)
        self.host.router.add_subscription(account, sub)

    def remote_unsub(self, route: RouteConnection, ru: rp.RUnsub) -> None:
        known = route.subs.pop((ru.account, ru.subject, ru.queue), None)
        if known is not None:
            self.host.router.remove_subscription(*known)

    def remote_msg(self, route: RouteConnection, msg: rp.RMsg) -> None:
        account = self.host.account_named(msg.account)
        if account is None:
            return
        if msg.route_by is None and msgtrace.maybe_traced(msg.hdr):
            assert msg.hdr is not None
            msgtrace.deliver_traced_from_route(
                self.host.router, route, account, msg.subject, msg.reply, msg.hdr, msg.data,
                msg.queues, self.host.trace_server_info,
            )  # fmt: skip
            return
        self.host.router.deliver_from_route(
            account, msg.subject, msg.reply, msg.hdr, msg.data, msg.queues, msg.route_by
        )

    def remote_msgs(self, route: RouteConnection, msgs: rp.RMsgs) -> None:
        account = self.host.account_named(msgs.account)
        if account is None:
            return
        # The batch a client connection's parser would have made: one line per run.
        lines = []
        starts = [0]
        for hdr_len, count in msgs.runs:
            first = starts[-1]
            lines.append(pub_line(msgs.subject, msgs.reply, len(msgs.bodies[first]), hdr_len))
            starts.append(first + count)
        self._deliver_pubs(route, account, PubBatch(lines, starts, msgs.bodies))

    def remote_pubs(self, route: RouteConnection, pubs: rp.RPubs) -> None:
        account = self.host.account_named(pubs.account)
        if account is None:
            return
        lines = []
        starts = [0]
        bodies = pubs.bodies
        for subject, reply, hdr_len, count in pubs.runs:
            first = starts[-1]
            lines.append(pub_line(subject, reply, len(bodies[first]), hdr_len))
            starts.append(first + count)
        self._deliver_pubs(route, account, PubBatch(lines, starts, bodies))

    def _deliver_pubs(self, route: RouteConnection, account: Account, batch: PubBatch) -> None:
        router = self.host.router
        if not msgtrace.batch_traced(batch):
            router.deliver_pubs_from_route(account, batch)
            return
        for line, body in batch.messages():  # rare: a traced message among them
            hdr, data = split_body(line, body)
            if msgtrace.maybe_traced(hdr):
                assert hdr is not None
                msgtrace.deliver_traced_from_route(
                    router, route, account, line[0], line[1], hdr, data, (),
                    self.host.trace_server_info,
                )  # fmt: skip
            else:
                router.deliver_from_route(account, line[0], line[1], hdr, data, (), None)

    def remote_answers(self, route: RouteConnection, answers: rp.RAnswers) -> None:
        account = self.host.account_named(answers.account)
        if account is None:
            return
        self.host.router.deliver_answers_from_route(account, answers.subjects, answers.bodies)

    # --- RAFT --------------------------------------------------------------------------------

    def send_raft(self, to_server: str, group: str, data: bytes) -> None:
        self._raft_out.setdefault(to_server, []).append((group, data))
        if not self._raft_flush_scheduled:
            self._raft_flush_scheduled = True
            self.loop.call_soon(self._flush_raft)

    def flush_raft(self) -> None:
        if self._raft_out:
            self._flush_raft()

    def push_raft(self) -> None:
        """The RAFT messages batched so far, written to their routes' sockets now (not at
        the end of the loop turn): a follower's answers, before it applies entries."""
        for route in self._flush_raft():
            route.flush()

    def _flush_raft(self) -> list[RouteConnection]:
        self._raft_flush_scheduled = False
        out, self._raft_out = self._raft_out, {}
        sent = []
        for to, items in out.items():
            route = self.by_name.get(to)
            if route is not None:
                route.send(rp.encode_raft(items))
                sent.append(route)
        return sent

    def remote_raft(self, route: RouteConnection, items: list[tuple[str, bytes]]) -> None:
        receiver = self.raft_receiver
        if receiver is None:
            return
        frm = route.peer.name
        for group, data in items:
            receiver(frm, group, data)

    # --- monitoring --------------------------------------------------------------------------

    def routez(self) -> list[dict[str, Any]]:
        out = []
        for sid, r in sorted(self.routes.items()):
            out.append(
                {
                    "rid": r.rid,
                    "remote_id": sid,
                    "remote_name": r.peer.name,
                    "did_solicit": r.solicited,
                    "is_configured": r.solicited and r.url in self.cfg.routes,
                    "ip": r.remote_host,
                    "port": r.remote_port,
                    "pending_size": r.transport.get_write_buffer_size() if r.transport else 0,
                    "in_msgs": r.in_msgs,
                    "out_msgs": r.out_msgs,
                    "in_bytes": r.in_bytes,
                    "out_bytes": r.out_bytes,
                    "subscriptions": len(r.subs),
                }
            )
        return out
