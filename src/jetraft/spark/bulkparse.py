"""A replacement for nats-py's protocol parser that hands whole runs of messages to bulk sinks.

nats-py parses each MSG/HMSG with regular expressions and awaits one coroutine per message,
then builds a ``Msg`` and a header dict and queues it for a subscription task: tens of
microseconds a message, more than a bulk read or an acknowledged publish costs everything
else together. This parser takes the read buffer as a whole: frames for subscriptions that
registered a bulk sink are cut with ``bytes.find`` and slicing and handed over as one list per
run, with no coroutine, object or task per message; everything else (other subscriptions,
PING, PONG, INFO, -ERR) goes to the same nats-py client methods the original parser calls,
in wire order. No sockets here: the client calls ``parse`` with what it read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from nats.errors import ProtocolError
from nats.protocol.parser import Parser

from jetraft.spark._frames import BAD, CONTROL, END, cut
from jetraft.spark._frames import Frame as Frame

log = logging.getLogger("jetraft.spark")

# Called on the event loop with a run of consecutive frames for one subscription; must not
# block and should not raise (an error is logged and the run dropped: the read loop must live).
BulkSink = Callable[[list[Frame]], None]



class BulkParser(Parser):  # type: ignore[misc, unused-ignore]
    """nats-py ``Parser`` with the same interface (``parse``, ``reset``), for a client whose
    subscriptions may have bulk sinks (``sinks``: sid -> sink)."""

    def __init__(self, nc: Any) -> None:
        self.sinks: dict[int, BulkSink] = {}
        self._parts: list[bytes] = []
        self._have = 0
        self._need = 0
        self._generation = 0
        super().__init__(nc)

    def reset(self) -> None:
        """The connection is being replaced: whatever was buffered belongs to the old one."""
        super().reset()
        self._parts = []
        self._have = 0
        self._need = 0
        self._generation = getattr(self, "_generation", 0) + 1

    async def parse(self, data: bytes = b"") -> None:
        if data:
            self._parts.append(bytes(data))
            self._have += len(data)
        if self._have < self._need or not self._parts:
            return  # a large payload still arriving: join once it is complete
        buf = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        generation = self._generation
        pos = await self._consume(buf)
        if generation != self._generation:
            return  # reset while handling (an -ERR that makes the client reconnect)
        rest = buf[pos:]
        self._parts = [rest] if rest else []
        self._have = len(rest)

    async def _consume(self, buf: bytes) -> int:
        """Handle every complete item of ``buf``; returns where the incomplete rest starts."""
        pos = 0
        sinks = self.sinks
        self._need = 0
        while True:
            # The frames for bulk sinks are cut in one call (``_frames``, compiled in the
            # optional build); anything else stops it and is handled here, in wire order.
            found = cut(buf, pos, sinks)
            for sink, run in found.runs:
                _deliver(sink, run)
            kind = found.kind
            if kind == END:
                self._need = found.need
                return found.pos
            if kind == BAD:
                raise ProtocolError(found.error)
            pos = found.after
            if kind == CONTROL:
                await self._control(found.line)
            else:
                subject, sid, reply, hdr, payload = found.msg
                await self.nc._process_msg(sid, subject, reply, payload, hdr or None)

    async def _control(self, line: bytes) -> None:
        """Every non-message operation, handled as nats-py's own parser does."""
        nc = self.nc
        if line.startswith(b"PING"):
            await nc._process_ping()
        elif line.startswith(b"PONG"):
            await nc._process_pong()
        elif line.startswith(b"+OK"):
            return
        elif line.startswith(b"-ERR"):
            # nats-py expects the quoted text, lowercased ("'authorization violation'").
            await nc._process_err(line[4:].strip().decode("utf-8", "replace").lower())
        elif line.startswith(b"INFO"):
            await nc._process_info(json.loads(line[4:].strip()))
        else:
            raise ProtocolError("nats: unknown protocol")


def _deliver(sink: BulkSink, run: list[Frame]) -> None:
    try:
        sink(run)
    except Exception:  # a bug in one sink must not stop the connection's read loop
        log.exception("jetstream connector: bulk message handler failed")
