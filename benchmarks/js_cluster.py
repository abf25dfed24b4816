"""Clustered JetStream: 3-server jetraft beside 3-server nats-server, same load generators.

    python -m benchmarks.js_cluster [--sections publish,consume,failover,start,idle]
        [--run-s S] [--consume-msgs N] [--kills K] [--starts S]
        [--streams N] [--idle-s S] [--only jetraft,nats-server,nats-server-always]
        [--consume-on leader|other] [--publish-runs r3-async,...] [--py-spy DIR]
        [--py-spy-follower]

Clusters (``benchmarks.cluster_common``): three servers on a loopback address of this run,
the same config for both (only the binary differs); jetraft fsyncs before every PubAck,
nats-server runs with its default (lazy sync) and with ``sync_interval: always``.

* publish: R1 and R3 file streams, 128 B messages, the client on the stream's leader and on
  another server (for R3 a follower replica); sync = one publish in flight, async = a window
  of W per connection over P connections (``benchmarks.js_publish.drive``).
* consume: an R3 stream filled with N messages, a durable pull consumer with explicit acks,
  the client on the consumer's leader, or with ``--consume-on other`` on another server
  (pulls, deliveries and acks then cross a route) (``benchmarks.js_consume.measure``: two
  pulls of 256 outstanding, every message acked, stops when the ack floor covers N).
* failover: a client on a follower publishes (one request in flight, Nats-Msg-Id, retried
  on timeout/503); the stream leader gets SIGKILL; the gap is the time from the last ack
  before the kill to the first ack after it; the killed server is restarted and the stream
  settles before the next kill.
* start: seconds from spawning the three processes to every server answering
  ``$JS.API.INFO`` without an error (also recorded for every other cluster started here).
* idle: CPU of each server (utime+stime from /proc/<pid>/stat, % of one core) over an
  interval, with no streams and then with N idle R3 streams.

Timing is printed against the goals of issue 10, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from benchmarks.cluster_common import KINDS, BenchCluster, ClusterNode, js_info_ok
from benchmarks.common import Profiler, cpu_seconds, load_summary, machine_summary
from benchmarks.js_consume import CONSUMER
from benchmarks.js_consume import measure as measure_consume
from benchmarks.js_publish import Scenario, drive, drive_counts

PAYLOAD = 128
MAX_MSGS = 10_000_000  # publish runs are bounded by time (--run-s)
SECTIONS = ("publish", "consume", "failover", "start", "idle")


@dataclass
class Results:
    publish: dict[tuple[int, str, str], dict[str, float]] = field(default_factory=dict)
    publish_cpu: dict[tuple[int, str, str], dict[str, list[float]]] = field(default_factory=dict)
    consume: dict[str, float] = field(default_factory=dict)
    consume_cpu: dict[str, list[float]] = field(default_factory=dict)  # kind -> us/msg
    gaps: dict[str, list[float]] = field(default_factory=dict)
    ready: dict[str, list[float]] = field(default_factory=dict)
    idle: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # kind -> phase -> %
    create_s: dict[str, float] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)


async def create_stream(cl: BenchCluster, name: str, subject: str, replicas: int) -> None:
    nc = await cl.connect(cl.nodes[0])
    try:
        await nc.jetstream().add_stream(
            name=name, subjects=[subject], storage="file", num_replicas=replicas
        )
    finally:
        await nc.close()


async def leader_of(cl: BenchCluster, stream: str, consumer: str = "") -> ClusterNode:
    for node in cl.nodes:  # any server that is up can answer
        if not node.running:
            continue
        nc = await cl.connect(node)
        try:
            js = nc.jetstream()
            if consumer:
                return await cl.consumer_leader(js, stream, consumer)
            return await cl.stream_leader(js, stream)
        finally:
            await nc.close()
    raise RuntimeError("no server is running")


async def delete_stream(cl: BenchCluster, name: str) -> None:
    nc = await cl.connect(next(n for n in cl.nodes if n.running))
    try:
        await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


def publish_section(cl: BenchCluster, args: argparse.Namespace, res: Results) -> None:
    """Every run on a fresh stream (a jetraft replica's snapshot cost grows with the
    stream, so a run on a stream filled by the runs before would be penalised)."""
    for replicas in (1, 3):
        for where in ("leader", "follower"):
            for mode in ("sync", "async"):
                if args.publish_runs and f"r{replicas}-{mode}" not in args.publish_runs:
                    continue
                rate, cpu = publish_run(cl, args, replicas, where, mode)
                key = (replicas, where, mode)
                res.publish.setdefault(key, {})[cl.kind] = rate
                res.publish_cpu.setdefault(key, {})[cl.kind] = cpu
                print(f"  {cl.kind} {label(key)}: {rate:,.0f} msg/s, "
                      f"servers' CPU {fmt_list(cpu, 1)} us/msg", flush=True)


def publish_run(
    cl: BenchCluster, args: argparse.Namespace, replicas: int, where: str, mode: str
) -> tuple[float, list[float]]:
    """(acked msg/s, CPU microseconds per acked message of each server: leader first)."""
    stream, subject = f"P{replicas}{where[0]}{mode}".upper(), f"p.{replicas}.{where}.{mode}"
    asyncio.run(create_stream(cl, stream, subject, replicas))
    leader = asyncio.run(leader_of(cl, stream))
    others = [n for n in cl.nodes if n is not leader]
    node = leader if where == "leader" else others[0]
    if mode == "sync":
        sc = Scenario("sync", PAYLOAD, 1, 1, args.run_s)
    else:
        sc = Scenario("async", PAYLOAD, args.window, args.pubs, args.run_s)
    profs = []
    if cl.kind == "jetraft" and replicas == 3 and mode == "async":
        profs.append(Profiler(args.py_spy, f"publish-r3-on-{where}-leader", leader.pid, 60))
        if args.py_spy_follower:  # the follower the client is not on
            profs.append(
                Profiler(args.py_spy, f"publish-r3-on-{where}-follower", others[-1].pid, 60)
            )
    order = [leader, *others]
    before = [cpu_seconds(n.pid) for n in order]
    try:
        acked, elapsed = drive_counts(node.addr, subject.encode(), sc, MAX_MSGS)
    finally:
        for prof in profs:
            prof.stop()
    cpu = [1e6 * (cpu_seconds(n.pid) - b) / acked for n, b in zip(order, before, strict=True)]
    asyncio.run(delete_stream(cl, stream))
    return acked / elapsed, cpu


def consume_section(cl: BenchCluster, args: argparse.Namespace, res: Results) -> None:
    stream, subject, n = "C3", "c3", args.consume_msgs
    asyncio.run(create_stream(cl, stream, subject, 3))
    leader = asyncio.run(leader_of(cl, stream))
    drive(leader.addr, subject.encode(), Scenario("fill", PAYLOAD, args.window, 1), n)

    async def add_consumer() -> None:
        nc = await cl.connect(leader)
        try:
            await nc.jetstream().add_consumer(
                stream, durable_name=CONSUMER, ack_policy="explicit", max_ack_pending=-1
            )
        finally:
            await nc.close()

    asyncio.run(add_consumer())
    node = asyncio.run(leader_of(cl, stream, CONSUMER))
    prof = None
    if cl.kind == "jetraft":
        prof = Profiler(args.py_spy, "consume-r3-consumer-leader", node.pid, 120)
    # The consumer's leader first, then the other servers.
    order = [node] + [x for x in cl.nodes if x.pid != node.pid]
    before = [cpu_seconds(x.pid) for x in order]
    # The client on the consumer's leader, or (--consume-on other) on another server: its
    # pulls, the deliveries and its acks then cross a route.
    client = node if args.consume_on == "leader" else order[1]
    try:
        rate = measure_consume(client.port, n, args.batch, host=client.host, stream=stream)
    finally:
        if prof is not None:
            prof.stop()
    cpu = [1e6 * (cpu_seconds(x.pid) - b) / n for x, b in zip(order, before, strict=True)]
    res.consume[cl.kind] = rate
    res.consume_cpu[cl.kind] = cpu
    print(f"  {cl.kind} R3 pull consume + acks (client on the consumer's "
          f"{'leader' if client is node else 'follower'}): {rate:,.0f} msg/s, CPU us/msg "
          f"(consumer leader/other/other) {fmt_list(cpu, 0)}", flush=True)


@dataclass
class PubLoop:
    """One request in flight; a refused or unanswered publish is retried with the same
    Nats-Msg-Id (so a retry of a message that did land is a duplicate, not a copy)."""

    nc: NATS
    tag: str
    acks: list[float] = field(default_factory=list)
    timeouts: int = 0
    refused: int = 0  # no responders or an error answer
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        i = 0
        payload = b"x" * PAYLOAD
        while not self.stop.is_set():
            try:
                msg = await self.nc.request(
                    "f", payload, timeout=0.25, headers={"Nats-Msg-Id": f"{self.tag}-{i}"}
                )
            except NoRespondersError:
                self.refused += 1
                await asyncio.sleep(0.01)
                continue
            except NatsTimeout:
                self.timeouts += 1
                continue
            if b'"error"' in msg.data:
                self.refused += 1
                await asyncio.sleep(0.01)
                continue
            self.acks.append(time.monotonic())
            i += 1


async def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def one_kill(cl: BenchCluster, round_no: int) -> float:
    """The longest pause between consecutive acks from just before the kill until 50 acks
    after it (an ack the old leader sent just before dying may still arrive after the kill,
    so the first ack after the kill is not yet the end of the outage)."""
    leader = await leader_of(cl, "F")
    client_node = next(n for n in cl.nodes if n is not leader)
    nc = await cl.connect(client_node)
    pub = PubLoop(nc, f"r{round_no}")
    task = asyncio.create_task(pub.run())
    acks = pub.acks
    try:
        await _wait(lambda: len(acks) >= 200, 60, "acks before the kill")
        t_kill = time.monotonic()
        before = len(acks)
        cl.kill(leader)
        await _wait(lambda: len(acks) >= before + 50, 60, "acks after the kill")
        pairs = zip(acks[before - 10 : before + 49], acks[before - 9 : before + 50], strict=True)
        gap, end = max((b - a, b) for a, b in pairs)
        print(f"  {cl.kind} kill {round_no + 1} of {leader.name}: ack gap {gap:.3f} s, "
              f"ending {end - t_kill:.3f} s after the kill ({pub.timeouts} timeouts, "
              f"{pub.refused} refusals)", flush=True)
    finally:
        pub.stop.set()
        await task
        await nc.close()
    cl.spawn(leader)
    await _wait(lambda: js_info_ok(leader), 60, f"{leader.name} back")
    await leader_of(cl, "F")  # every replica current again
    return gap


def failover_section(cl: BenchCluster, args: argparse.Namespace, res: Results) -> None:
    asyncio.run(create_stream(cl, "F", "f", 3))

    async def kills() -> list[float]:
        return [await one_kill(cl, k) for k in range(args.kills)]

    res.gaps[cl.kind] = asyncio.run(kills())


def cpu_share(cl: BenchCluster, seconds: float) -> list[float]:
    """% of one core each server used over ``seconds``."""
    before = [cpu_seconds(n.pid) for n in cl.nodes]
    t0 = time.monotonic()
    time.sleep(seconds)
    after = [cpu_seconds(n.pid) for n in cl.nodes]
    dt = time.monotonic() - t0
    return [100 * (a - b) / dt for a, b in zip(after, before, strict=True)]


async def create_idle_streams(cl: BenchCluster, count: int) -> None:
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream(timeout=60)
    gate = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with gate:
            await js.add_stream(
                name=f"IDLE{i}", subjects=[f"idle.{i}"], storage="file", num_replicas=3
            )

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await nc.close()


def idle_section(cl: BenchCluster, args: argparse.Namespace, res: Results) -> None:
    phases = res.idle.setdefault(cl.kind, {})
    time.sleep(2)  # let start-up work finish before the empty baseline
    phases["empty"] = cpu_share(cl, args.idle_s)
    t0 = time.monotonic()
    asyncio.run(create_idle_streams(cl, args.streams))
    res.create_s[cl.kind] = time.monotonic() - t0
    time.sleep(args.settle_s)
    prof = None
    if cl.kind == "jetraft":
        prof = Profiler(args.py_spy, "idle-streams-n1", cl.nodes[0].pid, args.idle_s)
    try:
        phases["streams"] = cpu_share(cl, args.idle_s)
    finally:
        if prof is not None:
            prof.stop()
    cl.check_running()
    print(f"  {cl.kind}: {args.streams} R3 streams created in {res.create_s[cl.kind]:.1f} s; "
          f"CPU % per server empty {fmt_list(phases['empty'])}, "
          f"with streams {fmt_list(phases['streams'])}", flush=True)


def fmt_list(xs: list[float], digits: int = 1) -> str:
    return "/".join(f"{x:.{digits}f}" for x in xs)


def traffic_sections(
    names: list[str], args: argparse.Namespace, res: Results, cl: BenchCluster
) -> None:
    steps = {"publish": publish_section, "consume": consume_section, "failover": failover_section}
    for name in names:
        steps[name](cl, args, res)


def with_cluster(kind: str, res: Results, body: Callable[[BenchCluster], None]) -> None:
    cl = BenchCluster.create(kind)
    try:
        cl.start()
        ready = cl.wait_ready()
        res.ready.setdefault(kind, []).append(ready)
        print(f"  {kind}: cluster ready {ready:.2f} s after spawn", flush=True)
        body(cl)
        cl.check_running()
    finally:
        cl.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--run-s", type=float, default=3.0, help="seconds per publish run")
    ap.add_argument("--consume-msgs", type=int, default=30_000)
    ap.add_argument("--window", type=int, default=256, help="async publishes in flight")
    ap.add_argument("--pubs", type=int, default=2, help="async publisher connections")
    ap.add_argument("--batch", type=int, default=256, help="pull batch")
    ap.add_argument("--consume-on", choices=["leader", "other"], default="leader",
                    help="consume: the client's server")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--starts", type=int, default=3, help="extra start-to-ready rounds")
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--idle-s", type=float, default=10.0, help="CPU measuring interval")
    ap.add_argument("--settle-s", type=float, default=5.0, help="wait after creating")
    ap.add_argument("--only", metavar="KIND[,KIND]", help=f"some of {', '.join(KINDS)}")
    ap.add_argument("--py-spy", metavar="DIR", help="profile jetraft into DIR (raw stacks)")
    ap.add_argument("--py-spy-follower", action="store_true",
                    help="R3 async publish: also profile the follower the client is not on")
    ap.add_argument("--publish-runs", type=lambda s: set(s.split(",")), default=set(),
                    metavar="r3-async,...", help="publish: only these of r1/r3 x sync/async")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if unknown := sections - set(SECTIONS):
        ap.error(f"unknown sections {sorted(unknown)}")
    kinds = args.only.split(",") if args.only else list(KINDS)
    if unknown := set(kinds) - set(KINDS):
        ap.error(f"unknown kinds {sorted(unknown)}")
    res = Results()
    res.loads.append(load_summary())
    for kind in kinds:
        traffic = [s for s in ("publish", "consume", "failover") if s in sections]
        if kind == "nats-server-always":
            traffic = [s for s in traffic if s == "publish"]
        if traffic:
            with_cluster(kind, res, functools.partial(traffic_sections, traffic, args, res))
        if kind == "nats-server-always":
            continue
        if "start" in sections:
            for _ in range(args.starts):
                with_cluster(kind, res, lambda cl: None)
        if "idle" in sections:
            with_cluster(kind, res, lambda cl: idle_section(cl, args, res))
        res.loads.append(load_summary())
    report(res, args)


def label(key: tuple[int, str, str]) -> str:
    """R1 has no followers: its "follower" run is on a server without a replica."""
    r, where, mode = key
    place = "leader" if where == "leader" else "follower" if r > 1 else "other server"
    return f"R{r} {mode} on {place}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"median {statistics.median(xs):.2f} s, max {max(xs):.2f} s ({fmt_list(xs)})"


def report(res: Results, args: argparse.Namespace) -> None:
    print()
    print(machine_summary())
    print("load: " + " -> ".join(res.loads))
    if res.publish:
        print(f"\npublish {PAYLOAD} B, file storage, {args.run_s:g} s per run; sync: one in "
              f"flight, async: window {args.window} x {args.pubs} connections; msg/s acked")
        print(f"{'scenario':<26}{'jetraft':>10}{'nats dflt':>11}{'nats always':>13}"
              f"{'vs dflt':>9}{'vs always':>11}")
        for (r, where, mode), row in res.publish.items():
            j, d, a = (row.get(k) for k in KINDS)
            cells = "".join(f"{x:>{w},.0f}" if x else f"{'-':>{w}}"
                            for x, w in ((j, 10), (d, 11), (a, 13)))
            print(f"{label((r, where, mode)):<26}{cells}{ratio(j, d):>9}{ratio(j, a):>11}")
        print("\nservers' CPU per acked message, us (stream leader/other/other; less noisy "
              "than the rates on a shared machine)")
        print(f"{'scenario':<26}{'jetraft':>16}{'nats dflt':>16}{'nats always':>16}")
        for (r, where, mode), cpu_row in res.publish_cpu.items():
            cells = "".join(
                f"{fmt_list(cpu_row[k], 1) if k in cpu_row else '-':>16}" for k in KINDS
            )
            print(f"{label((r, where, mode)):<26}{cells}")
    if res.consume:
        j, d = res.consume.get("jetraft"), res.consume.get("nats-server")
        print(f"\nR3 pull consume + acks ({args.consume_msgs} msgs, batch {args.batch}): "
              f"jetraft {j or 0:,.0f} msg/s, nats-server {d or 0:,.0f} msg/s, ratio {ratio(j, d)}")
    for kind, gaps in res.gaps.items():
        print(f"ack gap after SIGKILL of the stream leader, {kind}: {stats(gaps)}")
    for kind, ready in res.ready.items():
        print(f"start to JetStream ready, {kind}: {stats(ready)}")
    for kind, phases in res.idle.items():
        print(f"idle CPU % of a core per server, {kind}: empty {fmt_list(phases['empty'])}; "
              f"{args.streams} R3 streams {fmt_list(phases['streams'])} "
              f"(created in {res.create_s[kind]:.1f} s)")
    goals(res, args)


def goals(res: Results, args: argparse.Namespace) -> None:
    print("\ngoals (issue 10):")
    for where in ("leader", "follower"):
        row = res.publish.get((3, where, "async"), {})
        j, d, a = (row.get(k) for k in KINDS)
        if j and d:
            print(f"  R3 async on {where} >= 1/3 of nats R3 default: {j / d:.2f} "
                  f"-> {verdict(j >= d / 3)}")
        if j and a:
            print(f"  R3 async on {where} above nats R3 always: {j / a:.2f}x "
                  f"-> {verdict(j > a)}")
    if gaps := res.gaps.get("jetraft"):
        med = statistics.median(gaps)
        print(f"  median ack gap after leader kill <= 1 s: {med:.2f} s -> {verdict(med <= 1)}")
    if ready := res.ready.get("jetraft"):
        med, worst = statistics.median(ready), max(ready)
        print(f"  start to ready within 1 s: median {med:.2f} s, max {worst:.2f} s "
              f"-> {verdict(worst <= 1)}")
    if idle := res.idle.get("jetraft"):
        worst = max(idle["streams"])
        print(f"  {args.streams} idle R3 streams < 5% of a core per server: max {worst:.1f}% "
              f"-> {verdict(worst < 5)}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
