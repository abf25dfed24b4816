"""Pull consumers through nats-py and raw MSG.NEXT requests: batches, expiry, statuses, acks,
redelivery and the ConsumerInfo numbers."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging

import nats
import nats.js.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from tests.integration.jetstream.consumer_support import Inbox, pull, status_of, wait_for

SEC = 1_000_000_000


async def add_stream(
    nc: nats.NATS, name: str = "S", subjects: list[str] | None = None, **kw: object
) -> None:
    await nc.jetstream().add_stream(name=name, subjects=subjects or [f"{name.lower()}.>"], **kw)


async def publish_n(nc: nats.NATS, n: int, subject: str = "s.a", prefix: str = "m") -> None:
    js = nc.jetstream()
    for i in range(n):
        await js.publish(subject, f"{prefix}{i}".encode())


async def test_fetch_batches_acks_and_info_numbers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 10)
    sub = await js.pull_subscribe("s.a", durable="D")
    info = await js.consumer_info("S", "D")
    assert (info.num_pending, info.num_ack_pending, info.num_waiting) == (10, 0, 0)

    msgs = await sub.fetch(4, timeout=2)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
    meta = msgs[3].metadata
    assert (meta.sequence.stream, meta.sequence.consumer, meta.num_delivered) == (4, 4, 1)
    assert meta.num_pending == 6
    assert meta.stream == "S" and meta.consumer == "D"
    info = await js.consumer_info("S", "D")
    assert (info.num_pending, info.num_ack_pending) == (6, 4)
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (4, 4)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (0, 0)

    await msgs[1].ack_sync()  # out of order: the floor stays
    await msgs[0].ack_sync()
    info = await js.consumer_info("S", "D")
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 2)
    assert info.num_ack_pending == 2
    for m in msgs[2:]:
        await m.ack_sync()
    rest = await sub.fetch(10, timeout=1)
    assert len(rest) == 6
    for m in rest:
        await m.ack_sync()
    info = await js.consumer_info("S", "D")
    assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)
    assert (info.ack_floor.stream_seq, info.delivered.stream_seq) == (10, 10)


async def test_fetch_with_nothing_times_out(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    sub = await js.pull_subscribe("s.a", durable="D")
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.5)
    # A lingering fetch gets a message published while it waits.
    fetch = asyncio.create_task(sub.fetch(1, timeout=5))

    async def waiting() -> bool:
        return (await js.consumer_info("S", "D")).num_waiting == 1

    await wait_for(waiting)
    await js.publish("s.a", b"late")
    msgs = await fetch
    assert [m.data for m in msgs] == [b"late"]


async def test_fetch_heartbeats_like_nats_py_expects(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await js.add_consumer(
        "S", durable_name="a", max_waiting=5, max_ack_pending=5, filter_subject="s.>"
    )
    sub = await js.pull_subscribe_bind("a", stream="S")
    # FetchTimeoutError (heartbeats seen, client deadline first) or a plain TimeoutError
    # (the server's 408 first): nats-py races the two, so only the base class is certain.
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=1, heartbeat=0.1)
    for i in range(8):
        await js.publish(f"s.{i}", b"x")
    msgs = await sub.fetch(5, timeout=3, heartbeat=0.1)
    assert len(msgs) == 5
    with pytest.raises(nats.js.errors.APIError) as err:
        await sub.fetch(1, timeout=1, heartbeat=0.5)
    assert err.value.description == "Bad Request - heartbeat value too large"


async def test_raw_pull_statuses(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, max_waiting=1)
    inbox = await Inbox(nc).start()

    await pull(nc, "S", "D", b'{"batch":1,"no_wait":true}', inbox)
    (m,) = await inbox.wait(1)
    assert status_of(m) == ("404", "No Messages")

    await pull(nc, "S", "D", json.dumps({"batch": 3, "expires": SEC // 5}).encode(), inbox)
    m = (await inbox.wait(2))[1]
    assert status_of(m) == ("408", "Request Timeout")
    assert m.headers is not None
    assert (m.headers["Nats-Pending-Messages"], m.headers["Nats-Pending-Bytes"]) == ("3", "0")

    await pull(nc, "S", "D", json.dumps({"batch": 1, "expires": 5 * SEC}).encode(), inbox)
    await pull(nc, "S", "D", json.dumps({"batch": 1, "expires": 5 * SEC}).encode(), inbox)
    m = (await inbox.wait(3))[2]
    assert status_of(m) == ("409", "Exceeded MaxWaiting")
    info = await js.consumer_info("S", "D")
    assert info.num_waiting == 1

    await pull(nc, "S", "D", b'{"batch":1,"expires":1000000000,"idle_heartbeat":600000000}', inbox)
    m = (await inbox.wait(4))[3]
    assert status_of(m) == ("400", "Bad Request - heartbeat value too large")

    await js.delete_consumer("S", "D")
    m = (await inbox.wait(5))[4]
    assert status_of(m) == ("409", "Consumer Deleted")


async def test_pull_idle_heartbeats_carry_last_sequences(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 2)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    inbox = await Inbox(nc).start()
    body = json.dumps({"batch": 5, "expires": 2 * SEC, "idle_heartbeat": SEC // 10}).encode()
    await pull(nc, "S", "D", body, inbox)
    msgs = await inbox.wait(4)
    assert [status_of(m) for m in msgs[:2]] == [None, None]
    hb = msgs[2]
    assert status_of(hb) == ("100", "Idle Heartbeat")
    assert hb.headers is not None
    assert (hb.headers["Nats-Last-Consumer"], hb.headers["Nats-Last-Stream"]) == ("2", "2")


async def test_push_consumer_refuses_pull_and_max_bytes(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await js.publish("s.a", b"x" * 200)
    await js.add_consumer(
        "S", durable_name="P", deliver_subject="push.here", ack_policy=AckPolicy.EXPLICIT
    )
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    inbox = await Inbox(nc).start()
    await pull(nc, "S", "P", b"", inbox)
    (m,) = await inbox.wait(1)
    assert status_of(m) == ("409", "Consumer is push based")
    await pull(nc, "S", "D", b'{"batch":2,"max_bytes":100,"expires":1000000000}', inbox)
    m = (await inbox.wait(2))[1]
    assert status_of(m) == ("409", "Message Size Exceeds MaxBytes")


async def test_max_bytes_ends_batch(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 5)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    inbox = await Inbox(nc).start()
    # Each delivery costs subject + ack reply + payload (~40 bytes): two fit in 100.
    await pull(nc, "S", "D", b'{"batch":10,"max_bytes":100,"expires":2000000000}', inbox)
    msgs = await inbox.wait(3)
    assert [status_of(m) for m in msgs[:2]] == [None, None]
    assert status_of(msgs[2]) is not None and status_of(msgs[2])[0] in ("409", "408")  # type: ignore[index]


async def test_ack_kinds(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 4)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=30)
    sub = await js.pull_subscribe_bind("D", stream="S")
    msgs = await sub.fetch(4, timeout=2)
    await msgs[0].ack()
    await msgs[1].term()
    await msgs[2].in_progress()
    await msgs[3].nak()
    again = await sub.fetch(1, timeout=2)
    assert again[0].data == b"m3"
    assert again[0].metadata.num_delivered == 2
    assert again[0].metadata.sequence.consumer == 5
    await again[0].nak(delay=1.0)
    # A bounded negative wait well inside the delay: not redelivered yet (the delay's
    # accuracy is measured by benchmarks/js_timers.py).
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)
    third = await sub.fetch(1, timeout=5)
    assert third[0].data == b"m3" and third[0].metadata.num_delivered == 3
    await third[0].ack_sync()
    await msgs[2].ack_sync()
    info = await js.consumer_info("S", "D")
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
    assert info.ack_floor.stream_seq == 4


async def test_in_progress_holds_off_redelivery(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 1)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=0.5)
    sub = await js.pull_subscribe_bind("D", stream="S")
    (m,) = await sub.fetch(1, timeout=2)
    loop = asyncio.get_running_loop()
    # Keep saying "working on it" for twice the ack wait while a pull request waits: the
    # message is not redelivered to it meanwhile.
    waiting = asyncio.ensure_future(sub.fetch(1, timeout=1.0))
    until = loop.time() + 1.0
    while loop.time() < until:
        await m.in_progress()
        await asyncio.sleep(0.1)
    with pytest.raises(nats.errors.TimeoutError):
        await waiting
    info = await js.consumer_info("S", "D")
    assert (info.num_redelivered, info.num_ack_pending) == (0, 1)
    assert info.delivered.consumer_seq == 1
    # Once the progress reports stop, the ack wait runs out and the message comes again.
    (again,) = await sub.fetch(1, timeout=3)
    assert again.data == m.data and again.metadata.num_delivered == 2


async def test_ack_next_delivers_to_the_ack_reply(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 3)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    sub = await js.pull_subscribe_bind("D", stream="S")
    (first,) = await sub.fetch(1, timeout=2)
    inbox = await Inbox(nc).start()
    await nc.publish(first.reply, b'+NXT {"batch":2}', reply=inbox.subject)
    got = await inbox.wait(2)
    assert [m.data for m in got] == [b"m1", b"m2"]
    info = await js.consumer_info("S", "D")
    assert info.ack_floor.stream_seq == 1


async def test_redelivery_after_ack_wait_and_max_deliver(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 1)
    await js.add_consumer(
        "S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=0.3, max_deliver=2
    )
    sub = await js.pull_subscribe_bind("D", stream="S")
    (m1,) = await sub.fetch(1, timeout=2)
    (m2,) = await sub.fetch(1, timeout=3)
    assert m2.data == m1.data and m2.metadata.num_delivered == 2
    info = await js.consumer_info("S", "D")
    assert (info.num_redelivered, info.num_ack_pending) == (1, 1)
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=1)

    async def given_up() -> bool:
        return (await js.consumer_info("S", "D")).num_ack_pending == 0

    await wait_for(given_up)


async def test_backoff_schedules_redeliveries(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 1)
    await js.add_consumer(
        "S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, backoff=[0.2, 1.5], max_deliver=3
    )
    info = await js.consumer_info("S", "D")
    assert info.config.ack_wait == 0.2 and info.config.backoff == [0.2, 1.5]
    sub = await js.pull_subscribe_bind("D", stream="S")
    (m,) = await sub.fetch(1, timeout=3)
    (m,) = await sub.fetch(1, timeout=3)  # after the first backoff
    assert m.metadata.num_delivered == 2
    # The second backoff is the longer one: a bounded negative wait well inside it (its
    # accuracy is measured by benchmarks/js_timers.py).
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.4)
    (m,) = await sub.fetch(1, timeout=5)
    assert m.metadata.num_delivered == 3
    with pytest.raises(nats.errors.TimeoutError):  # max_deliver reached: no fourth
        await sub.fetch(1, timeout=2)


async def test_max_ack_pending_holds_back(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 5)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=2)
    sub = await js.pull_subscribe_bind("D", stream="S")
    msgs = await sub.fetch(5, timeout=1)
    assert len(msgs) == 2
    await msgs[0].ack_sync()
    more = await sub.fetch(5, timeout=1)
    assert [m.data for m in more] == [b"m2"]


async def test_a_no_wait_request_held_by_max_ack_pending_ends_once_it_got_messages(
    nc: nats.NATS,
) -> None:
    """What nats-py's ``fetch`` sends (no_wait with expires and heartbeats): once some
    messages went out and max_ack_pending holds the rest back, the request ends with a 404
    at its next heartbeat, as nats-server's does, instead of lingering until it expires and
    taking messages its requester no longer waits for (nats.py's test_fetch_heartbeats)."""
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 5)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=2)
    inbox = await Inbox(nc).start()
    body = {"batch": 5, "expires": 10 * SEC, "idle_heartbeat": SEC // 10, "no_wait": True}
    await pull(nc, "S", "D", json.dumps(body).encode(), inbox)

    async def ended() -> bool:
        return any(status_of(m) not in (None, ("100", "Idle Heartbeat")) for m in inbox.msgs)

    await wait_for(ended, timeout_s=5)
    got = [m for m in inbox.msgs if status_of(m) != ("100", "Idle Heartbeat")]
    assert [m.data for m in got[:2]] == [b"m0", b"m1"]
    assert status_of(got[2]) == ("404", "No Messages")
    info = await js.consumer_info("S", "D")
    assert info.num_waiting == 0
    await got[0].ack_sync()
    sub = await js.pull_subscribe_bind("D", stream="S")
    assert [m.data for m in await sub.fetch(5, timeout=2, heartbeat=0.1)] == [b"m2"]


@pytest.mark.parametrize(
    ("policy", "extra", "expected"),
    [
        (DeliverPolicy.ALL, {}, [b"a0", b"b0", b"a1", b"b1"]),
        (DeliverPolicy.LAST, {}, [b"b1"]),
        (DeliverPolicy.NEW, {}, []),
        (DeliverPolicy.BY_START_SEQUENCE, {"opt_start_seq": 3}, [b"a1", b"b1"]),
        (DeliverPolicy.LAST_PER_SUBJECT, {"filter_subject": "s.>"}, [b"a1", b"b1"]),
    ],
)
async def test_deliver_policies(
    nc: nats.NATS, policy: DeliverPolicy, extra: dict[str, object], expected: list[bytes]
) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    for data, subject in [(b"a0", "s.a"), (b"b0", "s.b"), (b"a1", "s.a"), (b"b1", "s.b")]:
        await js.publish(subject, data)
    info = await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="D", deliver_policy=policy, ack_policy=AckPolicy.EXPLICIT, **extra
        ),
    )
    assert info.num_pending == len(expected)
    sub = await js.pull_subscribe_bind("D", stream="S")
    got: list[bytes] = []
    if expected:
        got = [m.data for m in await sub.fetch(10, timeout=1)]
    assert got == expected


