"""Clustered consumers through nats-py: pull and push delivery from any server, replicated
delivered and ack state across leader changes and SIGKILL, retention, KV."""

from __future__ import annotations

import asyncio
import json

import nats
import nats.js.api
import nats.js.errors
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Cluster, wait_until
from tests.rawclient import RawClient

pytestmark = pytest.mark.timeout(240)


async def _consumer_leader(nc: nats.NATS, stream: str, name: str) -> str:
    async def known() -> str | None:
        info = await nc.jetstream().consumer_info(stream, name)
        return info.cluster.leader if info.cluster and info.cluster.leader else None

    return await wait_until(known, 20, f"a leader for consumer {name}")


async def test_pull_consumer_survives_step_down(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[1])
    js = nc.jetstream()
    await js.add_stream(name="PULL", subjects=["pull.>"], num_replicas=3)
    for i in range(30):
        await js.publish("pull.x", b"%d" % i)
    psub = await js.pull_subscribe("pull.>", durable="worker")
    msgs = await psub.fetch(10, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 11))
    for m in msgs[:8]:
        await m.ack_sync()  # 9 and 10 stay unacknowledged
    info = await js.consumer_info("PULL", "worker")
    assert info.num_ack_pending == 2 and info.ack_floor.stream_seq == 8
    assert info.cluster is not None and len(info.cluster.replicas or []) == 2
    before = info.cluster.leader
    reply = await nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.PULL.worker", b"", timeout=5)
    assert json.loads(reply.data)["success"] is True

    async def moved() -> str | None:
        leader = await _consumer_leader(nc, "PULL", "worker")
        return leader if leader != before else None

    await wait_until(moved, 15, "a new consumer leader")
    info = await js.consumer_info("PULL", "worker")
    # The new leader carries on from the replicated state, not from guesses.
    assert info.ack_floor.stream_seq == 8 and info.num_ack_pending == 2
    assert info.delivered.stream_seq == 10
    msgs = await psub.fetch(5, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == [11, 12, 13, 14, 15]
    await nc.close()


async def test_push_consumer_delivers_to_a_subscriber_on_another_server(
    shared_cluster: Cluster,
) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    pub = await cl.connect(cl.nodes[0])
    await pub.jetstream().add_stream(name="PUSH", subjects=["push"], num_replicas=3)
    got: list[bytes] = []
    for node in cl.nodes:  # a subscriber on each server in turn
        sub_nc = await cl.connect(node)
        done = asyncio.Event()

        async def cb(msg: nats.aio.msg.Msg, done: asyncio.Event = done) -> None:
            got.append(msg.data)
            await msg.ack()
            if len(got) % 5 == 0:
                done.set()

        durable = f"d{node.index}"
        sub = await sub_nc.jetstream().subscribe("push", durable=durable, cb=cb,
                                                 deliver_policy=nats.js.api.DeliverPolicy.NEW)
        for i in range(5):
            await pub.jetstream().publish("push", b"%s-%d" % (durable.encode(), i))
        await asyncio.wait_for(done.wait(), 10)
        await sub.unsubscribe()
        await sub_nc.close()
    assert len(got) == 15
    await pub.close()


async def test_acknowledged_acks_survive_sigkill_of_the_consumer_leader(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    js = admin.jetstream()
    await js.add_stream(name="ACKS", subjects=["acks"], num_replicas=3)
    for i in range(40):
        await js.publish("acks", b"%d" % i)
    await js.add_consumer("ACKS", durable_name="c", ack_policy="explicit", ack_wait=2)
    leader = await _consumer_leader(admin, "ACKS", "c")
    await admin.close()
    client_node = next(n for n in cl.nodes if n.name != leader)
    nc = await cl.connect(client_node)
    psub = await nc.jetstream().pull_subscribe("acks", durable="c")
    msgs = await psub.fetch(20, timeout=5)
    acked = set()
    for m in msgs[:15]:
        await m.ack_sync()  # answered only once committed on a quorum
        acked.add(m.metadata.sequence.stream)
    cl.node(leader).kill()
    await _consumer_leader(nc, "ACKS", "c")
    info = await nc.jetstream().consumer_info("ACKS", "c")
    assert info.ack_floor.stream_seq >= 15
    # Every confirmed ack holds: none of those come back; the unacknowledged ones do.
    seen: list[int] = []

    async def all_redelivered() -> bool:
        try:
            batch = await psub.fetch(10, timeout=1)
        except nats.errors.TimeoutError:
            batch = []
        for m in batch:
            seen.append(m.metadata.sequence.stream)
            await m.ack_sync()
        return set(range(16, 41)) <= set(seen)

    await wait_until(all_redelivered, 30, "the unacknowledged messages")
    assert not acked & set(seen)
    await nc.close()


async def test_workqueue_removes_acked_messages_on_every_replica(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[2])
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["wq.>"], num_replicas=3, retention="workqueue")
    for i in range(20):
        await js.publish("wq.job", b"%d" % i)
    psub = await js.pull_subscribe("wq.>", durable="w")
    for m in await psub.fetch(12, timeout=5):
        await m.ack_sync()
    await wait_until(lambda: cl.stream_messages("WQ") == {n.name: 8 for n in cl.nodes},
                     20, "acked work to leave every replica")
    await nc.close()


async def test_interest_stream_keeps_messages_until_every_consumer_acks(
    shared_cluster: Cluster,
) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="INT", subjects=["int"], num_replicas=3, retention="interest")
    a = await js.pull_subscribe("int", durable="a")
    b = await js.pull_subscribe("int", durable="b")
    for i in range(10):
        await js.publish("int", b"%d" % i)
    for m in await a.fetch(10, timeout=5):
        await m.ack_sync()
    await asyncio.sleep(0.3)  # bounded negative wait: nothing may go yet
    assert set(cl.stream_messages("INT").values()) == {10}
    for m in await b.fetch(6, timeout=5):
        await m.ack_sync()
    await wait_until(lambda: cl.stream_messages("INT") == {n.name: 4 for n in cl.nodes},
                     20, "messages acked by both to go")
    await js.delete_consumer("INT", "b")
    await wait_until(lambda: cl.stream_messages("INT") == {n.name: 0 for n in cl.nodes},
                     20, "messages only the deleted consumer held to go")
    await nc.close()


