"""One route: a connection to another server of the cluster.

The accepting side speaks first (INFO); the dialer answers with CONNECT (credentials,
identity) and its own INFO. A route is *ready* once both sides know each other and the
accepting side has checked the credentials; only then does it carry interest, messages
and RAFT traffic. The mesh (``mesh.RouteMesh``) decides whether a ready route is kept
(cluster name, duplicate names, duplicate routes) and owns everything cluster-wide; this
class is the socket, the parser and the per-peer state.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from jetraft.protocol import route as rp
from jetraft.protocol.client import PubBatch, split_body
from jetraft.server.core.accounts import Account, Subscription

log = logging.getLogger("jetraft.route")

# Frames are written once per loop turn, or earlier once this many bytes are waiting.
_FLUSH_BYTES = 256 * 1024
# Route connection ids (nats-server's rid): /routez and message traces name routes by them.
_RIDS = itertools.count(1)


@dataclass(slots=True)
class PeerInfo:
    """What a route's INFO told us about the server at the other end."""

    server_id: str = ""
    name: str = ""
    cluster: str = ""
    route_url: str = ""  # where other servers can dial it ("" when it did not say)
    client_urls: list[str] = field(default_factory=list)
    jetstream: bool = False
    tags: list[str] = field(default_factory=list)
    known_routes: list[dict[str, str]] = field(default_factory=list)  # gossip
    lame_duck: bool = False
    version: str = ""
    msg_batches: bool = False  # understands MSGS frames
    answers: bool = False  # understands ANSWERS frames
    pub_runs: bool = False  # understands PUBS frames

    @classmethod
    def from_fields(cls, f: dict[str, Any]) -> PeerInfo:
        def strs(key: str) -> list[str]:
            v = f.get(key) or []
            return [str(x) for x in v] if isinstance(v, list) else []

        known = f.get("routes")
        gossip = [r for r in known if isinstance(r, dict)] if isinstance(known, list) else []
        return cls(
            server_id=str(f.get("server_id", "")),
            name=str(f.get("server_name", "")),
            cluster=str(f.get("cluster", "")),
            route_url=str(f.get("route_url", "")),
            client_urls=strs("connect_urls"),
            jetstream=bool(f.get("jetstream", False)),
            tags=strs("tags"),
            known_routes=gossip,
            lame_duck=bool(f.get("ldm", False)),
            version=str(f.get("version", "")),
            msg_batches=f.get("msg_batches") is True,
            answers=f.get("answers") is True,
            pub_runs=f.get("pub_runs") is True,
        )


class RouteOwner(Protocol):
    """What a route needs from the mesh."""

    def info_fields(self) -> dict[str, Any]: ...

    def connect_fields(self, route: RouteConnection) -> dict[str, Any]: ...

    def check_connect(self, route: RouteConnection, fields: dict[str, Any]) -> str:
        """"" to accept the dialer's CONNECT, else the reason to refuse it."""
        ...

    def route_info(self, route: RouteConnection, info: PeerInfo, first: bool) -> None:
        """The peer's first INFO (the route may become ready) or a later update. The
        dialer answers the first one with CONNECT and its own INFO."""
        ...

    def route_closed(self, route: RouteConnection) -> None: ...

    def remote_sub(self, route: RouteConnection, sub: rp.RSub) -> None: ...

    def remote_unsub(self, route: RouteConnection, unsub: rp.RUnsub) -> None: ...

    def remote_msg(self, route: RouteConnection, msg: rp.RMsg) -> None: ...

    def remote_msgs(self, route: RouteConnection, msgs: rp.RMsgs) -> None: ...

    def remote_answers(self, route: RouteConnection, answers: rp.RAnswers) -> None: ...

    def remote_pubs(self, route: RouteConnection, pubs: rp.RPubs) -> None: ...

    def remote_raft(self, route: RouteConnection, items: list[tuple[str, bytes]]) -> None: ...

    def flush_raft(self) -> None:
        """Put the RAFT messages batched so far on their routes now."""
        ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def max_pending(self) -> int: ...

    @property
    def auth_timeout_s(self) -> float: ...


