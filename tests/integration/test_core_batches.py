"""Publishes that one read brings are routed together (in groups of one subject, written in
runs of one control line): every subscription still gets its messages in order, framed
exactly as one at a time, with auto-unsubscribe, echo off and clients without headers
support honoured in the middle of a run."""

from __future__ import annotations

from jetraft.server.server import Server
from tests.burst import burst, by_sid, encode, expected
from tests.rawclient import RawClient


async def test_a_burst_reaches_each_subscription_in_order_and_framed_alone(
    server: Server,
) -> None:
    port = server.client_port
    sub = await RawClient.connect("127.0.0.1", port, headers=True)
    await sub.send(b"SUB burst.a 7\r\nSUB burst.* 9\r\nSUB burst.a 11\r\nUNSUB 11 3\r\n")
    await sub.ping()
    headerless = await RawClient.connect("127.0.0.1", port)
    await headerless.send(b"SUB burst.a 1\r\n")
    await headerless.ping()
    # The publisher's own subscription gets nothing: echo is off.
    pub = await RawClient.connect("127.0.0.1", port, headers=True, echo=False)
    await pub.send(b"SUB burst.a 5\r\n")
    msgs = burst()
    await pub.send(encode(msgs))
    await pub.ping()

    def is_a(s: str) -> bool:
        return s == "burst.a"

    want = {
        "7": expected(msgs, "7", is_a),
        "9": expected(msgs, "9", lambda s: s.startswith("burst.")),
        "11": expected(msgs, "11", is_a, limit=3),
    }
    got = by_sid(await sub.read_frames(sum(map(len, want.values()))))
    assert got == want
    # Without headers support the header block is left out, as nats-server does.
    plain = expected(msgs, "1", is_a, headers=False)
    assert await headerless.read_frames(len(plain)) == plain
    for c in (sub, headerless, pub):
        await c.ping()  # nothing more for anyone (echo off: nothing at all for the publisher)
    for c in (sub, headerless, pub):
        await c.close()
