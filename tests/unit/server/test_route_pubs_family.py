"""Router.route_pubs with runs on different subjects that one sublist answer covers
(JetStream acks: a subject per message): each subscriber and each route still gets every
message with its own subject, in order, as when routed one by one."""

from __future__ import annotations

import random

from jetraft.protocol.client import ClientParser, PubBatch
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.router import Router


class Batches:
    """A parser handler that keeps the batches."""

    def __init__(self) -> None:
        self.batches: list[PubBatch] = []

    def on_pubs(self, batch: PubBatch) -> None:
        self.batches.append(batch)

    def on_connect(self, options: dict[str, object]) -> bool:
        return False

    def on_sub(self, subject: str, queue: str | None, sid: str) -> None: ...
    def on_unsub(self, sid: str, max_msgs: int | None) -> None: ...
    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...


def parse(data: bytes) -> PubBatch:
    h = Batches()
    ClientParser(h).feed(data)
    assert len(h.batches) == 1
    return h.batches[0]


class Sink:
    """A local subscriber; records (sid, subject, reply, body) and the calls it got."""

    closed = False
    is_route = False
    frames_answers = False

    def __init__(self) -> None:
        self.got: list[tuple[str, str, str | None, bytes]] = []
        self.calls = 0

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        self.got.append((sub.sid, subject, reply, data))
        return True

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        self.calls += 1
        n = 0
        for line, body in batch.messages(first, stop):
            self.got.append((sub.sid, line[0], line[1], body))
            n += 1
        assert n == msgs and size == sum(len(b) for _, b in batch.messages(first, stop))
        return n


