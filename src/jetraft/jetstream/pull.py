"""Pull requests (``CONSUMER.MSG.NEXT``): parsing and the waiting queue, sans I/O.

The request body's Struct lives in ``pull_json`` (this module may be compiled). Every
decision that ends a request produces a ``Status`` (the empty status message to send to
the request's reply subject); the caller publishes them. Time is passed in (``now_ns``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from jetraft.jetstream.pull_json import PULL_DECODER
from jetraft.protocol.headers import encode_headers

PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"


class Status(NamedTuple):
    """An empty status message for ``reply``."""

    reply: str
    hdr: bytes


def status(
    reply: str, code: int, description: str, items: tuple[tuple[str, str], ...] = ()
) -> Status:
    return Status(reply, encode_headers(items, status=code, description=description))


def heartbeat_hdr(last_dseq: int, last_sseq: int, stalled: str = "") -> bytes:
    items = [("Nats-Last-Consumer", str(last_dseq)), ("Nats-Last-Stream", str(last_sseq))]
    if stalled:
        items.append(("Nats-Consumer-Stalled", stalled))
    return encode_headers(items, status=100, description="Idle Heartbeat")


class PullError(Exception):
    """A request refused before queueing: reply with ``code description``."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


@dataclass(frozen=True, slots=True)
class PullRequest:
    batch: int = 1
    expires_ns: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    idle_heartbeat_ns: int = 0
    group: str = ""  # priority group ("" = none given)
    pin_id: str = ""  # the Nats-Pin-Id a pinned client got before ("" = none)


def parse_pull_request(data: bytes) -> PullRequest:
    """Empty body = one message; a bare integer = batch; else the JSON request."""
    body = data.strip()
    if not body:
        return PullRequest()
    if body[:1] == b"{":
        try:
            req = PULL_DECODER.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise PullError(400, f"Bad Request - {exc}") from None
        expires = req.expires or 0
        hb = req.idle_heartbeat or 0
        if hb > 0 and hb * 2 > expires:
            raise PullError(400, "Bad Request - heartbeat value too large")
        return PullRequest(
            batch=req.batch if req.batch and req.batch > 0 else 1,
            expires_ns=max(expires, 0),
            max_bytes=max(req.max_bytes or 0, 0),
            no_wait=bool(req.no_wait),
            idle_heartbeat_ns=max(hb, 0),
            group=req.group or "",
            pin_id=req.id or "",
        )
    try:
        return PullRequest(batch=int(body))
    except ValueError:
        return PullRequest()


@dataclass(slots=True)
class WaitingRequest:
    reply: str
    n: int  # messages still wanted
    b: int  # bytes still allowed (0 = no byte limit)
    expires_at_ns: int  # 0 = never
    no_wait: bool
    hb_ns: int
    next_hb_ns: int
    received_ns: int
    d: int = 0  # messages delivered so far
    group: str = ""
    pin_id: str = ""


@dataclass(slots=True)
class Pin:
    """priority_policy pinned_client: the one requester (by pin id) that gets messages.

    The pin goes to the first plain request when none is held, and lapses when the pinned
    client sends no pull request for ``ttl_ns`` (the consumer's priority_timeout); then the
    next requester takes over. Requests that name another pin id are ended with 423."""

    ttl_ns: int
    new_id: Callable[[], str]
    current: str = ""
    group: str = ""
    since_ns: int = 0
    expires_at_ns: int = 0

    def assign(self, group: str, now_ns: int) -> str:
        self.current = self.new_id()
        self.group = group
        self.since_ns = now_ns
        self.expires_at_ns = now_ns + self.ttl_ns
        return self.current

    def refresh(self, now_ns: int) -> None:
        self.expires_at_ns = now_ns + self.ttl_ns

    def clear(self) -> None:
        self.current = self.group = ""
        self.since_ns = self.expires_at_ns = 0

    def lapse(self, now_ns: int) -> bool:
        """Drop a pin whose client went quiet; True when one was dropped."""
        if self.current and now_ns >= self.expires_at_ns:
            self.clear()
            return True
        return False


def pending_items(wr: WaitingRequest) -> tuple[tuple[str, str], ...]:
    return ((PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b)))


