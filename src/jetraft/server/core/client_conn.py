"""One client connection: bytes in through the sans-I/O parser, frames out through a buffer
flushed once per event-loop turn.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from jetraft.config import ServerConfig
from jetraft.protocol import client as proto
from jetraft.protocol.subjects import is_valid_filter, is_valid_subject
from jetraft.server.core import msgtrace, proto_trace
from jetraft.server.core.accounts import (
    Account,
    Subscription,
    deliver_each,
    deliver_replies_each,
)
from jetraft.server.core.auth import Authenticator, ConnectInfo, Permissions, User
from jetraft.server.core.reply_permits import ReplyPermits
from jetraft.server.core.router import Router
from jetraft.server.core.tls import peer_certificate

log = logging.getLogger("jetraft.client")

# Frames are written at the end of each loop turn, or earlier once this many bytes are waiting,
# so one big read from a publisher does not pile up unbounded before the first write.
_FLUSH_BYTES = 256 * 1024
# A header block with this in it may be traced (``msgtrace``): such publishes go one by one.
_TRACE_MARK: Final = msgtrace.MARK
# Up to this many buffered pieces are written as they are (writelines), more are joined first.
_WRITELINES_MAX = 8
_HDR_LEN = operator.itemgetter(3)  # of a PubLine: -1 for PUB


@dataclass(slots=True)
class ServerStats:
    slow_consumers: int = 0
    total_connections: int = 0
    auth_failures: int = 0


class ClientHost(Protocol):
    """What a client connection needs from its server (``server.Server`` provides it)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def router(self) -> Router: ...

    @property
    def stats(self) -> ServerStats: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def client_opened(self, conn: ClientConnection) -> None: ...

    def client_bound(self, conn: ClientConnection) -> None: ...

    def client_closed(self, conn: ClientConnection) -> None: ...

    def trace_server_info(self) -> dict[str, Any]:
        """The ``server`` block of this server's message trace events."""
        ...


