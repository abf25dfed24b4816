"""The connector against a real 3-node JetStream cluster, of jetraft servers and of
nats-server ones: reads and writes stay exactly once while stream leaders move, replicas lag
or stall, and nodes die and come back.

Every test runs against both kinds; ``JETRAFT_SPARK_CLUSTER=jetraft`` (or ``nats-server``)
runs one kind only.

Every check compares the multiset of (sequence, data) read or stored with what was
published, not just counts.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import functions as F

from jetraft.spark import fetch, loop
from jetraft.spark.fetch import RangeSpec
from jetraft.spark.loop import JetClient
from tests.spark.cluster_support import (
    KINDS,
    NatsCluster,
    create_stream,
    publish,
    stored_messages,
)
from tests.spark.support import _nats_server_binary, run

pytestmark = pytest.mark.spark

Published = list[tuple[int, bytes]]
T = TypeVar("T")


def _kinds() -> list[str]:
    chosen = os.environ.get("JETRAFT_SPARK_CLUSTER", "")
    if chosen and chosen not in KINDS:
        raise ValueError(f"JETRAFT_SPARK_CLUSTER must be one of {KINDS}, not {chosen!r}")
    return [chosen] if chosen else list(KINDS)


@pytest.fixture(scope="module", params=_kinds())
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[NatsCluster]:
    kind = request.param
    if kind == "nats-server":
        _nats_server_binary()  # skips the nats-server run when it is not installed
    nodes = NatsCluster(tmp_path_factory.mktemp(f"{kind}-cluster"), kind=kind)
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop_all()
        loop.close_all()  # the driver's cached connections to the nodes just stopped


@pytest.fixture
def healthy(cluster: NatsCluster) -> Iterator[NatsCluster]:
    """The cluster, put back to three serving nodes after the test whatever it did."""
    yield cluster
    for node in cluster.nodes:
        if node.paused:
            cluster.resume(node.index)
        if not node.running:
            cluster.restart(node.index)
    cluster.wait_ready()


def _payload(i: int) -> bytes:
    return f"msg-{i:08d}-".encode().ljust(64, b"x")


def _fill(
    cluster: NatsCluster, stream: str, start: int, n: int, avoid: tuple[int, ...] = ()
) -> Published:
    prefix = stream.lower()
    items = [(f"{prefix}.{i % 4}", _payload(i)) for i in range(start, start + n)]
    seqs = publish(cluster, items, avoid)
    return sorted(zip(seqs, (d for _, d in items), strict=True))


def _r3_stream(cluster: NatsCluster, stream: str, n: int) -> Published:
    create_stream(cluster, stream, [f"{stream.lower()}.>"], allow_direct=True)
    return _fill(cluster, stream, 0, n)


def _read(spark: Any, servers: str, stream: str, **opts: str) -> Any:
    reader = spark.read.format("jetstream").option("servers", servers).option("stream", stream)
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()


def _pairs(rows: Any) -> Published:
    return sorted((int(r["sequence"]), bytes(r["data"])) for r in rows)


def _assert_exactly(got: Published, expected: Published) -> None:
    """Same multiset of (sequence, data); on failure, say what is missing or doubled."""
    if got == expected:
        return
    have, want = Counter(got), Counter(expected)
    missing = sorted((want - have).elements())
    extra = sorted((have - want).elements())
    raise AssertionError(
        f"{len(got)} rows for {len(expected)} messages; missing {len(missing)} "
        f"(first {[s for s, _ in missing[:10]]}), extra or doubled {len(extra)} "
        f"(first {[s for s, _ in extra[:10]]})"
    )


class Stepper:
    """A thread that keeps asking the stream leader to step down (at most ``max_steps``
    times, ``pause_s`` apart) until stopped. After each completed step-down (a new leader
    reported) it writes the count to ``marker``, which a gated Spark job waits for."""

    def __init__(
        self,
        cluster: NatsCluster,
        stream: str,
        marker: Path,
        max_steps: int = 40,
        pause_s: float = 0.2,
    ) -> None:
        self.cluster = cluster
        self.stream = stream
        self.marker = marker
        self.max_steps = max_steps
        self.pause_s = pause_s
        self.leaders: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepper", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and len(self.leaders) < self.max_steps:
                self.leaders.append(self.cluster.step_down(self.stream))
                tmp = self.marker.with_suffix(".tmp")
                tmp.write_text(str(len(self.leaders)))
                tmp.replace(self.marker)
                self._stop.wait(self.pause_s)  # let requests reach the new leader first
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def __enter__(self) -> Stepper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "stepper did not stop"
        if self.error is not None:
            raise AssertionError(f"step-down failed: {self.error!r}") from self.error


def _failed_tasks(spark: Any, group: str) -> int:
    """Failed task attempts in the jobs of a job group (Spark retried them)."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage is not None else 0
    return failed


