"""Interest and workqueue retention: which stored messages a stream's consumers still need.

A message of a ``limits`` stream stays until a limit removes it; under ``interest`` and
``workqueue`` retention it goes once no consumer needs it (every consumer whose filter
matches it acked it), and an ``interest`` stream does not even keep a message that no
consumer's filter matches. The stream state machine (``stream.py``) applies the decisions
(removes, tells its observers); these functions only look at the store and the consumers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Protocol

from jetraft.jetstream.store.types import StreamStore
from jetraft.protocol.subjects import subject_matches


class RetentionConsumer(Protocol):
    """What interest/workqueue retention needs from a consumer."""

    @property
    def name(self) -> str: ...

    @property
    def filters(self) -> tuple[str, ...]: ...

    def needs_ack(self, seq: int, subject: str) -> bool: ...


def has_interest(consumers: Iterable[RetentionConsumer], subject: str) -> bool:
    """Whether a consumer would ever see a message on ``subject`` (its filters match)."""
    for c in consumers:
        filters = c.filters
        if not filters or any(subject_matches(f, subject) for f in filters):
            return True
    return False


def unneeded(
    store: StreamStore, consumers: Collection[RetentionConsumer], seqs: Iterable[int]
) -> list[int]:
    """Of ``seqs``, those still stored that no consumer needs."""
    out = []
    for seq in seqs:
        msg = store.load(seq)
        if msg is None:
            continue
        if not any(c.needs_ack(seq, msg.subject) for c in consumers):
            out.append(seq)
    return out


def remove_unneeded(store: StreamStore, consumers: Collection[RetentionConsumer]) -> list[int]:
    """Remove every stored message no consumer needs; returns their sequences."""
    removed: list[int] = []
    first, last = store.bounds()
    seq = first
    while seq and seq <= last:
        msg = store.load_next(seq)
        if msg is None:
            break
        needed = any(c.needs_ack(msg.seq, msg.subject) for c in consumers)
        if not needed and store.remove(msg.seq):
            removed.append(msg.seq)
        seq = msg.seq + 1
    return removed