async def test_kv_bucket_replicated(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[1])
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="cfg", replicas=3, history=5)
    await kv.put("color", b"blue")
    await kv.put("color", b"green")
    entry = await kv.get("color")
    assert entry.value == b"green" and entry.revision == 2
    other = await cl.connect(cl.nodes[2])
    kv2 = await other.jetstream().key_value("cfg")
    assert (await kv2.get("color")).value == b"green"
    history = await kv2.history("color")
    assert [e.value for e in history] == [b"blue", b"green"]
    watcher = await kv2.watchall()
    initial = await watcher.updates(timeout=5)
    assert initial is not None and initial.value == b"green"
    assert await watcher.updates(timeout=5) is None  # nats-py: end of the initial values
    await kv.put("size", b"large")
    update = await watcher.updates(timeout=5)
    assert update is not None and update.key == "size"
    await kv.delete("color")
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv2.get("color")
    await nc.close()
    await other.close()


async def test_ordered_consumer_and_ephemerals(shared_cluster: Cluster) -> None:
    cl = shared_cluster
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="ORD", subjects=["ord"], num_replicas=3)
    for i in range(25):
        await js.publish("ord", b"%d" % i)
    sub = await js.subscribe("ord", ordered_consumer=True)
    seen = [int((await sub.next_msg(timeout=5)).data) for _ in range(25)]
    assert seen == list(range(25))
    await sub.unsubscribe()
    await nc.close()


async def test_a_burst_of_acks_from_another_server_takes_effect(shared_cluster: Cluster) -> None:
    """A client on a server that does not lead the consumer acks a whole fetch in one write
    (plain acks and acks sent as requests): the acks cross the route together, every one
    takes effect, each request is answered once, and a client on the third server
    subscribed to every ack subject sees each ack once, in order."""
    cl = shared_cluster
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    js = admin.jetstream()
    await js.add_stream(name="BURST", subjects=["burst.>"], num_replicas=3)
    for i in range(60):
        await js.publish("burst.x", b"%d" % i)
    await js.add_consumer("BURST", durable_name="c", ack_policy="explicit", ack_wait=30)
    leader = await _consumer_leader(admin, "BURST", "c")
    client_node, spy_node = [n for n in cl.nodes if n.name != leader]
    spy = await cl.connect(spy_node)
    seen: list[str] = []

    async def on_ack(msg: nats.aio.msg.Msg) -> None:
        seen.append(msg.subject)

    await spy.subscribe("$JS.ACK.BURST.>", cb=on_ack)
    await spy.flush()
    nc = await cl.connect(client_node)

    async def interest_arrived() -> bool:
        # The spy's interest travels over the routes: probe until it gets one.
        await nc.publish("$JS.ACK.BURST.probe.1", b"")
        await nc.flush()
        await asyncio.sleep(0.05)
        return "$JS.ACK.BURST.probe.1" in seen

    await wait_until(interest_arrived, 10, "the spy's interest")
    seen.clear()
    psub = await nc.jetstream().pull_subscribe("burst.>", durable="c")
    msgs = await psub.fetch(60, timeout=5)
    assert len(msgs) == 60
    raw = await RawClient.connect(client_node.host, client_node.port)
    await raw.send(b"SUB _INBOX.acked.* 1\r\n")
    await raw.ping()
    frames = []
    for i, m in enumerate(msgs):
        reply = f" _INBOX.acked.{i}" if i % 10 == 0 else ""
        frames.append(f"PUB {m.reply}{reply} 0\r\n\r\n".encode())
    await raw.send(b"".join(frames))
    answers = await raw.read_frames(6)
    want = [f"_INBOX.acked.{i}" for i in range(0, 60, 10)]
    assert sorted(f.subject for f in answers) == sorted(want)

    async def all_acked() -> bool:
        info = await nc.jetstream().consumer_info("BURST", "c")
        return info.ack_floor.stream_seq == 60 and info.num_ack_pending == 0

    await wait_until(all_acked, 10, "every ack to take effect")
    await wait_until(lambda: len(seen) >= 60, 10, "the spy to see every ack")
    await raw.ping()  # no second answer
    await spy.flush()
    assert seen == [m.reply for m in msgs]  # each once, in order
    await raw.close()
    for c in (spy, nc, admin):
        await c.close()


