"""Message tracing: a message published with a ``Nats-Trace-Dest`` header makes every
server it passes through publish one trace event to that subject, as nats-server 2.11 does.

An event says how the message came in (``in``: from a client or over a route), whether a
subject mapping changed its subject (``sm``), which stream took it (``js``) and where it
went out (``eg``: each client subscription, each route with the hop id the next server
will report). With ``Nats-Trace-Only: true`` the servers report where the message would
have gone without delivering it to clients or storing it; it still crosses routes, so the
servers behind them report too.

Tracing is rare and costs the hot paths only a byte search in header blocks: a traced
message leaves the batched paths and is routed here, one message at a time, by the rules
of ``Router.route_message`` and ``Router.deliver_from_route`` with an event per decision.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from jetraft.jetstream.models import format_time
from jetraft.protocol.client import PubBatch
from jetraft.protocol.headers import HeaderError, encode_headers, parse_headers
from jetraft.protocol.subjects import is_valid_subject
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.imports import StreamForwarder
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Publisher, Router, RouteSubscriber

log = logging.getLogger("jetraft.msgtrace")

TRACE_DEST = "Nats-Trace-Dest"
TRACE_ONLY = "Nats-Trace-Only"
TRACE_HOP = "Nats-Trace-Hop"
# Set by servers before 2.11's final protocol; a message carrying it is not traced.
TRACE_ORIGIN_ACCOUNT = "Nats-Trace-Origin-Account"
# Not a valid subject: written over the destination of a message that must not be traced
# (again), e.g. one stored by a stream and delivered later to a consumer.
DEST_DISABLED = "trace disabled"
MARK = TRACE_DEST.encode()

# nats-server's connection kinds, as events report them.
KIND_CLIENT = 0
KIND_ROUTER = 1

NO_ECHO = "Not delivered because of no echo"
SUB_DENIED = "Not delivered because subscription denies this subject"
CLIENT_CLOSED = "Not delivered because client is closed"

ServerInfo = Callable[[], dict[str, Any]]


class Sender(Publisher, Protocol):
    """The publishing client connection, as tracing needs it."""

    @property
    def cid(self) -> int: ...

    @property
    def name(self) -> str: ...


def maybe_traced(hdr: bytes | None) -> bool:
    """The cheap test of the hot paths; ``begin`` decides."""
    return hdr is not None and MARK in hdr


def batch_traced(batch: PubBatch) -> bool:
    """Does any publish of ``batch`` carry the trace header? (Only header blocks are read.)"""
    return batch.headers_contain(MARK)


def set_header(hdr: bytes, name: str, value: str) -> bytes:
    """``hdr`` with the first ``name`` header set to ``value`` (added when missing)."""
    lines = hdr.split(b"\r\n")
    key = name.encode()
    for i in range(1, len(lines)):
        head, sep, _ = lines[i].partition(b":")
        if sep and head == key:
            lines[i] = key + b": " + value.encode()
            return b"\r\n".join(lines)
    # The block ends with an empty line: b"...\r\n\r\n" splits into [..., b"", b""].
    return b"\r\n".join([*lines[:-2], key + b": " + value.encode(), b"", b""])


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), which the snappy framing format checks its chunks with."""
    crc = 0xFFFFFFFF
    table = _CRC32C
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def snappy_frame(data: bytes) -> bytes:
    """``data`` in the snappy framing format, as uncompressed chunks: any snappy (or S2)
    stream reader takes it, and a trace event is small enough not to need compressing."""
    out = [b"\xff\x06\x00\x00sNaPpY"]
    for i in range(0, max(len(data), 1), 65536):
        chunk = data[i : i + 65536]
        crc = crc32c(chunk)
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        out.append(b"\x01" + (len(chunk) + 4).to_bytes(3, "little"))
        out.append(masked.to_bytes(4, "little") + chunk)
    return b"".join(out)


