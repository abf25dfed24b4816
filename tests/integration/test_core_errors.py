"""Protocol violations get nats-server's -ERR text; the server stays up for everyone else."""

from __future__ import annotations

import asyncio
import socket
import threading

import nats
import pytest

from jetraft.server.server import Server

from .conftest import connect, wait_for


class Raw:
    """A bare TCP client for sending bytes no well-behaved client would send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, server: Server, connect_line: bool = True) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
        raw = cls(reader, writer)
        info = await raw.line()
        assert info.startswith(b"INFO {")
        if connect_line:
            writer.write(b'CONNECT {"verbose":false,"headers":true}\r\nPING\r\n')
            assert await raw.line() == b"PONG\r\n"
        return raw

    async def line(self) -> bytes:
        return await asyncio.wait_for(self.reader.readline(), 5)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_server(self) -> bool:
        rest = await asyncio.wait_for(self.reader.read(), 5)
        return rest == b"" or self.reader.at_eof()


@pytest.mark.parametrize(
    "garbage",
    [b"FOO bar\r\n", b"PUB\r\n", b"PUB foo bar baz qux\r\n", b"PUB foo x\r\n", b"\x00\xff\r\n"],
)
async def test_unknown_operation_closes_with_error(server: Server, garbage: bytes) -> None:
    raw = await Raw.open(server)
    await raw.send(garbage)
    assert await raw.line() == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert await raw.closed_by_server()


async def test_payload_must_end_with_crlf(server: Server) -> None:
    raw = await Raw.open(server)
    await raw.send(b"PUB foo 3\r\nabcdef\r\n")
    assert await raw.line() == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert await raw.closed_by_server()


async def test_max_payload_violation(make_server) -> None:  # type: ignore[no-untyped-def]
    server = await make_server("max_payload: 1024")
    raw = await Raw.open(server)
    await raw.send(b"PUB foo 2048\r\n")
    assert await raw.line() == b"-ERR 'Maximum Payload Violation'\r\n"
    assert await raw.closed_by_server()
    # nats-py refuses oversized payloads itself, using max_payload from INFO.
    nc = await connect(server)
    assert nc.max_payload == 1024
    with pytest.raises(nats.errors.MaxPayloadError):
        await nc.publish("foo", b"x" * 2000)
    await nc.close()


async def test_max_control_line(server: Server) -> None:
    raw = await Raw.open(server)
    await raw.send(b"SUB " + b"a" * 5000 + b" 1\r\n")
    assert await raw.line() == b"-ERR 'maximum control line exceeded'\r\n"
    assert await raw.closed_by_server()


async def test_invalid_subject_is_not_fatal(server: Server) -> None:
    raw = await Raw.open(server)
    await raw.send(b"SUB foo..bar 1\r\nPING\r\n")
    assert await raw.line() == b"-ERR 'Invalid Subject'\r\n"
    assert await raw.line() == b"PONG\r\n"


async def test_ping_pong_and_verbose(server: Server) -> None:
    raw = await Raw.open(server, connect_line=False)
    await raw.send(b'CONNECT {"verbose":true}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n')
    lines = [await raw.line() for _ in range(6)]
    assert lines == [b"+OK\r\n"] * 3 + [b"MSG a 1 2\r\n", b"hi\r\n", b"PONG\r\n"]


async def test_no_responders_wire_format(server: Server) -> None:
    raw = await Raw.open(server, connect_line=False)
    await raw.send(
        b'CONNECT {"headers":true,"no_responders":true}\r\n'
        b"SUB _INBOX.x.* 7\r\nPUB svc _INBOX.x.1 0\r\n\r\n"
    )
    head = await raw.line()
    n = 32 + len("svc")
    assert head == b"HMSG _INBOX.x.1 7 %d %d\r\n" % (n, n)
    block = await asyncio.wait_for(raw.reader.readexactly(n + 2), 5)
    assert block == b"NATS/1.0 503\r\nNats-Subject: svc\r\n\r\n\r\n"


async def test_garbage_client_does_not_hurt_others(server: Server) -> None:
    nc = await connect(server)
    sub = await nc.subscribe("steady")
    for _ in range(20):
        raw = await Raw.open(server)
        await raw.send(b"\x16\x03\x01 nonsense that is not NATS\r\n")
        assert await raw.closed_by_server()
    await nc.publish("steady", b"still here")
    assert (await sub.next_msg(timeout=2)).data == b"still here"
    fresh = await connect(server)
    assert fresh.is_connected
    await fresh.close()
    await nc.close()


async def test_stale_connection_is_closed(make_server) -> None:  # type: ignore[no-untyped-def]
    server = await make_server('ping_interval: "100ms"\nping_max: 2')
    raw = await Raw.open(server)
    # Never answer the server's PINGs.
    seen = []
    while True:
        line = await raw.line()
        if not line:
            break
        seen.append(line)
        if line.startswith(b"-ERR"):
            break
    assert seen.count(b"PING\r\n") == 2
    assert seen[-1] == b"-ERR 'Stale Connection'\r\n"
    assert await raw.closed_by_server()


def _fast_reader(
    port: int, expect_bytes: int, ready: threading.Event, progress: list[int]
) -> int:
    """A subscriber in its own thread that reads as fast as the kernel delivers; bytes read
    so far in ``progress[0]``."""
    sock = socket.create_connection(("127.0.0.1", port))
    f = sock.makefile("rb")
    f.readline()  # INFO
    sock.sendall(b"CONNECT {}\r\nSUB flood 1\r\nPING\r\n")
    assert f.readline() == b"PONG\r\n"
    ready.set()
    got = 0
    sock.settimeout(30)
    while got < expect_bytes:
        chunk = f.read1(1 << 20)
        if not chunk:
            break
        got += len(chunk)
        progress[0] = got
    sock.close()
    return got


async def test_slow_consumer_is_disconnected_alone(make_server) -> None:  # type: ignore[no-untyped-def]
    server = await make_server("max_pending: 262144")
    # A subscriber that never reads its socket.
    slow = await Raw.open(server)
    await slow.send(b"SUB flood 1\r\nPING\r\n")
    assert await slow.line() == b"PONG\r\n"
    payload = b"x" * 1024
    count = 10000  # 10 MB: more than the silent reader's kernel buffers plus max_pending
    frame = b"MSG flood 1 1024\r\n" + payload + b"\r\n"
    ready = threading.Event()
    progress = [0]
    healthy = asyncio.get_running_loop().run_in_executor(
        None, _fast_reader, server.client_port, count * len(frame), ready, progress
    )
    await asyncio.to_thread(ready.wait, 10)
    pub = await connect(server)
    # The publisher keeps pace with the healthy reader (a thread that a busy machine may
    # starve): it is a fast consumer, not one allowed to fall max_pending behind.
    window = 50
    for start in range(0, count, window):
        for _ in range(min(window, count - start)):
            await pub.publish("flood", payload)
        await pub.flush()
        behind = start * len(frame)
        await wait_for(lambda b=behind: progress[0] >= b, 30, "the healthy reader keeps up")
    assert await asyncio.wait_for(healthy, 30) == count * len(frame)
    assert server.stats.slow_consumers == 1
    assert await slow.closed_by_server()
    assert pub.is_connected
    await pub.close()