async def test_pinned_client_and_unpin_through_any_server(shared_cluster: Cluster) -> None:
    """An R3 pinned_client consumer: the pin and CONSUMER.UNPIN are the consumer leader's
    business, whichever server the admin talks to; the leader advises each pin and unpin
    once and reports the pinned client in consumer info."""
    cl = shared_cluster
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[2])
    await admin.jetstream(timeout=10).add_stream(name="PIN", subjects=["pin"], num_replicas=3)
    for _ in range(2):
        await admin.request("pin", b"x", timeout=10)
    consumer = {"stream_name": "PIN", "config": {
        "durable_name": "c", "ack_policy": "explicit", "num_replicas": 3,
        "priority_groups": ["g"], "priority_policy": "pinned_client",
        "priority_timeout": 60_000_000_000}}
    made = await admin.request("$JS.API.CONSUMER.CREATE.PIN.c", json.dumps(consumer).encode(),
                               timeout=10)
    assert "error" not in json.loads(made.data), made.data
    leader = await _consumer_leader(admin, "PIN", "c")
    # The pulling clients sit on the leader's server: its subscription to pull requests is
    # there at once (elsewhere it reaches the others over the routes).
    node = cl.node(leader)
    a, b = await cl.connect(node), await cl.connect(node)
    try:
        nxt = "$JS.API.CONSUMER.MSG.NEXT.PIN.c"
        # On the leader's server: the advisories are published there.
        events = await a.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.PIN.c")

        async def event() -> tuple[str, str]:
            msg = await events.next_msg(timeout=10)
            body = json.loads(msg.data)
            return msg.subject.split(".")[4], body.get("pinned_id") or body["reason"]

        # Not request(): a delivered message carries the stream's subject, not the inbox.
        mine = await a.subscribe(a.new_inbox())
        await a.publish(nxt, b'{"batch": 1, "group": "g"}', reply=mine.subject)
        first = await mine.next_msg(timeout=10)
        pin_a = first.headers["Nats-Pin-Id"]
        inbox = b.new_inbox()
        waiting = await b.subscribe(inbox)
        await b.publish(nxt, b'{"batch": 1, "group": "g", "expires": 20000000000}', reply=inbox)
        await b.flush()
        bad = await admin.request("$JS.API.CONSUMER.UNPIN.PIN.c", b'{"group": "h"}', timeout=10)
        assert json.loads(bad.data)["error"]["err_code"] == 10160
        done = await admin.request("$JS.API.CONSUMER.UNPIN.PIN.c", b'{"group": "g"}', timeout=10)
        assert json.loads(done.data) == {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}
        second = await waiting.next_msg(timeout=10)
        pin_b = second.headers["Nats-Pin-Id"]
        assert pin_b not in ("", pin_a)
        assert [await event() for _ in range(3)] == [
            ("PINNED", pin_a), ("UNPINNED", "admin"), ("PINNED", pin_b)]
        info = json.loads((await admin.request("$JS.API.CONSUMER.INFO.PIN.c", b"",
                                               timeout=10)).data)
        assert info["priority_groups"][0]["pinned_client_id"] == pin_b
    finally:
        for nc in (a, b, admin):
            await nc.close()
