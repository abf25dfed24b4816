"""A fake network for the simulator: delay, drop, duplicate, reorder, cut links.

Time is counted in steps. A message sent at step t is delivered at t + delay, delay drawn
from [1, max_delay_steps] (so messages overtake each other), and now and then much
longer (`long_delay` of them wait up to long_delay_steps: longer than an election
timeout). Links are directed: a partition cuts both directions, a one-way cut only one;
a flaky link loses a share of its messages. A message is checked against the cuts when
it is delivered, as a real network loses what is in flight when a link goes down.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Addressed(Protocol):
    """What travels: a RAFT message, or an envelope naming the group it belongs to."""

    @property
    def frm(self) -> str: ...

    @property
    def to(self) -> str: ...


M = TypeVar("M", bound=Addressed)


@dataclass
class NetConfig:
    drop: float = 0.05
    duplicate: float = 0.02
    max_delay_steps: int = 8
    long_delay: float = 0.0  # share of messages delayed up to long_delay_steps
    long_delay_steps: int = 0


class Network(Generic[M]):
    def __init__(self, rng: random.Random, cfg: NetConfig) -> None:
        self.rng = rng
        self.cfg = cfg
        self._queue: list[tuple[int, int, M]] = []
        self._seq = 0
        self.cut: set[tuple[str, str]] = set()  # directed links that lose everything
        self.flaky: dict[tuple[str, str], float] = {}  # directed links that lose a share
        self.sent = 0
        self.dropped = 0

    def send(self, now: int, msg: M) -> None:
        rng, cfg = self.rng, self.cfg
        self.sent += 1
        loss = self.flaky.get((msg.frm, msg.to), 0.0)
        if rng.random() < cfg.drop or (loss and rng.random() < loss):
            self.dropped += 1
            return
        copies = 2 if rng.random() < cfg.duplicate else 1
        for _ in range(copies):
            self._seq += 1
            if cfg.long_delay and rng.random() < cfg.long_delay:
                at = now + rng.randint(cfg.max_delay_steps, cfg.long_delay_steps)
            else:
                at = now + rng.randint(1, cfg.max_delay_steps)
            heapq.heappush(self._queue, (at, self._seq, msg))

    def due(self, now: int) -> list[M]:
        """Messages to deliver at this step, in delivery order (cut links dropped)."""
        out: list[M] = []
        q = self._queue
        while q and q[0][0] <= now:
            _, _, msg = heapq.heappop(q)
            if (msg.frm, msg.to) in self.cut:
                self.dropped += 1
                continue
            out.append(msg)
        return out

    def partition(self, groups: list[list[str]]) -> None:
        self.cut = set()
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        self.cut.add((x, y))
                        self.cut.add((y, x))

    def cut_one_way(self, frm: str, to: str) -> None:
        self.cut.add((frm, to))

    def heal(self) -> None:
        self.cut = set()
        self.flaky = {}

    def pending(self) -> int:
        return len(self._queue)