class ClientConnection(asyncio.Protocol):
    """The server's side of one client. Created by the listener, owned by the Server."""

    is_route = False
    frames_answers = True  # only auto-unsubscribe changes interest; deliver_answers sees it

    def __init__(self, server: ClientHost, cid: int) -> None:
        self.server = server
        self.cid = cid
        opts = server.config
        self.parser = proto.ClientParser(self, opts.max_control_line, opts.max_payload)
        self.transport: asyncio.Transport | None = None
        self.account: Account = server.auth.global_account()
        self.user: User | None = None
        self.perms: Permissions | None = None
        self.subs: dict[str, Subscription] = {}
        self.connected = False  # CONNECT accepted
        self.closed = False
        self.echo = True
        self.protocol = 0  # 1: understands async INFO (cluster changes, lame duck mode)
        self.verbose = False
        self.pedantic = False
        self.headers = False
        self.no_responders = False
        self.name = ""
        self.lang = ""
        self.version = ""
        self.host = ""
        self.port = 0
        self.start = time.time()
        self.last_activity = self.start
        self.pings_out = 0
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._max_pending = opts.max_pending
        self._call_soon = server.loop.call_soon
        self._route = server.router.route_message
        self._route_pubs = server.router.route_pubs
        self._plain = False  # connected, no permissions, not pedantic, not verbose: fast publish
        self.trace = opts.trace  # the protocol trace log (``proto_trace``)
        self._flush_scheduled = False
        self.reply_permits = ReplyPermits()  # allow_responses
        self._auth_timer: asyncio.TimerHandle | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._max_subs = opts.max_subscriptions  # 0: no limit
        self._max_payload_user = -1
        # The nonce nkey and JWT users sign (INFO ``nonce``), as nats-server: random, base64url.
        self.nonce = secrets.token_urlsafe(11) if server.auth.nonce_required else ""
        self.reason = ""

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but have the same methods.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host, self.port = str(peer[0]), int(peer[1])
        self.server.client_opened(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        try:
            self.parser.feed(data)
        except proto.ProtocolError as exc:
            self.fatal(exc.text)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._plain = False
        self.server.client_closed(self)

    # --- writing ---------------------------------------------------------------------------

    def enqueue(self, frame: bytes) -> None:
        """Buffer a frame; everything buffered this loop turn leaves in one write."""
        if self.closed:
            return
        if self.trace:
            proto_trace.outgoing(self, frame)
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._call_soon(self.flush)
        if self._out_bytes > _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Hand buffered frames to the transport. What the peer has not read yet stays in the
        transport's buffer; more than max_pending there makes this a slow consumer."""
        self._flush_scheduled = False
        if not self._out or self.transport is None or self.closed:
            return
        out = self._out
        if len(out) <= _WRITELINES_MAX:
            # A few pieces (runs of messages joined already): handed over without one more
            # copy (uvloop writes them with one writev).
            self.transport.writelines(out)
        else:
            self.transport.write(b"".join(out))
        out.clear()
        self._out_bytes = 0
        if self.transport.get_write_buffer_size() > self._max_pending:
            self.slow_consumer()

    def pending_bytes(self) -> int:
        buffered = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._out_bytes + buffered

    def slow_consumer(self) -> None:
        if self.closed:
            return
        self.server.stats.slow_consumers += 1
        log.warning("slow consumer detected, closing client %d", self.cid)
        self._out.clear()
        self._out_bytes = 0
        self.close("Slow Consumer (Pending Bytes)")

    def send_err(self, text: str) -> None:
        self.enqueue(proto.encode_err(text))

    def fatal(self, text: str) -> None:
        """-ERR then close, like nats-server for protocol violations."""
        log.debug("client %d: %s", self.cid, text)
        self.send_err(text)
        self.close(text)

    def close(self, reason: str = "Client Closed") -> None:
        if self.closed:
            return
        self.reason = self.reason or reason
        self.flush()
        self.closed = True
        self._plain = False
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self.transport is not None:
            self.transport.close()
        self.server.client_closed(self)

    # --- events ----------------------------------------------------------------------------

    # The parser calls these (jetraft.protocol.client.Handler). A fatal violation raises
    # ProtocolError, which stops the parser and closes the connection in data_received.

    def _require_auth(self) -> None:
        if not self.connected and self.server.auth.required:
            raise proto.ProtocolError("Authorization Violation")

    def on_connect(self, options: dict[str, Any]) -> bool:
        if self.trace:
            proto_trace.connect(self, options)
        return self._connect(options)

    def on_pubs(self, batch: proto.PubBatch) -> None:
        if self._plain and not batch.headers_contain(_TRACE_MARK):
            # The common case: an authenticated client with no permissions, pedantic or verbose
            # (HPUB without headers support is refused by the parser): the whole read at once.
            self.in_msgs += len(batch.bodies)
            self.in_bytes += self._route_pubs(self, self.account, batch)
            return
        for line, body in batch.messages():
            hdr, payload = proto.split_body(line, body)
            self.on_pub(line[0], line[1], hdr, payload)

    def on_pub(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload) if hdr is None else len(payload) + len(hdr)
        if self.trace:
            proto_trace.publish(self, subject, reply, hdr, payload)
        if self.closed:
            return
        if not self.connected:
            self._require_auth()
        self._pub(subject, reply, hdr, payload)

    def on_sub(self, subject: str, queue: str | None, sid: str) -> None:
        if self.trace:
            proto_trace.sub(self, subject, queue, sid)
        self._require_auth()
        self._sub(subject, queue, sid)

    def on_unsub(self, sid: str, max_msgs: int | None) -> None:
        if self.trace:
            proto_trace.unsub(self, sid, max_msgs)
        self._require_auth()
        self._unsub(sid, max_msgs)

    def on_ping(self) -> None:
        if self.trace:
            proto_trace.incoming(self, "PING")
        self._require_auth()
        self.enqueue(proto.PONG_FRAME)

    def on_pong(self) -> None:
        if self.trace:
            proto_trace.incoming(self, "PONG")
        self.pings_out = 0

    def _connect(self, o: dict[str, Any]) -> bool:
        """Apply a CONNECT. Returns True when authentication continues in a thread."""
        if self.connected:
            return False
        protocol = o.get("protocol", 0)
        if not isinstance(protocol, int) or not 0 <= protocol <= 1:
            raise proto.ProtocolError("invalid client protocol")
        self.protocol = protocol
        self.verbose = bool(o.get("verbose", False))
        self.pedantic = bool(o.get("pedantic", False))
        self.echo = bool(o.get("echo", True))
        self.headers = bool(o.get("headers", False))
        self.no_responders = bool(o.get("no_responders", False))
        if self.no_responders and not self.headers:
            raise proto.ProtocolError("no responders requires headers support")
        if not self.headers:
            self.parser.refuse_headers()
        self.name = str(o.get("name", ""))
        self.lang = str(o.get("lang", ""))
        self.version = str(o.get("version", ""))
        auth = self.server.auth
        info = ConnectInfo(self.nonce.encode(), peer_certificate(self.transport), self.host)
        if auth.needs_slow_check(o):
            # bcrypt takes ~0.2 s: check in a thread, park the parser, stop reading meanwhile.
            task = self.server.loop.run_in_executor(None, auth.authenticate, o, info)
            task.add_done_callback(self._auth_done)
            if self.transport is not None:
                self.transport.pause_reading()
            return True
        self._bind(auth.authenticate(o, info))
        return False

    def _can_batch(self) -> bool:
        """May a read's publishes go to the router whole (``route_pubs``)?"""
        return (
            self.connected
            and not self.closed
            and self.perms is None
            and not self.pedantic
            and not self.verbose
            and self._max_payload_user < 0
            and self.account.mapper is None
            and not self.trace
        )

    def set_trace(self, on: bool) -> None:
        """The protocol trace log turned on or off (a configuration reload)."""
        self.trace = on
        self._plain = self._can_batch()

    def _auth_done(self, fut: asyncio.Future[User | Account | None]) -> None:
        if self.closed:
            return
        self._bind(None if fut.exception() else fut.result())
        if not self.connected:  # _bind refused and closed the connection
            return
        if self.transport is not None:
            self.transport.resume_reading()
        try:
            self.parser.resume()
        except proto.ProtocolError as exc:
            self.fatal(exc.text)

    def _bind(self, who: User | Account | None) -> None:
        if who is None:
            self.server.stats.auth_failures += 1
            self.fatal("Authorization Violation")
            return
        if isinstance(who, User):
            self.user = who
            self.account = who.account
            self.perms = who.permissions
            if not self._apply_user_limits(who):
                return
        else:
            self.account = who
        self.connected = True
        self._plain = self._can_batch()
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.server.client_bound(self)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def _apply_user_limits(self, user: User) -> bool:
        """Limits and expiry that come with the user (JWT users). False: refused and closed."""
        limit = self.server.auth.account_connection_limit(user.account)
        if 0 <= limit <= user.account.num_connections:
            self.fatal("maximum account active connections exceeded")
            return False
        if user.max_subscriptions >= 0 and (
            not self._max_subs or user.max_subscriptions < self._max_subs
        ):
            # 0 from a JWT means no subscriptions at all; the server's 0 means no limit.
            self._max_subs = user.max_subscriptions or -1
        if self._max_subs < 0:
            # nats-server: a client already at its limit is told so and closed.
            self.fatal("maximum subscriptions exceeded")
            return False
        self._max_payload_user = user.max_payload
        if user.expires_at_s:
            delay = max(user.expires_at_s - time.time(), 0.0)
            self._expiry_timer = self.server.loop.call_later(
                delay, self.fatal, user.expired_text
            )
        return True

    def start_auth_timer(self, timeout_s: float) -> None:
        self._auth_timer = self.server.loop.call_later(timeout_s, self._auth_timeout)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.connected and not self.closed:
            self.fatal("Authentication Timeout")

    # --- PUB -------------------------------------------------------------------------------

    def _pub(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        limit = self._max_payload_user
        if limit >= 0 and len(payload) + (len(hdr) if hdr is not None else 0) > limit:
            raise proto.ProtocolError(proto.ERR_MAX_PAYLOAD)
        if self.pedantic and not is_valid_subject(subject):
            self.send_err("Invalid Publish Subject")
            return
        trace: msgtrace.MsgTrace | None = None
        if hdr is not None and _TRACE_MARK in hdr:
            start = msgtrace.begin(hdr, self.account, len(hdr) + len(payload), from_route=False)
            if start.drop:
                return
            hdr, trace = start.hdr, start.trace
            if trace is not None:
                if not self._may_publish(trace.dest):
                    self.send_err(f'Permissions Violation for Publish to "{trace.dest}"')
                    return
                trace.ingress(msgtrace.KIND_CLIENT, self.cid, self.name, subject)
        mapper = self.account.mapper
        if mapper is not None:
            # Mapped before the permission check, as nats-server (it checks the result).
            mapped = mapper.map(subject)
            if mapped is not None:
                if not mapped:
                    return  # the weights left this draw without a destination: dropped
                subject = mapped
                if trace is not None:
                    trace.mapped(subject)
        if not self._may_publish(subject) and not self.reply_permits.use(subject, time.time_ns()):
            error = f'Permissions Violation for Publish to "{subject}"'
            self.send_err(error)
            if trace is not None:
                trace.ingress_error(error)
                trace.send(self.server.router, self.server.trace_server_info)
            return
        if hdr is not None and not self.headers:
            # HPUB from a client that did not announce headers support.
            raise proto.ProtocolError(proto.ERR_UNKNOWN_OP)
        if self.verbose:
            # Acknowledged before delivery, as nats-server does (a self-subscriber sees +OK first).
            self.enqueue(proto.OK_FRAME)
        if trace is not None:
            assert hdr is not None
            msgtrace.route_traced(
                self.server.router, self, subject, reply, hdr, payload, trace,
                self.server.trace_server_info,
            )  # fmt: skip
            return
        self._route(self, self.account, subject, reply, hdr, payload)

    def _may_publish(self, subject: str) -> bool:
        perms = self.perms
        return perms is None or perms.publish is None or perms.publish.permits_publish(subject)

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        """Write one message for ``sub``. Returns False when the message was filtered out.

        This runs once per message per subscriber: keep it flat.
        """
        if self.closed:
            return False
        if self.perms is not None and not self._deliver_permitted(sub, subject, reply):
            return False
        if self.trace:
            proto_trace.delivered(self, subject, sub.sid, reply, hdr, data)
        out = self._out
        if not out and not self._flush_scheduled:
            self._flush_scheduled = True
            self._call_soon(self.flush)
        # A client that did not announce headers support gets the payload alone, as from
        # nats-server: dropping the message would lose it for older or minimal clients.
        if hdr is None or not self.headers:
            size = len(data)
            if reply is None:
                out.append(f"MSG {subject} {sub.sid} {size}\r\n".encode())
            else:
                out.append(f"MSG {subject} {sub.sid} {reply} {size}\r\n".encode())
        else:
            size = len(hdr) + len(data)
            out.append(proto.hmsg_head(subject, sub.sid, reply, len(hdr), size))
            out.append(hdr)
        out.append(data)
        out.append(b"\r\n")
        self._out_bytes += size
        self.out_msgs += 1
        self.out_bytes += size
        if self._out_bytes > _FLUSH_BYTES:
            self.flush()
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_sub(sub)
        return True

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        """Write ``answers[first:stop]`` (no reply, no headers: the PubAcks of one inbox) for
        ``sub``: the frames ``deliver`` writes one by one, joined into one piece, with the
        counters updated once, and a flush where ``deliver`` would flush."""
        if self.closed:
            return 0, 0
        if self.perms is not None or sub.max_msgs or self.trace:
            return deliver_each(self, sub, answers, first, stop)
        out = self._out
        sid = sub.sid
        parts: list[bytes] = []
        msgs = size = 0  # delivered in all
        held = held_size = 0  # in ``parts``, not yet counted
        pending = self._out_bytes
        for i in range(first, stop):
            if not out and not self._flush_scheduled:
                self._flush_scheduled = True
                self._call_soon(self.flush)
            subject, data = answers[i]
            n = len(data)
            parts.append(f"MSG {subject} {sid} {n}\r\n".encode())
            parts.append(data)
            parts.append(b"\r\n")
            held += 1
            held_size += n
            pending += n
            if pending > _FLUSH_BYTES:  # ``deliver`` flushes after such a message
                out.append(b"".join(parts))
                parts.clear()
                self._count_answers(sub, held, held_size, pending)
                msgs += held
                size += held_size
                held = held_size = 0
                if self._flush_closes():  # a slow consumer: nothing more for it
                    return msgs, size
                pending = self._out_bytes
        if parts:
            out.append(b"".join(parts))
            self._count_answers(sub, held, held_size, pending)
        return msgs + held, size + held_size

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        """Write ``items`` (a slice of a DIRECT.GET batch, see ``Subscriber``) for ``sub``: the
        frames ``deliver`` writes one by one, with no call per message, the counters updated
        as ``deliver_answers`` does and a flush where ``deliver`` would flush."""
        if self.closed:
            return 0, 0
        if self.perms is not None or sub.max_msgs or not self.headers or self.trace:
            return deliver_replies_each(self, sub, subject, items)
        out = self._out
        plain = f"MSG {subject} {sub.sid} "
        framed = f"HMSG {subject} {sub.sid} "
        msgs = size = 0  # delivered in all
        held = held_size = 0  # written, not yet counted
        pending = self._out_bytes
        for hdr, data in items:
            if not out and not self._flush_scheduled:
                self._flush_scheduled = True
                self._call_soon(self.flush)
            if hdr is None:
                n = len(data)
                out.append(f"{plain}{n}\r\n".encode())
            else:
                hlen = len(hdr)
                n = hlen + len(data)
                out.append(f"{framed}{hlen} {n}\r\n".encode())
                out.append(hdr)
            out.append(data)
            out.append(b"\r\n")
            held += 1
            held_size += n
            pending += n
            if pending > _FLUSH_BYTES:  # ``deliver`` flushes after such a message
                self._count_answers(sub, held, held_size, pending)
                msgs += held
                size += held_size
                held = held_size = 0
                if self._flush_closes():  # a slow consumer: nothing more for it
                    return msgs, size
                pending = self._out_bytes
        if held:
            self._count_answers(sub, held, held_size, pending)
        return msgs + held, size + held_size

    def _flush_closes(self) -> bool:
        """Flush; True when that closed the connection."""
        self.flush()
        return self.closed

    def _count_answers(self, sub: Subscription, msgs: int, size: int, pending: int) -> None:
        self._out_bytes = pending
        self.out_msgs += msgs
        self.out_bytes += size
        sub.delivered += msgs

    def deliver_run(
        self,
        sub: Subscription,
        batch: proto.PubBatch,
        first: int,
        stop: int,
        msgs: int,
        size: int,
    ) -> int:
        """Write runs of publishes for ``sub`` (see ``Subscriber``), each run as one piece.
        This runs once per subscriber per group: keep it flat."""
        if self.closed:
            return 0
        lines = batch.lines
        if (
            self.perms is not None
            or sub.max_msgs
            or self.trace
            or (not self.headers and max(map(_HDR_LEN, lines[first:stop])) >= 0)
        ):
            return self._deliver_each(sub, batch, first, stop)
        subject = lines[first][0]
        if sub.head_subject != subject:
            sub.head_subject = subject
            sub.head = f"MSG {subject} {sub.sid}".encode()
        prefix = sub.head
        out = self._out
        if not out and not self._flush_scheduled:
            self._flush_scheduled = True
            self._call_soon(self.flush)
        starts, bodies = batch.starts, batch.bodies
        append = out.append
        for r in range(first, stop):
            line = lines[r]
            if line[0] is not subject:  # runs on several subjects (JetStream acks)
                subject = line[0]
                prefix = f"MSG {subject} {sub.sid}".encode()
            head = (prefix if line[3] < 0 else b"H" + prefix) + line[4]
            b0, b1 = starts[r], starts[r + 1]
            append(head)
            append(bodies[b0] if b1 - b0 == 1 else (b"\r\n" + head).join(bodies[b0:b1]))
            append(b"\r\n")
        self._out_bytes += size
        self.out_msgs += msgs
        self.out_bytes += size
        sub.delivered += msgs
        if self._out_bytes > _FLUSH_BYTES:
            self.flush()
        return msgs

    def _deliver_each(self, sub: Subscription, batch: proto.PubBatch, first: int, stop: int) -> int:
        """``deliver_run`` message by message: permissions, auto-unsubscribe, clients without
        headers support."""
        delivered = 0
        for line, body in batch.messages(first, stop):
            if sub.max_msgs and sub.delivered >= sub.max_msgs:
                return delivered  # auto-unsubscribed: the rest is not for it
            hdr, data = proto.split_body(line, body)
            if self.deliver(sub, line[0], line[1], hdr, data):
                delivered += 1
        return delivered

    def _deliver_permitted(self, sub: Subscription, subject: str, reply: str | None) -> bool:
        perms = self.perms
        assert perms is not None
        if perms.subscribe is not None and perms.subscribe.delivery_denied(sub.subject, subject):
            return False
        if reply and perms.responses_max:
            self._track_reply(perms, reply)
        return True

    def _track_reply(self, perms: Permissions, reply: str) -> None:
        if perms.publish is not None and perms.publish.permits_publish(reply):
            return  # already allowed: nothing to remember (nats-server skips these too)
        self.reply_permits.grant(
            reply, perms.responses_max, perms.responses_expires_ns, time.time_ns()
        )

    @property
    def reply_permissions(self) -> int:
        """How many reply subjects this connection may still answer (for tests and /connz)."""
        return len(self.reply_permits)

    # --- SUB / UNSUB -----------------------------------------------------------------------

    def _sub(self, subject: str, queue: str | None, sid: str) -> None:
        if not is_valid_filter(subject):
            self.send_err("Invalid Subject")
            return
        perms = self.perms
        if (
            perms is not None
            and perms.subscribe is not None
            and not perms.subscribe.permits_subscribe(subject, queue)
        ):
            text = f'Permissions Violation for Subscription to "{subject}"'
            if queue:
                text += f' using queue "{queue}"'
            self.send_err(text)
            return
        limit = self._max_subs
        if limit and len(self.subs) >= max(limit, 0):
            # Not fatal, as from nats-server: the client is told, the subscription is not made.
            # Checked before the repeated-SID case, in nats-server's order.
            self.send_err("maximum subscriptions exceeded")
            return
        if sid in self.subs:
            # A repeated SID is ignored, as nats-server does.
            if self.verbose:
                self.enqueue(proto.OK_FRAME)
            return
        sub = Subscription(self, subject, queue, sid)
        self.subs[sid] = sub
        self.server.router.add_subscription(self.account, sub)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def _unsub(self, sid: str, max_msgs: int | None) -> None:
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs and sub.delivered < max_msgs:
                sub.max_msgs = max_msgs
            else:
                self.remove_sub(sub)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.server.router.remove_subscription(self.account, sub)

    def remove_all_subs(self) -> None:
        for sub in list(self.subs.values()):
            self.remove_sub(sub)
