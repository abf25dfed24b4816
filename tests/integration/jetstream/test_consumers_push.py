"""Push consumers through nats-py: callbacks and acks, heartbeats, flow control, ordered
consumers, queue groups, push_bound, and ephemeral cleanup."""

from __future__ import annotations

import asyncio
import datetime

import nats
import nats.js.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ReplayPolicy

from tests.integration.jetstream.consumer_support import Inbox, status_of, wait_for

SEC = 1_000_000_000


async def test_push_subscribe_auto_acks(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(5):
        await js.publish("s.a", f"m{i}".encode())
    got: list[bytes] = []
    done = asyncio.Event()

    async def cb(msg: Msg) -> None:
        got.append(msg.data)
        if len(got) == 5:
            done.set()

    sub = await js.subscribe("s.a", durable="P", cb=cb)
    await asyncio.wait_for(done.wait(), 5)
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]

    async def all_acked() -> bool:
        info = await js.consumer_info("S", "P")
        return info.num_ack_pending == 0 and info.ack_floor.stream_seq == 5

    await wait_for(all_acked)
    info = await js.consumer_info("S", "P")
    assert info.push_bound
    await sub.unsubscribe()

    async def unbound() -> bool:
        return not (await js.consumer_info("S", "P")).push_bound

    await wait_for(unbound)


async def test_push_sync_subscriber_next_msg_and_redelivery(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"one")
    sub = await js.subscribe("s.a", durable="Q", config=ConsumerConfig(ack_wait=0.3))
    m = await sub.next_msg(timeout=2)
    assert m.data == b"one" and m.metadata.num_delivered == 1
    again = await sub.next_msg(timeout=3)
    assert again.data == b"one" and again.metadata.num_delivered == 2
    await again.ack_sync()
    info = await js.consumer_info("S", "Q")
    assert info.num_ack_pending == 0


async def test_push_idle_heartbeats(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"x")
    inbox = await Inbox(nc).start()
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="H",
            deliver_subject=inbox.subject,
            idle_heartbeat=0.2,
            ack_policy=AckPolicy.NONE,
        ),
    )
    msgs = await inbox.wait(2)
    assert status_of(msgs[0]) is None and msgs[0].data == b"x"
    hb = msgs[1]
    assert status_of(hb) == ("100", "Idle Heartbeat")
    assert hb.headers is not None
    assert (hb.headers["Nats-Last-Consumer"], hb.headers["Nats-Last-Stream"]) == ("1", "1")


