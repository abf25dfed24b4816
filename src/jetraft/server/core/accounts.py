"""Accounts and subscriptions: the subject spaces messages are routed in.

An account is a subject space with its own sublist. A subscription belongs to a
``Subscriber``: a client connection, a server component (``InternalClient``) or, in a
cluster, a route standing for the interest of the servers behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jetraft.protocol.client import PubBatch, split_body
from jetraft.protocol.mapping import SubjectMapper
from jetraft.server.core.sublist import SubList

GLOBAL_ACCOUNT = "$G"


class Subscriber(Protocol):
    """What routing needs from the owner of a subscription."""

    @property
    def closed(self) -> bool: ...

    @property
    def is_route(self) -> bool:
        """True for a route: its subscriptions are the remote servers' interest."""
        ...

    @property
    def frames_answers(self) -> bool:
        """True when the router may hand this owner a stretch of answers in one call
        (``deliver_answers``) after matching them all: delivering cannot change who is
        subscribed, except by closing (and a closed owner takes nothing more). Not so for a
        component whose handlers may subscribe or unsubscribe."""
        ...

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        """Write one message for ``sub``; False when it was filtered out (not delivered)."""
        ...

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        """Write runs ``first`` to ``stop`` of ``batch`` (client publishes, each run with its
        own subject and reply; consecutive runs often share the subject object; ``msgs``
        messages of ``size`` bytes in all) for ``sub``, in order; returns how many were
        delivered (always the first ones)."""
        ...

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        """Write ``answers[first:stop]`` ((subject, payload), no reply, no headers: the
        PubAcks of one inbox) for ``sub`` as ``deliver`` would one by one, in order;
        returns how many were delivered and their payload bytes."""
        ...

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        """Write ``items`` ((header block or None, payload), no reply: a slice of a
        DIRECT.GET batch) to ``subject`` for ``sub`` as ``deliver`` would one by one, in
        order, stopping before the first one ``deliver`` would refuse; returns how many
        were delivered and their bytes (header blocks and payloads). Called only on an
        owner that ``frames_answers``."""
        ...



def deliver_each(
    owner: Subscriber,
    sub: Subscription,
    answers: Sequence[tuple[str, bytes]],
    first: int,
    stop: int,
) -> tuple[int, int]:
    """``Subscriber.deliver_answers`` one ``deliver`` at a time, for owners that cannot take a
    run in one piece (or a connection whose permissions or message limit decide per message)."""
    msgs = size = 0
    for i in range(first, stop):
        subject, data = answers[i]
        if owner.deliver(sub, subject, None, None, data):
            msgs += 1
            size += len(data)
    return msgs, size


def deliver_run_each(
    owner: Subscriber, sub: Subscription, batch: PubBatch, first: int, stop: int
) -> int:
    """``Subscriber.deliver_run`` one ``deliver`` at a time, for owners that take no runs."""
    delivered = 0
    for line, body in batch.messages(first, stop):
        hdr, data = split_body(line, body)
        if owner.deliver(sub, line[0], line[1], hdr, data):
            delivered += 1
    return delivered


def deliver_replies_each(
    owner: Subscriber, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
) -> tuple[int, int]:
    """``Subscriber.deliver_replies`` one ``deliver`` at a time (permissions, a message limit
    or a client without headers decide per message)."""
    msgs = size = 0
    for hdr, data in items:
        if not owner.deliver(sub, subject, None, hdr, data):
            break
        msgs += 1
        size += len(data) if hdr is None else len(hdr) + len(data)
    return msgs, size


class Subscription:
    __slots__ = (
        "conn",
        "delivered",
        "head",
        "head_subject",
        "max_msgs",
        "queue",
        "sid",
        "subject",
        "weight",
    )

    def __init__(self, conn: Subscriber, subject: str, queue: str | None, sid: str) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.delivered = 0
        self.max_msgs = 0  # 0: no auto-unsubscribe
        self.weight = 1  # queue members a route subscription stands for
        # The owner's cache of b"MSG <subject> <sid>" for the last subject delivered.
        self.head_subject = ""
        self.head = b""


@dataclass(slots=True)
class AccountStats:
    in_msgs: int = 0
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0

    def add(self, in_msgs: int, in_bytes: int, out_msgs: int, out_bytes: int) -> None:
        """Count a batch's traffic at once (the router's batched paths)."""
        self.in_msgs += in_msgs
        self.in_bytes += in_bytes
        self.out_msgs += out_msgs
        self.out_bytes += out_bytes


@dataclass(eq=False, slots=True)
class Account:
    name: str
    sublist: SubList[Subscription] = field(default_factory=SubList)
    stats: AccountStats = field(default_factory=AccountStats)
    num_connections: int = 0
    # Subject mappings applied to what the account's clients publish (None: none).
    mapper: SubjectMapper | None = None
