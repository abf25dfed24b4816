"""Core publish/subscribe through nats-py: wildcards, queues, request/reply, headers."""

from __future__ import annotations

from collections import Counter

import nats
import pytest
from nats.errors import NoRespondersError

from jetraft.server.server import Server

from .conftest import connect, wait_for


async def _collect(sub: nats.aio.subscription.Subscription, n: int) -> list[nats.aio.msg.Msg]:
    return [await sub.next_msg(timeout=2) for _ in range(n)]


async def test_publish_reaches_subscriber(server: Server) -> None:
    nc = await connect(server)
    sub = await nc.subscribe("orders.new")
    await nc.publish("orders.new", b"hello")
    msg = await sub.next_msg(timeout=2)
    assert (msg.subject, msg.data) == ("orders.new", b"hello")
    await nc.close()


async def test_wildcards_match_by_token(server: Server) -> None:
    nc = await connect(server)
    star = await nc.subscribe("orders.*")
    full = await nc.subscribe("orders.>")
    for subject in ("orders.new", "orders.eu.paid", "other.new", "orders"):
        await nc.publish(subject, subject.encode())
    await nc.flush()
    assert [m.subject for m in await _collect(star, 1)] == ["orders.new"]
    assert [m.subject for m in await _collect(full, 2)] == ["orders.new", "orders.eu.paid"]
    with pytest.raises(nats.errors.TimeoutError):
        await star.next_msg(timeout=0.2)
    with pytest.raises(nats.errors.TimeoutError):
        await full.next_msg(timeout=0.2)
    await nc.close()


async def test_queue_group_gets_each_message_once(server: Server) -> None:
    nc = await connect(server)
    got: Counter[str] = Counter()
    members = []
    for _ in range(3):
        members.append(await nc.subscribe("work", queue="workers"))
    plain = await nc.subscribe("work")
    for i in range(60):
        await nc.publish("work", str(i).encode())
    await nc.flush()
    # Every message lands once in the group, and once more on the plain subscriber.
    plain_msgs = await _collect(plain, 60)
    assert len(plain_msgs) == 60
    for idx, m in enumerate(members):
        while True:
            try:
                msg = await m.next_msg(timeout=0.3)
            except nats.errors.TimeoutError:
                break
            got[msg.data.decode()] += 1
            got[f"member{idx}"] += 1
    assert sum(got[str(i)] for i in range(60)) == 60
    assert all(got[str(i)] == 1 for i in range(60))
    # Spread over members (random choice, 60 messages: each member gets some with
    # overwhelming probability: 3 * (2/3)^60 ~ 1e-10).
    assert all(got[f"member{i}"] > 0 for i in range(3))
    await nc.close()


async def test_request_reply(server: Server) -> None:
    responder = await connect(server)
    requester = await connect(server)

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"re: " + msg.data)

    await responder.subscribe("svc.echo", cb=answer)
    await responder.flush()
    reply = await requester.request("svc.echo", b"ping", timeout=2)
    assert reply.data == b"re: ping"
    await requester.close()
    await responder.close()


async def test_headers_round_trip(server: Server) -> None:
    nc = await connect(server)
    sub = await nc.subscribe("h")
    await nc.publish("h", b"body", headers={"Trace-Id": "abc", "X-Two": "2"})
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"body"
    assert msg.headers == {"Trace-Id": "abc", "X-Two": "2"}
    await nc.close()


async def test_no_responders(server: Server) -> None:
    nc = await connect(server)
    with pytest.raises(NoRespondersError):
        await nc.request("nobody.home", b"?", timeout=2)
    await nc.close()


async def test_echo_off_skips_own_messages(server: Server) -> None:
    quiet = await connect(server, no_echo=True)
    other = await connect(server)
    own = await quiet.subscribe("chat")
    theirs = await other.subscribe("chat")
    await other.flush()
    await quiet.publish("chat", b"from quiet")
    await quiet.flush()
    assert (await theirs.next_msg(timeout=2)).data == b"from quiet"
    with pytest.raises(nats.errors.TimeoutError):
        await own.next_msg(timeout=0.3)
    await other.publish("chat", b"from other")
    assert (await own.next_msg(timeout=2)).data == b"from other"
    await quiet.close()
    await other.close()


async def test_unsubscribe_after_max_messages(server: Server) -> None:
    def subscriptions() -> int:  # the server's own (system requests) included
        return sum(len(a.sublist) for a in server.auth.accounts.values())

    before = subscriptions()
    nc = await connect(server)
    sub = await nc.subscribe("limited")
    await sub.unsubscribe(limit=2)
    for i in range(5):
        await nc.publish("limited", str(i).encode())
    await nc.flush()
    assert [m.data for m in await _collect(sub, 2)] == [b"0", b"1"]
    # The server removed the subscription after two deliveries.
    await wait_for(
        lambda: subscriptions() == before,
        what="auto-unsubscribe",
    )
    await nc.close()


async def test_large_payload_and_many_messages(server: Server) -> None:
    nc = await connect(server)
    sub = await nc.subscribe("bulk")
    payload = bytes(range(256)) * 4000  # ~1 MB minus a little
    payload = payload[: 1024 * 1024 - 10]
    await nc.publish("bulk", payload)
    for i in range(2000):
        await nc.publish("bulk", b"%d" % i)
    await nc.flush()
    first = await sub.next_msg(timeout=5)
    assert first.data == payload
    rest = await _collect(sub, 2000)
    assert [m.data for m in rest] == [b"%d" % i for i in range(2000)]
    await nc.close()