class RouteConnection(asyncio.Protocol):
    is_route = True
    frames_answers = False

    def __init__(self, owner: RouteOwner, *, solicited: bool, url: str = "") -> None:
        self.owner = owner
        self.rid = next(_RIDS)
        self.solicited = solicited
        self.url = url  # the URL we dialed (solicited routes)
        self.peer = PeerInfo()
        self.transport: asyncio.Transport | None = None
        self.remote_host = ""
        self.remote_port = 0
        self.parser = rp.RouteParser()
        self.authed = solicited  # the accepting side checks CONNECT first
        self.got_info = False
        self.ready = False  # accepted by the mesh: carries traffic
        self.closed = False
        self.reason = ""
        self.started = time.time()
        self.last_activity = self.started
        self.pings_out = 0
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        # (account, subject, queue) -> subscription standing for the peer's interest
        self.subs: dict[tuple[str, str, str | None], tuple[Account, Subscription]] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._auth_timer: asyncio.TimerHandle | None = None
        self.done: asyncio.Future[None] = owner.loop.create_future()

    def __repr__(self) -> str:
        who = self.peer.name or self.peer.server_id or f"{self.remote_host}:{self.remote_port}"
        return f"<route {who} {'out' if self.solicited else 'in'}>"

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.remote_host, self.remote_port = str(peer[0]), int(peer[1])
        if not self.solicited:
            self.send(rp.encode_info(self.owner.info_fields()))
            self._auth_timer = self.owner.loop.call_later(
                self.owner.auth_timeout_s, self._auth_timeout
            )

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        try:
            events = self.parser.feed(data)
        except rp.RouteProtocolError as exc:
            log.warning("%r: %s", self, exc)
            self.close(f"Protocol Error: {exc}", send_err=True)
            return
        self._handle(events)

    def _handle(self, events: list[rp.Event]) -> None:
        for ev in events:
            if self.closed:  # an event closed the route: the rest is dropped
                return
            self._dispatch(ev)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed_now(self.reason or "Connection Closed")

    # --- events ------------------------------------------------------------------------------

    def _dispatch(self, ev: rp.Event) -> None:
        owner = self.owner
        if isinstance(ev, rp.RMsg):
            if self.ready:
                self.in_msgs += 1
                self.in_bytes += len(ev.data) + (len(ev.hdr) if ev.hdr else 0)
                owner.remote_msg(self, ev)
        elif isinstance(ev, rp.RMsgs):
            if self.ready:
                self.in_msgs += len(ev.bodies)
                self.in_bytes += sum(map(len, ev.bodies))
                owner.remote_msgs(self, ev)
        elif isinstance(ev, rp.RPubs):
            if self.ready:
                self.in_msgs += len(ev.bodies)
                self.in_bytes += sum(map(len, ev.bodies))
                owner.remote_pubs(self, ev)
        elif isinstance(ev, rp.RaftBatch):
            if self.ready:
                owner.remote_raft(self, ev.items)
        elif isinstance(ev, rp.RAnswers):
            if self.ready:
                self.in_msgs += len(ev.bodies)
                self.in_bytes += sum(map(len, ev.bodies))
                owner.remote_answers(self, ev)
        elif isinstance(ev, rp.RSub):
            if self.ready:
                owner.remote_sub(self, ev)
        elif isinstance(ev, rp.RUnsub):
            if self.ready:
                owner.remote_unsub(self, ev)
        elif isinstance(ev, rp.Ping):
            self.send(rp.PONG_FRAME)
        elif isinstance(ev, rp.Pong):
            self.pings_out = 0
        elif isinstance(ev, rp.Connect):
            self._on_connect(ev.fields)
        elif isinstance(ev, rp.Info):
            self._on_info(ev.fields)
        elif isinstance(ev, rp.Err):
            log.warning("%r: peer refused the route: %s", self, ev.reason)
            self.reason = ev.reason
            self.close(ev.reason)

    def _on_connect(self, fields: dict[str, Any]) -> None:
        if self.solicited or self.authed:
            return
        why = self.owner.check_connect(self, fields)
        if why:
            log.warning("%r: refused: %s", self, why)
            self.close(why, send_err=True)
            return
        self.authed = True
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None

    def _on_info(self, fields: dict[str, Any]) -> None:
        if not self.authed:
            self.close("Authorization Violation", send_err=True)
            return
        first = not self.got_info
        self.got_info = True
        self.peer = PeerInfo.from_fields(fields)
        self.owner.route_info(self, self.peer, first)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.authed and not self.closed:
            self.close("Authentication Timeout", send_err=True)

    # --- writing -----------------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        if self.closed:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.owner.loop.call_soon(self.flush)
        if self._out_bytes > _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._out or self.transport is None or self.closed:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_bytes = 0
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > self.owner.max_pending:
            # The peer stopped reading (paused or cut off): drop the route rather than
            # buffer without bound; it is dialed again and RAFT catches up.
            log.warning("%r: peer is not reading (slow route), closing", self)
            self.close("Slow Consumer (Pending Bytes)")

    # --- Subscriber (interest standing for the peer's clients) --------------------------------

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        # The router forwards to routes itself (``forward``), once per route.
        return False

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        return 0  # as ``deliver``: the router forwards to routes itself

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        return 0, 0  # as ``deliver``: the router forwards to routes itself

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        return 0, 0  # as ``deliver``: the router forwards to routes itself

    def forward(
        self,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        queues: Sequence[str],
        route_by: str | None,
    ) -> None:
        self.out_msgs += 1
        self.out_bytes += len(data) + (len(hdr) if hdr else 0)
        # RAFT messages produced before this message leave before it: a PubAck must not
        # overtake the news that its entry is committed (followers serve reads).
        self.owner.flush_raft()
        self.send(rp.encode_msg(account.name, subject, reply, route_by, list(queues), hdr, data))

    def forward_run(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        """Send runs of client publishes on one subject with one reply (``Router.route_pubs``
        splits its groups by reply) for the peer's plain subscribers: one MSGS frame, or one
        MSG each for an older peer."""
        line0 = batch.lines[first]
        subject, reply = line0[0], line0[1]
        if not self.peer.msg_batches:
            for line, body in batch.messages(first, stop):
                hdr, data = split_body(line, body)
                self.forward(account, subject, reply, hdr, data, (), None)
            return
        starts = batch.starts
        bodies = batch.bodies[starts[first] : starts[stop]]
        runs = [(batch.lines[r][3], starts[r + 1] - starts[r]) for r in range(first, stop)]
        self.out_msgs += len(bodies)
        self.out_bytes += sum(map(len, bodies))
        self.owner.flush_raft()  # as in ``forward``: RAFT messages produced before go first
        self.send(rp.encode_msgs(account.name, subject, reply, runs, bodies))

    def forward_runs(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        """Send runs of client publishes whose subjects and replies may differ (a group of
        ``Router.route_pubs``) for the peer's plain subscribers: one PUBS frame, or one
        frame per stretch of one subject and one reply for an older peer."""
        lines = batch.lines
        if self.peer.pub_runs and stop - first > 1:
            starts = batch.starts
            runs = [
                (lines[r][0], lines[r][1], lines[r][3], starts[r + 1] - starts[r])
                for r in range(first, stop)
            ]
            bodies = batch.bodies[starts[first] : starts[stop]]
            self.out_msgs += len(bodies)
            self.out_bytes += sum(map(len, bodies))
            self.owner.flush_raft()  # as in ``forward``: RAFT messages produced before go first
            self.send(rp.encode_pubs(account.name, runs, bodies))
            return
        a = first
        while a < stop:
            subject, reply = lines[a][0], lines[a][1]
            b = a + 1
            while b < stop and lines[b][1] is reply and lines[b][0] is subject:
                b += 1
            self.forward_run(account, batch, a, b)
            a = b

    def forward_answers(self, account: Account, subjects: list[str], bodies: list[bytes]) -> None:
        """Answers of server components (no reply, no headers) for the peer's plain
        subscribers: one ANSWERS frame, or one MSG each for an older peer."""
        if not self.peer.answers:
            for subject, data in zip(subjects, bodies, strict=True):
                self.forward(account, subject, None, None, data, (), None)
            return
        self.out_msgs += len(bodies)
        self.out_bytes += sum(map(len, bodies))
        self.owner.flush_raft()  # as in ``forward``: RAFT messages produced before go first
        self.send(rp.encode_answers(account.name, subjects, bodies))

    # --- closing -----------------------------------------------------------------------------

    def close(self, reason: str = "Route Closed", send_err: bool = False) -> None:
        if self.closed:
            return
        self.reason = self.reason or reason
        if send_err:
            self.send(rp.encode_err(reason))
        self.flush()
        if self.transport is not None:
            self.transport.close()
        self._closed_now(reason)

    def _closed_now(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.reason = self.reason or reason
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self._out.clear()
        self.owner.route_closed(self)
        if not self.done.done():
            self.done.set_result(None)
