"""Spark connector throughput, jetraft beside nats-server, same Spark session and load.

    python -m benchmarks.spark_bench [--msgs 1000000] [--size 128] [--partitions 4]
                                     [--master local[2]] [--only jetraft|nats-server]
                                     [--cases sink,read,read-consumer,stream-read,stream-write]
                                     [--read-option K=V ...] [--write-option K=V ...]

Both servers run at once (file storage, default settings, a fresh store each). For each: a
warm-up (``--warmup`` rows written to and read from a stream of their own, and with the
streaming cases a streaming read and write of them, unmeasured: the JVM compiles its hot
paths and starts its Python helpers then, not in the first measured case), a stream BENCH
with ``allow_direct``; then the cases, one after the other, each on both servers in turn
(which server goes first alternates from case to case, so that what one case leaves the JVM
to do falls on both alike):

- sink: ``spark.range(N)`` as rows (subject, 128-byte data) written with
  ``df.write.format("jetstream")``: every row acknowledged (PubAck) before the job ends.
- read: ``spark.read.format("jetstream").load().count()`` over the N stored messages
  (``readMode`` auto: batched direct get), run twice; the better run is reported (the first
  also starts the Python workers).
- read-consumer: the same with ``readMode=consumer`` (an ephemeral pull consumer per
  partition).
- stream-read: ``spark.readStream.format("jetstream")`` from the first sequence, trigger
  AvailableNow, into Spark's ``noop`` sink: the N messages in one run.
- stream-write: N rows from a Parquet copy of the sink's input (read as a file stream,
  AvailableNow) written with ``writeStream.format("jetstream")`` to a second stream.

``--read-option`` / ``--write-option`` pass connector options (e.g. ``fetchBatch=2000``,
``maxPendingAcks=4000``) to every read / write, to try settings without editing code.

Rate = N / job (or query) time. Beside each rate: CPU time per row of the server process, of
Spark's Python workers (where the connector runs) and of the JVM, from /proc, so a reader
can tell which side limits; and the share of the wall time the server ran ("busy") and spent
runnable, waiting for a CPU ("wait", schedstat): busy + wait near 100% means the server was
never idle, so the case was CPU-bound (on a shared machine, short of CPU), not waiting on
round trips. The machine is shared with everything else running on it: the
CPU columns are steadier than the rates.

Not a test: numbers depend on the machine; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import free_port, load_summary, machine_summary, rss_mb, wait_port

SERVERS = ["jetraft", "nats-server"]
CASES = ["sink", "read", "read-consumer", "stream-read", "stream-write"]


def start_server(kind: str, port: int, store: str) -> subprocess.Popen[bytes]:
    flags = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store]
    if kind == "jetraft":
        cmd = [sys.executable, "-m", "jetraft", "server", *flags]
    else:
        binary = shutil.which("nats-server") or os.path.join(
            os.path.dirname(sys.executable), "nats-server"
        )
        cmd = [binary, *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def create_stream(url: str, name: str = "BENCH", subjects: tuple[str, ...] = ("bench.>",)) -> None:
    import nats
    from nats.js.api import StreamConfig

    async def _do() -> None:
        deadline = time.monotonic() + 20
        while True:
            nc = await nats.connect(url)
            try:
                await nc.jetstream().add_stream(
                    StreamConfig(name=name, subjects=list(subjects), allow_direct=True)
                )
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                await nc.close()
            await asyncio.sleep(0.1)

    asyncio.run(_do())


# -- CPU accounting from /proc --------------------------------------------------------------

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, CPU seconds of the process, CPU seconds of its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) * _TICK_S  # utime stime
    children = (int(fields[13]) + int(fields[14])) * _TICK_S  # cutime cstime
    return int(fields[1]), own, children


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def run_queue_wait_s(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (schedstat): when
    it is a large share of the wall time, the case is short of CPU (the machine is shared),
    not waiting on round trips."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


@dataclass
class Cpu:
    server: float = 0.0
    workers: float = 0.0  # Spark's Python workers (the connector's reads and writes)
    jvm: float = 0.0

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.server - other.server, self.workers - other.workers, self.jvm - other.jvm)


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it."""

    parent: int
    own: float  # CPU seconds of the process
    reaped: float  # CPU seconds of its children that it has reaped
    cmdline: str


