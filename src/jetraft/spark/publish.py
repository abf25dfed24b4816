"""Publishing with PubAck checks, a bounded window of outstanding acks, and retries.

Messages go out as prebuilt HPUB frames, as many per write as the window has room for, each
with its own reply subject (``<inbox>.<token>``) so that its PubAck finds it; PubAcks come
back through a bulk subscription (``bulkparse``) and are checked without decoding the JSON
when they are plain successes. Every message carries its Nats-Msg-Id in its header block, so
a retry (after an ack timeout, a 503 while a leader is elected, or no responders while a
server restarts) is the same message to the stream's duplicate detection: at most one copy is
stored. Retried messages can land after messages published later; ``maxPendingAcks=1`` keeps
input order.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import nats.errors
from nats.aio.subscription import Subscription

from jetraft.spark._publoops import Item, hpub_frames, take_acks
from jetraft.spark.bulkparse import Frame
from jetraft.spark.loop import JetClient

TRANSIENT_ERR_CODES = frozenset({10008, 10023, 10077, 10118})
# Payload and header bytes kept for retries while unacknowledged, on top of the message
# window: large messages fill this before the window.
MAX_PENDING_BYTES = 8 * 1024 * 1024


class PublishError(RuntimeError):
    """A message the stream refused for good (wrong subject, too big, expected stream...)."""


# What a retry needs: (subject, header block, payload, attempts, ack deadline).
_Item = Item


@dataclass(slots=True)
class PublishStats:
    acked: int = 0
    duplicates: int = 0
    retries: int = 0
    errors: list[str] = field(default_factory=list)


def check_subject(subject: bytes) -> None:
    """A subject that can be published to: tokens separated by dots, no whitespace (which
    would break the frame), no wildcards, no empty token."""
    if not subject or any(c in subject for c in b" \t\r\n"):
        raise PublishError(f"cannot publish to subject {subject!r}: empty or with whitespace")
    for token in subject.split(b"."):
        if not token or token in (b"*", b">"):
            raise PublishError(f"cannot publish to subject {subject.decode(errors='replace')!r}")


class Publisher:
    """Window of ``window`` unacknowledged messages over one connection.

    Contract: after ``flush()`` returns, every message given to ``send`` has a positive
    PubAck (new or duplicate); otherwise ``flush()`` (or ``send``) raises.
    """

    def __init__(
        self,
        nc: JetClient,
        window: int,
        ack_timeout_s: float,
        max_retries: int,
        max_bytes: int = MAX_PENDING_BYTES,
    ):
        self.nc = nc
        self.window = max(1, window)
        self.max_bytes = max_bytes
        self.ack_timeout_s = ack_timeout_s
        self.max_retries = max_retries
        self.stats = PublishStats()
        inbox = nc.new_inbox()
        self._inbox = inbox
        self._reply_prefix = (inbox + ".").encode()
        self._skip = len(self._reply_prefix)
        self._sub: Subscription | None = None
        self._inflight: dict[int, _Item] = {}
        self._counter = 0
        self._outstanding = 0  # sent or waiting to be resent, not yet finally acknowledged
        self._outstanding_bytes = 0
        # Senders wake when a quarter of the window is free, not on every ack.
        self._low_water = self.window - max(1, self.window // 4)
        self._low_bytes = max_bytes - max_bytes // 4
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._fatal: Exception | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._checked: set[bytes] = set()

    async def start(self) -> None:
        self._sub = await self.nc.bulk_subscribe(self._inbox + ".*", self._on_acks)
        self._watchdog = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._sub is not None:
            await self.nc.bulk_unsubscribe(self._sub)

    async def send(
        self, subjects: list[bytes], headers: list[bytes], payloads: list[bytes]
    ) -> None:
        """Publish the messages (same-length lists); returns once all of them are written,
        their acks may still be outstanding."""
        self._check(subjects, headers, payloads)
        i, n = 0, len(payloads)
        while i < n:
            if self._fatal is not None:
                raise self._fatal
            room = self.window - self._outstanding
            budget = self.max_bytes - self._outstanding_bytes
            if room <= 0 or (budget <= 0 and self._outstanding):
                self._room.clear()
                await self._room.wait()
                continue
            frames, k, size = self._frames(subjects, headers, payloads, i, min(n, i + room), budget)
            self._outstanding += k
            self._outstanding_bytes += size
            self._idle.clear()
            await self._write(frames)
            i += k

    def _check(self, subjects: list[bytes], headers: list[bytes], payloads: list[bytes]) -> None:
        checked = self._checked
        for subject in set(subjects) - checked:
            check_subject(subject)
            checked.add(subject)
        limit = self.nc._max_payload
        if limit and max(map(len, payloads), default=0) + max(map(len, headers), default=0) > limit:
            for subject, hdr, data in zip(subjects, headers, payloads, strict=True):
                if len(hdr) + len(data) > limit:
                    raise PublishError(f"message on {subject.decode()} exceeds max_payload")

    def _frames(
        self,
        subjects: list[bytes],
        headers: list[bytes],
        payloads: list[bytes],
        lo: int,
        hi: int,
        budget: int,
    ) -> tuple[bytes, int, int]:
        """HPUB frames for messages ``lo`` up to ``hi`` (excluded), stopping once ``budget``
        bytes are taken (always at least one message), each registered in flight under a
        fresh token. Returns (frames, message count, header and payload bytes)."""
        deadline = time.monotonic() + self.ack_timeout_s
        frames, k, size = hpub_frames(
            subjects, headers, payloads, lo, hi, budget, self._reply_prefix, self._counter,
            deadline, self._inflight,
        )
        self._counter += k
        return frames, k, size

    async def _write(self, frames: bytes) -> None:
        try:
            await self.nc.publish_frames(frames)
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError):
            # Not written: the watchdog resends them when their deadline passes (same ids).
            return

    async def flush(self) -> PublishStats:
        while self._outstanding and self._fatal is None:
            await self._idle.wait()
        if self._fatal is not None:
            raise self._fatal
        await self.nc.flush()
        return self.stats

    def _finished(self, count: int, size: int) -> None:
        self._outstanding -= count
        self._outstanding_bytes -= size
        if self._outstanding <= self._low_water and self._outstanding_bytes <= self._low_bytes:
            self._room.set()
        if not self._outstanding:
            self._idle.set()

    def _fail(self, exc: Exception) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._idle.set()
        self._room.set()

    def _on_acks(self, frames: list[Frame]) -> None:
        """PubAcks (or statuses) for a run of attempts; runs on the loop, never blocks."""
        got = take_acks(frames, self._inflight, self._skip)
        stats = self.stats
        stats.acked += got.acked
        stats.duplicates += got.duplicates
        done, size = got.done, got.size
        for item, hdr, data in got.others:
            if not data:
                # A bare status: 503 no responders, the stream (or its leader) is not there.
                code = hdr[9:12].decode(errors="replace") if hdr[8:9] == b" " else "?"
                self._retry(item, f"status {code} on {item[0].decode()}")
            elif self._slow_ack(item, data):
                done += 1
                size += len(item[1]) + len(item[2])
        if done:
            self._finished(done, size)

    def _slow_ack(self, item: _Item, data: bytes) -> bool:
        """A PubAck that is not a plain success: decode it. True if the message is done."""
        try:
            ack = json.loads(data)
        except ValueError:
            self._retry(item, "unreadable PubAck")
            return False
        err = ack.get("error") if isinstance(ack, dict) else None
        if not err:
            self.stats.acked += 1
            if ack.get("duplicate"):
                self.stats.duplicates += 1
            return True
        code, err_code = int(err.get("code", 0)), int(err.get("err_code", 0))
        text = f"{err.get('description')} (err_code {err_code}) on {item[0].decode()}"
        if code == 503 or err_code in TRANSIENT_ERR_CODES:
            self._retry(item, text)
            return False
        self._fail(PublishError(f"publish refused: {text}"))
        return True

    def _retry(self, item: _Item, why: str) -> None:
        """Resend later under a new token. Never blocks: it runs in the ack callback."""
        subject, hdr, data, attempts, _ = item
        if attempts > self.max_retries:
            self._fail(PublishError(f"no PubAck after {attempts} attempts: {why}"))
            self._finished(1, len(hdr) + len(data))
            return
        self.stats.retries += 1
        delay = min(1.0, 0.02 * (2 ** min(attempts + 1, 6)))
        again = (subject, hdr, data, attempts + 1, 0.0)
        asyncio.get_running_loop().call_later(delay, self._resend, again)

    def _resend(self, item: _Item) -> None:
        if self._fatal is not None:
            return
        subject, hdr, data, attempts, _ = item
        self._counter += 1
        token = self._counter
        deadline = time.monotonic() + self.ack_timeout_s
        self._inflight[token] = (subject, hdr, data, attempts, deadline)
        hlen = len(hdr)
        frame = b"HPUB %s %s%d %d %d\r\n%s%s\r\n" % (
            subject, self._reply_prefix, token, hlen, hlen + len(data), hdr, data
        )
        self._tasks.add(asyncio.ensure_future(self._write(frame)))
        self._tasks = {t for t in self._tasks if not t.done()}

    async def _watch(self) -> None:
        """Resend messages whose ack did not come in time (same id: the stream dedupes)."""
        tick = max(0.05, self.ack_timeout_s / 4)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            late = [t for t, item in self._inflight.items() if item[4] <= now]
            for token in late:
                item = self._inflight.pop(token, None)
                if item is not None:
                    self._retry(item, "PubAck timeout")

