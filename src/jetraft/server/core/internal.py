"""Clients without a socket: server components (JetStream, system services) subscribe and
publish through these, so their traffic takes the same routing path as everyone else's.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Sequence

from jetraft.protocol.client import PubBatch
from jetraft.server.core.accounts import (
    Account,
    Subscription,
    deliver_each,
    deliver_replies_each,
    deliver_run_each,
)
from jetraft.server.core.router import Router

log = logging.getLogger("jetraft.internal")

# (subject, reply, header block or None, payload)
Handler = Callable[[str, str | None, bytes | None, bytes], None]
# (batch, first run, stop run) -> messages taken: the runs of client publishes that
# ``Router.route_pubs`` hands over in one call (see ``PubBatch``).
RunHandler = Callable[[PubBatch, int, int], int]


class InternalClient:
    """Duck-types the parts of ClientConnection that routing uses (deliver, closed, echo)."""

    closed = False
    is_route = False
    frames_answers = False  # handlers may (un)subscribe while answers are delivered
    echo = True
    headers = True
    no_responders = False

    def __init__(self, router: Router, account: Account, name: str) -> None:
        self.router = router
        self.account = account
        self.name = name
        self.stream = ""  # the stream whose intake this is (message tracing reports it)
        self.subs: dict[str, Subscription] = {}
        self._handlers: dict[str, Handler] = {}
        self._run_handlers: dict[str, RunHandler] = {}
        self._next_sid = 1
        self._inbox = ""  # "_INBOX.<random>." once a request was made
        self._replies: dict[str, asyncio.Future[tuple[bytes | None, bytes]]] = {}
        self._next_reply = 1

    def subscribe(
        self,
        subject: str,
        handler: Handler,
        queue: str | None = None,
        run_handler: RunHandler | None = None,
    ) -> Subscription:
        """``handler`` takes one message; ``run_handler`` (optional) takes the runs of client
        publishes of one read at once (the hot path of a stream's intake)."""
        sid = str(self._next_sid)
        self._next_sid += 1
        sub = Subscription(self, subject, queue, sid)
        self.subs[sid] = sub
        self._handlers[sid] = handler
        if run_handler is not None:
            self._run_handlers[sid] = run_handler
        self.router.add_subscription(self.account, sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self._handlers.pop(sub.sid, None)
            self._run_handlers.pop(sub.sid, None)
            self.router.remove_subscription(self.account, sub)

    def close(self) -> None:
        for sub in list(self.subs.values()):
            self.unsubscribe(sub)
        self.closed = True
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(ConnectionError("internal client closed"))
        self._replies.clear()

    async def request(
        self, subject: str, data: bytes = b"", timeout_s: float = 1.0
    ) -> tuple[bytes | None, bytes] | None:
        """Publish with a reply subject and wait for the first answer: (headers, payload),
        or None when none came in time. All requests share one wildcard inbox."""
        if not self._inbox:
            self._inbox = f"_INBOX.{secrets.token_hex(8)}."
            self.subscribe(self._inbox + "*", self._on_reply)
        token = str(self._next_reply)
        self._next_reply += 1
        fut: asyncio.Future[tuple[bytes | None, bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._replies[token] = fut
        try:
            self.publish(subject, data, reply=self._inbox + token)
            return await asyncio.wait_for(fut, timeout_s)
        except (TimeoutError, ConnectionError):
            return None
        finally:
            self._replies.pop(token, None)

    def _on_reply(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        fut = self._replies.get(subject[len(self._inbox) :])
        if fut is not None and not fut.done():
            fut.set_result((hdr, data))

    def publish(
        self, subject: str, data: bytes = b"", reply: str | None = None, hdr: bytes | None = None
    ) -> int:
        return self.router.route_message(None, self.account, subject, reply, hdr, data)

    def publish_answers(self, answers: list[tuple[str, bytes]]) -> None:
        """Publish (subject, payload) pairs in order, no reply subjects, no headers."""
        self.router.route_answers(self.account, answers)

    def publish_replies(self, subject: str, items: list[tuple[bytes | None, bytes]]) -> int:
        """Publish (header block or None, payload) pairs to ``subject`` in order, no reply
        subjects; returns how many receivers took the last one (0: nobody listens)."""
        return self.router.route_replies(self.account, subject, items)

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        handler = self._handlers.get(sub.sid)
        if handler is None:
            return False
        try:
            handler(subject, reply, hdr, data)
        except Exception:
            # A bug in one component must not take down the publisher's connection.
            log.exception("internal handler %s failed on %s", self.name, subject)
        return True

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        return deliver_each(self, sub, answers, first, stop)

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        return deliver_replies_each(self, sub, subject, items)

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        run = self._run_handlers.get(sub.sid)
        if run is not None:
            try:
                return run(batch, first, stop)
            except Exception:
                # As in ``deliver``: a bug must not take down the publisher's connection.
                log.exception("internal handler %s failed on a batch", self.name)
                return msgs
        return deliver_run_each(self, sub, batch, first, stop)
