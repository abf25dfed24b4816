"""The nats.js scripts of ``tests/js`` against a 3-server jetraft cluster, with R3 streams,
KV buckets and object stores (``NATS_REPLICAS=3``).

The scripts are the ones ``tests/integration/test_nats_js.py`` runs against one server: a
nats.js user's code must not care whether it talks to one server or to a cluster. Each
script connects to a different server (script i to node i mod 3), so requests reach the
meta leader, stream leaders and consumer leaders over routes as often as directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests import natsjs
from tests.cluster.harness import Cluster

SIZE = 3


@pytest.fixture(scope="session")
def natsjs_installed() -> str:
    return natsjs.install()


@pytest.fixture(scope="module")
def js_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-server cluster for every script (they use unique stream and bucket names)."""
    cl = Cluster.create(tmp_path_factory.mktemp("natsjs-cluster"), SIZE)

    async def up() -> None:
        await cl.start()
        await cl.wait_jetstream()

    try:
        asyncio.run(up())
        yield cl
    finally:
        asyncio.run(cl.close())


@pytest.mark.parametrize("script", natsjs.SCRIPTS)
def test_nats_js_script_on_cluster(natsjs_installed: str, js_cluster: Cluster, script: str) -> None:
    node = js_cluster.nodes[natsjs.SCRIPTS.index(script) % SIZE]
    natsjs.run_script(natsjs_installed, script, node.url, js_cluster.logs, replicas=SIZE)
    dead = [n.name for n in js_cluster.nodes if not n.running]
    assert not dead, f"servers died during {script}: {dead}\n{js_cluster.logs()}"
