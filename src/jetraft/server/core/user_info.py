"""``$SYS.REQ.USER.INFO``: any client may ask the server who it is (its user, account and
permissions), as nats-server answers through a service import every account has from the
system account (nats.js's ``nc.context()``).

The answer needs the requester, which a subscriber is not told; the requester is the local
client that listens on the request's reply subject (its inbox). So the responder stands in
every account as a route-like owner: it is handed only messages that entered at this server
(a request that came over a route was answered by the server its client is on), and its
subscriptions are not announced to the other servers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.identity import Permissions, SubjectRule, User
from jetraft.server.core.router import Router
from jetraft.server.core.stand_in import StandIn

SUBJECT = "$SYS.REQ.USER.INFO"


def _rule(rule: SubjectRule | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if rule is not None and rule.allow:
        out["allow"] = list(rule.allow)
    if rule is not None and rule.deny:
        out["deny"] = list(rule.deny)
    return out


def public_permissions(perms: Permissions) -> dict[str, Any]:
    """A user's permissions as nats-server shows them."""
    out: dict[str, Any] = {"publish": _rule(perms.publish), "subscribe": _rule(perms.subscribe)}
    if perms.responses_max:
        out["responses"] = {"max": perms.responses_max, "ttl": perms.responses_expires_ns}
    return out


def user_info(account: Account, user: User | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "user": user.name if user is not None else "",
        "account": account.name,
        "account_name": account.name,  # nats-server's name tag: a JWT's name, else the name
    }
    if user is not None and user.permissions is not None:
        data["permissions"] = public_permissions(user.permissions)
    if user is not None and user.expires_at_s:
        left_ns = int((user.expires_at_s - time.time()) * 1e9)  # a Go duration, as nats-server
        if left_ns > 0:
            data["expires"] = left_ns
    return data


class UserInfoResponder(StandIn):
    """Answers in every account (see the module doc, and ``StandIn``)."""

    def __init__(self, router: Router, server_info: Callable[[], dict[str, Any]]) -> None:
        self.router = router
        self.server_info = server_info

    def install(self, account: Account) -> None:
        self.router.add_subscription(account, Subscription(self, SUBJECT, None, "user-info"))

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
        if not reply or route_by is not None:
            return
        asker = next(
            (
                s.conn
                for s in account.sublist.match(reply).plain
                if not s.conn.is_route and hasattr(s.conn, "user")
            ),
            None,
        )
        if asker is None:
            return  # no client of this server listens for the answer
        body = {
            "server": self.server_info(),
            "data": user_info(account, getattr(asker, "user", None)),
        }
        self.router.route_message(None, account, reply, None, None, json.dumps(body).encode())
