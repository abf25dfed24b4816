"""Spark's own cost per row for the connector's schema: a Python data source with no server.

    python -m benchmarks.spark_floor [--msgs 1000000] [--partitions 4] [--batch-rows 16384]
                                     [--schema jetstream|seq|seq-data|no-stream]
                                     [--cases read,noop,stream-read] [--rounds 2]

The source ``jetfloor`` yields one pre-built ``pyarrow.RecordBatch`` of ``--batch-rows`` rows
over and over (the connector's Arrow schema, 128-byte ``data``), so the Python workers only
hand batches over and the JVM does what it does for a real read: read the Arrow stream and
turn each row into an InternalRow. What this prints is the floor a connector with this
schema cannot go below on this Spark: JVM and workers' CPU per row (the server column of
``spark_bench`` is absent: there is none). ``--schema`` narrows the columns to see what each
costs; ``stream-read`` runs the same source as a Structured Streaming query (AvailableNow into
``noop``), once per round, to separate a query's fixed cost from its per-row cost (run it
with two ``--msgs``).

Not a test: numbers depend on the machine; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from benchmarks.common import load_summary, machine_summary
from benchmarks.spark_bench import cpu_now, spark_session
from jetraft.spark.rows import arrow_schema, source_schema

SCHEMAS = ["jetstream", "seq", "seq-data", "no-stream"]
CASES = ["read", "noop", "stream-read"]


def _columns(schema: str) -> list[str]:
    full = ["stream", "subject", "sequence", "timestamp", "data"]
    return {
        "jetstream": full,
        "seq": ["sequence"],
        "seq-data": ["sequence", "data"],
        "no-stream": full[1:],
    }[schema]


def floor_schema(schema: str) -> StructType:
    keep = _columns(schema)
    return StructType([f for f in source_schema(False).fields if f.name in keep])


def floor_batch(schema: str, rows: int, size: int = 128) -> pa.RecordBatch:
    """``rows`` rows shaped like a read of BENCH (subject bench.data, 128-byte data)."""
    full = arrow_schema(False)
    ts = pa.array(range(1_700_000_000_000_000, 1_700_000_000_000_000 + rows), pa.int64())
    arrays = {
        "stream": pa.array(["BENCH"] * rows, pa.string()),
        "subject": pa.array(["bench.data"] * rows, pa.string()),
        "sequence": pa.array(range(1, rows + 1), pa.int64()),
        "timestamp": ts.cast(full.field("timestamp").type),
        "data": pa.array([b"%08d" % i + b"x" * (size - 8) for i in range(rows)], pa.binary()),
    }
    keep = _columns(schema)
    fields = [f for f in full if f.name in keep]
    return pa.RecordBatch.from_arrays([arrays[f.name] for f in fields], schema=pa.schema(fields))


class _Part(InputPartition):  # type: ignore[misc, unused-ignore]
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.rows = rows


def _emit(schema: str, batch_rows: int, rows: int) -> Iterator[pa.RecordBatch]:
    batch = floor_batch(schema, batch_rows)
    left = rows
    while left > 0:
        yield batch if left >= batch_rows else batch.slice(0, left)
        left -= batch_rows


class _Options:
    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options.get("rows", "1000000"))
        self.partitions = int(options.get("partitions", "4"))
        self.batch_rows = int(options.get("batchRows", "16384"))
        self.schema = options.get("schema", "jetstream")

    def parts(self, rows: int) -> list[_Part]:
        each = -(-rows // self.partitions)
        out, left = [], rows
        for i in range(self.partitions):
            out.append(_Part(i, min(each, left)))
            left -= min(each, left)
        return out


class _Reader(DataSourceReader):  # type: ignore[misc, unused-ignore]
    def __init__(self, opts: _Options) -> None:
        self.opts = opts

    def partitions(self) -> list[_Part]:
        return self.opts.parts(self.opts.rows)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return _emit(self.opts.schema, self.opts.batch_rows, partition.rows)


class _StreamReader(DataSourceStreamReader):  # type: ignore[misc, unused-ignore]
    """Offsets are row counts; everything is available at once."""

    def __init__(self, opts: _Options) -> None:
        self.opts = opts

    def initialOffset(self) -> dict[str, int]:
        return {"row": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        return {"row": self.opts.rows}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Part]:
        return self.opts.parts(end["row"] - start["row"])

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return _emit(self.opts.schema, self.opts.batch_rows, partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        pass


class FloorDataSource(DataSource):  # type: ignore[misc, unused-ignore]
    @classmethod
    def name(cls) -> str:
        return "jetfloor"

    def schema(self) -> StructType:
        return floor_schema(self.options.get("schema", "jetstream"))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(_Options(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(_Options(dict(self.options)))


def _jvm_pid() -> int | None:
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                exe = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if ppid == me and exe.endswith(b"java"):
            return int(entry)
    return None


class JvmThreads:
    """CPU seconds per JVM thread group (thread names without their numbers: JIT compilers,
    GC, task threads, Python runner threads, the stream execution thread), sampled every
    0.1 s so that threads which end during the run (a task's writer thread, a query's
    execution thread) still count with what they used until their last sample."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.tick = 1.0 / os.sysconf("SC_CLK_TCK")
        self.base: dict[str, tuple[str, float]] = self._sample()
        self.last: dict[str, tuple[str, float]] = dict(self.base)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> dict[str, tuple[str, float]]:
        out: dict[str, tuple[str, float]] = {}
        if self.pid is None:
            return out
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")].rstrip("0123456789#- ")
            fields = text.rsplit(")", 1)[1].split()
            out[tid] = (name, (int(fields[11]) + int(fields[12])) * self.tick)
        return out

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            self.last.update(self._sample())

    def groups(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self.last.update(self._sample())
        out: dict[str, float] = {}
        for tid, (name, cpu) in self.last.items():
            out[name] = out.get(name, 0.0) + cpu - self.base.get(tid, (name, 0.0))[1]
        return out


def own_and_children(pid: int | None) -> tuple[float, float]:
    """A process's own CPU seconds and those of its reaped children (cutime + cstime): the
    JVM reaps the Python processes it starts itself (not through the worker daemon)."""
    if pid is None:
        return 0.0, 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) * tick, (int(fields[13]) + int(fields[14])) * tick


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msgs", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch-rows", type=int, default=16_384)
    parser.add_argument("--schema", choices=SCHEMAS, default="jetstream")
    parser.add_argument("--cases", default="read")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V")
    parser.add_argument("--threads", action="store_true", help="JVM CPU by thread group")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if set(cases) - set(CASES):
        parser.error(f"cases: {', '.join(CASES)}")
    spark = spark_session(args.master)
    for item in args.conf:
        key, _, value = item.partition("=")
        spark.conf.set(key, value)
    # By module name, not __main__: Spark's workers unpickle the reader by its module.
    from benchmarks import spark_floor

    spark.dataSource.register(spark_floor.FloorDataSource)
    opts = {
        "rows": str(args.msgs),
        "partitions": str(args.partitions),
        "batchRows": str(args.batch_rows),
        "schema": args.schema,
    }
    tmp = tempfile.mkdtemp(prefix="spark-floor-")
    jvm = _jvm_pid()
    # Unmeasured warm-up: the JIT compiles the read path first (as spark_bench's warm-up).
    warm = dict(opts, rows=str(min(args.msgs, 200_000)))
    spark.read.format("jetfloor").options(**warm).load().count()
    print(machine_summary())
    print(
        f"spark {args.master}, {args.msgs:,} rows, {args.partitions} partitions, "
        f"{args.batch_rows:,} rows per batch, schema {args.schema}; CPU in µs per row"
    )
    try:
        for rnd in range(args.rounds):
            for case in cases:
                df = (spark.readStream if case == "stream-read" else spark.read).format("jetfloor")
                frame = df.options(**opts).load()
                before = cpu_now(-1)
                sampler = JvmThreads(jvm) if args.threads else None
                own0, kids0 = own_and_children(jvm)
                me0 = sum(os.times()[:2])
                t0 = time.perf_counter()
                if case == "read":
                    got = frame.count()
                    assert got == args.msgs, got
                elif case == "noop":
                    frame.write.format("noop").mode("overwrite").save()
                else:
                    query = (
                        frame.writeStream.format("noop")
                        .option("checkpointLocation", tempfile.mkdtemp(dir=tmp))
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                wall = time.perf_counter() - t0
                used = cpu_now(-1) - before
                me = sum(os.times()[:2]) - me0
                own1, kids1 = own_and_children(jvm)
                print(
                    f"   jvm own {(own1 - own0) / args.msgs * 1e6:5.2f} µs/row, its reaped "
                    f"children {(kids1 - kids0) / args.msgs * 1e6:5.2f}"
                )
                if sampler is not None:
                    groups = sampler.groups()
                    top = sorted(groups.items(), key=lambda kv: -kv[1])[:8]
                    print("   jvm threads (s): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
                print(
                    f"round {rnd} {case:<11} {args.msgs / wall:>11,.0f} rows/s  workers "
                    f"{used.workers / args.msgs * 1e6:5.2f}  jvm {used.jvm / args.msgs * 1e6:5.2f}"
                    f"  driver {me / args.msgs * 1e6:5.2f}"
                    f"  wall {wall:5.2f} s  ({load_summary()})",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