class MsgTrace:
    """The event one server builds for one traced message, and its hop bookkeeping."""

    def __init__(
        self,
        account: Account,
        dest: str,
        only: bool,
        hop: str,
        header: dict[str, list[str]],
        size: int,
        encoding: str,
    ) -> None:
        self.account = account
        self.dest = dest
        self.only = only
        self.hop = hop  # this server's hop id ("" at the origin)
        self.header = header
        self.size = size
        self.encoding = encoding  # "gzip", "snappy" or "" (Accept-Encoding)
        self.hops = 0
        self.events: list[dict[str, Any]] = []

    def _add(self, kind: str, fields: dict[str, Any]) -> None:
        self.events.append({"type": kind, "ts": format_time(time.time_ns()), **fields})

    def ingress(self, kind: int, cid: int, name: str, subject: str, error: str = "") -> None:
        fields: dict[str, Any] = {"kind": kind, "cid": cid}
        if name:
            fields["name"] = name
        fields["acc"] = self.account.name
        fields["subj"] = subject
        if error:
            fields["error"] = error
        self._add("in", fields)

    def ingress_error(self, error: str) -> None:
        if self.events and self.events[0]["type"] == "in":
            self.events[0]["error"] = error

    def mapped(self, subject: str) -> None:
        self._add("sm", {"to": subject})

    def jetstream(self, stream: str, subject: str) -> None:
        self._add("js", {"stream": stream, "subject": subject})

    def stream_export(self, account: str, subject: str) -> None:
        self._add("se", {"acc": account, "to": subject})

    def client_egress(self, conn: Sender, sub: Subscription, error: str = "") -> None:
        fields: dict[str, Any] = {"kind": KIND_CLIENT, "cid": conn.cid}
        if conn.name:
            fields["name"] = conn.name
        if conn.account is not self.account:  # reached through an import
            fields["acc"] = conn.account.name
        fields["sub"] = sub.subject
        if sub.queue:
            fields["queue"] = sub.queue
        if error:
            fields["error"] = error
        self._add("eg", fields)

    def route_egress(self, rid: int, name: str) -> str:
        """Record the message leaving over a route; returns the hop id the next server
        reports (``Nats-Trace-Hop``)."""
        self.hops += 1
        hop = f"{self.hop}.{self.hops}" if self.hop else str(self.hops)
        fields: dict[str, Any] = {"kind": KIND_ROUTER, "cid": rid}
        if name:
            fields["name"] = name
        fields["hop"] = hop
        self._add("eg", fields)
        return hop

    def body(self, server: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"server": server, "request": {"header": self.header}}
        if self.size:
            out["request"]["msgsize"] = self.size
        if self.hops:
            out["hops"] = self.hops
        out["events"] = self.events
        return out

    def send(self, router: Router, server_info: ServerInfo) -> None:
        """Publish the event to the trace destination, in the traced message's account."""
        data = json.dumps(self.body(server_info()), separators=(",", ":")).encode()
        hdr = None
        if self.encoding:
            data = gzip.compress(data) if self.encoding == "gzip" else snappy_frame(data)
            hdr = encode_headers({"Content-Encoding": self.encoding})
        router.route_message(None, self.account, self.dest, None, hdr, data)


class Start:
    """What ``begin`` decided: ``trace`` (None: not traced), the header block to route
    with (rewritten when tracing was refused), and ``drop`` (route nothing at all)."""

    __slots__ = ("drop", "hdr", "trace")

    def __init__(self, trace: MsgTrace | None, hdr: bytes, drop: bool) -> None:
        self.trace = trace
        self.hdr = hdr
        self.drop = drop


