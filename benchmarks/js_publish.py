"""JetStream publish with acks, jetraft beside nats-server, same load generator.

    python -m benchmarks.js_publish [--msgs N] [--sync-msgs N] [--window W] [--pubs P]
                                    [--only jetraft|nats-server|nats-server-always]
                                    [--ids | --ids-only]

Servers (file storage each): jetraft with its default (fsync before every PubAck, group
commit), nats-server with its default (fsync every 2 minutes: lazy), and nats-server with
``jetstream { sync_interval: always }`` (fsync per write, the durable comparison).

Load generator: separate processes speaking the protocol over raw sockets with pre-encoded
``PUB <subject> <reply> <size>`` frames; replies arrive on a wildcard inbox subscription and
are counted (and checked for errors) by a minimal parser. "sync" keeps one publish
outstanding per connection (request/reply); "async" keeps a window of W outstanding per
connection over P connections. Rate = acknowledged messages / elapsed. Beside the rates: each
server's CPU time (user + system, from /proc) per acknowledged message, which moves less with
the machine's load than the rates do; and each server's resident memory (VmRSS) idle after
start and after the load.

``--ids`` adds "async 128B id": HPUB frames carrying a ``Nats-Msg-Id`` header, each with a reply
subject of its own (``_INBOX.b<n>.<i>``), as the Spark connector's sink and nats.py's publish
send them (dedupe on, no reply subject shared between publishes).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue as MpQueue
from multiprocessing.synchronize import Event as MpEvent

from benchmarks.common import (
    cpu_seconds,
    free_port,
    machine_summary,
    nats_server_binary,
    rss_mb,
    wait_port,
)

STREAM = "BENCH"
SUBJECT = b"bench.pub"
SERVERS = ["jetraft", "nats-server", "nats-server-always"]
Result = tuple[float, float, int, int]  # a publisher's start, end, acks, errors


@dataclass(frozen=True)
class Scenario:
    name: str
    payload: int
    window: int  # outstanding publishes per connection
    pubs: int  # publisher connections (processes)
    max_s: float = 0.0  # when set, stop sending new publishes after this many seconds
    ids: bool = False  # HPUB with a Nats-Msg-Id and a reply subject per message


def start_server(kind: str, port: int, store: str) -> subprocess.Popen[bytes]:
    conf = os.path.join(store, f"{kind}.conf")
    with open(conf, "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\n")
        if kind in ("jetraft", "nats-server"):
            f.write(f'jetstream {{ store_dir: "{store}/js" }}\n')
        else:
            f.write(f'jetstream {{ store_dir: "{store}/js", sync_interval: always }}\n')
    if kind == "jetraft":
        cmd = [sys.executable, "-m", "jetraft", "server", "-c", conf]
    else:
        cmd = [nats_server_binary(), "-c", conf]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


class Conn:
    """A minimal blocking NATS client: handshake, then raw frames."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout_s: float | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nPING\r\n')
        while self.line() != b"PONG":
            pass

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        i = self.buf.index(b"\r\n")
        out = bytes(self.buf[:i])
        del self.buf[: i + 2]
        return out

    def request(self, subject: str, body: bytes) -> bytes:
        self.sock.sendall(b"SUB _INBOX.setup 99\r\n")
        self.sock.sendall(b"PUB %s _INBOX.setup %d\r\n%s\r\n" % (subject.encode(), len(body), body))
        while True:
            head = self.line()
            if head.startswith(b"MSG"):
                size = int(head.split()[-1])
                while len(self.buf) < size + 2:
                    self.buf += self.sock.recv(65536)
                data = bytes(self.buf[:size])
                del self.buf[: size + 2]
                self.sock.sendall(b"UNSUB 99\r\n")
                return data

    def count_acks(self, limit: int) -> tuple[int, int]:
        """Read whatever arrived; returns (acks, errors) parsed from complete MSG frames."""
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk
        acks = errors = 0
        buf = self.buf
        pos = 0
        while acks < limit:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            if buf.startswith(b"PING", pos):
                self.sock.sendall(b"PONG\r\n")
                pos = end + 2
                continue
            size = int(buf[buf.rfind(b" ", pos, end) + 1 : end])
            if len(buf) < end + 2 + size + 2:
                break
            if b'"error"' in buf[end + 2 : end + 2 + size]:
                errors += 1
            acks += 1
            pos = end + 4 + size
        del buf[:pos]
        return acks, errors


