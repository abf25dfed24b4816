"""JetStream pull-consume with acks, jetraft beside nats-server, same load generator.

    python -m benchmarks.js_consume [--msgs N] [--batch B] [--only jetraft|nats-server]
                                    [--sync-acks] [--rounds R] [--py-spy DIR]

Setup (not timed): a file-storage stream is filled with N messages and a durable pull
consumer with explicit acks is created. Timed: one raw-socket client keeps two pull requests
of ``batch`` messages outstanding on ``$JS.API.CONSUMER.MSG.NEXT``, acks every message as it
arrives (a plain publish to its ack subject), and stops when the consumer's ack floor reaches
N (so the server's ack processing is inside the measurement). Rate = N / elapsed.

``--sync-acks``: every ack is sent as a request (a double ack, what nats-py's ``ack_sync``
sends, without waiting for each answer) and the run ends when all N acks were confirmed;
jetraft confirms an ack only once it is on disk (group-committed consumer state).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import (
    Profiler,
    cpu_seconds,
    free_port,
    load_summary,
    machine_summary,
    nats_server_binary,
    wait_port,
)

STREAM = "BENCH"
SUBJECT = "bench.js"
CONSUMER = "C"
SIZES = [128, 1024]


def start_server(kind: str, port: int, store: str) -> subprocess.Popen[bytes]:
    if kind == "jetraft":
        conf = os.path.join(store, "jetraft.conf")
        with open(conf, "w") as f:
            f.write(f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{store}/js" }}\n')
        cmd = [sys.executable, "-m", "jetraft", "server", "-c", conf]
    else:
        addr = ["-a", "127.0.0.1", "-p", str(port)]
        cmd = [nats_server_binary(), *addr, "-js", "-sd", f"{store}/js"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


class Raw:
    """A minimal blocking NATS protocol client (no client library in the timed loop)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
        self.sock.sendall(b"PING\r\n")
        while self._line() != b"PONG":
            pass

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def frames(self) -> list[tuple[bytes, bytes | None, bytes]]:
        """Every complete MSG/HMSG now buffered (blocks for at least one):
        (reply, header block or None, payload)."""
        out: list[tuple[bytes, bytes | None, bytes]] = []
        while not out:
            if not self.buf:
                self._fill()
            while True:
                end = self.buf.find(b"\r\n")
                if end < 0:
                    break
                head = self.buf[:end].split()
                op = head[0].upper() if head else b""
                if op in (b"PING", b"PONG", b"+OK"):
                    if op == b"PING":
                        self.sock.sendall(b"PONG\r\n")
                    self.buf = self.buf[end + 2 :]
                    continue
                if op not in (b"MSG", b"HMSG"):
                    raise RuntimeError(f"unexpected {self.buf[:end]!r}")
                total = int(head[-1])
                start = end + 2
                if len(self.buf) < start + total + 2:
                    break
                body = self.buf[start : start + total]
                if op == b"HMSG":
                    hlen = int(head[-2])
                    reply = head[3] if len(head) == 6 else None
                    out.append((reply or b"", body[:hlen], body[hlen:]))
                else:
                    reply = head[3] if len(head) == 5 else None
                    out.append((reply or b"", None, body))
                self.buf = self.buf[start + total + 2 :]
            if not out:
                self._fill()
        return out


def consume(
    port: int,
    n: int,
    batch: int,
    sync_acks: bool = False,
    host: str = "127.0.0.1",
    stream: str = STREAM,
) -> float:
    raw = Raw(port, host)
    inbox = b"_INBOX.bench"
    raw.sock.sendall(b"SUB " + inbox + b" 1\r\n")
    acked_inbox = b"_INBOX.acked"
    raw.sock.sendall(b"SUB " + acked_inbox + b" 2\r\n")
    ack_tail = b" " + acked_inbox if sync_acks else b""
    confirmed = 0
    req = json.dumps({"batch": batch, "expires": 5_000_000_000}).encode()
    pull = b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s %s %d\r\n%s\r\n" % (
        stream.encode(),
        CONSUMER.encode(),
        inbox,
        len(req),
        req,
    )
    got = 0
    in_flight = 0
    t0 = time.perf_counter()
    out: list[bytes] = []
    while got < n or (sync_acks and confirmed < n):
        while in_flight < 2 * batch and got + in_flight < n:
            out.append(pull)
            in_flight += batch
        if out:
            raw.sock.sendall(b"".join(out))
            out.clear()
        for reply, hdr, _payload in raw.frames():
            if hdr is not None and hdr.startswith(b"NATS/1.0 4"):
                # 408/409: the request ended early; account for what it did not deliver.
                pending = hdr.split(b"Nats-Pending-Messages: ")
                if len(pending) > 1:
                    in_flight -= int(pending[1].split(b"\r\n")[0])
                continue
            if not reply.startswith(b"$JS.ACK."):
                if not reply and hdr is None and not _payload:
                    confirmed += 1  # an ack's answer (only sent with --sync-acks)
                continue
            got += 1
            in_flight -= 1
            out.append(b"PUB %s%s 0\r\n\r\n" % (reply, ack_tail))
    raw.sock.sendall(b"".join(out) + b"PING\r\n")
    elapsed = time.perf_counter() - t0
    raw.sock.close()
    return elapsed


