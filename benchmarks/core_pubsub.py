"""Core publish/subscribe throughput, jetraft beside nats-server, same load generator.

    python -m benchmarks.core_pubsub [--msgs N] [--repeat R] [--only jetraft|nats-server]

Publishers and subscribers are separate processes that speak the protocol over raw sockets
with pre-encoded frames, so the client is never the bottleneck. Throughput is messages
delivered per subscriber divided by the time from the first publish to the last delivery.
Both servers run at once and the scenarios alternate between them, so that load from
elsewhere on the machine falls on both alike; with ``--repeat`` each figure is the best run.

Besides throughput it reports each server's CPU per delivered message (user + system time
of the server process from /proc/<pid>/stat over the scenario, divided by the messages
delivered to all subscribers; clock-tick resolution, 10 ms) and its resident memory (VmRSS)
when idle after start and after all scenarios.

Scenarios: one publisher and 1 or 4 subscribers on one subject; and ``200 conns``: 200
connections (in two load processes), each subscribed to its own subject and publishing to
the next connection's, all at once in bursts of 50 messages: many small connections, each
with a bounded load (``--msgs`` / 200 messages), done when every connection has received
all of its predecessor's messages.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks.common import free_port, machine_summary, wait_port

SUBJECT = b"bench.sub"
MANY_CONNS = 200
MANY_PROCS = 2
MANY_BURST = 50


@dataclass(frozen=True)
class Scenario:
    name: str
    payload: int
    subscribers: int  # 0: the many-connections scenario


SCENARIOS = [
    Scenario("1:1 16B", 16, 1),
    Scenario("1:1 1KB", 1024, 1),
    Scenario("fan-out 1:4 16B", 16, 4),
    Scenario("fan-out 1:4 1KB", 1024, 4),
    Scenario(f"{MANY_CONNS} conns 128B", 128, 0),
]


@dataclass
class Result:
    msgs_per_s: float
    cpu_us_per_delivery: float


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


def _many(port: int, first: int, count: int, n: int, payload: int, ready: mp.Event,
          start: mp.Event, out: mp.Queue) -> None:
    """Connections first..first+count-1 of the many-connections scenario: each subscribes to
    its own subject, publishes n messages to the next connection's, and reads until it has
    the n messages meant for it."""
    socks: list[socket.socket] = []
    expect: dict[socket.socket, int] = {}
    bursts: dict[socket.socket, tuple[bytes, int]] = {}
    body = b"x" * payload
    for i in range(first, first + count):
        sock = _handshake(port)
        own = b"many.%d" % i
        sock.sendall(b"SUB %s 1\r\nPING\r\n" % own)
        buf = b""
        while b"PONG\r\n" not in buf:
            buf += sock.recv(4096)
        frame = b"PUB many.%d %d\r\n%s\r\n" % ((i + 1) % MANY_CONNS, payload, body)
        bursts[sock] = (frame * MANY_BURST, n // MANY_BURST)
        expect[sock] = (n // MANY_BURST) * MANY_BURST * len(
            b"MSG %s 1 %d\r\n%s\r\n" % (own, payload, body)
        )
        socks.append(sock)
    ready.set()
    sel = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
    start.wait()
    t0 = time.perf_counter()
    got = dict.fromkeys(socks, 0)
    left = {s: b[1] for s, b in bursts.items()}
    waiting = len(socks)

    def drain(timeout: float) -> None:
        nonlocal waiting
        for key, _ in sel.select(timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                chunk = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise RuntimeError("a connection of the many-connections scenario was closed")
            got[sock] += len(chunk)
            if got[sock] >= expect[sock]:
                sel.unregister(sock)
                waiting -= 1

    while any(left.values()):
        for sock in socks:
            if left[sock]:
                sock.setblocking(True)
                sock.sendall(bursts[sock][0])
                sock.setblocking(False)
                left[sock] -= 1
        drain(0)
    while waiting:
        drain(1.0)
    out.put((t0, time.perf_counter()))
    for sock in socks:
        sock.close()


def _run_many(port: int, sc: Scenario, n_total: int) -> tuple[float, int]:
    """(msgs/s, deliveries) of the many-connections scenario."""
    per_conn = max(MANY_BURST, n_total // MANY_CONNS // MANY_BURST * MANY_BURST)
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    readies = [ctx.Event() for _ in range(MANY_PROCS)]
    go = ctx.Event()
    per_proc = MANY_CONNS // MANY_PROCS
    procs = [
        ctx.Process(
            target=_many, args=(port, k * per_proc, per_proc, per_conn, sc.payload, r, go, out)
        )
        for k, r in enumerate(readies)
    ]
    for p in procs:
        p.start()
    for r in readies:
        if not r.wait(60):
            raise RuntimeError("the many-connections clients did not get ready")
    go.set()
    ends = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(10)
    deliveries = per_conn * MANY_CONNS
    return deliveries / (max(e for _, e in ends) - min(t for t, _ in ends)), deliveries


def _run_fanout(port: int, sc: Scenario, n: int) -> tuple[float, int]:
    """(msgs/s per subscriber, deliveries) of a one-publisher scenario."""
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
    return n / elapsed, n * sc.subscribers


def run_scenario(port: int, pid: int, sc: Scenario, n: int) -> Result:
    cpu0 = cpu_seconds(pid)
    if sc.subscribers:
        rate, deliveries = _run_fanout(port, sc, n)
    else:
        rate, deliveries = _run_many(port, sc, n)
    cpu = cpu_seconds(pid) - cpu0
    return Result(rate, cpu / deliveries * 1e6)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


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
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure; the best is kept")
    ap.add_argument("--only", choices=["jetraft", "nats-server"])
    ap.add_argument("--scenario", action="append", help="run only these (by name)")
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["jetraft", "nats-server"]
    scenarios = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    table: dict[str, dict[str, Result]] = {}
    idle: dict[str, float] = {}
    loaded: dict[str, float] = {}
    try:
        for kind in kinds:
            port = free_port()
            servers[kind] = (start_server(kind, port), port)
        time.sleep(1.0)  # let start-up settle before the idle figure
        for kind, (proc, _) in servers.items():
            idle[kind] = rss_mb(proc.pid)
        for sc in scenarios:
            n = args.msgs if sc.payload < 1024 else args.msgs // 2
            for _ in range(args.repeat):
                for kind, (proc, port) in servers.items():
                    res = run_scenario(port, proc.pid, sc, n)
                    best = table.setdefault(sc.name, {}).get(kind)
                    if best is None or res.msgs_per_s > best.msgs_per_s:
                        table[sc.name][kind] = res
        for kind, (proc, _) in servers.items():
            loaded[kind] = rss_mb(proc.pid)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    print(machine_summary())
    print(
        f"{'scenario':<18}{'jetraft msg/s':>15}{'nats-server msg/s':>19}{'ratio':>7}"
        f"{'jetraft cpu/msg':>17}{'nats cpu/msg':>14}"
    )
    for sc in scenarios:
        row = table[sc.name]
        j, g = row.get("jetraft"), row.get("nats-server")
        jr = j.msgs_per_s if j else 0.0
        gr = g.msgs_per_s if g else 0.0
        ratio = f"{jr / gr:.2f}" if jr and gr else "-"
        jc = f"{j.cpu_us_per_delivery:.2f} us" if j else "-"
        gc = f"{g.cpu_us_per_delivery:.2f} us" if g else "-"
        print(f"{sc.name:<18}{jr:>15,.0f}{gr:>19,.0f}{ratio:>7}{jc:>17}{gc:>14}")
    for kind in kinds:
        print(f"{kind} RSS: idle {idle[kind]:.1f} MB, after load {loaded[kind]:.1f} MB")


if __name__ == "__main__":
    main()