async def test_deliver_by_start_time(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 2, prefix="old")
    last_old = (await js.get_msg("S", 2)).time  # the server's stamp
    # The start time lies after the old messages and before the new ones: wait until the
    # clock has passed the last old stamp, take it, and wait until it has passed that too.
    start = await _clock_after(_parse_stamp(last_old))
    await _clock_after(start)
    await publish_n(nc, 2, prefix="new")
    await js.add_consumer(
        "S",
        durable_name="T",
        deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=start,
        ack_policy=AckPolicy.EXPLICIT,
    )
    sub = await js.pull_subscribe_bind("T", stream="S")
    assert [m.data for m in await sub.fetch(10, timeout=1)] == [b"new0", b"new1"]


def _parse_stamp(stamp: datetime.datetime | None) -> datetime.datetime:
    """Just after a stored message's stamp (nats-py truncates it to microseconds)."""
    assert stamp is not None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp + datetime.timedelta(microseconds=1)


async def _clock_after(moment: datetime.datetime) -> datetime.datetime:
    """Wait (bounded) until the wall clock is past ``moment``; returns the time then."""
    for _ in range(1000):
        now = datetime.datetime.now(datetime.UTC)
        if now > moment:
            return now
        await asyncio.sleep(0.001)
    raise AssertionError("the clock does not move")


