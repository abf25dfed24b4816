"""``jetraft bench``: load generators to measure a cluster from the outside.

``bench pub`` / ``bench sub`` (core NATS; run the subscriber first, in another shell),
``bench js pub`` (publishes with acknowledgements, a window of them in flight) and
``bench js consume`` (a pull consumer, every message acknowledged). Each prints msgs/s, MiB/s
and, where it can measure it, latency percentiles. Core messages carry their send time in their
first 8 bytes so ``bench sub`` on the same host can tell end-to-end latency. A progress bar
shows on a terminal.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click
import nats.errors

from jetraft.cli.conn import Api, Client, connect, connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import print_json, stdout_is_tty

bench = group("bench", "Benchmark publishing and consuming, core NATS and JetStream")
js_bench = group("js", "JetStream benchmarks", parent=bench)
_STAMP = struct.Struct(">q")


@dataclass
class Stats:
    name: str
    msgs: int = 0
    bytes: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        rate = self.msgs / self.seconds if self.seconds > 0 else 0.0
        out: dict[str, Any] = {
            "name": self.name,
            "msgs": self.msgs,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "msgs_per_sec": round(rate, 1),
            "mib_per_sec": round(self.bytes / self.seconds / 2**20, 3) if self.seconds > 0 else 0.0,
        }
        if self.latencies_s:
            out["latency_ms"] = percentiles_ms(self.latencies_s)
        return out


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "min": round(ordered[0] * 1000, 3),
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "max": round(ordered[-1] * 1000, 3),
        "mean": round(statistics.fmean(ordered) * 1000, 3),
    }


def report(stats: Stats, as_json: bool) -> None:
    s = stats.summary()
    if as_json:
        print_json(s)
        return
    print(
        f"{s['name']} stats: {s['msgs_per_sec']:,.0f} msgs/sec ~ {s['mib_per_sec']:,.2f} MiB/sec "
        f"({s['msgs']:,} msgs in {s['seconds']:.2f}s)"
    )
    if "latency_ms" in s:
        lat = s["latency_ms"]
        print(
            f"  latency ms: min {lat['min']} p50 {lat['p50']} p90 {lat['p90']} p99 {lat['p99']} "
            f"max {lat['max']}"
        )


@contextmanager
def progress(label: str, total: int) -> Iterator[Any]:
    """A Rich progress bar on a terminal; a no-op advance function otherwise."""
    if not stdout_is_tty():
        yield lambda n=1: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)


def _payload(size: int) -> bytearray:
    return bytearray(max(size, 0))


COMMON = [
    click.option("--msgs", default=100_000, type=click.IntRange(min=1), help="Messages in total"),
    click.option("--size", default=128, type=click.IntRange(min=0), help="Message size in bytes"),
    click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output"),
]


def common(fn: Any) -> Any:
    for opt in reversed(COMMON):
        fn = opt(fn)
    return fn


@bench.command("pub", help="Publish core NATS messages as fast as possible")
@click.argument("subject")
@click.option(
    "--clients", default=1, type=click.IntRange(min=1), help="Concurrent publishing connections"
)
@common
@connection
def pub_cmd(
    conn: ConnOptions, subject: str, clients: int, msgs: int, size: int, as_json: bool
) -> None:
    async def one(nc: Client, count: int, advance: Any) -> None:
        data = _payload(size)
        for i in range(count):
            if size >= 8:
                _STAMP.pack_into(data, 0, time.time_ns())
            await nc.publish(subject, bytes(data))
            if i % 1000 == 999:
                advance(1000)
                await asyncio.sleep(0)
        await nc.flush(timeout=60)

    async def go() -> Stats:
        ncs = [await connect(conn) for _ in range(clients)]
        shares = [msgs // clients + (1 if i < msgs % clients else 0) for i in range(clients)]
        try:
            with progress("Publishing", msgs) as advance:
                start = time.perf_counter()
                await asyncio.gather(
                    *(one(nc, n, advance) for nc, n in zip(ncs, shares, strict=True))
                )
                elapsed = time.perf_counter() - start
        finally:
            for nc in ncs:
                await nc.close()
        return Stats("Pub", msgs, msgs * size, elapsed)

    report(run(go()), as_json)


@bench.command("sub", help="Receive core NATS messages and measure rate and latency")
@click.argument("subject")
@click.option(
    "--timeout-idle", "idle", default=10.0, help="Give up after this many seconds without messages"
)
@common
@connection
def sub_cmd(
    conn: ConnOptions, subject: str, idle: float, msgs: int, size: int, as_json: bool
) -> None:
    del size

    async def go() -> Stats:
        stats = Stats("Sub")
        done = asyncio.Event()
        first = [0.0]

        async with connected(conn) as nc:
            with progress("Receiving", msgs) as advance:

                async def on_msg(msg: Any) -> None:
                    now = time.perf_counter()
                    if not stats.msgs:
                        first[0] = now
                    stats.msgs += 1
                    stats.bytes += len(msg.data)
                    if len(msg.data) >= 8:
                        stats.latencies_s.append(
                            (time.time_ns() - _STAMP.unpack_from(msg.data)[0]) / 1e9
                        )
                    stats.seconds = now - first[0]
                    advance()
                    if stats.msgs >= msgs:
                        done.set()

                await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=1_000_000)
                await nc.flush()
                print(f"Waiting for {msgs:,} messages on {subject}", flush=True)
                last = -1
                while not done.is_set():
                    before = stats.msgs
                    try:
                        await asyncio.wait_for(done.wait(), idle)
                    except TimeoutError:
                        if stats.msgs == before or stats.msgs == last:
                            break
                    last = before
        if not stats.msgs:
            raise CliError(f"no messages arrived on {subject} within {idle:g}s")
        return stats

    report(run(go()), as_json)


async def _ensure_stream(api: Api, stream: str, subject: str, create: bool, replicas: int) -> None:
    try:
        await api.request(f"STREAM.INFO.{stream}")
        return
    except CliError:
        if not create:
            raise CliError(f"stream {stream} does not exist (pass --create to make it)") from None
    await api.request(
        f"STREAM.CREATE.{stream}",
        {
            "name": stream,
            "subjects": [subject],
            "num_replicas": replicas,
            "storage": "file",
            "retention": "limits",
        },
    )


@js_bench.command("pub", help="Publish to a stream, waiting for every acknowledgement")
@click.argument("subject")
@click.option("--stream", default="benchstream", help="The stream to publish into")
@click.option("--create", is_flag=True, help="Create the stream when it does not exist")
@click.option(
    "--replicas", default=1, type=click.IntRange(1, 5), help="Replicas when creating the stream"
)
@click.option(
    "--window", default=1, type=click.IntRange(min=1), help="Publishes in flight (1: one at a time)"
)
@common
@connection
def js_pub_cmd(
    conn: ConnOptions,
    subject: str,
    stream: str,
    create: bool,
    replicas: int,
    window: int,
    msgs: int,
    size: int,
    as_json: bool,
) -> None:
    async def go() -> Stats:
        stats = Stats("JetStream Pub")
        async with connected(conn) as nc:
            await _ensure_stream(Api(nc, conn), stream, subject, create, replicas)
            data = bytes(_payload(size))
            todo = iter(range(msgs))  # shared by the workers: each takes the next message

            async def worker(advance: Any) -> None:
                for _ in todo:
                    sent = time.perf_counter()
                    try:
                        reply = await nc.request(subject, data, timeout=conn.timeout_s)
                    except nats.errors.NoRespondersError:
                        raise CliError(f"no stream holds subject {subject}") from None
                    ack = json.loads(reply.data or b"{}")
                    if "error" in ack:
                        err = ack["error"]
                        raise CliError(f"{err.get('description')} ({err.get('err_code')})")
                    stats.latencies_s.append(time.perf_counter() - sent)
                    advance()

            with progress("Publishing", msgs) as advance:
                start = time.perf_counter()
                await asyncio.gather(*(worker(advance) for _ in range(window)))
                stats.seconds = time.perf_counter() - start
        stats.msgs, stats.bytes = msgs, msgs * size
        return stats

    report(run(go()), as_json)


@js_bench.command(
    "consume", help="Consume a stream with a pull consumer, acknowledging every message"
)
@click.option("--stream", default="benchstream", help="The stream to consume")
@click.option("--batch", default=500, type=click.IntRange(min=1), help="Messages per pull request")
@common
@connection
def js_consume_cmd(
    conn: ConnOptions, stream: str, batch: int, msgs: int, size: int, as_json: bool
) -> None:
    del size

    async def go() -> Stats:
        stats = Stats("JetStream Consume")
        async with connected(conn) as nc:
            api = Api(nc, conn)
            created = await api.request(
                f"CONSUMER.CREATE.{stream}",
                {
                    "stream_name": stream,
                    "config": {
                        "ack_policy": "explicit",
                        "deliver_policy": "all",
                        "inactive_threshold": 10**10,
                        "max_ack_pending": max(batch * 2, 1000),
                    },
                },
            )
            name = created["name"]
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox, pending_msgs_limit=1_000_000)
            with progress("Consuming", msgs) as advance:
                start = time.perf_counter()
                while stats.msgs < msgs:
                    want = min(batch, msgs - stats.msgs)
                    body = json.dumps(
                        {"batch": want, "expires": int(conn.timeout_s * 1e9)}
                    ).encode()
                    await nc.publish(
                        f"{conn.js_api_prefix}.CONSUMER.MSG.NEXT.{stream}.{name}", body, reply=inbox
                    )
                    got = 0
                    while got < want:
                        try:
                            msg = await sub.next_msg(timeout=conn.timeout_s + 1)
                        except nats.errors.TimeoutError:
                            raise CliError(
                                f"only {stats.msgs} of {msgs} messages arrived"
                            ) from None
                        if msg.headers and msg.headers.get("Status"):
                            if msg.headers.get("Status") in ("404", "408"):
                                break
                            continue
                        got += 1
                        stats.msgs += 1
                        stats.bytes += len(msg.data)
                        await nc.publish(msg.reply, b"+ACK")
                    advance(got)
                    if not got:
                        raise CliError(f"the stream ran dry after {stats.msgs} of {msgs} messages")
                await nc.flush()
                stats.seconds = time.perf_counter() - start
            await sub.unsubscribe()
            await api.request(f"CONSUMER.DELETE.{stream}.{name}")
        return stats

    report(run(go()), as_json)
