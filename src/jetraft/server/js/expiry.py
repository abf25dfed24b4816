"""When a stream's messages expire (max_age, per-message TTL): one timer per stream, armed
for the earliest due time, whose firing proposes an ``Expire`` entry stamped with the
clock (the entry decides what goes, the same on every replica)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from jetraft.jetstream.stream import Stream

MAX_DELAY_S = 3600.0  # longer waits re-arm; the loop's timers need not reach that far


class ExpiryTimer:
    def __init__(self, stream: Callable[[], Stream], on_due: Callable[[int], None]) -> None:
        """``stream()``: the stream to watch; ``on_due(now_ns)``: propose the expiry."""
        self._stream = stream
        self._on_due = on_due
        self._timer: asyncio.TimerHandle | None = None
        self._due_ns = 0

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self) -> None:
        """(Re)arm for the earliest due time, if it is earlier than the one armed."""
        due = self._stream().next_expiry_ns()
        if due is None:
            return
        if self._timer is not None:
            if self._due_ns <= due:
                return
            self._timer.cancel()
        self._due_ns = due
        delay_s = max(due - time.time_ns(), 0) / 1e9 + 0.001
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(min(delay_s, MAX_DELAY_S), self._fire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._on_due(time.time_ns())
        self.arm()
