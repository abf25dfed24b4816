"""How a RaftNode sends messages, and an in-memory hub connecting nodes of one process.

The Transport is fire-and-forget, like the network under RAFT: a message may be lost,
and the protocol recovers. The route-based transport (over the cluster's routes) comes
with clustering; tests and benchmarks use InMemoryHub, which can partition nodes and
drop messages per link.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import Protocol

from .messages import Message, decode_message, encode_message


class Transport(Protocol):
    def send(self, msg: Message) -> None:
        """Queue msg for msg.to; never blocks, may lose it."""

    def flush(self) -> None:
        """Put what was queued so far on its way now rather than later (a transport that
        batches sends per loop turn); never blocks."""


Receiver = Callable[[Message], None]


class InMemoryHub:
    """Delivers messages between nodes registered in this process, on the next loop turn.

    `partition(...)` cuts links between groups, `drop(a, b, p)` loses a share of the
    messages from a to b, `encode=True` round-trips every message through the codec.
    """

    def __init__(self, *, rng: random.Random | None = None, encode: bool = False) -> None:
        self._receivers: dict[str, Receiver] = {}
        self._cut: set[tuple[str, str]] = set()
        self._drop: dict[tuple[str, str], float] = {}
        self._rng = rng or random.Random(0)
        self._encode = encode
        self.delivered = 0
        self.dropped = 0

    def endpoint(self, node_id: str) -> InMemoryTransport:
        return InMemoryTransport(self, node_id)

    def register(self, node_id: str, receiver: Receiver) -> None:
        self._receivers[node_id] = receiver

    def unregister(self, node_id: str) -> None:
        self._receivers.pop(node_id, None)

    def partition(self, *groups: Iterable[str]) -> None:
        sets = [list(g) for g in groups]
        self._cut = set()
        for i, a in enumerate(sets):
            for b in sets[i + 1 :]:
                for x in a:
                    for y in b:
                        self._cut.add((x, y))
                        self._cut.add((y, x))

    def isolate(self, node_id: str) -> None:
        others = [n for n in self._receivers if n != node_id]
        self.partition([node_id], others)

    def heal(self) -> None:
        self._cut = set()
        self._drop = {}

    def drop(self, frm: str, to: str, probability: float) -> None:
        self._drop[(frm, to)] = probability

    def route(self, msg: Message) -> None:
        link = (msg.frm, msg.to)
        receiver = self._receivers.get(msg.to)
        if receiver is None or link in self._cut or (
            link in self._drop and self._rng.random() < self._drop[link]
        ):
            self.dropped += 1
            return
        if self._encode:
            msg = decode_message(encode_message(msg))
        self.delivered += 1
        asyncio.get_running_loop().call_soon(receiver, msg)


class InMemoryTransport:
    def __init__(self, hub: InMemoryHub, node_id: str) -> None:
        self.hub = hub
        self.node_id = node_id

    def send(self, msg: Message) -> None:
        self.hub.route(msg)

    def flush(self) -> None:
        pass  # every message is on its way already