def split_cpu(procs: dict[int, Proc], me: int, server_pid: int) -> Cpu:
    """The server's CPU, and that of ``me``'s descendants split into the JVM and Spark's
    Python workers.

    Live workers count themselves; exited ones are in their reaper's children times. The
    worker daemon reaps the workers it forks, but the JVM starts some Python processes itself
    (the driver side of a streaming source, for one) and reaps them: those seconds, and a
    child of the JVM that has exited but is not reaped yet (no command line any more), are
    Python's, not the JVM's (the JVM starts no other programs). Counting them as the JVM's
    charged a streaming query's source process (1.5-1.8 s of CPU, mostly Python compiling
    PySpark's modules out of pyspark.zip) to the JVM.
    """
    out = Cpu()
    server = procs.get(server_pid)
    if server is not None:
        out.server = server.own + server.reaped
    mine: list[int] = []
    for pid in procs:
        p, depth = procs[pid].parent, 0
        while p not in (0, 1, me) and depth < 20:
            p, depth = (procs[p].parent if p in procs else 0), depth + 1
        if p == me and pid != server_pid:
            mine.append(pid)
    jvms = {pid for pid in mine if "java" in procs[pid].cmdline.split(" ", 1)[0]}
    for pid in mine:
        proc = procs[pid]
        if pid in jvms:
            out.jvm += proc.own
            out.workers += proc.reaped
        elif "pyspark" in proc.cmdline or proc.parent in jvms:
            out.workers += proc.own + proc.reaped
    return out


def cpu_now(server_pid: int) -> Cpu:
    """CPU seconds so far of the server, the JVM and Spark's Python workers (``split_cpu``)."""
    procs: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                procs[int(entry)] = Proc(st[0], st[1], st[2], _cmdline(int(entry)))
    return split_cpu(procs, os.getpid(), server_pid)


# -- the cases ------------------------------------------------------------------------------


@dataclass
class Result:
    rows_s: float
    cpu: Cpu
    rows: int
    load: float = 0.0  # 1-minute load average when the case ended (the machine is shared)
    wall_s: float = 0.0
    server_wait_s: float = 0.0  # the server's time runnable but not running (see above)


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    import jetraft.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("jetraft-spark-bench")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jetraft.spark.register(spark)
    return spark


def _timed(server_pid: int, rows: int, job: Callable[[], int | None]) -> Result:
    before = cpu_now(server_pid)
    wait0 = run_queue_wait_s(server_pid)
    t0 = time.perf_counter()
    got = job()
    elapsed = time.perf_counter() - t0
    used = cpu_now(server_pid) - before
    waited = run_queue_wait_s(server_pid) - wait0
    count = rows if got is None else got
    if count != rows:
        raise AssertionError(f"{count} rows, expected {rows}")
    return Result(rows / elapsed, used, rows, os.getloadavg()[0], elapsed, waited)


