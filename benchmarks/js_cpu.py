"""Server CPU per message on the JetStream hot paths, in one process, without sockets.

    python -m benchmarks.js_cpu [--msgs N] [--size BYTES]
                                [--only publish|publish-id|consume|direct-get]
                                [--repeat R] [--profile FILE]

A jetraft server runs in this process; one client connection is fed bytes directly
(``data_received``) and writes into memory instead of a socket, so what is measured is the
Python work of the server alone: parse, route, store, commit bookkeeping, delivery, acks.
The loop thread's CPU time (``time.thread_time``) is counted while the server works and not
while the benchmark builds or reads frames; fsyncs run in worker threads and are not counted
(their wall time still paces the publish run). The figure moves far less with the machine's
load than the socket benchmarks' rates do, which makes it the one to compare changes with.

* publish: async durable publish, ``window`` PUBs with a reply in flight (fed in one chunk
  per window refill), file storage, fsync before every PubAck (group commit);
* publish-id: the same with what the Spark sink and nats.py's ``js.publish`` send: HPUB
  frames with a ``Nats-Msg-Id`` header (dedupe on) and a reply subject of their own each;
* direct-get: a stream of N messages read back with ``$JS.API.DIRECT.GET`` batch requests of
  ``--direct-batch`` messages, four in flight, as the Spark connector's reader does;
* consume: a stream of N messages, a durable pull consumer with explicit acks; two pull
  requests of 256 in flight, every message acked with a plain publish to its ack subject,
  until the consumer's ack floor reaches N.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import machine_summary
from jetraft.config import parse_config
from jetraft.server.server import Server

MSG_RE = re.compile(rb"(H?MSG) ([^ \r\n]+) ([^ \r\n]+)(?: ([^ \r\n]+))?(?: (\d+))? (\d+)\r\n")


class Transport:
    """Collects what the server writes."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.closed = False
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.buf += data
        self.wrote.set()

    def writelines(self, data: list[bytes]) -> None:
        for d in data:
            self.buf += d
        self.wrote.set()

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Client:
    """A client connection without a socket; ``feed`` counts the loop thread's CPU."""

    def __init__(self, server: Server) -> None:
        self.conn = server._new_client()
        self.t = Transport()
        self.conn.connection_made(self.t)  # type: ignore[arg-type]
        self.server_cpu = 0.0
        self.feed(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')

    def feed(self, data: bytes) -> None:
        t0 = time.thread_time()
        self.conn.data_received(data)
        self.server_cpu += time.thread_time() - t0

    def take(self) -> bytes:
        out = bytes(self.t.buf)
        self.t.buf.clear()
        self.t.wrote.clear()
        return out


class Meter:
    """Loop-thread CPU while the loop runs (not while the benchmark's own code does)."""

    def __init__(self) -> None:
        self.cpu = 0.0

    async def turn(self) -> None:
        t0 = time.thread_time()
        await asyncio.sleep(0)
        self.cpu += time.thread_time() - t0

    async def until(self, cond: Callable[[], bool], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not get there in time")
            t0 = time.thread_time()
            await asyncio.sleep(0.0005)
            self.cpu += time.thread_time() - t0

    async def output(self, t: Transport, timeout_s: float = 60.0) -> None:
        """Until the server wrote something (sleeping in the loop meanwhile)."""
        t0 = time.thread_time()
        await asyncio.wait_for(t.wrote.wait(), timeout_s)
        self.cpu += time.thread_time() - t0


def frames(data: bytes) -> list[tuple[bytes, bytes, bytes | None, bytes]]:
    """(subject, reply, header block or None, payload) of every MSG/HMSG in ``data``."""
    out = []
    pos = 0
    while True:
        m = MSG_RE.search(data, pos)
        if m is None:
            return out
        op, subject, _sid, a, b, total = m.groups()
        start = m.end()
        n = int(total)
        if op == b"HMSG":
            hlen = int(b) if b is not None else int(a)
            reply = a if b is not None else b""
            body = data[start : start + n]
            out.append((subject, reply, body[:hlen], body[hlen:]))
        else:
            reply = a or b""
            out.append((subject, reply, None, data[start : start + n]))
        pos = start + n + 2


async def request(cli: Client, meter: Meter, subject: str, body: bytes) -> dict[str, Any]:
    pub = b"PUB %s _INBOX.setup %d\r\n%s\r\n" % (subject.encode(), len(body), body)
    cli.feed(b"SUB _INBOX.setup 999\r\n" + pub)
    got: list[bytes] = []

    def answered() -> bool:
        for subj, _r, _h, data in frames(cli.take()):
            if subj == b"_INBOX.setup":
                got.append(data)
        return bool(got)

    await meter.until(answered)
    cli.feed(b"UNSUB 999\r\n")
    reply: dict[str, Any] = json.loads(got[0])
    if "error" in reply:
        raise RuntimeError(reply)
    return reply


async def start(store: str) -> Server:
    cfg = parse_config(f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{store}" }}\n')
    server = Server(cfg)
    await server.start()
    return server


def _id_frames(n: int, size: int) -> list[bytes]:
    """HPUB frames with a Nats-Msg-Id and a reply subject of their own each."""
    data = b"x" * size
    out = []
    for i in range(n):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: 0123456789abcdef:0:0:%d\r\n\r\n" % i
        head = b"HPUB b.pub _INBOX.acks.%d %d %d\r\n" % (i, len(hdr), len(hdr) + size)
        out.append(head + hdr + data + b"\r\n")
    return out


async def bench_publish(n: int, size: int, window: int, ids: bool = False) -> tuple[float, float]:
    """(server CPU us/msg, msgs/s) of async durable publish (``ids``: as publish-id)."""
    store = tempfile.mkdtemp(prefix="jetraft-cpu-")
    server = await start(store)
    try:
        cli = Client(server)
        meter = Meter()
        await request(cli, meter, "$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.pub"]}')
        cli.feed(b"SUB _INBOX.acks.* 1\r\n")
        frame = b"PUB b.pub _INBOX.acks.x %d\r\n%s\r\n" % (size, b"x" * size)
        id_frames = _id_frames(n, size) if ids else []
        cli.server_cpu = meter.cpu = 0.0
        sent = acked = 0
        t0 = time.perf_counter()
        while acked < n:
            more = min(window - (sent - acked), n - sent)
            if more > 0:
                cli.feed(b"".join(id_frames[sent : sent + more]) if ids else frame * more)
                sent += more
            await meter.turn()
            out = cli.take()
            if out:
                if b'"error"' in out or b'"duplicate"' in out:
                    raise RuntimeError(out[:300])
                acked += out.count(b"MSG _INBOX.acks.")
            elif sent - acked >= window or sent == n:
                await meter.output(cli.t)
        elapsed = time.perf_counter() - t0
        if os.environ.get("JS_CPU_SPLIT"):
            print(f"  feed {cli.server_cpu / n * 1e6:.2f} us/msg, loop {meter.cpu / n * 1e6:.2f}")
        return (cli.server_cpu + meter.cpu) / n * 1e6, n / elapsed
    finally:
        await server.stop()
        shutil.rmtree(store, ignore_errors=True)


async def _filled_stream(cli: Client, meter: Meter, n: int, size: int,
                         extra: bytes = b"") -> None:
    """Stream B on subject b.js (`extra`: more config fields), holding n messages."""
    config = b'{"name":"B","subjects":["b.js"]%s}' % extra
    await request(cli, meter, "$JS.API.STREAM.CREATE.B", config)
    frame = b"PUB b.js %d\r\n%s\r\n" % (size, b"x" * size)
    for i in range(0, n, 1000):
        cli.feed(frame * min(1000, n - i))
        await meter.turn()
    info = await request(cli, meter, "$JS.API.STREAM.INFO.B", b"")
    while info["state"]["messages"] < n:
        info = await request(cli, meter, "$JS.API.STREAM.INFO.B", b"")


async def bench_direct_get(n: int, size: int, batch: int) -> tuple[float, float]:
    """(server CPU us/msg, msgs/s) of reading a stream back with batched direct gets."""
    store = tempfile.mkdtemp(prefix="jetraft-cpu-")
    server = await start(store)
    try:
        cli = Client(server)
        meter = Meter()
        await _filled_stream(cli, meter, n, size, b',"allow_direct":true')
        cli.feed(b"SUB _INBOX.get.* 8\r\n")
        starts = list(range(1, n + 1, batch))
        cli.server_cpu = meter.cpu = 0.0
        got = ended = asked = 0
        t0 = time.perf_counter()
        while ended < len(starts):
            out: list[bytes] = []
            while asked < len(starts) and asked - ended < 4:
                req = b'{"seq":%d,"batch":%d,"max_bytes":4194304}' % (starts[asked], batch)
                out.append(
                    b"PUB $JS.API.DIRECT.GET.B _INBOX.get.%d %d\r\n%s\r\n" % (asked, len(req), req)
                )
                asked += 1
            if out:
                cli.feed(b"".join(out))
            await meter.turn()
            data = cli.take()
            if not data:
                await meter.output(cli.t)
                continue
            # Every answer but the batch's closing status carries the stored message.
            got += data.count(b"HMSG _INBOX.get.")
            eobs = data.count(b" 204 EOB")
            got -= eobs
            ended += eobs
        elapsed = time.perf_counter() - t0
        if got != n:
            raise RuntimeError(f"direct get returned {got} messages, expected {n}")
        return (cli.server_cpu + meter.cpu) / n * 1e6, n / elapsed
    finally:
        await server.stop()
        shutil.rmtree(store, ignore_errors=True)


async def bench_consume(n: int, size: int, batch: int) -> tuple[float, float]:
    """(server CPU us/msg, msgs/s) of pull consume with explicit acks."""
    store = tempfile.mkdtemp(prefix="jetraft-cpu-")
    server = await start(store)
    try:
        cli = Client(server)
        meter = Meter()
        await _filled_stream(cli, meter, n, size)
        body = json.dumps(
            {"stream_name": "B", "config": {"durable_name": "C", "ack_policy": "explicit"}}
        ).encode()
        await request(cli, meter, "$JS.API.CONSUMER.CREATE.B.C", body)
        cli.feed(b"SUB _INBOX.pull 7\r\n")
        req = json.dumps({"batch": batch, "expires": 5_000_000_000}).encode()
        pull = b"PUB $JS.API.CONSUMER.MSG.NEXT.B.C _INBOX.pull %d\r\n%s\r\n" % (len(req), req)
        cli.server_cpu = meter.cpu = 0.0
        got = in_flight = 0
        t0 = time.perf_counter()
        while got < n:
            out: list[bytes] = []
            while in_flight < 2 * batch and got + in_flight < n:
                out.append(pull)
                in_flight += batch
            if out:
                cli.feed(b"".join(out))
            await meter.turn()
            data = cli.take()
            if not data:
                await meter.output(cli.t)
                continue
            acks = []
            for _subj, reply, hdr, _payload in frames(data):
                if hdr is not None and hdr.startswith(b"NATS/1.0 4"):
                    raise RuntimeError(hdr)
                if reply.startswith(b"$JS.ACK."):
                    got += 1
                    in_flight -= 1
                    acks.append(b"PUB %s 0\r\n\r\n" % reply)
            if acks:
                cli.feed(b"".join(acks))
        floor: list[int] = [0]

        async def acked() -> None:
            info = await request(cli, meter, "$JS.API.CONSUMER.INFO.B.C", b"")
            floor[0] = info["ack_floor"]["stream_seq"]

        await acked()
        while floor[0] < n:
            await acked()
        elapsed = time.perf_counter() - t0
        if os.environ.get("JS_CPU_SPLIT"):
            print(f"  feed {cli.server_cpu / n * 1e6:.2f} us/msg, loop {meter.cpu / n * 1e6:.2f}")
        return (cli.server_cpu + meter.cpu) / n * 1e6, n / elapsed
    finally:
        await server.stop()
        shutil.rmtree(store, ignore_errors=True)


CASES = ["publish", "publish-id", "consume", "direct-get"]


def run(what: str, args: argparse.Namespace) -> tuple[float, float]:
    if what == "publish":
        coro = bench_publish(args.msgs, args.size, args.window)
    elif what == "publish-id":
        coro = bench_publish(args.msgs, args.size, args.window, ids=True)
    elif what == "direct-get":
        coro = bench_direct_get(args.msgs, args.size, args.direct_batch)
    else:
        coro = bench_consume(args.msgs, args.size, args.batch)
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--msgs", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--window", type=int, default=512, help="publishes in flight")
    ap.add_argument("--batch", type=int, default=256, help="pull request batch")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is shown")
    ap.add_argument("--direct-batch", type=int, default=1000, help="direct get batch")
    ap.add_argument("--only", choices=CASES)
    ap.add_argument("--profile", help="write a cProfile of one run of each case here")
    args = ap.parse_args()
    print(machine_summary())
    print(f"load average {os.getloadavg()[0]:.1f}; {args.msgs} msgs of {args.size} B, file storage")
    for what in [args.only] if args.only else CASES:
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(run, what, args)
            prof.dump_stats(f"{args.profile}.{what}")
        results = [run(what, args) for _ in range(args.repeat)]
        cpu = min(r[0] for r in results)
        rate = max(r[1] for r in results)
        best = f"best of {args.repeat}"
        print(f"{what:<10} server CPU {cpu:6.2f} us/msg ({best}); {rate:>9,.0f} msg/s")


if __name__ == "__main__":
    main()
