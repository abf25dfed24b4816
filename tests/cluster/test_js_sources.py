"""Sourcing and mirroring in a cluster: an R3 origin, an R3 sourcing stream and an R3
mirror. The sourcing stream's leader reads the origin through the JetStream API (its
leader may be another server) and proposes the copies through its own group; SIGKILL of
that leader while the origin grows loses and duplicates nothing (the origin's Nats-Msg-Id
does not help: a sourcing stream keeps no duplicate window), and every replica holds the
same."""

from __future__ import annotations

import base64
import json

import nats
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import CLUSTER, Cluster, stream_leader, wait_until
from tests.cluster.test_js_faults import _publish_reliably

pytestmark = pytest.mark.timeout(240)

N = 400


async def _api(nc: nats.NATS, subject: str, body: object) -> dict[str, object]:
    msg = await nc.request("$JS.API." + subject, json.dumps(body).encode(), timeout=10)
    out: dict[str, object] = json.loads(msg.data)
    return out


async def _source_seqs(nc: nats.NATS, stream: str) -> list[int]:
    """The origin sequence of each message of ``stream``, from its Nats-Stream-Source."""
    seqs = []
    seq = 1
    while True:
        got = await _api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": ">"})
        if "error" in got:
            return seqs
        m = got["message"]
        assert isinstance(m, dict)
        hdrs = base64.b64decode(m["hdrs"]).decode()
        line = next(x for x in hdrs.split("\r\n") if x.startswith("Nats-Stream-Source:"))
        seqs.append(int(line.split(" ")[2]))
        seq = int(m["seq"]) + 1


async def test_r3_sourcing_survives_sigkill_of_its_leader(make_cluster: ClusterFactory) -> None:
    cl: Cluster = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    await admin.jetstream(timeout=10).add_stream(name="O", subjects=["o.>"], num_replicas=3)
    for body in ({"name": "S", "num_replicas": 3, "sources": [{"name": "O"}]},
                 {"name": "M", "num_replicas": 3, "mirror": {"name": "O"}}):
        got = await _api(admin, f"STREAM.CREATE.{body['name']}", body)
        assert "error" not in got, got
    leader = await stream_leader(admin, "S")
    await admin.close()
    # Publish from a server that survives; kill S's leader while the origin keeps growing,
    # so copies are being read and proposed when it dies.
    nc = await cl.connect(next(n for n in cl.nodes if n.name != leader))
    for i in range(N):
        if i == N // 3:
            cl.node(leader).kill()
        await _publish_reliably(nc, f"o.{i % 5}", i)
    assert await stream_leader(nc, "S") != leader

    def all_copied() -> bool:
        return cl.stream_messages("S") == {n.name: N for n in cl.nodes if n.running} and (
            cl.stream_messages("M") == {n.name: N for n in cl.nodes if n.running}
        )

    await wait_until(all_copied, 120, "S and M to hold every origin message")
    assert await _source_seqs(nc, "S") == list(range(1, N + 1))  # no loss, no duplicate
    info = await _api(nc, "STREAM.INFO.M", {})
    state = info["state"]
    assert isinstance(state, dict) and (state["first_seq"], state["last_seq"]) == (1, N)
    # The killed server comes back and its replicas catch up with the same messages.
    cl.node(leader).start()
    await cl.wait_mesh()
    await wait_until(lambda: cl.stream_messages("S") == {n.name: N for n in cl.nodes}, 60,
                     "the restarted replica of S to catch up")
    await nc.close()


async def test_stream_info_lists_mirrors_as_alternates(make_cluster: ClusterFactory) -> None:
    """In a cluster a stream's info names where it can be read: itself and its mirrors
    (``alternates``, which nats.js's streams.get(...).alternates()/best() use); a stream
    nobody mirrors has none."""
    cl: Cluster = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[1])
    try:
        for body in ({"name": "ORIG", "subjects": ["orig"]}, {"name": "LONE", "subjects": ["l"]},
                     {"name": "COPY", "mirror": {"name": "ORIG"}}):
            got = await _api(nc, f"STREAM.CREATE.{body['name']}", body)
            assert "error" not in got, got
        info = await _api(nc, "STREAM.INFO.ORIG", {})
        assert info["alternates"] == [{"name": "ORIG", "cluster": CLUSTER},
                                      {"name": "COPY", "cluster": CLUSTER}]
        assert "alternates" not in await _api(nc, "STREAM.INFO.LONE", {})
    finally:
        await nc.close()
