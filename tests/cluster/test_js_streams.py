"""Clustered streams through nats-py: placement, replication, the stream info cluster
section, step-down, purge, delete, scaling. One 3-server cluster for the module."""

from __future__ import annotations

import json
from typing import Any

import nats
import nats.js.api
import nats.js.errors
import pytest

from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.timeout(180)


async def _connect(cl: Cluster, index: int = 0) -> nats.NATS:
    await cl.wait_jetstream()
    return await cl.connect(cl.nodes[index])


async def test_r3_stream_is_placed_replicated_and_reported(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    info = await js.add_stream(name="ORDERS", subjects=["orders.>"], num_replicas=3)
    assert info.config.num_replicas == 3
    cluster = info.cluster
    assert cluster is not None and cluster.name == "C1"
    names = {n.name for n in cl.nodes}
    assert cluster.leader in names
    assert {r.name for r in cluster.replicas or []} == names - {cluster.leader}
    for i in range(50):
        ack = await js.publish(f"orders.{i}", b"order %d" % i)
        assert ack.stream == "ORDERS" and ack.seq == i + 1
    # Every replica holds every message: read each server's own copy through /jsz.
    def replicated() -> bool:
        return cl.stream_messages("ORDERS") == {n.name: 50 for n in cl.nodes}

    await wait_until(replicated, what="all replicas hold the messages")
    info = await js.stream_info("ORDERS")
    assert info.state.messages == 50 and info.state.last_seq == 50
    reps = info.cluster.replicas or []
    assert len(reps) == 2 and all(r.current for r in reps)
    assert all(r.active is not None and 0 < r.active < 5_000_000_000 for r in reps)  # ns
    msg = await js.get_msg("ORDERS", 7)
    assert msg.data == b"order 6"
    # /raftz: every server runs the stream's group and agrees on its leader; the leader
    # sees both followers holding every entry it committed.
    raw = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"")).data)
    group = raw["cluster"]["raft_group"]
    views = {n.name: n.http(f"/raftz?acc=$G&group={group}")["$G"][group] for n in cl.nodes}
    assert all(v["size"] == 3 and v["committed"] >= 50 for v in views.values())
    assert {v["leader_name"] for v in views.values()} == {info.cluster.leader}
    lead = views[info.cluster.leader]
    assert lead["state"] == "LEADER" and len(lead["peers"]) == 2
    assert all(p["last_replicated_index"] == lead["last_index"] for p in lead["peers"].values())
    await nc.close()