class Bench:
    def __init__(self, spark: Any, args: argparse.Namespace, url: str, pid: int, tmp: str):
        self.spark = spark
        self.args = args
        self.url = url
        self.pid = pid
        self.tmp = tmp

    def source_df(self, rows: int | None = None, subject: str = "bench.data") -> Any:
        from pyspark.sql import functions as F

        pad = "x" * (self.args.size - 8)
        count = self.args.msgs if rows is None else rows
        return self.spark.range(0, count, 1, self.args.partitions).select(
            F.lit(subject).alias("subject"),
            F.concat(F.lpad(F.col("id").cast("string"), 8, "0"), F.lit(pad))
            .cast("binary")
            .alias("data"),
        )

    def warm_up(self) -> None:
        """A small write and read on a stream of its own before the measured cases, so that
        the JVM's JIT compilation (several CPU seconds on a fresh session) is not charged to
        whichever server and case come first."""
        from pyspark.sql import functions as F

        create_stream(self.url, "WARM", ("warm.>",))
        rows = self.args.warmup
        df = self.spark.range(0, rows, 1, self.args.partitions).select(
            F.lit("warm.data").alias("subject"), F.col("id").cast("string").alias("data")
        )
        df.write.format("jetstream").mode("append").option("servers", self.url).option(
            "commitBucket", ""
        ).save()
        got = (
            self.spark.read.format("jetstream")
            .option("servers", self.url)
            .option("stream", "WARM")
            .option("minPartitions", str(self.args.partitions))
            .load()
            .count()
        )
        if got != rows:
            raise AssertionError(f"warm-up read {got} rows, expected {rows}")
        if "stream-read" in self.args.cases:
            # A streaming query runs code a batch read does not (micro-batch planning, the
            # offset and commit logs, the driver side of the source): compile it here too.
            query = (
                self.spark.readStream.format("jetstream")
                .option("servers", self.url)
                .option("stream", "WARM")
                .option("minPartitions", str(self.args.partitions))
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", tempfile.mkdtemp(dir=self.tmp))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
        if "stream-write" in self.args.cases:
            # The same for the streaming write: its driver side (the sink's commit runs in a
            # Python daemon of its own that the JVM starts on first use) and Spark's streaming
            # Parquet scan. Without this, whichever server runs first paid those first-use
            # costs (about 1.3 s of Python and a few of JIT) inside its measured case. The
            # input has the measured case's columns and types, so the same code is compiled.
            files = os.path.join(self.tmp, "warm-parquet")
            self.source_df(rows, "warm2.data").write.parquet(files)
            create_stream(self.url, "WARM2", ("warm2.>",))
            query = (
                self.spark.readStream.schema(self.spark.read.parquet(files).schema)
                .parquet(files)
                .selectExpr("'warm2.data' AS subject", "data")
                .writeStream.format("jetstream")
                .option("servers", self.url)
                .option("commitBucket", "")
                .option("checkpointLocation", tempfile.mkdtemp(dir=self.tmp))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))

    def sink(self) -> Result:
        df = self.source_df()

        def job() -> None:
            (
                df.write.format("jetstream")
                .mode("append")
                .options(**self.args.write_options)
                .option("servers", self.url)
                .option("commitBucket", "")
                .save()
            )

        return _timed(self.pid, self.args.msgs, job)

    def read(self, mode: str) -> Result:
        def job() -> int:
            return int(
                self.spark.read.format("jetstream")
                .options(**self.args.read_options)
                .option("servers", self.url)
                .option("stream", "BENCH")
                .option("readMode", mode)
                .option("minPartitions", str(self.args.partitions))
                .load()
                .count()
            )

        runs = [_timed(self.pid, self.args.msgs, job) for _ in range(2)]
        return max(runs, key=lambda r: r.rows_s)

    def stream_read(self) -> Result:
        checkpoint = tempfile.mkdtemp(dir=self.tmp)

        def job() -> None:
            query = (
                self.spark.readStream.format("jetstream")
                .options(**self.args.read_options)
                .option("servers", self.url)
                .option("stream", "BENCH")
                .option("minPartitions", str(self.args.partitions))
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))

        return _timed(self.pid, self.args.msgs, job)

    def stream_write(self) -> Result:
        create_stream(self.url, "BENCH2", ("bench2.>",))
        files = os.path.join(self.tmp, "parquet")
        if not os.path.exists(files):
            self.source_df().write.parquet(files)
        checkpoint = tempfile.mkdtemp(dir=self.tmp)
        schema = self.spark.read.parquet(files).schema

        def job() -> None:
            query = (
                self.spark.readStream.schema(schema)
                .parquet(files)
                .selectExpr("'bench2.data' AS subject", "data")
                .writeStream.format("jetstream")
                .options(**self.args.write_options)
                .option("servers", self.url)
                .option("commitBucket", "")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))

        return _timed(self.pid, self.args.msgs, job)


def _case_list(args: argparse.Namespace) -> list[str]:
    # In CASES order whatever the command line's: the sink first (the reads need its
    # messages; ``--cases read,sink`` used to read an empty stream).
    cases = [c for c in CASES if c in args.cases]
    if any(c != "sink" and c != "stream-write" for c in cases) and "sink" not in cases:
        cases = ["sink", *cases]
    return cases


