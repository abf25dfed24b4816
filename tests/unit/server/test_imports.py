"""Account imports in the router, without sockets: stream forwarders, service forwarders and
their response relays (jetraft.server.core.imports) driven through every routing path."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from jetraft.config import parse_config
from jetraft.protocol.client import PubBatch, split_body
from jetraft.protocol.headers import parse_headers
from jetraft.protocol.subjects import filter_intersection, filters_overlap
from jetraft.server.core.accounts import (
    Account,
    Subscription,
    deliver_each,
    deliver_replies_each,
)
from jetraft.server.core.import_mapping import (
    service_mapper,
    source_filter,
    stream_mapper,
    untokenize,
)
from jetraft.server.core.imports import MAX_HOPS, ResponseRelay, install_imports
from jetraft.server.core.router import Router

CONF = """
accounts {
  A {
    exports [
      {stream: "a.>"}, {stream: "m.*.*", accounts: [B]}
      {service: "svc.>"}
      {service: "many", response_type: stream, response_threshold: "10s"}
    ]
  }
  B {
    imports [
      {stream: {account: A, subject: "a.>"}, prefix: "p"}
      {stream: {account: A, subject: "m.*.*"}, to: "n.$2.*"}
      {service: {account: A, subject: "svc.>"}, to: "local.svc.>"}
      {service: {account: A, subject: "many"}}
    ]
  }
}
"""

Got = tuple[str, str | None, bytes | None, bytes]


class Sink:
    closed = False
    is_route = False
    frames_answers = False

    def __init__(self, no_responders: bool = False) -> None:
        self.no_responders = no_responders
        self.got: list[Got] = []

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        self.got.append((subject, reply, hdr, data))
        return True

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        for line, body in batch.messages(first, stop):
            hdr, data = split_body(line, body)
            self.deliver(sub, line[0], line[1], hdr, data)
        return msgs

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        return deliver_each(self, sub, answers, first, stop)

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        return deliver_replies_each(self, sub, subject, items)


class Listener:
    def __init__(self) -> None:
        self.announced: list[tuple[str, str, bool]] = []

    def local_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        self.announced.append((account.name, sub.subject, added))


class Clock:
    def __init__(self) -> None:
        self.now_ns = 1_000

    def __call__(self) -> int:
        return self.now_ns


class World:
    def __init__(self, conf: str = CONF) -> None:
        self.router = Router(random.Random(1))
        self.listener = Listener()
        self.router.listener = self.listener
        cfg = parse_config(conf, "t.conf", env={})
        self.accounts = {a.name: Account(a.name) for a in cfg.accounts}
        self.clock = Clock()
        self.relays = install_imports(
            self.router, self.accounts, cfg.accounts, self.clock, random.Random(2)
        )

    def sub(self, account: str, subject: str, owner: Sink | None = None) -> Sink:
        owner = owner or Sink()
        sub = Subscription(owner, subject, None, "1")
        self.router.add_subscription(self.accounts[account], sub)
        return owner

    def pub(self, account: str, subject: str, data: bytes = b"", reply: str | None = None) -> int:
        return self.router.route_message(None, self.accounts[account], subject, reply, None, data)


def _batch(*msgs: tuple[str, str | None, bytes]) -> PubBatch:
    lines = [(s, r, len(d), -1, b"") for s, r, d in msgs]
    return PubBatch(lines, list(range(len(msgs) + 1)), [d for _, _, d in msgs])


class Publisher(Sink):
    echo = True

    def __init__(self, account: Account) -> None:
        super().__init__()
        self.account = account

    def enqueue(self, frame: bytes) -> None:
        raise AssertionError("no notices expected")


def test_stream_import_maps_subjects_and_keeps_reply() -> None:
    w = World()
    b = w.sub("B", ">")
    w.pub("A", "a.x.y", b"1", reply="r.1")
    w.pub("A", "m.one.two", b"2")
    w.pub("A", "other", b"3")
    assert b.got == [("p.a.x.y", "r.1", None, b"1"), ("n.two.one", None, None, b"2")]


def test_stream_import_on_every_local_path() -> None:
    w = World()
    b = w.sub("B", "p.>")
    acc = w.accounts["A"]
    w.router.route_pubs(Publisher(acc), acc, _batch(("a.1", None, b"x"), ("a.2", "r", b"y")))
    w.router.route_answers(acc, [("a.3", b"z"), ("a.3", b"w")])
    w.router.route_replies(acc, "a.4", [(None, b"v")])
    w.router.route_deliveries(acc, "a.5", [("orig", None, None, b"u")])
    assert b.got == [
        ("p.a.1", None, None, b"x"), ("p.a.2", "r", None, b"y"),
        ("p.a.3", None, None, b"z"), ("p.a.3", None, None, b"w"),
        ("p.a.4", None, None, b"v"),
        ("orig", None, None, b"u"),  # routed by the mapped deliver subject, shown as is
    ]


def test_messages_from_routes_are_not_forwarded() -> None:
    """The server where a message entered forwarded it already."""
    w = World()
    b = w.sub("B", ">")
    acc = w.accounts["A"]
    w.router.deliver_from_route(acc, "a.1", None, None, b"x", (), None)
    w.router.deliver_pubs_from_route(acc, _batch(("a.2", None, b"y")))
    w.router.deliver_answers_from_route(acc, ["a.3"], [b"z"])
    w.router.deliver_from_route(w.accounts["B"], "local.svc.q", "_INBOX.1", None, b"q", (), None)
    assert b.got == [("local.svc.q", "_INBOX.1", None, b"q")]  # B's own subscriber only


def test_only_response_interest_is_announced_to_routes() -> None:
    w = World()
    relay = w.relays["A"]
    assert w.listener.announced == [("A", relay.prefix + ">", True)]
    assert relay.prefix.startswith("_R_.") and len(relay.prefix) == len("_R_.XXXXXX.")


def _request(w: World, subject: str, reply: str = "_INBOX.r.1") -> tuple[Sink, Sink, Got]:
    responder = w.sub("A", "svc.>")
    requester = w.sub("B", "_INBOX.r.*")
    assert w.pub("B", subject, b"q", reply=reply) == 1
    (got,) = responder.got
    return responder, requester, got


def test_service_request_and_singleton_response() -> None:
    w = World()
    _, requester, (subject, reply, hdr, data) = _request(w, "local.svc.ping")
    assert subject == "svc.ping" and data == b"q"
    assert reply is not None and reply.startswith(w.relays["A"].prefix)
    assert hdr is not None and parse_headers(hdr).get("Nats-Request-Info") == '{"acc":"B"}'
    w.pub("A", reply, b"answer")
    w.pub("A", reply, b"second")  # a Singleton mapping ends with the first response
    assert requester.got == [("_INBOX.r.1", None, None, b"answer")]
    assert w.relays["A"].pending == {}


def test_request_headers_keep_their_own_lines() -> None:
    w = World()
    responder = w.sub("A", "svc.>")
    hdr = b"NATS/1.0\r\nX: 1\r\n\r\n"
    w.router.route_message(None, w.accounts["B"], "local.svc.h", "_INBOX.r.1", hdr, b"")
    got = parse_headers(responder.got[0][2] or b"")
    assert got.get("X") == "1" and got.get("Nats-Request-Info") == '{"acc":"B"}'


def test_streamed_responses_until_the_threshold_passes() -> None:
    w = World()
    responder = w.sub("A", "many")
    requester = w.sub("B", "_INBOX.r.*")
    w.pub("B", "many", b"", reply="_INBOX.r.1")
    reply = responder.got[0][1]
    assert reply is not None
    for n in range(3):
        w.clock.now_ns += 9_000_000_000  # each within 10 s of the one before
        w.pub("A", reply, b"%d" % n)
    w.clock.now_ns += 10_000_000_000
    w.pub("A", reply, b"late")
    assert [d for *_, d in requester.got] == [b"0", b"1", b"2"]
    assert w.relays["A"].pending == {}


def test_empty_response_ends_a_stream() -> None:
    w = World()
    responder = w.sub("A", "many")
    requester = w.sub("B", "_INBOX.r.*")
    w.pub("B", "many", b"", reply="_INBOX.r.1")
    reply = responder.got[0][1]
    assert reply is not None
    for data in (b"1", b"", b"after"):
        w.pub("A", reply, data)
    assert [d for *_, d in requester.got] == [b"1", b""]


def test_expired_mappings_are_swept_by_new_requests() -> None:
    w = World()
    w.sub("A", "svc.>")
    w.sub("B", "_INBOX.r.*")
    w.pub("B", "local.svc.a", reply="_INBOX.r.1")
    assert len(w.relays["A"].pending) == 1
    w.clock.now_ns += 120_000_000_000
    w.pub("B", "local.svc.b", reply="_INBOX.r.2")
    assert len(w.relays["A"].pending) == 1


def test_no_responders_notice_for_the_requester() -> None:
    w = World()
    requester = w.sub("B", "_INBOX.r.*", Sink(no_responders=True))
    w.pub("B", "local.svc.nobody", reply="_INBOX.r.1")
    ((subject, reply, hdr, data),) = requester.got
    assert (subject, reply, data) == ("_INBOX.r.1", None, b"")
    assert hdr is not None
    headers = parse_headers(hdr)
    assert headers.status == 503 and headers.get("Nats-Subject") == "local.svc.nobody"
    assert w.relays["A"].pending == {}


def test_no_notice_without_asking_or_when_the_own_account_answered() -> None:
    w = World()
    quiet = w.sub("B", "_INBOX.r.*")
    w.pub("B", "local.svc.nobody", reply="_INBOX.r.1")
    assert quiet.got == []
    w2 = World()
    asking = w2.sub("B", "_INBOX.r.*", Sink(no_responders=True))
    own = w2.sub("B", "local.svc.>")
    w2.pub("B", "local.svc.x", reply="_INBOX.r.1")
    assert asking.got == [] and len(own.got) == 1


def test_responses_from_a_route_reach_the_requester() -> None:
    """The responder sits on another server: its response arrives over a route."""
    w = World()
    requester = w.sub("B", "_INBOX.r.*")
    route = Sink()
    route.is_route = True  # type: ignore[misc]
    forwarded: list[str] = []
    route.forward = lambda acc, subject, *rest: forwarded.append(subject)  # type: ignore[attr-defined]
    w.router.add_subscription(w.accounts["A"], Subscription(route, "svc.>", None, "r"))
    w.pub("B", "local.svc.x", reply="_INBOX.r.1")
    assert forwarded == ["svc.x"]
    relay: ResponseRelay = w.relays["A"]
    (reply,) = relay.pending
    w.router.deliver_from_route(w.accounts["A"], reply, None, None, b"r", (), None)
    assert requester.got == [("_INBOX.r.1", None, None, b"r")]


def test_a_loop_through_imports_stops() -> None:
    conf = """accounts { A {
      exports [{stream: "ok.>"}]
      imports [{stream: {account: A, subject: "ok.>"}, prefix: "ok"}]
    } }"""
    w = World(conf)
    seen = w.sub("A", "ok.>")
    w.pub("A", "ok.x")
    assert [s for s, *_ in seen.got] == ["ok." * n + "ok.x" for n in range(MAX_HOPS + 1)]


@pytest.mark.parametrize("reply", ["$JS.ACK.S.C.1.2.3.4.5", None])
def test_acks_and_plain_publishes_cross_without_a_mapping(reply: str | None) -> None:
    w = World()
    responder = w.sub("A", "svc.>")
    w.pub("B", "local.svc.x", reply=reply)
    assert responder.got[0][1] == reply
    assert w.relays["A"].pending == {}


class Asking(Publisher):
    """A publisher that asked for no-responders notices."""

    def __init__(self, account: Account) -> None:
        super().__init__(account)
        self.no_responders = True
        self.frames: list[bytes] = []

    def enqueue(self, frame: bytes) -> None:
        self.frames.append(frame)


def test_stream_import_listens_only_while_the_importer_does() -> None:
    """As nats-server's import subscriptions: a request in the exporting account on an
    exported subject nobody in the importer listens to hears no-responders."""
    w = World()
    acc = w.accounts["A"]
    asking = Asking(acc)
    w.sub("A", "_INBOX.a.*", asking)
    assert w.router.route_message(asking, acc, "a.q", "_INBOX.a.1", None, b"") == 0
    assert len(asking.frames) == 1 and b"503" in asking.frames[0]
    b = Sink()
    sub = Subscription(b, "p.a.*", None, "9")
    w.router.add_subscription(w.accounts["B"], sub)
    assert w.router.route_message(asking, acc, "a.q", "_INBOX.a.2", None, b"") == 1
    assert b.got == [("p.a.q", "_INBOX.a.2", None, b"")]
    w.router.remove_subscription(w.accounts["B"], sub)
    assert not acc.sublist.match("a.q").plain
    w.sub("B", "p.other")  # cannot take anything the import forwards
    assert not acc.sublist.match("a.q").plain


def test_route_interest_in_the_importer_counts() -> None:
    """In a cluster the importer's subscriber may be on another server."""
    w = World()
    route = Sink()
    route.is_route = True  # type: ignore[misc]
    w.router.add_subscription(w.accounts["B"], Subscription(route, "p.>", None, "r"))
    assert w.accounts["A"].sublist.match("a.q").plain


