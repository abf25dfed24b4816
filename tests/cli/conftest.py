"""Fixtures: one jetraft server and one 5-server cluster per module, and a CLI runner.

The cluster's backend is ``JETRAFT_CLI_CLUSTER`` (jetraft by default, nats-server with
``JETRAFT_CLI_CLUSTER=nats``; see support.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.support import Result, Servers, cli_env, cluster_backend, run_cli

Runner = Callable[..., Result]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    servers = Servers(tmp_path_factory.mktemp("single"), 1, "jetraft")
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    servers = Servers(tmp_path_factory.mktemp("cluster"), 5, cluster_backend())
    try:
        servers.start(timeout_s=90)
        yield servers
    finally:
        servers.stop()


def make_runner(home: Path, url: str) -> Runner:
    def run(
        *args: str, stdin: str = "", env: dict[str, str] | None = None, timeout_s: float = 60
    ) -> Result:
        full_env = cli_env(home, NATS_URL=url)
        full_env.update(env or {})
        return run_cli(list(args), env=full_env, stdin=stdin, timeout_s=timeout_s)

    return run


@pytest.fixture
def jr(single: Servers, tmp_path: Path) -> Runner:
    """``jr("str", "ls")`` runs ``jetraft str ls`` against the single jetraft server."""
    return make_runner(tmp_path / "home", single.urls)


@pytest.fixture
def jc(cluster: Servers, tmp_path: Path) -> Runner:
    """Runs ``jetraft`` against the cluster (all its URLs in NATS_URL)."""
    return make_runner(tmp_path / "home", cluster.urls)
