"""Accounts, users and permissions, built from the config.

An account is a subject space: its own sublist. Users from ``authorization {}`` land in the
global account ``$G``; users listed under ``accounts { NAME { users = [...] } }`` land in NAME.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import bcrypt

from jetraft.config import ServerConfig
from jetraft.protocol.subjects import filters_overlap, is_subset, subject_matches
from jetraft.server.core.accounts import GLOBAL_ACCOUNT, Account


@dataclass(frozen=True, slots=True)
class SubjectRule:
    """Allow/deny lists for one direction. An empty allow list allows everything."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def permits_publish(self, subject: str) -> bool:
        if self.allow and not any(subject_matches(a, subject) for a in self.allow):
            return False
        return not any(subject_matches(d, subject) for d in self.deny)

    def permits_subscribe(self, filter_subject: str) -> bool:
        if self.allow and not any(is_subset(filter_subject, a) for a in self.allow):
            return False
        return not any(is_subset(filter_subject, d) for d in self.deny)

    def delivery_denied(self, filter_subject: str, subject: str) -> bool:
        """A wildcard subscription that overlaps a deny rule must not see the denied subjects."""
        return any(
            filters_overlap(filter_subject, d) and subject_matches(d, subject) for d in self.deny
        )


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: SubjectRule | None = None
    subscribe: SubjectRule | None = None
    # allow_responses: may publish to the reply subject of a received request this many times.
    responses_max: int = 0
    responses_expires_ns: int = 0


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password: str  # plain text or a bcrypt hash ("$2a$", "$2b$", "$2y$")
    account: Account
    permissions: Permissions | None = None
    token: str = ""


def _is_bcrypt(secret: str) -> bool:
    return secret.startswith(("$2a$", "$2b$", "$2y$"))


class Authenticator:
    """Decides who a CONNECT is. bcrypt checks are slow, so callers run them off the loop."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.accounts: dict[str, Account] = {GLOBAL_ACCOUNT: Account(GLOBAL_ACCOUNT)}
        self.users: dict[str, User] = {}
        self.token = ""
        self._verified: set[bytes] = set()
        for acc_cfg in cfg.accounts:
            acc = self.accounts.setdefault(acc_cfg.name, Account(acc_cfg.name))
            for u in acc_cfg.users:
                self.users[u.user] = User(u.user, u.password, acc, _perms(u.permissions))
        auth = cfg.authorization
        if auth is not None:
            glob = self.accounts[GLOBAL_ACCOUNT]
            if auth.user:
                self.users[auth.user] = User(auth.user, auth.password, glob)
            for u in auth.users:
                acc = self.accounts.get(u.account or GLOBAL_ACCOUNT, glob)
                self.users[u.user] = User(u.user, u.password, acc, _perms(u.permissions))
            self.token = auth.token
        self.system_account_name = cfg.system_account or ""
        self.no_auth_user = cfg.no_auth_user or ""
        if self.no_auth_user and self.no_auth_user not in self.users:
            raise ValueError(f"no_auth_user {self.no_auth_user!r} is not a configured user")
        # nats-server's reading of the seeds' config: when the only users are the system
        # account's (no other account, no authorization block, no no_auth_user), a client
        # without credentials lands in the global account; credentials are still checked.
        self.anonymous_global = (
            set(self.accounts) == {GLOBAL_ACCOUNT, self.system_account_name}
            and auth is None
            and not self.no_auth_user
        )

    @property
    def required(self) -> bool:
        return bool(self.users or self.token)

    def global_account(self) -> Account:
        return self.accounts[GLOBAL_ACCOUNT]

    def needs_slow_check(self, options: dict[str, Any]) -> bool:
        user = self.users.get(str(options.get("user", "")))
        return user is not None and _is_bcrypt(user.password)

    def authenticate(self, options: dict[str, Any]) -> User | Account | None:
        """Return the user (or, without auth, the global account) for a CONNECT, else None."""
        if not self.required:
            return self.global_account()
        name = options.get("user")
        token = options.get("auth_token")
        if self.token and isinstance(token, str):
            if hmac.compare_digest(token.encode(), self.token.encode()):
                return self.global_account()
            return None
        if isinstance(name, str) and name:
            user = self.users.get(name)
            password = options.get("pass", "")
            if user is None or not isinstance(password, str):
                return None
            return user if self._check(user.password, password) else None
        if self.no_auth_user and not token:
            return self.users[self.no_auth_user]
        if self.anonymous_global and token is None and not name:
            return self.global_account()
        return None

    def _check(self, secret: str, given: str) -> bool:
        if not _is_bcrypt(secret):
            return hmac.compare_digest(secret.encode(), given.encode())
        # Cache successful checks by a digest of (hash, password): reconnect storms would
        # otherwise cost ~0.2 s of CPU each at bcrypt cost 11.
        key = hashlib.sha256(secret.encode() + b"\0" + given.encode()).digest()
        if key in self._verified:
            return True
        try:
            ok = bcrypt.checkpw(given.encode(), secret.encode())
        except ValueError:
            return False
        if ok:
            self._verified.add(key)
        return ok


def _perms(cfg: Any) -> Permissions | None:
    if cfg is None:
        return None
    pub = _rule(getattr(cfg, "publish", None))
    sub = _rule(getattr(cfg, "subscribe", None))
    resp = getattr(cfg, "allow_responses", None)
    if resp is None:
        return Permissions(pub, sub)
    if pub is None:
        # allow_responses without publish rules: the user may publish replies and nothing else.
        pub = SubjectRule(deny=(">",))
    return Permissions(pub, sub, max(int(resp.max_msgs), 1), int(resp.expires_ns))


def _rule(cfg: Any) -> SubjectRule | None:
    if cfg is None:
        return None
    return SubjectRule(tuple(cfg.allow), tuple(cfg.deny))
