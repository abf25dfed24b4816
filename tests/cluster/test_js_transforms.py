"""Subject transforms and republish on a clustered R3 stream: every replica stores the same
transformed subjects, and only the stream leader republishes, also after a step-down."""

from __future__ import annotations

import json

import nats
import nats.errors
import pytest

from tests.cluster.harness import Cluster, stream_leader, wait_until

pytestmark = pytest.mark.timeout(180)


async def _direct_subjects(nc: nats.NATS, stream: str, last: int) -> list[str]:
    """The subjects of messages 1..last as the replica on ``nc``'s server holds them
    (direct gets are answered by the client's own server first)."""
    out = []
    for seq in range(1, last + 1):
        msg = await nc.request(f"$JS.API.DIRECT.GET.{stream}",
                               json.dumps({"seq": seq}).encode(), timeout=5)
        assert msg.headers is not None, msg.data
        out.append(msg.headers["Nats-Subject"])
    return out


async def test_r3_transform_and_republish(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    conns = [await cl.connect(node) for node in cl.nodes]
    nc = conns[0]
    resp = json.loads((await nc.request("$JS.API.STREAM.CREATE.XF", json.dumps({
        "name": "XF", "subjects": ["xf.*"], "num_replicas": 3, "allow_direct": True,
        "subject_transform": {"src": "xf.*", "dest": "p.{{partition(3,1)}}.$1"},
        "republish": {"src": ">", "dest": "out.>"},
    }).encode(), timeout=10)).data)
    assert "error" not in resp, resp
    # One subscriber on every server: each must see each copy exactly once.
    subs = [await c.subscribe("out.>") for c in conns]
    for c in conns:
        await c.flush()
    js = nc.jetstream()
    keys = [f"k{i}" for i in range(12)]
    for key in keys[:6]:
        await js.publish(f"xf.{key}", key.encode())
    before = await stream_leader(nc, "XF")
    reply = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.XF", b"", timeout=5)
    assert json.loads(reply.data)["success"] is True

    async def moved() -> str | None:
        leader = await stream_leader(nc, "XF")
        return leader if leader != before else None

    await wait_until(moved, 20, "a new leader for XF")
    for key in keys[6:]:
        ack = await js.publish(f"xf.{key}", key.encode())
        assert ack.seq == int(key[1:]) + 1
    for sub in subs:
        copies = [await sub.next_msg(timeout=5) for _ in keys]
        # The partition token is the same one on every copy and every replica.
        assert [m.data.decode() for m in copies] == keys
        assert all(m.subject.startswith("out.p.") and m.subject.endswith(m.data.decode())
                   for m in copies)
        seqs = [(m.headers or {}).get("Nats-Sequence") for m in copies]
        assert seqs == [str(i) for i in range(1, 13)]
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.3)  # no second copy from a follower
    expected = [m.subject[len("out."):] for m in copies]

    async def replicas_agree() -> bool:
        views = [await _direct_subjects(c, "XF", len(keys)) for c in conns]
        return all(v == expected for v in views)

    await wait_until(replicas_agree, 20, "every replica storing the transformed subjects")
    for c in conns:
        await c.close()
