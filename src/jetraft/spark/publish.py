"""Publishing with PubAck checks, a bounded window of outstanding acks, and retries.

Every message carries its Nats-Msg-Id in its prebuilt header block, so a retry (after an ack
timeout, a 503 while a leader is elected, or no responders while a server restarts) is the
same message to the stream's duplicate detection: at most one copy is stored. Retried messages
can land after messages published later; ``maxPendingAcks=1`` keeps input order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import nats.errors
from nats.aio.subscription import Subscription

from jetraft.spark.loop import JetClient

TRANSIENT_ERR_CODES = frozenset({10008, 10023, 10077, 10118})


@dataclass(frozen=True, slots=True)
class OutMsg:
    subject: str
    data: bytes
    header_block: bytes


class PublishError(RuntimeError):
    """A message the stream refused for good (wrong subject, too big, expected stream...)."""


@dataclass(slots=True)
class _InFlight:
    msg: OutMsg
    deadline: float
    attempts: int = 1


@dataclass(slots=True)
class PublishStats:
    acked: int = 0
    duplicates: int = 0
    retries: int = 0
    first_seq: int = 0
    last_seq: int = 0
    errors: list[str] = field(default_factory=list)


class Publisher:
    """Window of ``window`` unacknowledged messages over one connection.

    Contract: after ``flush()`` returns, every message given to ``send_many`` has a positive
    PubAck (new or duplicate); otherwise ``flush()`` raises.
    """

    def __init__(self, nc: JetClient, window: int, ack_timeout_s: float, max_retries: int):
        self.nc = nc
        self.window = window
        self.ack_timeout_s = ack_timeout_s
        self.max_retries = max_retries
        self.stats = PublishStats()
        self._inbox = nc.new_inbox()
        self._skip = len(self._inbox) + 1
        self._sub: Subscription | None = None
        self._inflight: dict[str, _InFlight] = {}
        self._slots = asyncio.Semaphore(window)
        self._counter = 0
        self._outstanding = 0  # sent or waiting to be resent, not yet finally acknowledged
        self._idle = asyncio.Event()
        self._idle.set()
        self._fatal: Exception | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        self._sub = await self.nc.fast_subscribe(self._inbox + ".*", self._on_ack)
        self._watchdog = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()

    async def send_many(self, msgs: Iterable[OutMsg]) -> None:
        for msg in msgs:
            if self._fatal is not None:
                raise self._fatal
            await self._slots.acquire()
            self._outstanding += 1
            await self._send(_InFlight(msg, 0.0))

    async def flush(self) -> PublishStats:
        while self._outstanding and self._fatal is None:
            self._idle.clear()
            await self._idle.wait()
        if self._fatal is not None:
            raise self._fatal
        await self.nc.flush()
        return self.stats

    async def _send(self, item: _InFlight) -> None:
        self._counter += 1
        token = str(self._counter)
        item.deadline = time.monotonic() + self.ack_timeout_s
        self._inflight[token] = item
        try:
            await self.nc.publish_with_header_block(
                item.msg.subject, f"{self._inbox}.{token}", item.msg.header_block, item.msg.data
            )
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError):
            item.deadline = time.monotonic()  # the watchdog resends it
        except nats.errors.MaxPayloadError:
            self._fail(PublishError(f"message on {item.msg.subject} exceeds max_payload"))

    def _done(self, token: str | None) -> None:
        if token is not None:
            self._inflight.pop(token, None)
        self._outstanding -= 1
        self._slots.release()
        if not self._outstanding:
            self._idle.set()

    def _fail(self, exc: Exception) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._idle.set()

    def _on_ack(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        """PubAck (or status) for one attempt; runs on the loop, never blocks."""
        token = subject[self._skip :].decode()
        item = self._inflight.get(token)
        if item is None:
            return  # an ack for an attempt already retried under another token
        if not data and headers[8:9] == b" ":
            # 503 no responders: the stream (or its leader) is not there right now.
            self._retry(token, item, f"status {headers[9:12].decode()} on {item.msg.subject}")
            return
        try:
            ack = json.loads(data)
        except ValueError:
            self._retry(token, item, "unreadable PubAck")
            return
        err = ack.get("error")
        if err:
            code, err_code = int(err.get("code", 0)), int(err.get("err_code", 0))
            text = f"{err.get('description')} (err_code {err_code}) on {item.msg.subject}"
            if code == 503 or err_code in TRANSIENT_ERR_CODES:
                self._retry(token, item, text)
            else:
                self._fail(PublishError(f"publish refused: {text}"))
                self._done(token)
            return
        self._record(ack)
        self._done(token)

    def _record(self, ack: dict[str, object]) -> None:
        st = self.stats
        st.acked += 1
        if ack.get("duplicate"):
            st.duplicates += 1
        seq = ack.get("seq")
        if isinstance(seq, int):
            st.first_seq = seq if not st.first_seq else min(st.first_seq, seq)
            st.last_seq = max(st.last_seq, seq)

    def _retry(self, token: str, item: _InFlight, why: str) -> None:
        """Resend later under a new token. Never blocks: it runs in the ack callback."""
        self._inflight.pop(token, None)
        if item.attempts > self.max_retries:
            self._fail(PublishError(f"no PubAck after {item.attempts} attempts: {why}"))
            self._done(None)
            return
        self.stats.retries += 1
        item.attempts += 1
        delay = min(1.0, 0.02 * (2 ** min(item.attempts, 6)))
        asyncio.get_running_loop().call_later(delay, self._resend, item)

    def _resend(self, item: _InFlight) -> None:
        if self._fatal is None:
            self._tasks.add(asyncio.ensure_future(self._send(item)))
            self._tasks = {t for t in self._tasks if not t.done()}

    async def _watch(self) -> None:
        """Resend messages whose ack did not come in time (same id: the stream dedupes)."""
        tick = max(0.05, self.ack_timeout_s / 4)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            late = [(t, i) for t, i in self._inflight.items() if i.deadline <= now]
            for token, item in late:
                if self._inflight.get(token) is item:
                    self._retry(token, item, "PubAck timeout")