async def setup(port: int, n: int, size: int) -> None:
    import nats

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    with contextlib.suppress(Exception):
        await js.delete_stream(STREAM)
    await js.add_stream(name=STREAM, subjects=[SUBJECT], storage="file")
    payload = b"x" * size
    for _ in range(n):
        await nc.publish(SUBJECT, payload)
    await nc.flush()
    deadline = time.monotonic() + 120
    while (await js.stream_info(STREAM)).state.messages < n:
        if time.monotonic() > deadline:
            raise RuntimeError("stream did not fill")
        await asyncio.sleep(0.05)
    await js.add_consumer(STREAM, durable_name=CONSUMER, ack_policy="explicit", max_ack_pending=-1)
    await nc.close()


async def wait_acked(port: int, n: int, host: str = "127.0.0.1", stream: str = STREAM) -> None:
    """Until the consumer's ack floor reaches stream sequence ``n`` (the stream's last)."""
    import nats

    nc = await nats.connect(f"nats://{host}:{port}")
    js = nc.jetstream()
    deadline = time.monotonic() + 120
    while (await js.consumer_info(stream, CONSUMER)).ack_floor.stream_seq < n:
        if time.monotonic() > deadline:
            raise RuntimeError("acks did not arrive")
        await asyncio.sleep(0.001)
    await nc.close()


def run(
    kind: str,
    n: int,
    size: int,
    batch: int,
    sync_acks: bool = False,
    py_spy: str | None = None,
) -> tuple[float, float]:
    """One server, filled and consumed: (messages per second, the server's CPU
    microseconds per message during the timed part)."""
    with tempfile.TemporaryDirectory(prefix="jsbench-") as store:
        port = free_port()
        proc = start_server(kind, port, store)
        prof = None
        try:
            asyncio.run(setup(port, n, size))
            if py_spy and kind == "jetraft":
                label = f"consume-{size}{'-sync' if sync_acks else ''}"
                prof = Profiler(py_spy, label, proc.pid, 120)
            cpu0 = cpu_seconds(proc.pid)
            rate = measure(port, n, batch, sync_acks)
            return rate, 1e6 * (cpu_seconds(proc.pid) - cpu0) / n
        finally:
            if prof is not None:
                prof.stop()
            proc.terminate()
            proc.wait(10)


def measure(
    port: int,
    n: int,
    batch: int,
    sync_acks: bool = False,
    host: str = "127.0.0.1",
    stream: str = STREAM,
) -> float:
    """The timed part: consume and ack ``n`` messages of ``stream`` (through consumer C)
    until the server's ack floor covers them; returns messages per second."""
    t0 = time.perf_counter()
    consume(port, n, batch, sync_acks, host, stream)
    asyncio.run(wait_acked(port, n, host, stream))
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--msgs", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--only", choices=["jetraft", "nats-server"])
    ap.add_argument("--sync-acks", action="store_true", help="acks as requests (ack_sync)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each server per size")
    ap.add_argument("--py-spy", metavar="DIR", help="profile jetraft into DIR (raw stacks)")
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["jetraft", "nats-server"]
    # size -> kind -> [(rate, cpu us/msg)] of each round; the servers alternate.
    table: dict[int, dict[str, list[tuple[float, float]]]] = {}
    loads = [load_summary()]
    for _ in range(args.rounds):
        for size in SIZES:
            for kind in kinds:
                got = run(kind, args.msgs, size, args.batch, args.sync_acks, args.py_spy)
                table.setdefault(size, {}).setdefault(kind, []).append(got)
        loads.append(load_summary())
    print(machine_summary())
    print("load: " + " | ".join(loads))
    acks = "acks as requests (confirmed)" if args.sync_acks else "plain acks"
    print(f"pull consume + {acks}, {args.msgs} msgs, batch {args.batch}, file storage "
          f"({args.rounds} round(s): median rate, server CPU per message)")
    print(f"{'payload':<10}{'jetraft msg/s':>16}{'nats-server msg/s':>20}{'ratio':>8}"
          f"{'jetraft us/msg':>16}{'nats us/msg':>13}")
    for size in SIZES:
        row = table[size]
        j = statistics.median(r for r, _ in row.get("jetraft", [(0.0, 0.0)]))
        g = statistics.median(r for r, _ in row.get("nats-server", [(0.0, 0.0)]))
        jc = statistics.median(c for _, c in row.get("jetraft", [(0.0, 0.0)]))
        gc = statistics.median(c for _, c in row.get("nats-server", [(0.0, 0.0)]))
        ratio = f"{j / g:.2f}" if j and g else "-"
        print(f"{size:<10}{j:>16,.0f}{g:>20,.0f}{ratio:>8}{jc:>16.1f}{gc:>13.1f}")
        if args.rounds > 1 and len(kinds) == 2:
            pairs = zip(row["jetraft"], row["nats-server"], strict=True)
            print(f"{'':<10}per round: " + " ".join(f"{a[0] / b[0]:.2f}" for a, b in pairs))


if __name__ == "__main__":
    main()