def _no_task_retries(spark: Any, action: Callable[[], T]) -> T:
    """Run a Spark action and check no task of it failed: the connector rode out the faults
    itself (the session would otherwise hide a failure by retrying the task)."""
    group = f"cluster-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "cluster fault test")
    try:
        result = action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert _failed_tasks(spark, group) == 0, "a task failed and was retried by Spark"
    return result


def _gate(df: Any, marker: Path) -> Any:
    """The same rows, but the task of partition 0 only finishes after a step-down that
    completed once it had started (``marker`` holds the count of step-downs): the job is
    certainly running while the leader moves. The other tasks run meanwhile, and the stepper
    keeps going until the job returns. (An RDD step: mapInArrow would need pandas.)"""
    path = str(marker)

    def count() -> int:
        try:
            with open(path) as f:
                return int(f.read() or 0)
        except FileNotFoundError:
            return 0

    def gate(index: int, rows: Iterator[Any]) -> Iterator[Any]:
        if index == 0:
            before = count()
            deadline = time.monotonic() + 60
            while count() <= before:
                if time.monotonic() > deadline:
                    raise TimeoutError("no step-down completed while the task ran")
                time.sleep(0.05)
        yield from rows

    rdd = df.rdd.mapPartitionsWithIndex(gate)
    return df.sparkSession.createDataFrame(rdd, df.schema)


# -- batch reads while the leader moves ---------------------------------------------------


@pytest.mark.parametrize("mode", ["direct", "consumer"])
def test_read_while_stream_leader_steps_down(
    spark: Any, healthy: NatsCluster, stream_name: str, tmp_path: Path, mode: str
) -> None:
    expected = _r3_stream(healthy, stream_name, 20_000)
    marker = tmp_path / "stepped"
    df = _read(
        spark,
        healthy.servers(),
        stream_name,
        readMode=mode,
        minPartitions="8",
        fetchBatch="100",
        requestTimeoutSeconds="3",
    ).select("sequence", "data")
    with Stepper(healthy, stream_name, marker) as stepper:
        rows = _no_task_retries(spark, _gate(df, marker).collect)
        during = len(stepper.leaders)
    assert during >= 1, "no step-down completed while the read ran"
    _assert_exactly(_pairs(rows), expected)


# -- lagging, stalled and dead replicas ---------------------------------------------------


def _spec(stream: str, end: int) -> RangeSpec:
    return RangeSpec(
        stream=stream,
        start=1,
        end=end,
        filter_subject=None,
        filter_subjects=(),
        batch=500,
        timeout_s=3.0,
        max_retries=20,
        fail_on_data_loss=True,
    )


async def _read_across_resume(
    cluster: NatsCluster, url: str, spec: RangeSpec, mode: str, paused: int
) -> Published:
    """The executors' fetch path, run here, started while node ``paused`` is stalled: direct
    gets routed to it wait in its sockets, and it answers them when resumed (mid-read), at
    the state it had then. Resumes it after some progress (or a second) whatever happens."""
    nc = JetClient()
    await nc.connect(url, allow_reconnect=False)
    out: Published = []
    try:
        read = fetch.read_direct if mode == "direct" else fetch.read_consumer

        async def consume() -> None:
            async for chunk in read(nc, spec):
                out.extend(zip(chunk.seqs, chunk.data, strict=True))

        task = asyncio.ensure_future(consume())
        deadline = time.monotonic() + 1.0
        while not task.done() and len(out) < 1000 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        cluster.resume(paused)
        await asyncio.wait_for(task, 120)
        return sorted(out)
    finally:
        if cluster.nodes[paused].paused:
            cluster.resume(paused)
        await nc.close()


@pytest.mark.parametrize("mode", ["direct", "consumer"])
def test_read_as_a_stalled_replica_resumes_behind(
    spark: Any, healthy: NatsCluster, stream_name: str, mode: str
) -> None:
    expected = _r3_stream(healthy, stream_name, 2_000)
    leader = healthy.leader_index(stream_name)
    lagger = next(i for i in range(3) if i != leader)
    healthy.pause(lagger)
    # A quorum of two still acknowledges; the stalled replica misses all of these.
    expected = sorted(expected + _fill(healthy, stream_name, 2_000, 8_000, avoid=(lagger,)))
    spec = _spec(stream_name, expected[-1][0])
    got = run(_read_across_resume(healthy, healthy.nodes[leader].url, spec, mode, lagger))
    _assert_exactly(got, expected)
    # And straight after, through the replica that was behind only.
    lag_url = healthy.nodes[lagger].url
    rows = _read(spark, lag_url, stream_name, readMode=mode, minPartitions="4").collect()
    _assert_exactly(_pairs(rows), expected)