async def test_flow_control_requests_and_resumes(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f"])
    chunk = b"A" * 64 * 1024
    n = 48  # 3 MiB: more than the first flow control window
    for _ in range(n):
        await js.publish("f", chunk)
    inbox = Inbox(nc)
    fc_seen: list[str] = []

    async def cb(msg: Msg) -> None:
        st = status_of(msg)
        if st == ("100", "FlowControl Request"):
            fc_seen.append(msg.reply)
            await nc.publish(msg.reply, b"")
            return
        if st is None:
            inbox.msgs.append(msg)

    await nc.subscribe(inbox.subject, cb=cb)
    await js.add_consumer(
        "F",
        ConsumerConfig(
            durable_name="FC",
            deliver_subject=inbox.subject,
            flow_control=True,
            idle_heartbeat=1,
            ack_policy=AckPolicy.NONE,
        ),
    )

    async def all_in() -> bool:
        return len(inbox.msgs) == n

    await wait_for(all_in, timeout_s=10)
    assert fc_seen and all(r.startswith("$JS.FC.F.FC.") for r in fc_seen)


async def test_flow_control_with_nats_py(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="flow", subjects=["flow"])
    got = []

    async def cb(msg: Msg) -> None:
        got.append(len(msg.data))

    with pytest.raises(nats.js.errors.APIError) as err:
        await js.subscribe("flow", cb=cb, flow_control=True)
    assert err.value.description == "consumer with flow control also needs heartbeats"
    await js.subscribe("flow", cb=cb, flow_control=True, idle_heartbeat=0.5)
    chunk = b"B" * 32 * 1024
    for _ in range(80):
        await js.publish("flow", chunk)

    async def all_in() -> bool:
        return len(got) == 80

    await wait_for(all_in, timeout_s=10)


async def test_ordered_consumer_reads_everything_in_order(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"], storage="memory")
    for i in range(200):
        await js.publish("o", f"{i}".encode(), headers={"data": "true"})
    got: list[int] = []

    async def cb(msg: Msg) -> None:
        got.append(int(msg.data))

    await js.subscribe("o", cb=cb, ordered_consumer=True, idle_heartbeat=0.3)
    for i in range(200, 300):
        await js.publish("o", f"{i}".encode())

    async def all_in() -> bool:
        return len(got) >= 300

    await wait_for(all_in, timeout_s=10)
    assert got == list(range(300))


async def test_ordered_consumer_sync_next_msg(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"])
    for i in range(3):
        await js.publish("o", f"{i}".encode())
    sub = await js.subscribe("o", ordered_consumer=True, idle_heartbeat=0.5)
    got = [int((await sub.next_msg(timeout=2)).data) for _ in range(3)]
    assert got == [0, 1, 2]
    info = await sub.consumer_info()
    assert info.config.flow_control and info.config.ack_policy == AckPolicy.NONE
    assert info.config.max_deliver == 1 and info.num_pending == 0


async def test_queue_group_shares_messages(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    a: list[bytes] = []
    b: list[bytes] = []

    async def cb_a(msg: Msg) -> None:
        a.append(msg.data)

    async def cb_b(msg: Msg) -> None:
        b.append(msg.data)

    await js.subscribe("s.q", queue="workers", cb=cb_a)
    await js.subscribe("s.q", queue="workers", cb=cb_b)
    info = await js.consumer_info("S", "workers")
    assert info.config.deliver_group == "workers"
    for i in range(40):
        await js.publish("s.q", f"{i}".encode())

    async def all_in() -> bool:
        return len(a) + len(b) == 40

    await wait_for(all_in)
    assert sorted(a + b, key=int) == [f"{i}".encode() for i in range(40)]


async def test_bound_push_consumer_refuses_second_subscriber(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.subscribe("s.a", durable="ONE")

    async def bound() -> bool:
        return bool((await js.consumer_info("S", "ONE")).push_bound)

    await wait_for(bound)
    with pytest.raises(nats.js.errors.Error, match="already bound"):
        await js.subscribe("s.a", durable="ONE")


async def test_headers_only_sends_size(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"12345", headers={"k": "v"})
    await js.publish("s.a", b"abc")
    inbox = await Inbox(nc).start()
    await js.add_consumer(
        "S",
        ConsumerConfig(
            name="HO", deliver_subject=inbox.subject, headers_only=True, ack_policy=AckPolicy.NONE
        ),
    )
    first, second = await inbox.wait(2)
    assert first.data == b"" and first.headers is not None
    assert (first.headers["k"], first.headers["Nats-Msg-Size"]) == ("v", "5")
    assert second.headers is not None and second.headers["Nats-Msg-Size"] == "3"


async def test_ephemeral_push_consumer_goes_away_without_interest(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    sub = await js.subscribe("s.a", inactive_threshold=0.3)
    name = (await sub.consumer_info()).name
    await sub.unsubscribe()

    async def gone() -> bool:
        return not [c for c in await js.consumers_info("S") if c.name == name]

    await wait_for(gone, timeout_s=3)


async def test_ephemeral_pull_consumer_goes_away_when_idle(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.add_consumer(
        "S", ConsumerConfig(name="E", inactive_threshold=0.3, ack_policy=AckPolicy.EXPLICIT)
    )

    info = await js.consumer_info("S", "E")
    assert info.config.inactive_threshold == 0.3

    async def gone() -> bool:
        return not [c for c in await js.consumers_info("S") if c.name == "E"]

    await wait_for(gone, timeout_s=3)


async def test_replay_original_keeps_the_spacing(nc: nats.NATS) -> None:
    """The stored messages are one second apart; replayed "original", the second does not
    come right after the first (a bounded negative wait well inside the gap). How closely
    the spacing is kept is measured by benchmarks/js_timers.py."""
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"0")
    first = (await js.get_msg("S", 1)).time
    assert first is not None
    while datetime.datetime.now(first.tzinfo) < first + datetime.timedelta(seconds=1):
        await asyncio.sleep(0.01)  # the input: a stored gap of one second
    await js.publish("s.a", b"1")
    inbox = await Inbox(nc).start()
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="R",
            deliver_subject=inbox.subject,
            replay_policy=ReplayPolicy.ORIGINAL,
            ack_policy=AckPolicy.NONE,
        ),
    )
    await inbox.wait(1, timeout_s=5)
    with pytest.raises(AssertionError, match="got 1 messages"):
        await inbox.wait(2, timeout_s=0.4)
    got = await inbox.wait(2, timeout_s=5)
    assert [m.data for m in got] == [b"0", b"1"]