def begin(hdr: bytes, account: Account, size: int, from_route: bool) -> Start:
    """Start tracing a message whose header block has ``Nats-Trace-Dest``, as nats-server
    decides it: a disabled or invalid destination means no trace (and, for a trace-only
    message, no delivery either, so that a badly traced message reaches nobody)."""
    try:
        items = parse_headers(hdr).items
    except HeaderError:
        return Start(None, hdr, False)
    header: dict[str, list[str]] = {}
    for name, value in items:
        if value:
            header.setdefault(name, []).append(value)

    def first(name: str) -> str:
        values = header.get(name)
        return values[0] if values else ""

    only = first(TRACE_ONLY).lower() in ("1", "true", "on")
    dest = first(TRACE_DEST)
    if dest == DEST_DISABLED:
        return Start(None, hdr, False)
    if not dest:
        return Start(None, hdr, only)
    origin = first(TRACE_ORIGIN_ACCOUNT)
    if origin:
        log.error(
            "message tracing disabled because of header %r with value=%r",
            TRACE_ORIGIN_ACCOUNT,
            origin,
        )
        return Start(None, hdr if only else set_header(hdr, TRACE_DEST, DEST_DISABLED), only)
    if not is_valid_subject(dest) or "*" in dest.split(".") or ">" in dest.split("."):
        log.error("destination %r is not valid, won't be able to trace events", dest)
        return Start(None, hdr, only)
    # nats-server's choice: snappy (or its S2) before gzip; anything else is not encoded.
    accept = first("Accept-Encoding").lower()
    encoding = (
        "snappy" if "snappy" in accept or "s2" in accept else "gzip" if "gzip" in accept else ""
    )
    trace = MsgTrace(
        account,
        dest,
        only,
        first(TRACE_HOP) if from_route else "",
        header,
        size,
        encoding,
    )
    return Start(trace, hdr, False)


# --- routing ---------------------------------------------------------------------------------


def _to_internal(
    trace: MsgTrace,
    conn: InternalClient,
    sub: Subscription,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
) -> bool:
    """A server component takes the message: a stream's intake reports it (and, tracing
    only, takes nothing); any other component gets it as nats-server's do."""
    if conn.stream:
        trace.jetstream(conn.stream, subject)
        if trace.only:
            return True
        # Stored with tracing disabled: its later deliveries must not trace again.
        hdr = set_header(hdr, TRACE_DEST, DEST_DISABLED)
    return conn.deliver(sub, subject, reply, hdr, data)


def _to_local(
    trace: MsgTrace,
    sub: Subscription,
    skip: object,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
) -> bool:
    conn = sub.conn
    if isinstance(conn, InternalClient):
        return _to_internal(trace, conn, sub, subject, reply, hdr, data)
    if not hasattr(conn, "cid"):
        # Another server-side owner (an import's response relay): no connection to report.
        return conn.deliver(sub, subject, reply, hdr, data)
    client = cast(Sender, conn)
    if conn is skip:
        trace.client_egress(client, sub, NO_ECHO)
        return False
    if conn.closed:
        trace.client_egress(client, sub, CLIENT_CLOSED)
        return False
    if trace.only:
        trace.client_egress(client, sub)
        return True
    if conn.deliver(sub, subject, reply, hdr, data):
        trace.client_egress(client, sub)
        return True
    trace.client_egress(client, sub, SUB_DENIED)
    return False


def _queue(
    rng_pick: Callable[[int], int],
    trace: MsgTrace,
    members: tuple[Subscription, ...],
    skip: object,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
) -> RouteSubscriber | bool:
    """One member of a queue group: True when a local one took it, the route to forward it
    to when only remote members are left, False when nobody can take it."""
    n = len(members)
    start = rng_pick(n)
    route: RouteSubscriber | None = None
    for i in range(n):
        sub = members[(start + i) % n]
        conn = sub.conn
        if conn.is_route:
            route = route or cast(RouteSubscriber, conn)
        elif (
            conn is not skip
            and not conn.closed
            and _to_local(trace, sub, None, subject, reply, hdr, data)
        ):
            return True
    return route if route is not None else False