def _run_case(bench: Bench, case: str) -> Result:
    if case == "sink":
        return bench.sink()
    if case == "read":
        return bench.read("auto")
    if case == "read-consumer":
        return bench.read("consumer")
    if case == "stream-read":
        return bench.stream_read()
    return bench.stream_write()


def bench_all(
    spark: Any, kinds: list[str], args: argparse.Namespace, memory: dict[str, tuple[float, float]]
) -> dict[str, dict[str, Result]]:
    """The cases against the servers, in turns: each case runs on every server before the
    next case starts, and which server goes first alternates from case to case, so what a
    case leaves the JVM to do (compilation, collection) falls on both alike. The servers'
    RSS in MB, idle and at the end, goes into ``memory``."""
    benches: dict[str, tuple[Bench, subprocess.Popen[bytes]]] = {}
    idle: dict[str, float] = {}
    out: dict[str, dict[str, Result]] = {kind: {} for kind in kinds}
    try:
        for kind in kinds:
            tmp = tempfile.mkdtemp(prefix=f"spark-bench-{kind}-")
            port = free_port()
            proc = start_server(kind, port, os.path.join(tmp, "store"))
            url = f"nats://127.0.0.1:{port}"
            benches[kind] = (Bench(spark, args, url, proc.pid, tmp), proc)
            create_stream(url)
            idle[kind] = rss_mb(proc.pid)
        if args.warmup:
            for kind in kinds:
                benches[kind][0].warm_up()
        for i, case in enumerate(_case_list(args)):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                result = out[kind][case] = _run_case(benches[kind][0], case)
                print(f"  {kind} {case}: {result.rows_s:,.0f} rows/s ({load_summary()})",
                      file=sys.stderr)
        for kind in kinds:
            memory[kind] = (idle[kind], rss_mb(benches[kind][1].pid))
        return out
    finally:
        for bench, proc in benches.values():
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(bench.tmp, ignore_errors=True)


def _us(seconds: float, rows: int) -> str:
    return f"{seconds / rows * 1e6:.1f}"


def report(
    args: argparse.Namespace,
    results: dict[str, dict[str, Result]],
    memory: dict[str, tuple[float, float]],
) -> None:
    print(machine_summary())
    print(
        f"spark {args.master}, {args.msgs:,} messages x {args.size} B, "
        f"{args.partitions} partitions; CPU in microseconds per row"
    )
    head = (
        f"{'case':<14} {'server':<12} {'rows/s':>10} {'server':>7} {'workers':>8} {'jvm':>6}"
        f" {'load':>5} {'srv busy/wait':>13}"
    )
    print(head)
    cases = [c for c in CASES if any(c in r for r in results.values())]
    for case in cases:
        for kind, res in results.items():
            if case not in res:
                continue
            r = res[case]
            print(
                f"{case:<14} {kind:<12} {r.rows_s:>10,.0f} {_us(r.cpu.server, r.rows):>7} "
                f"{_us(r.cpu.workers, r.rows):>8} {_us(r.cpu.jvm, r.rows):>6} {r.load:>5.1f}"
                f" {r.cpu.server / r.wall_s:>6.0%}/{r.server_wait_s / r.wall_s:<6.0%}"
            )
        if len(results) == 2 and all(case in r for r in results.values()):
            ratio = results["jetraft"][case].rows_s / results["nats-server"][case].rows_s
            print(f"{case:<14} {'ratio j/n':<12} {ratio:>10.2f}")
    for kind, (idle, loaded) in memory.items():
        print(f"RSS {kind}: {idle:.0f} MB with an empty stream, {loaded:.0f} MB after the cases")


def _options(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"option {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msgs", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", choices=SERVERS)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--warmup", type=int, default=200_000, help="rows written and read first (0: none)"
    )
    parser.add_argument("--read-option", action="append", default=[], metavar="K=V")
    parser.add_argument("--write-option", action="append", default=[], metavar="K=V")
    args = parser.parse_args(argv)
    args.read_options = _options(parser, args.read_option)
    args.write_options = _options(parser, args.write_option)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    kinds = [args.only] if args.only else SERVERS
    spark = spark_session(args.master)
    memory: dict[str, tuple[float, float]] = {}
    results = bench_all(spark, kinds, args, memory)
    spark.stop()
    report(args, results, memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
