"""``allow_responses``: the reply subjects a client may publish to once, because a request
it received named them, as nats-server keeps them: each for ``max`` responses (and until
``expires``), pruned of used-up and expired ones every 4096 additions or once a second.

Beyond nats-server, a hard cap: requests that arrive faster than their permissions expire
cannot grow one responder's table without bound (the oldest, first to expire, go first).
Time is passed in (nanoseconds), so this is tested without a clock.
"""

from __future__ import annotations

PRUNE_COUNT = 4096
PRUNE_NS = 1_000_000_000
MAX_KEPT = 65536


class ReplyPermits:
    def __init__(
        self, prune_count: int = PRUNE_COUNT, prune_ns: int = PRUNE_NS, max_kept: int = MAX_KEPT
    ) -> None:
        # reply subject -> [responses left, expiry in ns or 0]; in the order granted, which
        # is the order of expiry (a subject granted again moves to the end).
        self._allowed: dict[str, list[int]] = {}
        self.since_prune = 0
        self._last_prune_ns = 0
        self.prune_count = prune_count
        self.prune_ns = prune_ns
        self.max_kept = max_kept

    def __len__(self) -> int:
        return len(self._allowed)

    def use(self, subject: str, now_ns: int) -> bool:
        """May the client publish to ``subject`` now? Spends one response when it may."""
        entry = self._allowed.get(subject)
        if entry is None:
            return False
        remaining, expires_ns = entry
        if expires_ns and now_ns > expires_ns:
            del self._allowed[subject]
            return False
        if remaining <= 1:
            del self._allowed[subject]
        else:
            entry[0] = remaining - 1
        return True

    def grant(self, reply: str, responses: int, expires_after_ns: int, now_ns: int) -> None:
        """``reply`` may be answered ``responses`` times (for ``expires_after_ns``, 0: no
        limit); prunes and caps the table as the module doc says."""
        allowed = self._allowed
        allowed.pop(reply, None)  # re-inserted last: the dict stays in expiry order
        allowed[reply] = [responses, now_ns + expires_after_ns if expires_after_ns else 0]
        self.since_prune += 1
        if self.since_prune > self.prune_count or now_ns - self._last_prune_ns > self.prune_ns:
            self.prune(now_ns)
        while len(self._allowed) > self.max_kept:
            del self._allowed[next(iter(self._allowed))]

    def prune(self, now_ns: int) -> None:
        self._allowed = {
            k: v for k, v in self._allowed.items() if v[0] > 0 and not (v[1] and now_ns > v[1])
        }
        self.since_prune = 0
        self._last_prune_ns = now_ns