def test_read_with_a_follower_killed_then_restarted(
    spark: Any, healthy: NatsCluster, stream_name: str
) -> None:
    expected = _r3_stream(healthy, stream_name, 3_000)
    dead = next(i for i in range(3) if i != healthy.leader_index(stream_name))
    healthy.kill(dead)
    expected = sorted(expected + _fill(healthy, stream_name, 3_000, 2_000, avoid=(dead,)))
    # The dead node stays in the servers list: connections to it fail over to the others.
    df = _read(
        spark,
        healthy.servers(),
        stream_name,
        readMode="direct",
        minPartitions="4",
        fetchBatch="200",
        requestTimeoutSeconds="2",
    )
    _assert_exactly(_pairs(df.collect()), expected)
    healthy.restart(dead)
    # Right after the restart the node may serve direct gets while still catching up.
    expected = sorted(expected + _fill(healthy, stream_name, 5_000, 1_000))
    rows = _read(spark, healthy.nodes[dead].url, stream_name, readMode="direct").collect()
    _assert_exactly(_pairs(rows), expected)


# -- the sink while the leader moves -------------------------------------------------------


def test_write_while_stream_leader_steps_down(
    spark: Any, healthy: NatsCluster, stream_name: str, tmp_path: Path
) -> None:
    prefix = stream_name.lower()
    create_stream(healthy, stream_name, [f"{prefix}.>"], allow_direct=True)
    n = 10_000
    df = spark.range(0, n, 1, 6).select(
        F.concat(F.lit(f"{prefix}."), (F.col("id") % 4).cast("string")).alias("subject"),
        F.rpad(F.concat(F.lit("row-"), F.col("id").cast("string")), 64, "x").alias("data"),
    )
    marker = tmp_path / "stepped"
    writer = (
        _gate(df, marker)
        .write.format("jetstream")
        .mode("append")
        .option("servers", healthy.servers())
        .option("stream", stream_name)
        .option("ackTimeoutSeconds", "1")
        .option("maxPendingAcks", "64")
    )
    # Moves keep coming until the write returns: with a handful only, publishing can fall
    # between them and no publish is ever retried.
    with Stepper(healthy, stream_name, marker, max_steps=30, pause_s=0.3) as stepper:
        _no_task_retries(spark, writer.save)
        during = len(stepper.leaders)
    assert during >= 1, "no step-down completed while the write ran"
    healthy.wait_stream_current(stream_name)
    stored = stored_messages(healthy, stream_name)
    ids = Counter(m.msg_id for m in stored)
    assert None not in ids and max(ids.values()) == 1, "a Nats-Msg-Id is stored twice"
    expected = sorted(f"row-{i}".ljust(64, "x").encode() for i in range(n))
    assert sorted(m.data for m in stored) == expected
    assert sorted(m.seq for m in stored) == list(range(1, n + 1))


# -- a streaming query across leader moves and a node restart -------------------------------


def test_available_now_runs_across_stepdown_and_node_restart(
    spark: Any, healthy: NatsCluster, stream_name: str, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run_once(servers: str) -> None:
        df = (
            spark.readStream.format("jetstream")
            .option("servers", servers)
            .option("stream", stream_name)
            .option("requestTimeoutSeconds", "2")
            .load()
        )
        query = (
            df.select("sequence", "data")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(90), "availableNow run did not finish"
        assert query.exception() is None, query.exception()

    def written() -> Published:
        rows = spark.read.schema("sequence long, data binary").parquet(str(out)).collect()
        return _pairs(rows)

    expected = _r3_stream(healthy, stream_name, 3_000)
    run_once(healthy.servers())
    _assert_exactly(written(), expected)

    victim = healthy.leader_index(stream_name)
    healthy.step_down(stream_name)
    healthy.kill(victim)  # the old leader, a follower now
    expected = sorted(expected + _fill(healthy, stream_name, 3_000, 2_000, avoid=(victim,)))
    run_once(healthy.servers())
    _assert_exactly(written(), expected)

    healthy.restart(victim)
    expected = sorted(expected + _fill(healthy, stream_name, 5_000, 1_000))
    run_once(healthy.nodes[victim].url)  # through the node that just came back
    _assert_exactly(written(), expected)
