"""A minimal NATS client over a raw socket, for tests that check the exact frames a server
writes (MSG/HMSG lines, sids, header blocks) rather than what a client library makes of
them."""

from __future__ import annotations

import asyncio
import json
from typing import NamedTuple

TIMEOUT_S = 10.0


class Frame(NamedTuple):
    subject: str
    sid: str
    reply: str | None
    hdr: bytes | None
    payload: bytes


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int, **options: object) -> RawClient:
        reader, writer = await asyncio.open_connection(host, port)
        info = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
        assert info.startswith(b"INFO "), info
        client = cls(reader, writer)
        writer.write(b"CONNECT " + json.dumps({"verbose": False, **options}).encode() + b"\r\n")
        await client.ping()
        return client

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def ping(self) -> None:
        """PING and read up to the PONG (nothing else may come first): the server has handled
        everything sent before."""
        await self.send(b"PING\r\n")
        line = await asyncio.wait_for(self.reader.readline(), TIMEOUT_S)
        assert line == b"PONG\r\n", line

    async def read_frames(self, count: int) -> list[Frame]:
        """Read ``count`` MSG/HMSG frames, checking each one's sizes and terminator."""
        out: list[Frame] = []
        while len(out) < count:
            try:
                line = await asyncio.wait_for(self.reader.readline(), TIMEOUT_S)
            except TimeoutError:
                raise AssertionError(_short_of(out, count)) from None
            if not line:
                raise ConnectionError("the server closed the connection")
            assert line.endswith(b"\r\n"), line
            args = line[:-2].decode().split(" ")
            if args[0] == "MSG" and len(args) in (4, 5):
                size, hdr_len = int(args[-1]), -1
            elif args[0] == "HMSG" and len(args) in (5, 6):
                size, hdr_len = int(args[-1]), int(args[-2])
            else:
                raise AssertionError(f"unexpected line {line!r}")
            reply = args[3] if len(args) == (5 if hdr_len < 0 else 6) else None
            body = await asyncio.wait_for(self.reader.readexactly(size + 2), TIMEOUT_S)
            assert body[-2:] == b"\r\n", body
            hdr = body[:hdr_len] if hdr_len >= 0 else None
            out.append(Frame(args[1], args[2], reply, hdr, body[max(hdr_len, 0) : -2]))
        return out

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def _short_of(got: list[Frame], count: int) -> str:
    """What arrived before a wait for frames timed out: per sid, how many and the last one."""
    seen: dict[str, tuple[int, str]] = {}
    for f in got:
        n, _ = seen.get(f.sid, (0, ""))
        seen[f.sid] = (n + 1, f.subject)
    parts = ", ".join(f"sid {sid}: {n} (last on {subj})" for sid, (n, subj) in seen.items())
    return f"timed out after {len(got)} of {count} frames; {parts or 'none'}"