async def test_publish_and_info_through_every_server(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    conns = [await _connect(cl, i) for i in range(3)]
    await conns[0].jetstream().add_stream(name="EVERY", subjects=["every"], num_replicas=3)
    seqs = []
    for k, nc in enumerate(conns * 5):
        seqs.append((await nc.jetstream().publish("every", b"%d" % k)).seq)
    assert seqs == list(range(1, 16))
    for nc in conns:
        info = await nc.jetstream().stream_info("EVERY")
        assert info.state.messages == 15
        await nc.close()


async def test_r1_stream_and_too_many_replicas(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    info = await js.add_stream(name="SINGLE", subjects=["single"], num_replicas=1)
    assert info.cluster is not None and info.cluster.leader
    assert not info.cluster.replicas
    await js.publish("single", b"one")
    with pytest.raises(nats.js.errors.APIError) as err:
        await js.add_stream(name="FIVE", subjects=["five"], num_replicas=5)
    assert err.value.err_code == 10005
    assert "no suitable peers for placement" in (err.value.description or "")
    with pytest.raises(nats.js.errors.APIError) as err:
        await js.add_stream(
            name="TAGGED", subjects=["tagged"], placement=nats.js.api.Placement(tags=["ssd"])
        )
    assert err.value.err_code == 10005
    assert "tags not matched ['ssd']" in (err.value.description or "")
    await nc.close()


async def test_create_is_idempotent_and_conflicts_are_refused(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    await js.add_stream(name="IDEM", subjects=["idem.>"], num_replicas=3)
    again = await js.add_stream(name="IDEM", subjects=["idem.>"], num_replicas=3)
    assert again.config.name == "IDEM"
    with pytest.raises(nats.js.errors.APIError) as err:
        await js.add_stream(name="IDEM", subjects=["idem.other"], num_replicas=3)
    assert err.value.err_code == 10058
    with pytest.raises(nats.js.errors.APIError) as err:
        await js.add_stream(name="OVERLAP", subjects=["idem.x"], num_replicas=1)
    assert err.value.err_code == 10065
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.stream_info("NOPE")
    names = await js.streams_info()
    assert "IDEM" in {s.config.name for s in names}
    await nc.close()


async def test_stream_leader_step_down_elects_another(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    await js.add_stream(name="STEP", subjects=["step"], num_replicas=3)
    await js.publish("step", b"before")
    before = (await js.stream_info("STEP")).cluster.leader
    reply = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.STEP", b"", timeout=5)
    assert json.loads(reply.data)["success"] is True

    async def new_leader() -> str | None:
        leader = (await js.stream_info("STEP")).cluster.leader
        return leader if leader and leader != before else None

    after = await wait_until(new_leader, 10, "a new stream leader")
    assert after != before
    ack = await js.publish("step", b"after")
    assert ack.seq == 2
    await nc.close()


async def test_purge_delete_message_and_delete_stream(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    await js.add_stream(name="OPS", subjects=["ops.*"], num_replicas=3)
    for i in range(10):
        await js.publish(f"ops.{'a' if i % 2 else 'b'}", b"%d" % i)
    assert await js.delete_msg("OPS", 3)
    with pytest.raises(nats.js.errors.APIError) as err:
        await js.delete_msg("OPS", 3)
    assert err.value.err_code == 10043  # sequence 3 not found
    assert await js.purge_stream("OPS", subject="ops.a")
    info = await js.stream_info("OPS")
    assert info.state.messages == 4  # ops.b from i = 0, 4, 6, 8 (i = 2 was seq 3, deleted)

    def replicas_agree() -> bool:
        return cl.stream_messages("OPS") == {n.name: 4 for n in cl.nodes}

    await wait_until(replicas_agree, what="replicas to agree")
    assert await js.delete_stream("OPS")
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.stream_info("OPS")
    await nc.close()


async def test_scale_up_and_down(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    nc = await _connect(cl)
    js = nc.jetstream()
    await js.add_stream(name="SCALE", subjects=["scale"], num_replicas=1)
    for i in range(20):
        await js.publish("scale", b"%d" % i)
    await js.update_stream(name="SCALE", subjects=["scale"], num_replicas=3)

    async def three_current() -> bool:
        info = await js.stream_info("SCALE")
        reps = info.cluster.replicas or []
        return len(reps) == 2 and all(r.current for r in reps)

    await wait_until(three_current, 20, "three current replicas")
    assert (await js.stream_info("SCALE")).state.messages == 20
    await js.update_stream(name="SCALE", subjects=["scale"], num_replicas=1)

    async def one_replica() -> bool:
        info = await js.stream_info("SCALE")
        return not info.cluster.replicas and info.config.num_replicas == 1

    await wait_until(one_replica, 20, "a single replica")
    assert (await js.publish("scale", b"more")).seq == 21
    await nc.close()


async def test_deleted_stream_and_consumer_are_not_found_at_once(shared_cluster: Cluster) -> None:
    """A delete is answered only once the asset's leader stopped speaking for it: a client
    that deletes and at once looks the asset up (nats.js' object store ``destroy()`` then
    ``streams.info()`` does) gets "not found", from any server. The lookup races the
    servers applying the removal, so the steps repeat a bounded number of times."""
    await shared_cluster.wait_jetstream()
    ncs = [await shared_cluster.connect(n) for n in shared_cluster.nodes]
    for i in range(20):
        nc = ncs[i % len(ncs)]
        js = nc.jetstream()
        stream = f"DELGONE{i}"
        await js.add_stream(name=stream, subjects=[f"delgone{i}.>"], num_replicas=1 + 2 * (i % 2))
        await js.publish(f"delgone{i}.a", b"x")
        await js.add_consumer(stream, nats.js.api.ConsumerConfig(durable_name="c"))
        other = ncs[(i + 1) % len(ncs)]
        assert await js.delete_consumer(stream, "c")
        reply = await other.request(f"$JS.API.CONSUMER.INFO.{stream}.c", b"", timeout=5)
        body = json.loads(reply.data)
        assert body.get("error", {}).get("err_code") == 10014, f"round {i}: {body}"
        assert await js.delete_stream(stream)
        reply = await other.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        body = json.loads(reply.data)
        assert body.get("error", {}).get("err_code") == 10059, f"round {i}: {body}"
    for nc in ncs:
        await nc.close()


async def test_direct_get_through_any_server_sees_an_acknowledged_write(
    shared_cluster: Cluster,
) -> None:
    """Every replica of a stream with allow_direct answers DIRECT.GET (a KV ``get``), the
    client's own server first. A follower answers only once it applied every commit it
    heard of, and the commit news leaves the leader ahead of the PubAck: a ``put`` then
    ``get`` through any server returns the value just written."""
    await shared_cluster.wait_jetstream()
    ncs = [await shared_cluster.connect(n) for n in shared_cluster.nodes]
    js = ncs[0].jetstream()
    await js.add_stream(name="KV_STALE", subjects=["$KV.STALE.>"], num_replicas=3,
                        allow_direct=True, max_msgs_per_subject=5)
    for i in range(60):
        for nc in ncs:
            value = b"%d" % i
            await nc.jetstream().publish("$KV.STALE.k", value)
            got = await nc.request("$JS.API.DIRECT.GET.KV_STALE.$KV.STALE.k", b"", timeout=5)
            where = nc.connected_url.netloc if nc.connected_url else "?"
            assert got.data == value, f"round {i}: {where} gave {got.data!r}, not {value!r}"
    await js.delete_stream("KV_STALE")
    for nc in ncs:
        await nc.close()


async def test_peer_remove_without_a_spare_server_is_refused(shared_cluster: Cluster) -> None:
    """Three servers, three replicas: no server can take a removed peer's place, so the
    removal is refused with nats-server's 10075 and the stream keeps its replicas."""
    nc = await _connect(shared_cluster)
    js = nc.jetstream()
    await js.add_stream(name="NOSPARE", subjects=["nospare"], num_replicas=3)
    info = await js.stream_info("NOSPARE")
    peer = (info.cluster.replicas or [])[0].name
    reply = await nc.request("$JS.API.STREAM.PEER.REMOVE.NOSPARE",
                             json.dumps({"peer": peer}).encode(), timeout=10)
    err = json.loads(reply.data)["error"]
    assert (err["code"], err["err_code"], err["description"]) == (503, 10075, "peer remap failed")
    info = await js.stream_info("NOSPARE")
    assert peer in {r.name for r in info.cluster.replicas or []}
    assert len(info.cluster.replicas or []) == 2
    await js.delete_stream("NOSPARE")
    await nc.close()


async def test_action_advisories_once_per_committed_change(shared_cluster: Cluster) -> None:
    """The clustered API advises each stream and consumer create, update and delete once,
    after the meta group committed it (as nats-server, whose asset leaders advise): one
    subscriber sees each once, whichever server it is on and whichever server published."""
    cl = shared_cluster
    await cl.wait_jetstream()
    conns = [await cl.connect(node) for node in cl.nodes]
    try:
        subs = [await nc.subscribe("$JS.EVENT.ADVISORY.>") for nc in conns]
        seen: list[set[str]] = [set() for _ in conns]

        async def probes(tag: str) -> bool:
            """Every subscriber got ``tag`` from every server: interest has spread, and
            whatever a server published before its probe has arrived (a route keeps order)."""
            for i, nc in enumerate(conns):
                await nc.publish(f"$JS.EVENT.ADVISORY.PROBE.{tag}.{i}", b"")
            for sub, got in zip(subs, seen, strict=True):
                while len([s for s in got if f".{tag}." in s]) < len(conns):
                    try:
                        msg = await sub.next_msg(timeout=0.5)
                    except nats.errors.TimeoutError:
                        return False
                    if ".PROBE." in msg.subject:
                        got.add(msg.subject)
                    elif ".LEADER_ELECTED." not in msg.subject:  # their own test, below
                        events[subs.index(sub)].append(msg.subject)
            return True

        events: list[list[str]] = [[] for _ in conns]
        await wait_until(lambda: probes("start"), 20, "advisory interest on every server")
        for got in events:
            got.clear()  # only what follows counts
        nc = conns[1]

        async def api(subject: str, body: dict[str, object] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            answer = json.loads((await nc.request("$JS.API." + subject, data, timeout=20)).data)
            assert "error" not in answer, answer

        stream = {"name": "ADV", "subjects": ["adv"], "num_replicas": 3}
        await api("STREAM.CREATE.ADV", stream)
        await api("STREAM.CREATE.ADV", stream)  # nothing changes: nothing to advise
        await api("STREAM.UPDATE.ADV", {**stream, "max_msgs": 10})
        for name in ("d", "e"):
            durable = {"stream_name": "ADV", "config": {"durable_name": name}}
            await api(f"CONSUMER.DURABLE.CREATE.ADV.{name}", durable)
        changed = {"stream_name": "ADV", "config": {"durable_name": "e", "max_deliver": 5}}
        await api("CONSUMER.DURABLE.CREATE.ADV.e", changed)  # an update: not advised
        await api("CONSUMER.DELETE.ADV.d")
        await api("STREAM.DELETE.ADV")  # its consumer e goes with it, advised first

        async def settled() -> bool:
            return await probes(f"end{len(seen[0])}")

        await wait_until(settled, 20, "the advisories to arrive")
        prefix = "$JS.EVENT.ADVISORY."
        expected = [prefix + s for s in (
            "STREAM.CREATED.ADV", "STREAM.UPDATED.ADV", "CONSUMER.CREATED.ADV.d",
            "CONSUMER.CREATED.ADV.e", "CONSUMER.DELETED.ADV.d", "CONSUMER.DELETED.ADV.e",
            "STREAM.DELETED.ADV")]
        assert events == [expected] * len(conns)
    finally:
        for c in conns:
            await c.close()


async def test_leader_elected_advisories(shared_cluster: Cluster) -> None:
    """A stream's, a consumer's and the meta group's new leaders advise their election, as
    nats-server's do: the first two into the asset's account and, naming the account, into
    the system account; the meta group's (DOMAIN.LEADER_ELECTED) into the system account.
    Each names the new leader and lists the group's replicas, the leader among them."""
    cl = shared_cluster
    await cl.wait_jetstream()
    user = [await cl.connect(node) for node in cl.nodes]
    system = [await cl.connect_system(node) for node in cl.nodes]
    conns = user + system
    try:
        subs = [await nc.subscribe("$JS.EVENT.ADVISORY.>") for nc in (user[0], system[0])]

        async def interest(tag: str) -> bool:
            """Both subscribers got a probe from every server of their account."""
            for nc in conns:
                await nc.publish(f"$JS.EVENT.ADVISORY.PROBE.{tag}", b"")
            for sub in subs:
                probes = 0
                while probes < len(cl.nodes):
                    try:
                        msg = await sub.next_msg(timeout=0.5)
                    except nats.errors.TimeoutError:
                        return False
                    probes += msg.subject.endswith(f".PROBE.{tag}")
            return True

        tags = iter(range(1000))
        await wait_until(lambda: interest(f"t{next(tags)}"), 20, "advisory interest everywhere")
        js = user[0].jetstream()
        await js.add_stream(name="ELECT", subjects=["elect"], num_replicas=3)
        await js.add_consumer("ELECT", durable_name="ec", ack_policy="explicit")

        async def elected(sub: Any, subject: str) -> dict[str, Any]:
            while True:
                msg = await sub.next_msg(timeout=15)
                if msg.subject == subject:
                    return dict(json.loads(msg.data))

        async def step_down(what: str, subject: str, leader_of: Any) -> None:
            before = await leader_of()
            for sub in subs:  # what the creates advised is not what this test is about
                while sub.pending_msgs:
                    await sub.next_msg(timeout=1)
            reply = await user[0].request(f"$JS.API.{what}.LEADER.STEPDOWN.{subject}", b"",
                                          timeout=10)
            assert json.loads(reply.data)["success"] is True
            kind = what.split(".")[0]
            adv_subject = f"$JS.EVENT.ADVISORY.{kind}.LEADER_ELECTED.{subject}"
            mine, sys_copy = [await elected(sub, adv_subject) for sub in subs]
            after = await wait_until(leader_of, 15, "the new leader in info")
            assert after != before
            kind_type = f"io.nats.jetstream.advisory.v1.{kind.lower()}_leader_elected"
            for body in (mine, sys_copy):
                assert body["type"] == kind_type
                assert body["leader"] == after
                assert sorted(r["name"] for r in body["replicas"]) == sorted(
                    n.name for n in cl.nodes)
                assert [r["current"] for r in body["replicas"] if r["name"] == after] == [True]
            assert "account" not in mine
            assert sys_copy["account"] == "$G"

        async def stream_leader() -> str:
            return str((await js.stream_info("ELECT")).cluster.leader or "")

        async def consumer_leader() -> str:
            return str((await js.consumer_info("ELECT", "ec")).cluster.leader or "")

        await step_down("STREAM", "ELECT", stream_leader)
        await step_down("CONSUMER", "ELECT.ec", consumer_leader)

        meta_before = await cl.wait_jetstream()
        reply = await system[0].request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=10)
        assert json.loads(reply.data).get("success") is True, reply.data
        body = await elected(subs[1], "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED")

        def meta_moved() -> str | None:
            lead = cl.meta_leader()
            return lead if lead and lead != meta_before else None

        meta_after = await wait_until(meta_moved, 20, "the meta leader to change")
        by_peer = {r["peer"]: r["name"] for r in body["replicas"]}
        assert by_peer[body["leader"]] == meta_after
        assert sorted(by_peer.values()) == sorted(n.name for n in cl.nodes)
        assert body["cluster"] == cl.nodes[0].cluster_name
        await js.delete_stream("ELECT")
    finally:
        for nc in conns:
            await nc.close()
