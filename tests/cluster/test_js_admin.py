"""Administering a clustered JetStream as the seeds do: readiness with a quorum, peer
removal with re-placement, zones, meta step-down, server removal, lame duck, and servers
without JetStream in the same cluster."""

from __future__ import annotations

import asyncio
import json
import signal

import nats
import nats.js.errors
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Node, wait_until

pytestmark = pytest.mark.timeout(300)


async def _info(nc: nats.NATS, stream: str) -> nats.js.api.StreamInfo:
    return await nc.jetstream().stream_info(stream)


async def _stream_leader(nc: nats.NATS, stream: str) -> str:
    async def known() -> str | None:
        info = await _info(nc, stream)
        return info.cluster.leader if info.cluster and info.cluster.leader else None

    return await wait_until(known, 20, "a stream leader")


async def test_jetstream_needs_a_quorum_of_the_configured_servers(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    n1, n2, n3 = cl.nodes
    await cl.start(wait=False)
    n2.stop()
    n3.stop()
    nc = await cl.connect(n1)
    with pytest.raises(nats.js.errors.APIError) as err:
        await nc.jetstream().account_info()
    assert err.value.err_code == 10008  # JetStream system temporarily unavailable
    n2.start()  # "after two servers are running you'll be ready to use JetStream"
    await cl.wait_mesh(nodes=[n1, n2])
    info = await wait_until(lambda: nc.jetstream().account_info(), 30, "JetStream ready")
    assert info.streams == 0
    n3.start()
    await cl.wait_mesh()
    await cl.wait_jetstream()
    meta = n1.http("/jsz")["meta_cluster"]
    assert meta["cluster_size"] == 3 and meta["quorum_needed"] == 2
    await nc.close()


async def test_peer_remove_places_a_new_replica_that_catches_up(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(5)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"], num_replicas=3)
    for i in range(200):
        await js.publish("orders.new", b"order %d" % i)
    await js.add_consumer("ORDERS", durable_name="shipping", ack_policy="explicit")
    info = await _info(nc, "ORDERS")
    leader = info.cluster.leader
    removed = next(r.name for r in info.cluster.replicas if r.name != leader)
    reply = await nc.request("$JS.API.STREAM.PEER.REMOVE.ORDERS",
                             json.dumps({"peer": removed}).encode(), timeout=5)
    assert json.loads(reply.data) == {
        "type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}

    async def replaced() -> bool:
        info = await _info(nc, "ORDERS")
        names = {info.cluster.leader, *(r.name for r in info.cluster.replicas or [])}
        return len(names) == 3 and removed not in names and all(
            r.current for r in info.cluster.replicas or [])

    await wait_until(replaced, 30, "a current replacement replica")
    counts = cl.stream_messages("ORDERS")
    assert len(counts) == 3 and set(counts.values()) == {200} and removed not in counts
    cinfo = await js.consumer_info("ORDERS", "shipping")

    async def consumer_moved() -> bool:
        c = await js.consumer_info("ORDERS", "shipping")
        names = {c.cluster.leader, *(r.name for r in c.cluster.replicas or [])}
        return removed not in names and len(names) == 3

    await wait_until(consumer_moved, 30, "the consumer to follow its stream")
    assert cinfo.num_pending == 200
    reply = await nc.request("$JS.API.STREAM.PEER.REMOVE.ORDERS",
                             json.dumps({"peer": "nobody"}).encode(), timeout=5)
    assert json.loads(reply.data)["error"]["err_code"] == 10040
    await nc.close()


async def test_zones_with_unique_tag_survive_the_loss_of_a_zone(
    make_cluster: ClusterFactory,
) -> None:
    zones = {1: "az:1", 2: "az:1", 3: "az:2", 4: "az:2", 5: "az:3"}
    cl = make_cluster(5, extra=lambda i: f'server_tags: ["{zones[i]}"]\n')
    for node in cl.nodes:
        node.js_extra = '   unique_tag: "az:"\n'
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[4])
    js = nc.jetstream()
    await js.add_stream(name="Z", subjects=["z"], num_replicas=3)
    info = await _info(nc, "Z")
    peers = [info.cluster.leader, *(r.name for r in info.cluster.replicas or [])]
    by_name = {n.name: n for n in cl.nodes}
    assert len({zones[by_name[p].index] for p in peers}) == 3  # one replica per zone
    for i in range(10):
        await js.publish("z", b"%d" % i)
    lost = zones[by_name[peers[0]].index]
    if lost == "az:3":
        lost = zones[by_name[peers[1]].index]
    for node in cl.nodes:
        if zones[node.index] == lost:
            node.kill()
    survivor = next(n for n in cl.nodes if n.running)
    nc2 = await cl.connect(survivor)

    async def publish() -> bool:
        try:
            await nc2.jetstream().publish("z", b"after", timeout=1)
            return True
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return False

    await wait_until(publish, 30, "publishing with a zone down")
    assert (await _info(nc2, "Z")).state.messages == 11
    await nc.close()
    await nc2.close()


async def test_meta_step_down_and_server_remove(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3)
    await cl.start()
    before = await cl.wait_jetstream()
    sysc = await cl.connect_system(cl.nodes[0])
    # Only the system account may ask; in an application account nobody answers.
    app = await cl.connect(cl.nodes[0])
    with pytest.raises(nats.errors.TimeoutError):
        await app.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=1)
    reply = await sysc.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=5)
    assert json.loads(reply.data)["success"] is True
    def new_leader() -> str | None:
        leader = cl.meta_leader()
        return leader if leader and leader != before else None

    after = await wait_until(new_leader, 15, "a new meta leader")
    assert after != before
    gone = next(n for n in cl.nodes[1:] if n.name != after)  # not our client's server
    gone.stop()

    def offline() -> bool:
        leader_node = cl.node(cl.meta_leader())
        reps = leader_node.http("/jsz")["meta_cluster"]["replicas"]
        return any(r["name"] == gone.name and r.get("offline") for r in reps)

    await wait_until(offline, 20, "the stopped server to show offline")
    reply = await sysc.request("$JS.API.SERVER.REMOVE",
                               json.dumps({"peer": gone.name}).encode(), timeout=5)
    assert json.loads(reply.data)["success"] is True

    def removed() -> bool:
        leader_node = cl.node(cl.meta_leader())
        reps = leader_node.http("/jsz")["meta_cluster"]["replicas"]
        return all(r["name"] != gone.name for r in reps)

    await wait_until(removed, 20, "the server to leave the meta group")
    await sysc.close()
    await app.close()


