"""The server's CPU per message on the Spark connector's two hot paths, without sockets.

    python -m benchmarks.js_intake [--msgs 200000] [--window 2000] [--batch 1000] [--repeat 3]

One jetraft server runs in this process (file storage, fsync before every PubAck as by
default) with one client connection whose transport is a stub: the test feeds it protocol
bytes the way socket reads would (64 KiB at a time) and counts the messages it writes back.
No load generator, network stack or other process shares the measurement, so the figure
(process CPU time per message, the fsync thread included) moves far less than the rates of
the end-to-end benchmarks on a busy machine, which makes it the tool for A/B comparisons
of the server's code.

- publish: HPUB frames as the Spark sink sends them (a Nats-Msg-Id header and a reply
  subject of their own each, 128 B payloads), at most ``window`` unacknowledged;
- direct get: ``$JS.API.DIRECT.GET`` batch requests of ``batch`` messages over the stored
  stream, four in flight, as the connector's reader sends them.

Not a test: numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from benchmarks.common import load_summary, machine_summary

READ_SIZE = 64 * 1024


class StubTransport:
    """Collects nothing, counts messages (MSG and HMSG frames) written to the client."""

    def __init__(self) -> None:
        self.msgs = 0
        self.eobs = 0
        self.changed = asyncio.Event()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self._count(data)

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self._count(part)

    def _count(self, data: bytes) -> None:
        self.msgs += data.count(b"MSG _INBOX.")
        self.eobs += data.count(b"204 EOB")
        self.changed.set()

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def _until(transport: StubTransport, done: Any) -> None:
    while not done():
        transport.changed.clear()
        await asyncio.wait_for(transport.changed.wait(), 30)


def _pub_frames(n: int, run: int) -> list[bytes]:
    data = b"x" * 128
    out = []
    for i in range(n):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: %d:0:0:%d\r\n\r\n" % (run, i)
        out.append(
            b"HPUB bench.data _INBOX.p.%d %d %d\r\n%s%s\r\n"
            % (i, len(hdr), len(hdr) + len(data), hdr, data)
        )
    return out


def _reads(frames: list[bytes]) -> list[bytes]:
    """The frames cut into socket-read-sized pieces (cut anywhere, as reads are)."""
    blob = b"".join(frames)
    return [blob[i : i + READ_SIZE] for i in range(0, len(blob), READ_SIZE)]


async def publish(conn: Any, transport: StubTransport, n: int, window: int, run: int) -> int:
    frames = _pub_frames(n, run)
    sizes = [len(f) for f in frames]
    base = transport.msgs
    sent = i = 0
    pending = b""
    while i < n or transport.msgs - base < n:
        # Feed up to the window (by whole frames), then wait for acks.
        while i < n and sent - (transport.msgs - base) < window:
            take, size = 0, 0
            while i + take < n and size < READ_SIZE and sent + take - (
                transport.msgs - base
            ) < window:
                size += sizes[i + take]
                take += 1
            pending = b"".join(frames[i : i + take])
            for k in range(0, len(pending), READ_SIZE):
                conn.data_received(pending[k : k + READ_SIZE])
            i += take
            sent += take
            await asyncio.sleep(0)
        if transport.msgs - base < n:
            transport.changed.clear()
            await asyncio.wait_for(transport.changed.wait(), 30)
    return n


async def direct_get(conn: Any, transport: StubTransport, n: int, batch: int) -> int:
    base_msgs, base_eobs = transport.msgs, transport.eobs
    starts = list(range(1, n + 1, batch))
    k = 0
    in_flight = 4
    while transport.eobs - base_eobs < len(starts):
        while k < len(starts) and k - (transport.eobs - base_eobs) < in_flight:
            body = json.dumps({"seq": starts[k], "batch": batch, "max_bytes": 4 << 20}).encode()
            conn.data_received(
                b"PUB $JS.API.DIRECT.GET.BENCH _INBOX.r.%d %d\r\n%s\r\n" % (k, len(body), body)
            )
            k += 1
        transport.changed.clear()
        await asyncio.wait_for(transport.changed.wait(), 30)
    return transport.msgs - base_msgs - len(starts)


async def main_async(args: argparse.Namespace) -> None:
    from jetraft.config.build import parse_config
    from jetraft.server.server import Server

    store = tempfile.mkdtemp(prefix="js-intake-")
    cfg = parse_config(
        f'host: "127.0.0.1"\nport: -1\njetstream {{ store_dir: "{store}" }}\n'
    )
    server = Server(cfg)
    await server.start()
    try:
        conn = server._new_client()
        transport = StubTransport()
        conn.connection_made(transport)
        conn.data_received(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
            b"SUB _INBOX.p.* 1\r\nSUB _INBOX.r.* 2\r\nSUB _INBOX.s.* 3\r\n"
        )
        for r in range(args.repeat):
            body = json.dumps(
                {"name": "BENCH", "subjects": ["bench.>"], "allow_direct": True}
            ).encode()
            for op in (b"DELETE", b"CREATE"):
                before = transport.msgs
                conn.data_received(
                    b"PUB $JS.API.STREAM.%s.BENCH _INBOX.s.%d %d\r\n%s\r\n"
                    % (op, r, len(body), body)
                )
                await _until(transport, lambda b=before: transport.msgs > b)
            for name, job in (
                ("publish", lambda r=r: publish(conn, transport, args.msgs, args.window, r)),
                ("direct get", lambda: direct_get(conn, transport, args.msgs, args.batch)),
            ):
                cpu0, t0 = time.process_time(), time.perf_counter()
                got = await job()
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
                if got != args.msgs:
                    raise AssertionError(f"{name}: {got} messages, expected {args.msgs}")
                print(
                    f"{name:<11} {args.msgs / wall:>10,.0f} msg/s  "
                    f"{cpu / args.msgs * 1e6:6.2f} us CPU/msg   ({load_summary()})"
                )
    finally:
        await server.stop()
        shutil.rmtree(store, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msgs", type=int, default=200_000)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(machine_summary())
    try:
        import uvloop

        uvloop.run(main_async(args))
    except ImportError:  # pragma: no cover - uvloop is a dependency of the server
        asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
