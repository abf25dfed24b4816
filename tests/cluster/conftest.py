"""Fixtures for multi-process cluster tests (see harness.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster

ClusterFactory = Callable[..., Cluster]


@pytest.fixture
async def make_cluster(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[ClusterFactory]:
    """``make_cluster(size, proxies=False, jetstream=..., extra=...)``: configs are written
    and processes started by ``await cluster.start()``; all are stopped at the end, and
    their logs are printed when the test failed."""
    made: list[Cluster] = []

    def make(size: int, **kwargs: Any) -> Cluster:
        base = tmp_path / f"cluster{len(made)}"
        base.mkdir()
        cl = Cluster.create(base, size, **kwargs)
        made.append(cl)
        return cl

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cl in made:
        if failed is not None and failed.failed:
            print(cl.logs())
        await cl.close()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-server JetStream cluster for a whole module (tests that do not break it)."""
    base = tmp_path_factory.mktemp("shared")
    cl = Cluster.create(base, 3)
    asyncio.run(cl.start())
    yield cl
    asyncio.run(cl.close())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
