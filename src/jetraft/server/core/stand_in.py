"""Owners of subscriptions that stand for interest elsewhere on this server (an account
import's forwarders, the ``$SYS.REQ.USER.INFO`` responder).

They say ``is_route``, so they get what a route gets: only messages that entered at this
server (one that came over a route was handled by the server it entered at), handed over
once each through the route methods, and their subscriptions are not announced to the
other servers. A subclass says what ``forward`` does with one message; runs of client
publishes and stretches of answers come to it one message at a time unless it overrides
``forward_runs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from jetraft.protocol.client import PubBatch, split_body
from jetraft.server.core.accounts import Account, Subscription


class StandIn:
    closed = False
    is_route = True
    frames_answers = False

    def forward(
        self,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        queues: Sequence[str],
        route_by: str | None,
    ) -> None:
        raise NotImplementedError

    def forward_run(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        self.forward_runs(account, batch, first, stop)

    def forward_runs(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        for line, body in batch.messages(first, stop):
            hdr, data = split_body(line, body)
            self.forward(account, line[0], line[1], hdr, data, (), None)

    def forward_answers(self, account: Account, subjects: list[str], bodies: list[bytes]) -> None:
        for subject, data in zip(subjects, bodies, strict=True):
            self.forward(account, subject, None, None, data, (), None)

    # As a Subscriber: never called for a route-like owner; nothing delivered.
    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        return False

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        return 0

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        return 0, 0

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        return 0, 0