def test_chained_stream_imports() -> None:
    conf = """accounts {
      A { exports [{stream: "a.>"}] }
      B { exports [{stream: "p.>"}], imports [{stream: {account: A, subject: "a.>"}, prefix: "p"}] }
      C { imports [{stream: {account: B, subject: "p.>"}, prefix: "c"}] }
    }"""
    w = World(conf)
    c = w.sub("C", "c.>")
    w.pub("A", "a.x", b"1")
    assert c.got == [("c.p.a.x", None, None, b"1")]


JS_CONF = """accounts {
  A { exports [{service: "$JS.API.>", response_type: stream}] }
  B { imports [{service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"}] }
}"""


def test_pull_deliveries_shown_with_their_stored_subject() -> None:
    """A pull request's mapping has a subscription of its own: the consumer routes by the
    mapped reply and shows the stored subject, here or from the leader's server."""
    w = World(JS_CONF)
    consumer = w.sub("A", "$JS.API.CONSUMER.MSG.NEXT.S.C")
    inbox = w.sub("B", "_INBOX.p.*")
    w.pub("B", "JS.A.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":3}', reply="_INBOX.p.1")
    (subject, key, _, _) = consumer.got[0]
    assert subject == "$JS.API.CONSUMER.MSG.NEXT.S.C" and key is not None
    assert ("A", key, True) in w.listener.announced  # the leader may be another server
    acc = w.accounts["A"]
    w.router.route_deliveries(acc, key, [("orders.1", "$JS.ACK.S.C.1.1.1.0.0", None, b"m1")])
    w.router.deliver_from_route(acc, "orders.2", "$JS.ACK.S.C.1.2.2.0.0", None, b"m2", (), key)
    w.router.route_message(None, acc, key, None, b"NATS/1.0 408 Request Timeout\r\n\r\n", b"")
    assert [(s, r, d) for s, r, _, d in inbox.got] == [
        ("orders.1", "$JS.ACK.S.C.1.1.1.0.0", b"m1"),
        ("orders.2", "$JS.ACK.S.C.1.2.2.0.0", b"m2"),
        ("_INBOX.p.1", None, b""),  # a status sent to the mapped reply: once
    ]
    w.clock.now_ns += 120_000_000_000
    w.router.route_message(None, acc, key, None, None, b"late")
    assert ("A", key, False) in w.listener.announced
    assert w.relays["A"].pending == {}


