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
from nats.protocol.parser import MAX_CONTROL_LINE_SIZE, Parser

log = logging.getLogger("jetraft.spark")

# (subject, reply or b"", header block or b"", payload), as they came on the wire.
Frame = tuple[bytes, bytes, bytes, bytes]
# Called on the event loop with a run of consecutive frames for one subscription; must not
# block and should not raise (an error is logged and the run dropped: the read loop must live).
BulkSink = Callable[[list[Frame]], None]

_CRLF = b"\r\n"
_M, _H = ord("M"), ord("H")


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
        n = len(buf)
        pos = 0
        sinks = self.sinks
        run: list[Frame] = []
        run_sink: BulkSink | None = None
        self._need = 0
        try:
            while pos < n:
                eol = buf.find(_CRLF, pos)
                if eol < 0:
                    if n - pos > MAX_CONTROL_LINE_SIZE:
                        raise ProtocolError("nats: control line too long")
                    break
                op = buf[pos]
                if op != _M and op != _H:
                    if run_sink is not None:
                        _deliver(run_sink, run)
                        run, run_sink = [], None
                    await self._control(buf[pos:eol])
                    pos = eol + 2
                    continue
                args = buf[pos:eol].split()
                if len(args) == 5 and op == _H:
                    # HMSG subject sid hdr_len total, the usual answer (no reply): read here,
                    # one call less per message.
                    subject, reply = args[1], b""
                    try:
                        sid, hdr_len, total = int(args[2]), int(args[3]), int(args[4])
                    except ValueError:
                        raise ProtocolError("nats: malformed MSG") from None
                else:
                    subject, sid, reply, hdr_len, total = _msg_args(args, op == _H)
                start = eol + 2
                end = start + total
                if end + 2 > n:
                    self._need = end + 2 - pos
                    break
                hdr = buf[start : start + hdr_len] if hdr_len else b""
                payload = buf[start + hdr_len : end]
                pos = end + 2
                sink = sinks.get(sid)
                if sink is not None:
                    if sink is not run_sink:
                        if run_sink is not None:
                            _deliver(run_sink, run)
                        run, run_sink = [], sink
                    run.append((subject, reply, hdr, payload))
                    continue
                if run_sink is not None:
                    _deliver(run_sink, run)
                    run, run_sink = [], None
                await self.nc._process_msg(sid, subject, reply, payload, hdr or None)
        finally:
            if run_sink is not None:
                _deliver(run_sink, run)
        return pos

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


def _msg_args(args: list[bytes], with_headers: bool) -> tuple[bytes, int, bytes, int, int]:
    """``MSG subject sid [reply] size`` / ``HMSG subject sid [reply] hdr_size size``, split."""
    try:
        if with_headers:
            if len(args) == 6:
                return args[1], int(args[2]), args[3], int(args[4]), int(args[5])
            if len(args) == 5:
                return args[1], int(args[2]), b"", int(args[3]), int(args[4])
        elif len(args) == 5:
            return args[1], int(args[2]), args[3], 0, int(args[4])
        elif len(args) == 4:
            return args[1], int(args[2]), b"", 0, int(args[3])
    except ValueError:
        pass
    raise ProtocolError("nats: malformed MSG")


def _deliver(sink: BulkSink, run: list[Frame]) -> None:
    try:
        sink(run)
    except Exception:  # a bug in one sink must not stop the connection's read loop
        log.exception("jetstream connector: bulk message handler failed")