async def test_lame_duck_hands_leaderships_away(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3, extra=lambda i: "lame_duck_duration: 5s\nlame_duck_grace_period: 1s\n")
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="LDM", subjects=["ldm"], num_replicas=3)
    leader = await _stream_leader(nc, "LDM")
    await nc.close()
    lnode = cl.node(leader)
    client = await cl.connect(next(n for n in cl.nodes if n is not lnode))
    lnode.signal(signal.SIGUSR2)

    async def moved() -> str | None:
        now = await _stream_leader(client, "LDM")
        return now if now != leader else None

    await wait_until(moved, 10, "leadership to leave the lame duck")
    assert (await client.jetstream().publish("ldm", b"still here")).seq == 1
    await wait_until(lambda: not lnode.running, 30, "the lame duck to exit")
    await client.close()


async def test_servers_without_jetstream_forward_to_those_with_it(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(5, jetstream=lambda i: i <= 3)
    await cl.start()
    await cl.wait_jetstream()
    std: Node = cl.nodes[4]
    assert std.http("/jsz").get("disabled") is True
    nc = await cl.connect(std)  # a client of a standard server uses JetStream fully
    js = nc.jetstream()
    info = await js.add_stream(name="MIX", subjects=["mix"], num_replicas=3)
    assert info.cluster.leader in {"n1-c1", "n2-c1", "n3-c1"}
    for i in range(10):
        assert (await js.publish("mix", b"%d" % i)).seq == i + 1
    psub = await js.pull_subscribe("mix", durable="m")
    msgs = await psub.fetch(10, timeout=5)
    assert [m.data for m in msgs] == [b"%d" % i for i in range(10)]
    for m in msgs:
        await m.ack_sync()
    assert std.name not in cl.stream_messages("MIX")
    meta = cl.nodes[0].http("/jsz")["meta_cluster"]
    assert meta["cluster_size"] == 3
    await nc.close()
    await asyncio.sleep(0)