async def test_filters_and_multiple_filters(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    for subject in ["s.a", "s.b", "s.c", "s.a", "s.c"]:
        await js.publish(subject, subject.encode())
    await js.add_consumer(
        "S", ConsumerConfig(name="M", filter_subjects=["s.a", "s.c"], ack_policy=AckPolicy.EXPLICIT)
    )
    info = await js.consumer_info("S", "M")
    assert info.num_pending == 4
    sub = await js.pull_subscribe_bind("M", stream="S")
    assert [m.subject for m in await sub.fetch(10, timeout=1)] == ["s.a", "s.c", "s.a", "s.c"]
    single = await js.pull_subscribe("s.b", durable="B")
    (m,) = await single.fetch(1, timeout=1)
    assert (m.subject, m.metadata.sequence.stream) == ("s.b", 2)


async def test_interest_retention_removes_acked(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc, retention="interest")
    await js.add_consumer("S", durable_name="A", ack_policy=AckPolicy.EXPLICIT)
    await js.add_consumer("S", durable_name="B", ack_policy=AckPolicy.EXPLICIT)
    await publish_n(nc, 3)
    a = await js.pull_subscribe_bind("A", stream="S")
    b = await js.pull_subscribe_bind("B", stream="S")
    for m in await a.fetch(3, timeout=1):
        await m.ack_sync()
    assert (await js.stream_info("S")).state.messages == 3
    bm = await b.fetch(3, timeout=1)
    await bm[0].ack_sync()
    await bm[2].ack_sync()

    async def two_gone() -> bool:
        return (await js.stream_info("S")).state.messages == 1

    await wait_for(two_gone)
    await js.delete_consumer("S", "B")

    async def all_gone() -> bool:
        return (await js.stream_info("S")).state.messages == 0

    await wait_for(all_gone)


async def test_workqueue_retention(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc, name="W", retention="workqueue")
    await js.add_consumer(
        "W", durable_name="A", ack_policy=AckPolicy.EXPLICIT, filter_subject="w.a"
    )
    with pytest.raises(nats.js.errors.BadRequestError) as err:
        await js.add_consumer(
            "W", durable_name="B", ack_policy=AckPolicy.EXPLICIT, filter_subject="w.*"
        )
    assert err.value.err_code == 10100
    with pytest.raises(nats.js.errors.BadRequestError) as err:
        await js.add_consumer("W", durable_name="C", ack_policy=AckPolicy.EXPLICIT)
    assert err.value.err_code == 10099
    await js.publish("w.a", b"job")
    await js.publish("w.b", b"other")
    sub = await js.pull_subscribe_bind("A", stream="W")
    (m,) = await sub.fetch(1, timeout=1)
    await m.ack_sync()

    async def removed() -> bool:
        return (await js.stream_info("W")).state.messages == 1

    await wait_for(removed)


async def test_purge_and_delete_update_consumer_numbers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 6, subject="s.a")
    await publish_n(nc, 2, subject="s.b", prefix="b")
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=30)
    sub = await js.pull_subscribe_bind("D", stream="S")
    msgs = await sub.fetch(3, timeout=1)
    await msgs[0].ack_sync()
    info = await js.consumer_info("S", "D")
    assert (info.num_ack_pending, info.num_pending) == (2, 5)

    await js.delete_msg("S", 5)
    info = await js.consumer_info("S", "D")
    assert info.num_pending == 4

    await js.purge_stream("S", subject="s.a")
    info = await js.consumer_info("S", "D")
    assert (info.num_ack_pending, info.num_pending) == (0, 2)
    assert info.ack_floor.stream_seq >= 3
    rest = await sub.fetch(5, timeout=1)
    assert [m.data for m in rest] == [b"b0", b"b1"]

    await js.purge_stream("S")
    await js.publish("s.a", b"after")
    (m,) = await sub.fetch(1, timeout=1)
    assert m.data == b"after" and m.metadata.sequence.stream == 9


