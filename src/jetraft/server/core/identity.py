"""Identities and permissions: what a connection is allowed once authenticated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jetraft.config.nkey import decode_signature, verify
from jetraft.protocol.subjects import filters_overlap, is_subset, subject_matches
from jetraft.server.core.accounts import Account


@dataclass(frozen=True, slots=True)
class SubjectRule:
    """Allow/deny lists for one direction. An empty allow list allows everything."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def permits_publish(self, subject: str) -> bool:
        if self.allow and not any(subject_matches(a, subject) for a in self.allow):
            return False
        return not any(subject_matches(d, subject) for d in self.deny)

    def permits_subscribe(self, filter_subject: str, queue: str | None = None) -> bool:
        # An entry "subject queue" speaks only of queue subscriptions in that group. As in
        # nats-server: in the allow list, such entries covering the subject decide alone for
        # a queue subscription; in the deny list, a plain entry denies every subscription
        # and a queue entry denies its group's.
        if self.allow:
            plain, groups = _covering(self.allow, filter_subject)
            allowed = _group_listed(queue, groups) if queue and groups else plain
            if not allowed:
                return False
        plain, groups = _covering(self.deny, filter_subject)
        return not (plain or (bool(queue) and _group_listed(queue, groups)))

    def delivery_denied(self, filter_subject: str, subject: str) -> bool:
        """A wildcard subscription that overlaps a deny rule must not see the denied subjects."""
        return any(
            filters_overlap(filter_subject, d) and subject_matches(d, subject) for d in self.deny
        )


def _covering(entries: tuple[str, ...], filter_subject: str) -> tuple[bool, list[str]]:
    """Of ``entries`` (subjects, or "subject queue"), those that take in this subscription's
    subject: whether a plain one does, and the queue groups the others name."""
    plain = False
    groups: list[str] = []
    for entry in entries:
        subject, _, group = entry.partition(" ")
        if not is_subset(filter_subject, subject):
            continue
        if group:
            groups.append(group.strip())
        else:
            plain = True
    return plain, groups


def _group_listed(queue: str | None, groups: list[str]) -> bool:
    return bool(queue) and any(
        queue == g or (_has_wildcard(g) and subject_matches(g, str(queue))) for g in groups
    )


def _has_wildcard(name: str) -> bool:
    return any(tok in ("*", ">") for tok in name.split("."))


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: SubjectRule | None = None
    subscribe: SubjectRule | None = None
    # allow_responses: may publish to the reply subject of a received request this many times.
    responses_max: int = 0
    responses_expires_ns: int = 0


@dataclass(frozen=True, slots=True)
class User:
    """Who a connection is once authenticated.

    ``name`` is the user name, or the public nkey of nkey and JWT users. ``expires_at_s`` (Unix
    seconds, 0 = never) closes the connection when reached, with ``expired_text`` as the
    -ERR. ``max_subscriptions``/``max_payload`` -1 mean no limit of the user's own (the
    server-wide ones still hold).
    """

    name: str
    password: str  # plain text or a bcrypt hash ("$2a$", "$2b$", "$2y$")
    account: Account
    permissions: Permissions | None = None
    token: str = ""
    nkey: str = ""
    connection_types: tuple[str, ...] = ()
    expires_at_s: float = 0.0
    expired_text: str = "User Authentication Expired"
    max_subscriptions: int = -1
    max_payload: int = -1


@dataclass(frozen=True, slots=True)
class ConnectInfo:
    """What authentication needs besides the CONNECT options: the nonce sent in INFO, the
    client's certificate when TLS gave one (DER), and its address."""

    nonce: bytes = b""
    peer_cert: bytes | None = None
    client_ip: str = ""


# The only kind of connection jetraft serves (nats-server's name for plain NATS clients).
CONNECTION_TYPE = "STANDARD"


def check_signature(public_key: str, nonce: bytes, sig: object) -> bool:
    """CONNECT ``sig``: the client's signature of the INFO nonce with the key ``public_key``."""
    if not isinstance(sig, str) or not sig or not nonce:
        return False
    raw = decode_signature(sig)
    return raw is not None and verify(public_key, nonce, raw)


def allowed(user: User) -> User | None:
    """The user, unless its allowed connection types exclude plain NATS clients."""
    if user.connection_types and CONNECTION_TYPE not in user.connection_types:
        return None
    return user


def perms_from_config(cfg: Any) -> Permissions | None:
    if cfg is None:
        return None
    pub = rule_from_config(getattr(cfg, "publish", None))
    sub = rule_from_config(getattr(cfg, "subscribe", None))
    resp = getattr(cfg, "allow_responses", None)
    if resp is None:
        return Permissions(pub, sub)
    if pub is None:
        # allow_responses without publish rules: the user may publish replies and nothing else.
        pub = SubjectRule(deny=(">",))
    return Permissions(pub, sub, max(int(resp.max_msgs), 1), int(resp.expires_ns))


def rule_from_config(cfg: Any) -> SubjectRule | None:
    if cfg is None:
        return None
    return SubjectRule(tuple(cfg.allow), tuple(cfg.deny))
