"""Router.route_answers (the PubAcks of one commit) delivers as route_message does."""

from __future__ import annotations

import random

from jetraft.protocol.client import PubBatch
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.router import Router


class Sink:
    """A subscriber that records what it is given."""

    closed = False
    is_route = False

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