async def test_requests_of_departed_clients_are_dropped(nc: nats.NATS, js_url: str) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    other = await nats.connect(js_url, allow_reconnect=False)
    gone = await Inbox(other).start()
    await pull(other, "S", "D", json.dumps({"batch": 5, "expires": 30 * SEC}).encode(), gone)
    await other.flush()

    async def waiting(n: int) -> bool:
        return (await js.consumer_info("S", "D")).num_waiting == n

    await wait_for(lambda: waiting(1))
    await other.close()
    await wait_for(lambda: waiting(0))
    # The message goes to whoever asks next, not to the departed requester.
    await js.publish("s.a", b"kept")
    sub = await js.pull_subscribe_bind("D", stream="S")
    (m,) = await sub.fetch(1, timeout=2)
    assert m.data == b"kept" and m.metadata.num_delivered == 1


async def test_request_limits_of_the_consumer(nc: nats.NATS) -> None:
    await add_stream(nc)
    config = {
        "durable_name": "D",
        "ack_policy": "explicit",
        "max_batch": 2,
        "max_expires": SEC,
        "max_bytes": 1000,
    }
    msg = await nc.request(
        "$JS.API.CONSUMER.CREATE.S.D", json.dumps({"stream_name": "S", "config": config}).encode()
    )
    assert "error" not in json.loads(msg.data)
    inbox = await Inbox(nc).start()
    for body in (
        b'{"batch":3}',
        b'{"batch":1,"expires":2000000000}',
        b'{"batch":1,"max_bytes":5000}',
    ):
        await pull(nc, "S", "D", body, inbox)
    got = [status_of(m) for m in await inbox.wait(3)]
    assert got == [
        ("409", "Exceeded MaxRequestBatch of 2"),
        ("409", "Exceeded MaxRequestExpires of 1s"),
        ("409", "Exceeded MaxRequestMaxBytes of 1000"),
    ]