class RunSink(Sink):
    def __init__(self) -> None:
        super().__init__()
        self.runs: list[int] = []

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        self.runs.append(msgs)
        return super().deliver_run(sub, batch, first, stop, msgs, size)


def test_a_batch_crosses_a_stream_import_in_one_piece() -> None:
    """Client publishes reach the importer's subscriber as the publisher's batch would reach
    a subscriber of its own account (here: runs on subjects of one stem, in one call), not
    one message at a time."""
    w = World()
    b = RunSink()
    w.sub("B", "p.>", b)
    acc = w.accounts["A"]
    subject = "a.run"
    line = (subject, None, 1, -1, b" 1\r\n")
    batch = PubBatch([line, ("a.other", "r", 1, -1, b" r 1\r\n")], [0, 3, 4],
                     [b"1", b"2", b"3", b"4"])
    w.router.route_pubs(Publisher(acc), acc, batch)
    assert b.runs == [4]
    assert [(s, r, d) for s, r, _, d in b.got] == [
        ("p.a.run", None, b"1"), ("p.a.run", None, b"2"), ("p.a.run", None, b"3"),
        ("p.a.other", "r", b"4"),
    ]


def test_a_literal_subscriber_of_a_mapped_stream_import_is_interest() -> None:
    """``to: "n.$2.*"``: the importer's subscribers see ``n.*.*``; one on a literal subject
    there makes the import listen."""
    w = World()
    b = w.sub("B", "n.two.one")
    w.pub("A", "m.one.two", b"x")
    assert b.got == [("n.two.one", None, None, b"x")]