def _publisher(
    addr: tuple[str, int],
    subject: bytes,
    n: int,
    sc: Scenario,
    idx: int,
    go: MpEvent,
    out: MpQueue[Result],
) -> None:
    conn = Conn(addr[1], addr[0], timeout_s=60)  # a stalled server fails the run
    conn.sock.sendall(b"SUB _INBOX.b%d.* 1\r\nPING\r\n" % idx)
    while conn.line() != b"PONG":
        pass
    frame = b"PUB %s _INBOX.b%d.x %d\r\n%s\r\n" % (subject, idx, sc.payload, b"x" * sc.payload)
    frames = _id_frames(subject, idx, n, sc.payload) if sc.ids else []
    go.wait()
    t0 = time.perf_counter()
    stop_at = t0 + sc.max_s if sc.max_s else float("inf")
    sent = acked = errors = 0
    first = min(sc.window, n)
    conn.sock.sendall(b"".join(frames[:first]) if sc.ids else frame * first)
    sent = first
    while acked < sent:
        got, bad = conn.count_acks(sent - acked)
        acked += got
        errors += bad
        more = min(got, n - sent) if time.perf_counter() < stop_at else 0
        if more:
            conn.sock.sendall(b"".join(frames[sent : sent + more]) if sc.ids else frame * more)
            sent += more
    out.put((t0, time.perf_counter(), acked, errors))
    conn.sock.close()


def _id_frames(subject: bytes, idx: int, n: int, payload: int) -> list[bytes]:
    """``n`` HPUB frames, each with its own Nats-Msg-Id and reply subject."""
    data = b"x" * payload
    run = os.getpid()  # a new id space for every run: the stream would dedupe a repeat
    out = []
    for i in range(n):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: %d-%d-%d\r\n\r\n" % (run, idx, i)
        size = len(hdr) + payload
        line = b"HPUB %s _INBOX.b%d.%d %d %d\r\n" % (subject, idx, i, len(hdr), size)
        out.append(line + hdr + data + b"\r\n")
    return out


def run_scenario(port: int, sc: Scenario, n: int) -> float:
    setup = Conn(port)
    setup.request(f"$JS.API.STREAM.DELETE.{STREAM}", b"")
    body = b'{"name":"%s","subjects":["%s"],"storage":"file"}' % (STREAM.encode(), SUBJECT)
    resp = setup.request(f"$JS.API.STREAM.CREATE.{STREAM}", body)
    assert b'"error"' not in resp, resp
    rate = drive(("127.0.0.1", port), SUBJECT, sc, n)
    setup.sock.close()
    return rate


def drive(addr: tuple[str, int], subject: bytes, sc: Scenario, n: int) -> float:
    """Publish ``n`` messages (fewer if ``sc.max_s`` runs out first) to ``subject`` on the
    server at ``addr`` as ``sc`` says, from separate processes; return acknowledged messages
    per second. Any refusal is an error."""
    acked, elapsed = drive_counts(addr, subject, sc, n)
    return acked / elapsed


