"""One client connection: bytes in through the sans-I/O parser, frames out through a buffer
flushed once per event-loop turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from jetraft.protocol import client as proto
from jetraft.protocol.subjects import is_valid_filter, is_valid_subject
from jetraft.server.auth import Account, Permissions, User

if TYPE_CHECKING:
    from jetraft.server.server import Server

log = logging.getLogger("jetraft.client")


class Subscription:
    __slots__ = ("conn", "delivered", "max_msgs", "queue", "sid", "subject")

    def __init__(self, conn: ClientConnection, subject: str, queue: str | None, sid: str) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.delivered = 0
        self.max_msgs = 0  # 0: no auto-unsubscribe


class ClientConnection(asyncio.Protocol):
    """The server's side of one client. Created by the listener, owned by the Server."""

    def __init__(self, server: Server, cid: int) -> None:
        self.server = server
        self.cid = cid
        opts = server.config
        self.parser = proto.ClientParser(opts.max_control_line, opts.max_payload)
        self.transport: asyncio.Transport | None = None
        self.account: Account = server.auth.global_account()
        self.user: User | None = None
        self.perms: Permissions | None = None
        self.subs: dict[str, Subscription] = {}
        self.connected = False  # CONNECT accepted
        self.closed = False
        self.echo = True
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
        self._flush_scheduled = False
        self._held: list[proto.Event] | None = None  # events waiting for a slow auth check
        self._resp_allowed: dict[str, list[int]] = {}  # reply subject -> [remaining, expires_ns]
        self._auth_timer: asyncio.TimerHandle | None = None
        self.reason = ""

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host, self.port = str(peer[0]), int(peer[1])
        self.server.client_opened(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            events = self.parser.feed(data)
        except proto.ProtocolError as exc:
            self.fatal(exc.text)
            return
        self.last_activity = time.time()
        if self._held is not None:
            self._held.extend(events)
            return
        self._process(events)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.client_closed(self)

    # --- writing ---------------------------------------------------------------------------

    def enqueue(self, frame: bytes) -> None:
        """Buffer a frame; everything buffered this loop turn leaves in one write."""
        if self.closed:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.server.loop.call_soon(self.flush)
        if self._out_bytes > self.server.config.max_pending:
            self.slow_consumer()

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._out or self.transport is None or self.closed:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_bytes = 0
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > self.server.config.max_pending:
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
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        if self.transport is not None:
            self.transport.close()
        self.server.client_closed(self)

    # --- events ----------------------------------------------------------------------------

    def _process(self, events: list[proto.Event]) -> None:
        for i, ev in enumerate(events):
            if self.closed:
                return
            kind = type(ev)
            if kind is proto.Pub:
                if not self.connected and self.server.auth.required:
                    self.fatal("Authorization Violation")
                    return
                self._pub(ev)  # type: ignore[arg-type]
            elif kind is proto.Connect:
                if self._connect(ev.options):  # type: ignore[union-attr]
                    # A bcrypt check is running; everything after CONNECT waits for it.
                    self._held = list(events[i + 1 :])
                    return
            elif not self.connected and self.server.auth.required:
                self.fatal("Authorization Violation")
                return
            elif kind is proto.Sub:
                self._sub(ev)  # type: ignore[arg-type]
            elif kind is proto.Unsub:
                self._unsub(ev)  # type: ignore[arg-type]
            elif kind is proto.Ping:
                self.enqueue(proto.PONG_FRAME)
            elif kind is proto.Pong:
                self.pings_out = 0

    def _connect(self, o: dict[str, Any]) -> bool:
        """Apply a CONNECT. Returns True when authentication continues in a thread."""
        if self.connected:
            return False
        protocol = o.get("protocol", 0)
        if not isinstance(protocol, int) or not 0 <= protocol <= 1:
            self.fatal("invalid client protocol")
            return False
        self.verbose = bool(o.get("verbose", False))
        self.pedantic = bool(o.get("pedantic", False))
        self.echo = bool(o.get("echo", True))
        self.headers = bool(o.get("headers", False))
        self.no_responders = bool(o.get("no_responders", False))
        if self.no_responders and not self.headers:
            self.fatal("no responders requires headers support")
            return False
        self.name = str(o.get("name", ""))
        self.lang = str(o.get("lang", ""))
        self.version = str(o.get("version", ""))
        auth = self.server.auth
        if auth.needs_slow_check(o):
            task = self.server.loop.run_in_executor(None, auth.authenticate, o)
            task.add_done_callback(self._auth_done)
            return True
        self._bind(auth.authenticate(o))
        return False

    def _auth_done(self, fut: asyncio.Future[User | Account | None]) -> None:
        if self.closed:
            return
        held, self._held = self._held or [], None
        self._bind(None if fut.exception() else fut.result())
        if not self.closed:
            self._process(held)

    def _bind(self, who: User | Account | None) -> None:
        if who is None:
            self.server.stats.auth_failures += 1
            self.fatal("Authorization Violation")
            return
        if isinstance(who, User):
            self.user = who
            self.account = who.account
            self.perms = who.permissions
        else:
            self.account = who
        self.connected = True
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.server.client_bound(self)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def start_auth_timer(self, timeout_s: float) -> None:
        self._auth_timer = self.server.loop.call_later(timeout_s, self._auth_timeout)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.connected and not self.closed:
            self.fatal("Authentication Timeout")

    # --- PUB -------------------------------------------------------------------------------

    def _pub(self, ev: proto.Pub) -> None:
        subject = ev.subject
        size = len(ev.payload) + (len(ev.headers) if ev.headers else 0)
        self.in_msgs += 1
        self.in_bytes += size
        if self.pedantic and not is_valid_subject(subject):
            self.send_err("Invalid Publish Subject")
            return
        perms = self.perms
        if perms is not None and perms.publish is not None:
            if not perms.publish.permits_publish(subject) and not self._response_ok(subject):
                self.send_err(f'Permissions Violation for Publish to "{subject}"')
                return
        if ev.headers is not None and not self.headers:
            # HPUB from a client that did not announce headers: nats-server treats it as an error.
            self.fatal(proto.ERR_UNKNOWN_OP)
            return
        self.server.route_message(self, self.account, subject, ev.reply, ev.headers, ev.payload)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def _response_ok(self, subject: str) -> bool:
        entry = self._resp_allowed.get(subject)
        if entry is None:
            return False
        remaining, expires_ns = entry
        if expires_ns and time.time_ns() > expires_ns:
            del self._resp_allowed[subject]
            return False
        if remaining <= 1:
            del self._resp_allowed[subject]
        else:
            entry[0] = remaining - 1
        return True

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        """Write one message for ``sub``. Returns False when the message was filtered out."""
        perms = self.perms
        if perms is not None:
            if perms.subscribe is not None and perms.subscribe.delivery_denied(
                sub.subject, subject
            ):
                return False
            if reply and perms.responses_max:
                expires = time.time_ns() + perms.responses_expires_ns
                self._resp_allowed[reply] = [
                    perms.responses_max,
                    expires if perms.responses_expires_ns else 0,
                ]
        if hdr:
            if not self.headers:
                return False
            head = proto.hmsg_head(subject, sub.sid, reply, len(hdr), len(hdr) + len(data))
            self.enqueue(head + hdr + data + b"\r\n")
        else:
            head = proto.msg_head(subject, sub.sid, reply, len(data))
            self.enqueue(head + data + b"\r\n")
        self.out_msgs += 1
        self.out_bytes += len(data) + (len(hdr) if hdr else 0)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_sub(sub)
        return True

    # --- SUB / UNSUB -----------------------------------------------------------------------

    def _sub(self, ev: proto.Sub) -> None:
        if not is_valid_filter(ev.subject) or (ev.queue is not None and " " in ev.queue):
            self.send_err("Invalid Subject")
            return
        perms = self.perms
        if perms is not None and perms.subscribe is not None:
            if not perms.subscribe.permits_subscribe(ev.subject):
                text = f'Permissions Violation for Subscription to "{ev.subject}"'
                if ev.queue:
                    text += f' using queue "{ev.queue}"'
                self.send_err(text)
                return
        if ev.sid in self.subs:
            # A repeated SID is ignored, as nats-server does.
            if self.verbose:
                self.enqueue(proto.OK_FRAME)
            return
        sub = Subscription(self, ev.subject, ev.queue, ev.sid)
        self.subs[ev.sid] = sub
        self.server.add_subscription(self.account, sub)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def _unsub(self, ev: proto.Unsub) -> None:
        sub = self.subs.get(ev.sid)
        if sub is not None:
            if ev.max_msgs and sub.delivered < ev.max_msgs:
                sub.max_msgs = ev.max_msgs
            else:
                self.remove_sub(sub)
        if self.verbose:
            self.enqueue(proto.OK_FRAME)

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.server.remove_subscription(self.account, sub)

    def remove_all_subs(self) -> None:
        for sub in list(self.subs.values()):
            self.remove_sub(sub)
