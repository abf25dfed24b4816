"""Fixtures for the Spark connector suite: one local Spark session and one server process.

``JETRAFT_SPARK_SERVER=jetraft`` (default) runs ``python -m jetraft server``;
``JETRAFT_SPARK_SERVER=nats-server`` runs the nats-server binary (same wire protocol).
The Spark session is started once per session (the JVM takes seconds to start) with
``local[2, 4]``: two worker threads, and a failed task is retried up to 4 times.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.support import SERVER_KIND, ServerProcess

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError:  # the spark extra is not installed: nothing here can run
    collect_ignore_glob = [
        "test_read.py", "test_sink.py", "test_stream.py", "test_read_limits.py",
        "test_cluster.py", "test_security.py", "test_example.py", "test_encode.py",
        "test_prefetch.py",
    ]  # fmt: skip


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("spark-server")
    srv = ServerProcess(SERVER_KIND, base / "store")
    srv.start()
    yield srv
    srv.stop()


class _Sessions:
    """The suite's one Spark session, rebuilt after a test timed out inside it.

    pytest-timeout ends a test by raising in the main thread, which can be in the middle
    of a py4j call; the gateway connection is then left with an answer nobody read, and
    every later call on it gets some earlier call's answer. One timeout would fail every
    Spark test after it with nonsense, so the JVM of a timed-out test is ended and the
    next test starts a fresh one.
    """

    def __init__(self, warehouse: str) -> None:
        self.warehouse = warehouse
        self.session: Any = None
        self.poisoned = False

    def get(self) -> Any:
        if self.poisoned:
            self.discard()
        if self.session is None:
            self.session = self._build()
        return self.session

    def _build(self) -> Any:
        from pyspark.sql import SparkSession

        import jetraft.spark

        session = (
            SparkSession.builder.master("local[2, 4]")
            .appName("jetraft-spark-tests")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.warehouse.dir", self.warehouse)
            .config("spark.driver.memory", "1g")
            .config("spark.python.worker.reuse", "true")
            .config("spark.sql.streaming.stopTimeout", "20s")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        jetraft.spark.register(session)
        return session

    def discard(self) -> None:
        """End the JVM without a word to it (its connection cannot be trusted) and forget
        every reference PySpark keeps, so the next ``getOrCreate`` launches a new one."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(Exception):
            gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
        self.session = None
        self.poisoned = False

    def stop(self) -> None:
        if self.session is not None and not self.poisoned:
            self.session.stop()
        elif self.session is not None:
            self.discard()


@pytest.fixture(scope="session")
def _spark_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Sessions]:
    # Loopback only: Spark otherwise binds the driver to the host's first non-loopback address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    sessions = _Sessions(str(tmp_path_factory.mktemp("spark-warehouse")))
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(_spark_sessions: _Sessions) -> Any:
    return _spark_sessions.get()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (
        report.failed
        # pytest-timeout's failure, raised as such or wrapped by py4j (then its banner is
        # in the captured stderr)
        and ("Timeout" in str(report.longrepr) or "+ Timeout +" in report.capstderr)
        and "spark" in getattr(item, "fixturenames", ())
    ):
        sessions = item.funcargs.get("_spark_sessions")  # type: ignore[attr-defined]
        if isinstance(sessions, _Sessions):
            sessions.poisoned = True


_counter = itertools.count()


@pytest.fixture
def stream_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c for c in request.node.name if c.isalnum()).upper()[:40]
    return f"{base}{next(_counter)}"


def pytest_report_header(config: pytest.Config) -> str:
    return f"spark connector tests run against: {SERVER_KIND} (JETRAFT_SPARK_SERVER)"
