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


async def test_requests_with_their_own_replies_in_one_read_get_notices_only_when_untaken(
    server: Server,
) -> None:
    """Requests on one subject, each with its own reply subject, sent in one write: the
    subscribers take the first ones (auto-unsubscribe after a few), and the requester gets a
    no-responders notice for each of the rest, in order; likewise with a queue group."""
    port = server.client_port
    plain = await RawClient.connect("127.0.0.1", port, headers=True)
    await plain.send(b"SUB req.a 3\r\nUNSUB 3 5\r\n")
    await plain.ping()
    queue = await RawClient.connect("127.0.0.1", port, headers=True)
    await queue.send(b"SUB req.q grp 4\r\nUNSUB 4 2\r\n")
    await queue.ping()
    me = await RawClient.connect("127.0.0.1", port, headers=True, no_responders=True)
    await me.send(b"SUB _INBOX.me.* 1\r\n")
    await me.ping()
    for subject, sub, sid, taken in ((b"req.a", plain, "3", 5), (b"req.q", queue, "4", 2)):
        frames = b"".join(
            b"PUB %s _INBOX.me.%d 2\r\nr%d\r\n" % (subject, n, n % 10) for n in range(12)
        )
        await me.send(frames)
        got = await sub.read_frames(taken)
        assert [(f.sid, f.reply, f.payload) for f in got] == [
            (sid, f"_INBOX.me.{n}", b"r%d" % n) for n in range(taken)
        ]
        notices = await me.read_frames(12 - taken)
        assert [(f.subject, f.payload) for f in notices] == [
            (f"_INBOX.me.{n}", b"") for n in range(taken, 12)
        ]
        assert all(f.hdr is not None and f.hdr.startswith(b"NATS/1.0 503") for f in notices)
        await me.ping()  # nothing more: no notice for a request that was taken
    for c in (plain, queue, me):
        await c.close()


async def test_a_burst_on_many_subjects_of_one_family_is_framed_with_each_subject(
    server: Server,
) -> None:
    """Publishes on a subject each (as JetStream acks are) that one wildcard subscription
    covers are routed together; every frame still carries its own subject, reply and body,
    auto-unsubscribe still stops where it should, and a subscription on a literal subject
    of another family gets only its own."""
    port = server.client_port
    sub = await RawClient.connect("127.0.0.1", port, headers=True)
    await sub.send(b"SUB fam.> 1\r\nSUB fam.> 2\r\nUNSUB 2 50\r\nSUB other.9.x 3\r\n")
    await sub.ping()
    pub = await RawClient.connect("127.0.0.1", port, headers=True)
    subjects = [f"{'other' if n % 9 == 0 else 'fam'}.{n}.x" for n in range(60)]
    msgs = [m for m in burst(subjects) if m.subject != "burst.other"]
    await pub.send(encode(msgs))
    await pub.ping()
    want = {
        "1": expected(msgs, "1", lambda s: s.startswith("fam.")),
        "2": expected(msgs, "2", lambda s: s.startswith("fam."), limit=50),
        "3": expected(msgs, "3", lambda s: s == "other.9.x"),
    }
    got = by_sid(await sub.read_frames(sum(map(len, want.values()))))
    assert got == want
    await sub.ping()  # nothing more
    for c in (sub, pub):
        await c.close()
