"""What clients saw go wrong when their suites ran against a jetraft cluster (nats.js scripts,
the CLI, the Spark connector), each reduced to a few nats-py calls. Every one of these holds
on a single server and on a nats-server cluster.

* A new consumer delivered before its Start entry was applied; applying it moved the cursor
  back, so every message went out twice (nats.js push consumers saw 1..N, then 1..N again).
* The consumer leader counted a delivery as pending only once its entry was applied:
  info right after a fetch showed nothing delivered, max_ack_pending let a whole batch
  through, a quick -NAK was ignored, and no ack timer was armed, so an unacknowledged
  message was never redelivered.
* ``first_seq`` was ignored by replicated streams.
"""

from __future__ import annotations

from typing import Any

import nats
import nats.js.api
import pytest
from nats.js.client import JetStreamContext

from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.timeout(120)

EXPLICIT = nats.js.api.AckPolicy.EXPLICIT


async def _client(cl: Cluster, index: int) -> nats.NATS:
    await cl.wait_jetstream()
    return await cl.connect(cl.nodes[index])


@pytest.mark.parametrize("replicas", [1, 3])
async def test_push_consumer_delivers_each_message_once(
    shared_cluster: Cluster, replicas: int
) -> None:
    nc = await _client(shared_cluster, 0)
    js = nc.jetstream()
    stream = f"ONCE{replicas}"
    await js.add_stream(name=stream, subjects=[f"once{replicas}.>"], num_replicas=replicas)
    for i in range(5):
        await js.publish(f"once{replicas}.a", b"%d" % i)
    got: list[tuple[int, int]] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append((msg.metadata.sequence.stream, msg.metadata.num_delivered))

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_msg)
    await js.add_consumer(
        stream, nats.js.api.ConsumerConfig(durable_name="d", deliver_subject=inbox)
    )
    for i in range(5, 10):
        await js.publish(f"once{replicas}.a", b"%d" % i)

    async def all_delivered() -> bool:
        info = await js.consumer_info(stream, "d")
        return info.num_pending == 0 and info.delivered.stream_seq == 10

    await wait_until(all_delivered, 15, "every message delivered")
    await nc.flush()
    info = await js.consumer_info(stream, "d")
    # A repeated pass over the stream would have taken consumer sequences 11 and up.
    assert info.delivered.consumer_seq == 10
    assert sorted(got) == [(seq, 1) for seq in range(1, 11)]
    await js.delete_stream(stream)
    await nc.close()


PullSub = JetStreamContext.PullSubscription


async def _pull(cl: Cluster, stream: str, n: int, **cfg: Any) -> tuple[nats.NATS, PullSub]:
    nc = await _client(cl, 1)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3)
    for i in range(n):
        await js.publish(f"{stream.lower()}.a", b"%d" % i)
    await js.add_consumer(
        stream, nats.js.api.ConsumerConfig(durable_name="w", ack_policy=EXPLICIT, **cfg)
    )
    return nc, await js.pull_subscribe_bind("w", stream)


async def test_consumer_info_right_after_a_fetch_counts_the_deliveries(
    shared_cluster: Cluster,
) -> None:
    nc, psub = await _pull(shared_cluster, "FETCHINFO", 10)
    js = nc.jetstream()
    msgs = await psub.fetch(4, timeout=5)
    info = await js.consumer_info("FETCHINFO", "w")
    assert len(msgs) == 4
    assert info.num_ack_pending == 4 and info.num_pending == 6
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (4, 4)
    for m in msgs:
        await m.ack_sync()
    info = await js.consumer_info("FETCHINFO", "w")
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 4
    await js.delete_stream("FETCHINFO")
    await nc.close()


async def test_max_ack_pending_holds_within_one_fetch(shared_cluster: Cluster) -> None:
    nc, psub = await _pull(shared_cluster, "MAXACK", 6, max_ack_pending=2)
    msgs = await psub.fetch(6, timeout=1)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2]
    await nc.jetstream().delete_stream("MAXACK")
    await nc.close()


async def test_an_unacknowledged_message_is_redelivered_after_ack_wait(
    shared_cluster: Cluster,
) -> None:
    nc, psub = await _pull(shared_cluster, "ACKWAIT", 1, ack_wait=1)
    first = await psub.fetch(1, timeout=5)
    assert first[0].metadata.num_delivered == 1
    again = await psub.fetch(1, timeout=10)
    assert again[0].metadata.sequence.stream == 1 and again[0].metadata.num_delivered == 2
    await nc.jetstream().delete_stream("ACKWAIT")
    await nc.close()


async def test_a_nak_right_after_the_fetch_redelivers_at_once(shared_cluster: Cluster) -> None:
    # ack_wait is 30 s: a dropped -NAK would leave the message pending past the fetch below.
    nc, psub = await _pull(shared_cluster, "QUICKNAK", 2)
    a, b = await psub.fetch(2, timeout=5)
    await a.nak()
    await b.term()
    again = await psub.fetch(1, timeout=5)
    assert again[0].metadata.sequence.stream == 1 and again[0].metadata.num_delivered == 2
    await nc.jetstream().delete_stream("QUICKNAK")
    await nc.close()


async def test_first_seq_of_a_replicated_stream(shared_cluster: Cluster) -> None:
    nc = await _client(shared_cluster, 2)
    js = nc.jetstream()
    await js.add_stream(name="FIRST", subjects=["first"], num_replicas=3, first_seq=100)
    assert (await js.stream_info("FIRST")).state.first_seq == 100
    ack = await js.publish("first", b"x")
    assert ack.seq == 100
    # Every replica agrees (each starts its store at first_seq from the assignment).
    await wait_until(
        lambda: set(shared_cluster.stream_messages("FIRST").values()) == {1}
        and len(shared_cluster.stream_messages("FIRST")) == 3,
        10,
        "three replicas holding the message",
    )
    await js.delete_stream("FIRST")
    await nc.close()

