"""Router.route_answers (the PubAcks of one commit) delivers as route_message does."""

from __future__ import annotations

import random
from collections.abc import Sequence

from jetraft.protocol.client import PubBatch
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.router import Router


class Sink:
    """A subscriber that records what it is given."""

    closed = False
    is_route = False
    frames_answers = False  # as an internal client: the router delivers one by one

    def __init__(self) -> None:
        self.got: list[tuple[str, str, bytes]] = []

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        assert reply is None and hdr is None
        self.got.append((sub.sid, subject, data))
        return True

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        raise AssertionError("not used for answers")

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        msgs = size = 0
        for subject, data in answers[first:stop]:
            if self.deliver(sub, subject, None, None, data):
                msgs += 1
                size += len(data)
        return msgs, size


def _setup() -> tuple[Router, Account, Sink, Sink]:
    router = Router(random.Random(1))
    acct = Account("A")
    inbox, queued = Sink(), Sink()
    router.add_subscription(acct, Subscription(inbox, "_INBOX.x.*", None, "1"))
    router.add_subscription(acct, Subscription(inbox, "_INBOX.x.7", None, "2"))
    router.add_subscription(acct, Subscription(queued, "_INBOX.q.*", "grp", "3"))
    return router, acct, inbox, queued


def test_answers_reach_the_same_subscribers_in_order_as_one_by_one() -> None:
    answers = [(f"_INBOX.x.{n}", b"%d" % n) for n in range(1, 10)]
    answers += [("_INBOX.q.1", b"q1"), ("_INBOX.nobody.1", b"lost"), ("_INBOX.x.9", b"again")]
    router, acct, inbox, queued = _setup()
    router.route_answers(acct, answers)
    ref_router, ref_acct, ref_inbox, ref_queued = _setup()
    for subject, data in answers:
        ref_router.route_message(None, ref_acct, subject, None, None, data)
    assert inbox.got == ref_inbox.got
    assert queued.got == ref_queued.got == [("3", "_INBOX.q.1", b"q1")]
    assert ("2", "_INBOX.x.7", b"7") in inbox.got  # the literal subscription too
    assert acct.stats == ref_acct.stats
    assert acct.stats.in_msgs == len(answers)


class RouteSink(Sink):
    """A route: it takes messages for the peer through ``forward``/``forward_answers``."""

    is_route = True

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[list[tuple[str, bytes]]] = []  # one list per frame sent

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        return False  # the router forwards to routes itself

    def forward(
        self, account: Account, subject: str, reply: str | None, hdr: bytes | None,
        data: bytes, queues: object, route_by: str | None,
    ) -> None:
        assert reply is None and hdr is None
        self.frames.append([(subject, data)])

    def forward_answers(self, account: Account, subjects: list[str], bodies: list[bytes]) -> None:
        self.frames.append(list(zip(subjects, bodies, strict=True)))

    def forward_run(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        raise AssertionError("not used for answers")


def _with_route() -> tuple[Router, Account, Sink, RouteSink]:
    router, acct, inbox, _ = _setup()
    route = RouteSink()
    # The peer's client inbox, and a wider interest of the same peer: one copy each.
    router.add_subscription(acct, Subscription(route, "_INBOX.r.*", None, "r1"))
    router.add_subscription(acct, Subscription(route, "_INBOX.>", None, "r2"))
    return router, acct, inbox, route


def test_answers_for_another_server_leave_in_one_frame_per_route_in_order() -> None:
    answers = [(f"_INBOX.r.{n}", b"%d" % n) for n in range(5)]
    answers += [("_INBOX.x.1", b"local"), ("_INBOX.r.9", b"last")]
    router, acct, inbox, route = _with_route()
    router.route_answers(acct, answers)
    ref_router, ref_acct, ref_inbox, ref_route = _with_route()
    for subject, data in answers:
        ref_router.route_message(None, ref_acct, subject, None, None, data)
    # The same messages reach the peer, in the same order, once each, in one frame.
    assert len(route.frames) == 1
    assert route.frames[0] == [m for f in ref_route.frames for m in f] == answers
    assert inbox.got == ref_inbox.got == [("1", "_INBOX.x.1", b"local")]
    assert acct.stats == ref_acct.stats


def test_answers_from_a_route_reach_local_plain_subscribers_only() -> None:
    router, acct, inbox, route = _with_route()
    subjects = ["_INBOX.x.7", "_INBOX.q.1", "_INBOX.r.1"]
    router.deliver_answers_from_route(acct, subjects, [b"a", b"b", b"c"])
    ref_router, ref_acct, ref_inbox, _ = _with_route()
    for subject, data in zip(subjects, [b"a", b"b", b"c"], strict=True):
        ref_router.deliver_from_route(ref_acct, subject, None, None, data, (), None)
    assert inbox.got == ref_inbox.got
    assert {g[0] for g in inbox.got} == {"1", "2"}
    assert route.frames == []  # never sent on to another server
    assert acct.stats == ref_acct.stats


class Once(Sink):
    """Unsubscribes its subscription (auto-unsubscribe after one message) on delivery."""

    def __init__(self, router: Router, acct: Account) -> None:
        super().__init__()
        self.router, self.acct = router, acct

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        super().deliver(sub, subject, reply, hdr, data)
        self.router.remove_subscription(self.acct, sub)
        return True


def test_answers_of_one_inbox_see_interest_change_midway() -> None:
    """Answers to one inbox are matched once, but a subscription removed while they are
    delivered is not handed the rest."""
    router, acct = Router(random.Random(1)), Account("A")
    once = Once(router, acct)
    router.add_subscription(acct, Subscription(once, "_INBOX.x.*", None, "1"))
    router.route_answers(acct, [(f"_INBOX.x.{n}", b"%d" % n) for n in range(5)])
    assert once.got == [("1", "_INBOX.x.0", b"0")]


class Full(Sink):
    """Records header blocks too."""

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        self.got.append((sub.sid, subject, (hdr or b"") + data))
        return True


def test_replies_to_one_subject_go_in_order_and_stop_when_nobody_listens() -> None:
    router, acct = Router(random.Random(1)), Account("A")
    inbox, queued = Full(), Full()
    router.add_subscription(acct, Subscription(inbox, "_INBOX.x.*", None, "1"))
    router.add_subscription(acct, Subscription(queued, "_INBOX.q.*", "grp", "3"))
    hdr = b"NATS/1.0\r\n\r\n"
    items: list[tuple[bytes | None, bytes]] = [(None, b"a"), (hdr, b"b")]
    assert router.route_replies(acct, "_INBOX.x.3", items) == 1
    assert inbox.got == [("1", "_INBOX.x.3", b"a"), ("1", "_INBOX.x.3", hdr + b"b")]
    assert router.route_replies(acct, "_INBOX.q.3", items) == 1  # a queue group: one by one
    assert queued.got == [("3", "_INBOX.q.3", b"a"), ("3", "_INBOX.q.3", hdr + b"b")]
    assert router.route_replies(acct, "_INBOX.gone.1", items) == 0
    assert acct.stats.in_msgs == 5  # the first message to nobody counted, the rest not sent
    assert acct.stats.out_msgs == 4
