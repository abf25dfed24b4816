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

Scenarios: one publisher and 1 or 4 subscribers on one subject; ``mixed``: the same with
payload sizes cycling from 16 to 79 bytes, so that no two consecutive publishes share a
control line (the best case above, one subject at one size, lets the server write runs of
messages as one piece); ``routed``: publisher and subscriber on two servers of a cluster
(CPU is both servers' together); and ``200 conns``: 200 connections (in two load processes),
each subscribed to its own subject and publishing to the next connection's, all at once in
bursts of 50 messages: many small connections, each with a bounded load (``--msgs`` / 200
messages), done when every connection has received all of its predecessor's messages.
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

from benchmarks.common import cpu_seconds, free_port, machine_summary, rss_mb, wait_port

SUBJECT = b"bench.sub"
MANY_CONNS = 200
MANY_PROCS = 2
MANY_BURST = 50


@dataclass(frozen=True)
class Scenario:
    name: str
    payload: int
    subscribers: int  # 0: the many-connections scenario
    mixed: bool = False  # payload sizes payload..payload+63, changing with every message
    routed: bool = False  # subscriber on another server of a two-server cluster

    def sizes(self) -> list[int]:
        return [self.payload + i for i in range(64)] if self.mixed else [self.payload]


SCENARIOS = [
    Scenario("1:1 16B", 16, 1),
    Scenario("1:1 1KB", 1024, 1),
    Scenario("fan-out 1:4 16B", 16, 4),
    Scenario("fan-out 1:4 1KB", 1024, 4),
    Scenario("1:1 mixed 16-79B", 16, 1, mixed=True),
    Scenario("routed 1:1 16B", 16, 1, routed=True),
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


def _frames(sizes: list[int], n: int) -> list[bytes]:
    """The n publishes of a scenario, sizes taken in turn."""
    cycle = [b"PUB %s %d\r\n%s\r\n" % (SUBJECT, size, b"x" * size) for size in sizes]
    return [cycle[i % len(cycle)] for i in range(n)]


def _publisher(port: int, n: int, sizes: list[int], start: mp.Event, out: mp.Queue) -> None:
    sock = _handshake(port)
    frames = _frames(sizes, n)
    per_batch = max(1, 65536 // len(frames[0]))
    batches = [b"".join(frames[i : i + per_batch]) for i in range(0, n, per_batch)]
    start.wait()
    t0 = time.perf_counter()
    for batch in batches:
        sock.sendall(batch)
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


def _wait_for_interest(sub_port: int, pub_port: int) -> None:
    """Subscribers are on sub_port's server: wait until pub_port's server knows. Interest
    travels in order over the route, so once a probe subscription made after theirs is
    known there, theirs is too."""
    probe = _handshake(sub_port)
    probe.sendall(b"SUB bench.probe 1\r\nPING\r\n")
    got = b""
    while b"PONG\r\n" not in got:
        got += probe.recv(65536)
    probe.settimeout(0.2)
    pub = _handshake(pub_port)
    got = b""
    for _ in range(100):
        pub.sendall(b"PUB bench.probe 0\r\n\r\n")
        try:
            got += probe.recv(65536)
        except TimeoutError:
            continue
        if b"MSG bench.probe" in got:
            break
    else:
        raise RuntimeError("interest did not reach the publisher's server")
    probe.close()
    pub.close()


def _run_fanout(port: int, pub_port: int, sc: Scenario, n: int) -> tuple[float, int]:
    """(msgs/s per subscriber, deliveries) of a one-publisher scenario."""
    sizes = sc.sizes()
    frame_lens = [len(b"MSG %s 1 %d\r\n" % (SUBJECT, size)) + size + 2 for size in sizes]
    total_bytes = sum(frame_lens[i % len(sizes)] for i in range(n))
    ctx = mp.get_context("fork")
    results: mp.Queue = ctx.Queue()
    pub_out: mp.Queue = ctx.Queue()
    readies = [ctx.Event() for _ in range(sc.subscribers)]
    subs = [
        ctx.Process(target=_subscriber, args=(port, total_bytes, r, results)) for r in readies
    ]
    for p in subs:
        p.start()
    for r in readies:
        if not r.wait(20):
            raise RuntimeError("subscriber did not get ready")
    go = ctx.Event()
    if sc.routed:
        _wait_for_interest(port, pub_port)
    pub = ctx.Process(target=_publisher, args=(pub_port, n, sc.sizes(), go, pub_out))
    pub.start()
    go.set()
    t0, _ = pub_out.get(timeout=300)
    ends = [results.get(timeout=300) for _ in subs]
    for p in [*subs, pub]:
        p.join(10)
    if any(got < total_bytes for _, _, got in ends):
        raise RuntimeError("a subscriber lost its connection (slow consumer?)")
    elapsed = max(end for _, end, _ in ends) - t0
    return n / elapsed, n * sc.subscribers


@dataclass
class Target:
    """One server, or two in a cluster (subscribers on the first, the publisher on the
    second)."""

    procs: list[subprocess.Popen[bytes]]
    port: int
    pub_port: int

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(10)


def run_scenario(target: Target, sc: Scenario, n: int) -> Result:
    cpu0 = target.cpu_seconds()
    if sc.subscribers:
        rate, deliveries = _run_fanout(target.port, target.pub_port, sc, n)
    else:
        rate, deliveries = _run_many(target.port, sc, n)
    cpu = target.cpu_seconds() - cpu0
    return Result(rate, cpu / deliveries * 1e6)


def _server_cmd(kind: str, port: int) -> list[str]:
    if kind == "jetraft":
        return [sys.executable, "-m", "jetraft", "server", "-a", "127.0.0.1", "-p", str(port)]
    here = os.path.join(os.path.dirname(sys.executable), "nats-server")
    return [shutil.which("nats-server") or here, "-a", "127.0.0.1", "-p", str(port)]


def start_server(kind: str) -> Target:
    port = free_port()
    proc = subprocess.Popen(
        _server_cmd(kind, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_port(port)
    return Target([proc], port, port)


def start_cluster(kind: str) -> Target:
    """Two servers routed to each other."""
    ports = [free_port(), free_port()]
    cluster_ports = [free_port(), free_port()]
    procs = []
    for i in (0, 1):
        cmd = [
            *_server_cmd(kind, ports[i]),
            "-n", f"bench-{i}", "--cluster_name", "bench",
            "--cluster", f"nats://127.0.0.1:{cluster_ports[i]}",
            "--routes", f"nats://127.0.0.1:{cluster_ports[1 - i]}",
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for port in ports:
        wait_port(port)
    return Target(procs, ports[0], ports[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure; the best is kept")
    ap.add_argument("--only", choices=["jetraft", "nats-server"])
    ap.add_argument("--scenario", action="append", help="run only these (by name)")
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["jetraft", "nats-server"]
    scenarios = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    servers: dict[str, Target] = {}
    clusters: dict[str, Target] = {}
    table: dict[str, dict[str, Result]] = {}
    idle: dict[str, float] = {}
    loaded: dict[str, float] = {}
    try:
        for kind in kinds:
            servers[kind] = start_server(kind)
            if any(sc.routed for sc in scenarios):
                clusters[kind] = start_cluster(kind)
        time.sleep(1.0)  # let start-up settle before the idle figure
        for kind, target in servers.items():
            idle[kind] = rss_mb(target.procs[0].pid)
        for sc in scenarios:
            n = args.msgs if sc.payload < 1024 else args.msgs // 2
            for _ in range(args.repeat):
                for kind in kinds:
                    target = clusters[kind] if sc.routed else servers[kind]
                    res = run_scenario(target, sc, n)
                    best = table.setdefault(sc.name, {}).get(kind)
                    if best is None or res.msgs_per_s > best.msgs_per_s:
                        table[sc.name][kind] = res
        for kind, target in servers.items():
            loaded[kind] = rss_mb(target.procs[0].pid)
    finally:
        for target in [*servers.values(), *clusters.values()]:
            target.stop()
    print(machine_summary())
    print(
        f"{'scenario':<19}{'jetraft msg/s':>14}{'nats-server msg/s':>19}{'ratio':>7}"
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
        print(f"{sc.name:<19}{jr:>14,.0f}{gr:>19,.0f}{ratio:>7}{jc:>17}{gc:>14}")
    for kind in kinds:
        if kind in loaded:
            print(f"{kind} RSS: idle {idle[kind]:.1f} MB, after load {loaded[kind]:.1f} MB")


if __name__ == "__main__":
    main()