@pytest.mark.parametrize(
    ("local", "subject", "asked", "mapped"),
    [
        ("local.svc.>", "svc.>", "local.svc.a.b", "svc.a.b"),
        ("x.$2.$1", "swap.*.*", "x.one.two", "swap.two.one"),
        ("x.*.*", "swap.*.*", "x.one.two", "swap.one.two"),
        ("all.*", "svc.one", "all.thing", "svc.one"),
        ("same", "same", "same", "same"),
        ("local.svc.>", "svc.>", "local.svc.CREATE.S.>", "svc.CREATE.S.>"),
    ],
)
def test_service_import_mapping(local: str, subject: str, asked: str, mapped: str) -> None:
    assert service_mapper(local, subject)(asked) == mapped


@pytest.mark.parametrize(
    ("subject", "local", "published", "mapped"),
    [
        ("a.>", "p.a.>", "a.x.y", "p.a.x.y"),
        ("m.*.*", "n.$2.*", "m.one.two", "n.two.one"),
        ("m.*.*", "n.*.*", "m.one.two", "n.one.two"),
        ("lit", "other", "lit", "other"),
    ],
)
def test_stream_import_mapping(subject: str, local: str, published: str, mapped: str) -> None:
    assert stream_mapper(subject, local)(published) == mapped
    assert untokenize(local).count("$") == 0


