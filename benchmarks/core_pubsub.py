"""Core publish/subscribe throughput, jetraft beside nats-server, same load generator.

    python -m benchmarks.core_pubsub [--msgs N] [--only jetraft|nats-server]

Publishers and subscribers are separate processes that speak the protocol over raw sockets
with pre-encoded frames, so the client is never the bottleneck. Throughput is messages
delivered per subscriber divided by the time from the first publish to the last delivery.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks.common import free_port, machine_summary, wait_port

SUBJECT = b"bench.sub"


@dataclass(frozen=True)
class Scenario:
    name: str
    payload: int
    subscribers: int


SCENARIOS = [
    Scenario("1:1 16B", 16, 1),
    Scenario("1:1 1KB", 1024, 1),
    Scenario("fan-out 1:4 16B", 16, 4),
    Scenario("fan-out 1:4 1KB", 1024, 4),
]


def _handshake(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    f = sock.makefile("rb")
    f.readline()  # INFO
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    assert f.readline() == b"PONG\r\n"
    return sock


def _subscriber(port: int, total_bytes: int, ready: mp.Event, out: mp.Queue) -> None:
    sock = _handshake(port)
    sock.sendall(b"SUB " + SUBJECT + b" 1\r\nPING\r\n")
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += sock.recv(65536)
    ready.set()
    got = 0
    first = 0.0
    while got < total_bytes:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        if not first:
            first = time.perf_counter()
        got += len(chunk)
    out.put((first, time.perf_counter(), got))
    sock.close()


def _publisher(port: int, n: int, payload: int, start: mp.Event, out: mp.Queue) -> None:
    sock = _handshake(port)
    frame = b"PUB %s %d\r\n%s\r\n" % (SUBJECT, payload, b"x" * payload)
    per_batch = max(1, 65536 // len(frame))
    batch = frame * per_batch
    start.wait()
    t0 = time.perf_counter()
    sent = 0
    while sent + per_batch <= n:
        sock.sendall(batch)
        sent += per_batch
    if sent < n:
        sock.sendall(frame * (n - sent))
    sock.sendall(b"PING\r\n")
    f = sock.makefile("rb")
    while f.readline() != b"PONG\r\n":
        pass
    out.put((t0, time.perf_counter()))
    sock.close()


def run_scenario(port: int, sc: Scenario, n: int) -> float:
    frame_len = len(b"MSG %s 1 %d\r\n" % (SUBJECT, sc.payload)) + sc.payload + 2
    ctx = mp.get_context("fork")
    results: mp.Queue = ctx.Queue()
    pub_out: mp.Queue = ctx.Queue()
    readies = [ctx.Event() for _ in range(sc.subscribers)]
    subs = [
        ctx.Process(target=_subscriber, args=(port, n * frame_len, r, results)) for r in readies
    ]
    for p in subs:
        p.start()
    for r in readies:
        if not r.wait(20):
            raise RuntimeError("subscriber did not get ready")
    go = ctx.Event()
    pub = ctx.Process(target=_publisher, args=(port, n, sc.payload, go, pub_out))
    pub.start()
    go.set()
    t0, _ = pub_out.get(timeout=300)
    ends = [results.get(timeout=300) for _ in subs]
    for p in [*subs, pub]:
        p.join(10)
    if any(got < n * frame_len for _, _, got in ends):
        raise RuntimeError("a subscriber lost its connection (slow consumer?)")
    elapsed = max(end for _, end, _ in ends) - t0
    return n / elapsed


def start_server(kind: str, port: int) -> subprocess.Popen[bytes]:
    if kind == "jetraft":
        cmd = [sys.executable, "-m", "jetraft", "server", "-a", "127.0.0.1", "-p", str(port)]
    else:
        here = os.path.join(os.path.dirname(sys.executable), "nats-server")
        binary = shutil.which("nats-server") or here
        cmd = [binary, "-a", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=200_000)
    ap.add_argument("--only", choices=["jetraft", "nats-server"])
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["jetraft", "nats-server"]
    table: dict[str, dict[str, float]] = {}
    for kind in kinds:
        port = free_port()
        proc = start_server(kind, port)
        try:
            for sc in SCENARIOS:
                n = args.msgs if sc.payload < 1024 else args.msgs // 2
                table.setdefault(sc.name, {})[kind] = run_scenario(port, sc, n)
        finally:
            proc.terminate()
            proc.wait(10)
    print(machine_summary())
    print(f"{'scenario':<18}{'jetraft msg/s':>16}{'MB/s':>9}{'nats-server msg/s':>20}{'ratio':>8}")
    for sc in SCENARIOS:
        row = table[sc.name]
        j, g = row.get("jetraft", 0.0), row.get("nats-server", 0.0)
        mb = j * sc.payload / 1e6
        ratio = f"{j / g:.2f}" if j and g else "-"
        print(f"{sc.name:<18}{j:>16,.0f}{mb:>9.1f}{g:>20,.0f}{ratio:>8}")


if __name__ == "__main__":
    main()
