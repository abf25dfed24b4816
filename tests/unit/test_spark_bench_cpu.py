"""spark_bench's split of CPU between the server, Spark's JVM and its Python workers."""

from __future__ import annotations

from benchmarks.spark_bench import Proc, split_cpu

ME, SERVER, JVM, DAEMON, WORKER, RUNNER, ZOMBIE, OTHER = 10, 11, 12, 13, 14, 15, 16, 17
JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp x org.apache.spark.deploy.SparkSubmit"


def procs(**extra: Proc) -> dict[int, Proc]:
    out = {
        ME: Proc(1, 5.0, 0.0, "python -m benchmarks.spark_bench"),
        SERVER: Proc(ME, 3.0, 0.5, "python -m jetraft server"),
        JVM: Proc(ME, 7.0, 0.0, JAVA),
        DAEMON: Proc(JVM, 0.25, 2.0, "python -m pyspark.daemon pyspark.worker"),
        WORKER: Proc(DAEMON, 1.0, 0.0, "python -m pyspark.daemon pyspark.worker"),
        OTHER: Proc(1, 9.0, 0.0, "python -m pytest"),
    }
    for key, proc in extra.items():
        out[{"jvm": JVM, "runner": RUNNER, "zombie": ZOMBIE}[key]] = proc
    return out


def test_server_jvm_and_workers_are_told_apart() -> None:
    cpu = split_cpu(procs(), ME, SERVER)
    assert (cpu.server, cpu.jvm, cpu.workers) == (3.5, 7.0, 3.25)


def test_python_the_jvm_started_and_reaped_counts_as_workers() -> None:
    # The driver side of a streaming source runs in a Python process the JVM starts and
    # reaps itself: its seconds land in the JVM's children times, not the JVM's own.
    cpu = split_cpu(procs(jvm=Proc(ME, 7.0, 1.5, JAVA)), ME, SERVER)
    assert (cpu.jvm, cpu.workers) == (7.0, 4.75)


def test_live_and_exited_children_of_the_jvm_count_as_workers() -> None:
    runner = Proc(JVM, 1.25, 0.0, "python -m pyspark.sql.streaming.python_streaming_source_runner")
    zombie = Proc(JVM, 0.5, 0.0, "")  # exited, not reaped yet: no command line any more
    cpu = split_cpu(procs(runner=runner, zombie=zombie), ME, SERVER)
    assert (cpu.jvm, cpu.workers) == (7.0, 5.0)