def test_stream_import_listens_in_the_exporter_for_what_the_importer_wants() -> None:
    """As nats-server's shadow subscriptions: the exporting account sees interest only in the
    subjects the importer's subscriptions map back to, so a push consumer there whose deliver
    subject nobody listens to is not bound (nats.js refuses a bound consumer: its KV watch
    and history across accounts run two such consumers at once)."""
    w = World()
    a, b = w.accounts["A"], w.accounts["B"]
    one = Subscription(Sink(), "p.a.d1", None, "1")
    w.router.add_subscription(b, one)
    assert a.sublist.match("a.d1").plain and not a.sublist.match("a.d2").plain
    two = Subscription(Sink(), "p.a.d1", None, "2")  # the same filter again: one shadow
    w.router.add_subscription(b, two)
    w.router.remove_subscription(b, one)
    assert a.sublist.match("a.d1").plain
    w.router.remove_subscription(b, two)
    assert not a.sublist.match("a.d1").plain
    # Wildcards map back too; overlapping shadows forward a message once.
    wide, narrow = Sink(), Sink()
    w.sub("B", "p.>", wide)
    w.sub("B", "p.a.x", narrow)
    assert w.pub("A", "a.x", b"m") >= 1
    assert wide.got == [("p.a.x", None, None, b"m")] and narrow.got == wide.got


@pytest.mark.parametrize(
    ("imported", "local", "wanted", "source"),
    [
        ("a.>", "a.>", "a.x", "a.x"),
        ("a.>", "a.>", ">", "a.>"),
        ("a.>", "a.>", "b.x", None),
        ("a.>", "p.a.>", "p.a.*", "a.*"),
        ("a.>", "p.a.>", "*.a.x.y", "a.x.y"),
        ("a.>", "p.a.>", "p.>", "a.>"),
        ("a.>", "p.a.>", ">", "a.>"),
        ("a.>", "p.a.>", "q.a.x", None),
        ("a.>", "p.a.>", "p", None),
        ("a.*", "a.*", "a.x.y", None),
        ("m.*.*", "n.*.*", "n.x.y", "m.*.*"),  # other mappings: the whole import
        ("m.*.*", "n.*.*", "o.x.y", None),
    ],
)
def test_source_filters(imported: str, local: str, wanted: str, source: str | None) -> None:
    assert source_filter(imported, local, wanted) == source


@pytest.mark.parametrize(
    ("a", "b", "both"),
    [
        ("a.*", "*.b", "a.b"),
        ("a.>", "a.b.*", "a.b.*"),
        (">", "a", "a"),
        ("a.>", "a", None),
        ("a.b", "a.c", None),
        ("a.*.c", "a.>", "a.*.c"),
        (">", ">", ">"),
    ],
)
def test_filter_intersections(a: str, b: str, both: str | None) -> None:
    assert filter_intersection(a, b) == both
    assert filter_intersection(b, a) == both
    assert filters_overlap(a, b) == (both is not None)