def drive_counts(
    addr: tuple[str, int], subject: bytes, sc: Scenario, n: int
) -> tuple[int, float]:
    """``drive``, returning (acknowledged messages, elapsed seconds)."""
    ctx = mp.get_context("fork")
    out: MpQueue[Result] = ctx.Queue()
    go = ctx.Event()
    per = n // sc.pubs
    procs = [
        ctx.Process(target=_publisher, args=(addr, subject, per, sc, i, go, out))
        for i in range(sc.pubs)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let every publisher connect before the clock starts
    go.set()
    results: list[Result] = []
    deadline = time.monotonic() + 600
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            if any(p.exitcode for p in procs) or time.monotonic() > deadline:
                for p in procs:
                    p.terminate()
                raise RuntimeError("a publisher failed (see its traceback above)") from None
    for p in procs:
        p.join(10)
    errors = sum(r[3] for r in results)
    if errors:
        raise RuntimeError(f"{errors} publishes were refused")
    elapsed = max(r[1] for r in results) - min(r[0] for r in results)
    return sum(r[2] for r in results), elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=100_000, help="messages per async scenario")
    ap.add_argument("--sync-msgs", type=int, default=3_000, help="messages per sync scenario")
    ap.add_argument("--window", type=int, default=256, help="outstanding async publishes")
    ap.add_argument("--pubs", type=int, default=2, help="async publisher connections")
    ap.add_argument("--only", choices=SERVERS)
    ap.add_argument("--ids", action="store_true", help="add the Nats-Msg-Id scenario")
    ap.add_argument("--ids-only", action="store_true", help="run the Nats-Msg-Id scenario alone")
    args = ap.parse_args()
    scenarios = [
        Scenario("sync 128B", 128, 1, 1),
        Scenario("sync 1KB", 1024, 1, 1),
        Scenario("async 128B", 128, args.window, args.pubs),
        Scenario("async 1KB", 1024, args.window, args.pubs),
    ]
    if args.ids_only:
        scenarios = []
    if args.ids or args.ids_only:
        scenarios.append(Scenario("async 128B id", 128, args.window, args.pubs, ids=True))
    kinds = [args.only] if args.only else SERVERS
    table: dict[str, dict[str, float]] = {}
    cpu: dict[str, dict[str, float]] = {}  # server CPU us per message
    rss: dict[str, tuple[float, float, int]] = {}  # MB idle, MB after the load, msgs stored
    for kind in kinds:
        store = tempfile.mkdtemp(prefix=f"jsbench-{kind}-")
        port = free_port()
        proc = start_server(kind, port, store)
        try:
            time.sleep(1.0)  # let start-up settle before the idle figure
            idle = rss_mb(proc.pid)
            stored = 0
            for sc in scenarios:
                n = args.sync_msgs if sc.window == 1 else args.msgs
                before = cpu_seconds(proc.pid)
                table.setdefault(sc.name, {})[kind] = run_scenario(port, sc, n)
                cpu.setdefault(sc.name, {})[kind] = 1e6 * (cpu_seconds(proc.pid) - before) / n
                stored = n  # each scenario starts on a fresh stream
            rss[kind] = (idle, rss_mb(proc.pid), stored)
        finally:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(store, ignore_errors=True)
    print(machine_summary())
    print(f"async: window {args.window} x {args.pubs} connections; file storage throughout")
    _print_table(scenarios, table, cpu)
    for kind, (idle, loaded, stored) in rss.items():
        print(
            f"RSS {kind}: {idle:.0f} MB idle, {loaded:.0f} MB after the load "
            f"(its stream holding the last scenario's {stored:,} messages)"
        )


def _print_table(
    scenarios: list[Scenario], table: dict[str, dict[str, float]], cpu: dict[str, dict[str, float]]
) -> None:
    head = f"{'scenario':<14}{'jetraft':>10}{'nats default':>14}{'nats always':>13}"
    print(head + f"{'vs default':>12}{'vs always':>11}   server CPU us/msg (j / d / a)")
    for sc in scenarios:
        row = table[sc.name]
        j = row.get("jetraft", 0.0)
        d = row.get("nats-server", 0.0)
        a = row.get("nats-server-always", 0.0)
        rd = f"{j / d:.2f}" if j and d else "-"
        ra = f"{j / a:.2f}" if j and a else "-"
        us = " / ".join(
            f"{cpu[sc.name][k]:.1f}" if k in cpu[sc.name] else "-" for k in SERVERS
        )
        print(f"{sc.name:<14}{j:>10,.0f}{d:>14,.0f}{a:>13,.0f}{rd:>12}{ra:>11}   {us}")
    print("(msg/s acknowledged; ratios are jetraft / nats-server; CPU includes stream set-up)")


if __name__ == "__main__":
    main()
