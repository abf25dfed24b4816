"""Fixtures for the Spark connector suite: one local Spark session and one server process.

``JETRAFT_SPARK_SERVER=jetraft`` (default) runs ``python -m jetraft server``;
``JETRAFT_SPARK_SERVER=nats-server`` runs the nats-server binary (same wire protocol).
The Spark session is started once per session (the JVM takes seconds to start) with
``local[2, 4]``: two worker threads, and a failed task is retried up to 4 times.
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import jetraft.spark

    # Loopback only: Spark otherwise binds the driver to the host's first non-loopback address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2, 4]")
        .appName("jetraft-spark-tests")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    jetraft.spark.register(session)
    yield session
    session.stop()


_counter = itertools.count()


@pytest.fixture
def stream_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c for c in request.node.name if c.isalnum()).upper()[:40]
    return f"{base}{next(_counter)}"


def pytest_report_header(config: pytest.Config) -> str:
    return f"spark connector tests run against: {SERVER_KIND} (JETRAFT_SPARK_SERVER)"
