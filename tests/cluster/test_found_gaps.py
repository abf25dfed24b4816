"""Behaviour of a jetraft cluster that differs from nats-server, found by running client
suites (nats.js, the CLI, the Spark connector) against it. Each test is a minimal nats-py
reproduction that fails today; a 3-node nats-server 2.15.1 cluster passes it. They stay
here, failing, until the server is fixed (then they move next to the tests of that part).

The checks race the server on purpose (what a client may do right after a reply), so each
repeats its few steps a bounded number of times and fails on the first wrong answer.
"""

from __future__ import annotations

import pytest

from tests.cluster.harness import Cluster

pytestmark = pytest.mark.timeout(120)

ROUNDS = 30


async def test_direct_get_through_any_server_sees_an_acknowledged_write(
    shared_cluster: Cluster,
) -> None:
    """Every replica of a stream with allow_direct answers DIRECT.GET (KV ``get`` uses it),
    and a client's own server is preferred. A follower answers from what it has applied, and
    it may not have applied a message whose PubAck the client already holds: a KV ``put``
    then ``get`` through a follower's server returns the previous value (a few gets in a
    hundred here, all through one of the two followers; nats.js' js_kv "put, get,
    revisions" fails in about half its cluster runs). nats-server serves direct gets from
    followers that are caught up and, in the same loop, returned no stale value in 300.
    A fix: a follower answers a direct get only once it applied everything committed when
    the request arrived (the commit news must then reach it ahead of the PubAck it
    forwards), or leaves it to the leader meanwhile."""
    await shared_cluster.wait_jetstream()
    ncs = [await shared_cluster.connect(n) for n in shared_cluster.nodes]
    js = ncs[0].jetstream()
    await js.add_stream(
        name="KV_STALE",
        subjects=["$KV.STALE.>"],
        num_replicas=3,
        allow_direct=True,
        max_msgs_per_subject=5,
    )
    for i in range(ROUNDS * 2):
        for nc in ncs:
            value = b"%d" % i
            await nc.jetstream().publish("$KV.STALE.k", value)
            got = await nc.request("$JS.API.DIRECT.GET.KV_STALE.$KV.STALE.k", b"", timeout=5)
            assert got.data == value, (
                f"round {i}: through {nc.connected_url.netloc if nc.connected_url else '?'} "
                f"got {got.data!r} after the PubAck of {value!r}"
            )
    await js.delete_stream("KV_STALE")
    for nc in ncs:
        await nc.close()