def _forward(
    router: Router,
    trace: MsgTrace,
    remote: dict[RouteSubscriber, list[str]],
    account: Account,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
) -> None:
    for route, queues in remote.items():
        if isinstance(route, StreamForwarder):
            _cross_stream_import(router, trace, route, subject, reply, hdr, data)
            continue
        peer = getattr(route, "peer", None)
        if peer is None:
            # Another owner standing for interest on this server (a service import's
            # forwarder): it passes the message on as it would an untraced one.
            route.forward(account, subject, reply, hdr, data, queues, None)
            continue
        hop = trace.route_egress(getattr(route, "rid", 0), getattr(peer, "name", ""))
        route.forward(account, subject, reply, set_header(hdr, TRACE_HOP, hop), data, queues, None)


def _cross_stream_import(
    router: Router,
    trace: MsgTrace,
    forwarder: StreamForwarder,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
) -> None:
    """The message crosses a stream import (``se``) and is routed, still traced, in the
    importing account under the mapped subject."""
    mapped = forwarder.mapped_subject(subject)
    if mapped is None or not forwarder.enter():
        return
    try:
        trace.stream_export(forwarder.target.name, mapped)
        _route_in(router, forwarder.target, None, mapped, reply, hdr, data, trace)
    finally:
        forwarder.leave()


def _route_in(
    router: Router,
    account: Account,
    skip: object,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
    trace: MsgTrace,
) -> int:
    """``Router.route_message``'s delivery of a traced message in ``account``; returns how
    many receivers took it."""
    size = len(hdr) + len(data)
    account.stats.in_msgs += 1
    account.stats.in_bytes += size
    match = account.sublist.match(subject)
    remote: dict[RouteSubscriber, list[str]] = {}
    delivered = 0
    for sub in match.plain:
        if sub.conn.is_route:
            remote.setdefault(cast(RouteSubscriber, sub.conn), [])
        elif _to_local(trace, sub, skip, subject, reply, hdr, data):
            delivered += 1
    pick = router.pick_index
    for members in match.queues:
        chosen = _queue(pick, trace, members, skip, subject, reply, hdr, data)
        if chosen is True:
            delivered += 1
        elif chosen is not False:
            remote.setdefault(chosen, []).append(members[0].queue or "")
    _forward(router, trace, remote, account, subject, reply, hdr, data)
    delivered += len(remote)
    if delivered and not trace.only:
        account.stats.out_msgs += delivered
        account.stats.out_bytes += size * delivered
    return delivered


def route_traced(
    router: Router,
    sender: Sender,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
    trace: MsgTrace,
    server_info: ServerInfo,
) -> None:
    """``Router.route_message`` for a traced message a client published here; then the
    event goes out."""
    skip: object = sender if not sender.echo else None
    delivered = _route_in(router, sender.account, skip, subject, reply, hdr, data, trace)
    if not delivered and reply and sender.no_responders:
        router.no_responders(sender, subject, reply)
    trace.send(router, server_info)


def deliver_traced_from_route(
    router: Router,
    route: object,
    account: Account,
    subject: str,
    reply: str | None,
    hdr: bytes,
    data: bytes,
    queues: tuple[str, ...] | list[str],
    server_info: ServerInfo,
) -> None:
    """``Router.deliver_from_route`` for a traced message: local subscribers only, and of
    the queue groups those the sending server picked this one for; then this server's
    event goes out."""
    start = begin(hdr, account, len(hdr) + len(data), from_route=True)
    trace = start.trace
    if trace is None:
        if not start.drop:
            router.deliver_from_route(account, subject, reply, start.hdr, data, queues, None)
        return
    peer = getattr(route, "peer", None)
    trace.ingress(KIND_ROUTER, getattr(route, "rid", 0), getattr(peer, "name", ""), subject)
    account.stats.in_msgs += 1
    account.stats.in_bytes += len(hdr) + len(data)
    match = account.sublist.match(subject)
    for sub in match.plain:
        if not sub.conn.is_route:
            _to_local(trace, sub, None, subject, reply, hdr, data)
    if queues and match.queues:
        wanted = set(queues)
        pick = router.pick_index
        for members in match.queues:
            local = tuple(m for m in members if not m.conn.is_route)
            if local and members[0].queue in wanted:
                _queue(pick, trace, local, None, subject, reply, hdr, data)
    trace.send(router, server_info)