class RouteSink(Sink):
    is_route = True

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[list[tuple[str, str | None, bytes]]] = []

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        return False

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        return 0

    def forward(
        self, account: Account, subject: str, reply: str | None, hdr: bytes | None,
        data: bytes, queues: object, route_by: str | None,
    ) -> None:
        self.frames.append([(subject, reply, data)])

    def forward_run(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        frame = [(line[0], line[1], body) for line, body in batch.messages(first, stop)]
        # A MSGS frame carries one subject and one reply.
        assert len({(s, r) for s, r, _ in frame}) == 1
        self.frames.append(frame)

    def forward_runs(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        self.frames.append([(ln[0], ln[1], body) for ln, body in batch.messages(first, stop)])


class Publisher:
    closed = False
    echo = True
    no_responders = False

    def __init__(self, account: Account) -> None:
        self.account = account

    def enqueue(self, frame: bytes) -> None:
        raise AssertionError("no notices expected")


def _setup() -> tuple[Router, Account, Sink, Sink, RouteSink]:
    router = Router(random.Random(1))
    acct = Account("A")
    consumer, user, route = Sink(), Sink(), RouteSink()
    router.add_subscription(acct, Subscription(consumer, "$JS.ACK.S.C.>", None, "c"))
    router.add_subscription(acct, Subscription(consumer, "$JS.ACK.S.D.>", None, "d"))
    router.add_subscription(acct, Subscription(user, "$JS.ACK.>", None, "u"))
    router.add_subscription(acct, Subscription(user, "$JS.ACK.S.D.1.26.>", None, "narrow"))
    router.add_subscription(acct, Subscription(route, "$JS.ACK.S.>", None, "r"))
    return router, acct, consumer, user, route


def _acks() -> bytes:
    out = []
    for n in range(1, 40):
        consumer = "D" if n % 13 == 0 else "C"
        reply = f" _INBOX.x.{n}" if n % 5 == 0 else ""
        body = b"+NAK" if n % 11 == 0 else b""
        out.append(b"PUB $JS.ACK.S.%s.1.%d.%d.99.0%s %d\r\n%s\r\n" % (
            consumer.encode(), n, n, reply.encode(), len(body), body))
        if n == 20:
            out.append(b"PUB other.subject 1\r\nx\r\n")
    return b"".join(out)


def test_ack_subjects_of_one_consumer_reach_everyone_as_one_by_one() -> None:
    data = _acks()
    router, acct, consumer, user, route = _setup()
    router.route_pubs(Publisher(acct), acct, parse(data))
    ref_router, ref_acct, ref_consumer, ref_user, ref_route = _setup()
    ref = parse(data)
    for r in range(len(ref.lines)):
        ref_router.route_pubs(Publisher(ref_acct), ref_acct, PubBatch(
            ref.lines[r : r + 1], [0, 1], ref.bodies[ref.starts[r] : ref.starts[r + 1]]))
    assert consumer.got == ref_consumer.got
    assert user.got == ref_user.got
    assert [m for f in route.frames for m in f] == [m for f in ref_route.frames for m in f]
    assert acct.stats == ref_acct.stats
    assert len(consumer.got) == 39 and {g[0] for g in consumer.got} == {"c", "d"}
    assert [g[1] for g in user.got if g[0] == "narrow"] == ["$JS.ACK.S.D.1.26.26.99.0"]
    # Runs between the other consumer's acks and the other subject go in few calls: the
    # consumer's acks are not handed over one by one.
    assert consumer.calls < len(consumer.got) // 4
    # The peer gets them in few frames too (a PUBS frame carries runs on many subjects).
    assert len(route.frames) < len(ref_route.frames) // 4


def test_a_group_from_a_route_reaches_local_subscribers_as_one_by_one() -> None:
    """What a PUBS frame brings (runs on many subjects) goes to the local plain subscribers
    as if each message had come alone, never back to a route."""
    data = _acks()
    router, acct, consumer, user, route = _setup()
    router.deliver_pubs_from_route(acct, parse(data))
    ref_router, ref_acct, ref_consumer, ref_user, _ = _setup()
    ref = parse(data)
    for r in range(len(ref.lines)):
        ref_router.deliver_pubs_from_route(ref_acct, PubBatch(
            ref.lines[r : r + 1], [0, 1], ref.bodies[ref.starts[r] : ref.starts[r + 1]]))
    assert consumer.got == ref_consumer.got and len(consumer.got) == 39
    assert user.got == ref_user.got
    assert route.frames == []
    assert acct.stats == ref_acct.stats
    assert consumer.calls < len(consumer.got) // 4


class Once(Sink):
    """Unsubscribes its subscription after the first message (interest changes midway)."""

    def __init__(self, router: Router, acct: Account) -> None:
        super().__init__()
        self.router, self.acct = router, acct

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        super().deliver(sub, subject, reply, hdr, data)
        self.router.remove_subscription(self.acct, sub)
        return True


def _inbox_setup() -> tuple[Router, Account, Sink, RouteSink, Sink]:
    router = Router(random.Random(1))
    acct = Account("A")
    client, route, queued = Sink(), RouteSink(), Sink()
    router.add_subscription(acct, Subscription(client, "_INBOX.pull", None, "1"))
    router.add_subscription(acct, Subscription(route, "_INBOX.remote", None, "r"))
    router.add_subscription(acct, Subscription(queued, "_INBOX.q", "grp", "q"))
    router.add_subscription(acct, Subscription(Once(router, acct), "_INBOX.once", None, "o"))
    return router, acct, client, route, queued


def test_deliveries_to_one_inbox_reach_it_as_one_by_one() -> None:
    """A pull request's deliveries (each with its own subject and ack reply, routed by the
    request's inbox): local, remote, queue and vanishing interest as route_message."""
    items = [(f"s.{n}", f"$JS.ACK.S.C.1.{n}.{n}.9.0", None if n % 3 else b"NATS/1.0\r\n\r\n",
              b"m%d" % n) for n in range(8)]
    for inbox in ("_INBOX.pull", "_INBOX.remote", "_INBOX.q", "_INBOX.once", "_INBOX.none"):
        router, acct, client, route, queued = _inbox_setup()
        router.route_deliveries(acct, inbox, items)
        ref_router, ref_acct, ref_client, ref_route, ref_queued = _inbox_setup()
        for subject, reply, hdr, data in items:
            ref_router.route_message(None, ref_acct, subject, reply, hdr, data, route_by=inbox)
        assert client.got == ref_client.got
        assert route.frames == ref_route.frames
        assert queued.got == ref_queued.got
        assert acct.stats == ref_acct.stats
    router, acct, client, *_ = _inbox_setup()
    router.route_deliveries(acct, "_INBOX.pull", items)
    assert [(g[1], g[2]) for g in client.got] == [(s, r) for s, r, _, _ in items]