async def test_garbage_pull_requests_are_answered_and_harmless(
    nc: nats.NATS, caplog: pytest.LogCaptureFixture
) -> None:
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 1)
    await js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    inbox = await Inbox(nc).start()
    await pull(nc, "S", "D", b'{"batch": "many"}', inbox)
    await pull(nc, "S", "D", b"{not json", inbox)
    first, second = await inbox.wait(2)
    assert status_of(first) is not None and status_of(first)[0] == "400"  # type: ignore[index]
    assert status_of(second) is not None and status_of(second)[0] == "400"  # type: ignore[index]
    await nc.publish("$JS.ACK.S.D.x.y.z.1.1", b"+ACK")
    await nc.publish("$JS.ACK.S.D.1.99.99.1.0", b"+ACK")  # never delivered: ignored
    await nc.publish("$JS.ACK.S.D.1.\u00b2.1.1.0", b"+ACK")  # not an ASCII number
    sub = await js.pull_subscribe_bind("D", stream="S")
    (m,) = await sub.fetch(1, timeout=2)
    assert m.data == b"m0"
    await m.ack_sync()
    assert (await js.consumer_info("S", "D")).ack_floor.stream_seq == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_no_wait_counts_only_requests_whose_requester_is_still_there(
    nc: nats.NATS,
) -> None:
    """A no_wait request is refused with 408 Requests Pending when queued requests already
    ask for more than is waiting; a queued request whose requester left does not count."""
    js = nc.jetstream()
    await js.add_stream(name="NW", subjects=["nw.>"])
    for _ in range(10):
        await js.publish("nw.a", b"x")
    cfg = {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 3}
    await nc.request(
        "$JS.API.CONSUMER.DURABLE.CREATE.NW.C",
        json.dumps({"stream_name": "NW", "config": cfg}).encode(),
        timeout=2,
    )
    first = await Inbox(nc).start()
    await pull(nc, "NW", "C", b'{"batch":3,"no_wait":true}', first)
    assert [status_of(m) for m in await first.wait(3)] == [None, None, None]
    # max_ack_pending is reached: this one waits in the queue for 10 of the 7 left.
    blocked = await Inbox(nc).start()
    await pull(nc, "NW", "C", b'{"batch":10,"no_wait":true}', blocked)
    await nc.flush()
    pending = await Inbox(nc).start()
    await pull(nc, "NW", "C", b'{"batch":2,"no_wait":true,"expires":400000000}', pending)
    assert [status_of(m) for m in await pending.wait(1)] == [("408", "Requests Pending")]
    await blocked.sub.unsubscribe()
    await nc.flush()
    later = await Inbox(nc).start()
    await pull(nc, "NW", "C", b'{"batch":2,"no_wait":true,"expires":400000000}', later)
    assert [status_of(m) for m in await later.wait(1)] == [("408", "Request Timeout")]
    assert blocked.msgs == []


async def test_an_ack_of_what_was_not_delivered_is_not_answered(nc: nats.NATS) -> None:
    # As on nats-server: an ack sent as a request for a message the consumer has not
    # delivered is ignored and not answered, so the requester cannot believe it acked
    # something (a new consumer leader may not know its predecessor's last deliveries).
    js = nc.jetstream()
    await add_stream(nc)
    await publish_n(nc, 3)
    sub = await js.pull_subscribe("s.a", durable="D")
    (first,) = await sub.fetch(1, timeout=2)
    parts = first.reply.split(".")  # $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>...
    parts[5] = parts[6] = "3"
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request(".".join(parts), b"+ACK", timeout=0.5)  # bounded: no answer
    await first.ack_sync()
    info = await js.consumer_info("S", "D")
    assert (info.num_pending, info.num_ack_pending) == (2, 0)
    rest = await sub.fetch(2, timeout=2)
    assert [m.metadata.sequence.stream for m in rest] == [2, 3]