class WaitQueue:
    """Queued pull requests, served in arrival order."""

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self.reqs: list[WaitingRequest] = []
        self.pin: Pin | None = None  # set for priority_policy pinned_client
        self.last_ns = 0  # last time a request arrived or a message went out (inactivity)

    def __len__(self) -> int:
        return len(self.reqs)

    def is_full(self) -> bool:
        return self.max_waiting > 0 and len(self.reqs) >= self.max_waiting

    def add(self, wr: WaitingRequest) -> bool:
        if self.is_full():
            return False
        self.reqs.append(wr)
        return True

    def pending_batch(self) -> int:
        return sum(wr.n for wr in self.reqs)

    def process(self, now_ns: int, eos: bool, has_interest: Callable[[str], bool]) -> list[Status]:
        """Expire requests (408), finish no_wait ones at end of stream (404), drop those
        whose requester left. Heartbeats are separate (``heartbeats``)."""
        out: list[Status] = []
        keep: list[WaitingRequest] = []
        for wr in self.reqs:
            expired = wr.expires_at_ns and now_ns >= wr.expires_at_ns
            if expired:
                out.append(status(wr.reply, 408, "Request Timeout", pending_items(wr)))
                continue
            if eos and wr.no_wait and (not wr.expires_at_ns or wr.d > 0):
                out.append(status(wr.reply, 404, "No Messages"))
                continue
            if not has_interest(wr.reply):
                continue
            keep.append(wr)
        self.reqs = keep
        return out

    def heartbeats(self, now_ns: int, hdr: Callable[[], bytes]) -> list[Status]:
        out: list[Status] = []
        for wr in self.reqs:
            if wr.hb_ns and now_ns >= wr.next_hb_ns:
                out.append(Status(wr.reply, hdr()))
                wr.next_hb_ns = now_ns + wr.hb_ns
        return out

    def next_deadline(self) -> int:
        """The earliest expiry or heartbeat among queued requests (0 = none)."""
        best = self.pin.expires_at_ns if self.pin is not None and self.pin.current else 0
        for wr in self.reqs:
            for t in (wr.expires_at_ns, wr.next_hb_ns if wr.hb_ns else 0):
                if t and (not best or t < best):
                    best = t
        return best

    def take(
        self, size: int, now_ns: int, has_interest: Callable[[str], bool]
    ) -> tuple[WaitingRequest | None, list[Status]]:
        """The request that gets a message of ``size`` bytes, charged for it.

        Requests that expired, lost interest, or cannot take a message this large are
        finished on the way (with the status their requesters expect)."""
        out: list[Status] = []
        reqs, pin = self.reqs, self.pin
        i = 0
        while i < len(reqs):
            wr = reqs[i]
            if wr.expires_at_ns and now_ns >= wr.expires_at_ns:
                out.append(status(wr.reply, 408, "Request Timeout", pending_items(wr)))
                reqs.pop(i)
                continue
            if pin is not None and wr.pin_id != pin.current:
                if wr.pin_id:
                    # Pinned before, but the pin moved on (or lapsed): the client learns it.
                    out.append(status(wr.reply, 423, "Nats-Wrong-Pin-Id", pending_items(wr)))
                    reqs.pop(i)
                else:
                    i += 1  # not the pinned client: waits its turn
                continue
            if wr.b > 0 and size > wr.b:
                out.append(
                    status(wr.reply, 409, "Message Size Exceeds MaxBytes", pending_items(wr))
                )
                reqs.pop(i)
                continue
            if not has_interest(wr.reply):
                reqs.pop(i)
                continue
            if pin is not None and not pin.current:
                wr.pin_id = pin.assign(wr.group, now_ns)
            if wr.b > 0:
                wr.b -= size
                if wr.b == 0:
                    wr.n = 1  # this one fits exactly; nothing more after it
            wr.n -= 1
            wr.d += 1
            reqs.pop(i)
            if wr.n > 0:
                # Still wanting more: to the back of the line, so waiting requesters take
                # turns (nats-server's wait queue does the same).
                reqs.append(wr)
                if wr.hb_ns:
                    wr.next_hb_ns = now_ns + wr.hb_ns
            self.last_ns = now_ns
            return wr, out
        return None, out

    def drain(self) -> list[WaitingRequest]:
        reqs, self.reqs = self.reqs, []
        return reqs
