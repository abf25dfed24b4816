"""Authentication: who a CONNECT is, from the config's users, nkeys, token or operator mode.

An account is a subject space: its own sublist. Users from ``authorization {}`` land in the
global account ``$G``; users listed under ``accounts { NAME { users = [...] } }`` land in NAME.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any

import bcrypt

from jetraft.config import ServerConfig, UserConfig
from jetraft.server.core.accounts import GLOBAL_ACCOUNT, Account
from jetraft.server.core.auth_jwt import OperatorAuthority
from jetraft.server.core.identity import (
    ConnectInfo,
    Permissions,
    SubjectRule,
    User,
    allowed,
    check_signature,
    perms_from_config,
)
from jetraft.server.core.mappings import build_mapper
from jetraft.server.core.tls import map_certificate

__all__ = ["Authenticator", "ConnectInfo", "Permissions", "SubjectRule", "User"]


def _is_bcrypt(secret: str) -> bool:
    return secret.startswith(("$2a$", "$2b$", "$2y$"))


def password_matches(secret: str, given: str, verified: set[bytes]) -> bool:
    """Does ``given`` match ``secret`` (plain text or a bcrypt hash)? Successful bcrypt
    checks are remembered in ``verified`` by a digest of (hash, password): reconnect
    storms would otherwise cost ~0.2 s of CPU each at bcrypt cost 11."""
    if not _is_bcrypt(secret):
        return hmac.compare_digest(secret.encode(), given.encode())
    key = hashlib.sha256(secret.encode() + b"\0" + given.encode()).digest()
    if key in verified:
        return True
    try:
        ok = bcrypt.checkpw(given.encode(), secret.encode())
    except ValueError:
        return False
    if ok:
        verified.add(key)
    return ok


class Authenticator:
    """Decides who a CONNECT is. bcrypt checks are slow, so callers run them off the loop.

    The order is nats-server's: a user JWT in operator mode; else an nkey; else a user (by the
    client certificate with ``verify_and_map``, else by name); else the token; the
    ``no_auth_user`` stands in for a CONNECT without credentials.
    """

    def __init__(self, cfg: ServerConfig, clock: Callable[[], float] = time.time) -> None:
        self.accounts: dict[str, Account] = {GLOBAL_ACCOUNT: Account(GLOBAL_ACCOUNT)}
        self.users: dict[str, User] = {}
        self.nkeys: dict[str, User] = {}
        self.token = ""
        self._verified: set[bytes] = set()
        self._clock = clock
        cluster = cfg.cluster.name if cfg.cluster is not None else ""
        self.accounts[GLOBAL_ACCOUNT].mapper = build_mapper(cfg.mappings, cluster)
        for acc_cfg in cfg.accounts:
            acc = self.accounts.setdefault(acc_cfg.name, Account(acc_cfg.name))
            if acc_cfg.mappings:
                acc.mapper = build_mapper(acc_cfg.mappings, cluster)
            for u in acc_cfg.users:
                self._add_user(u, acc)
        auth = cfg.authorization
        if auth is not None:
            glob = self.accounts[GLOBAL_ACCOUNT]
            if auth.user:
                self.users[auth.user] = User(auth.user, auth.password, glob)
            for u in auth.users:
                self._add_user(u, self.accounts.get(u.account or GLOBAL_ACCOUNT, glob))
            self.token = auth.token
        self.operator: OperatorAuthority | None = None
        if cfg.operator is not None:
            self.operator = OperatorAuthority(cfg.operator, self.accounts, clock)
        self.system_account_name = cfg.system_account or ""
        # The system account exists even when no config block names it (nats-server's
        # default "$SYS"): server requests and cluster traffic use it; nobody can log in to
        # it without a user of its own. ``no_system_account`` leaves the name empty.
        if self.system_account_name:
            self.accounts.setdefault(self.system_account_name, Account(self.system_account_name))
        self.no_auth_user = cfg.no_auth_user or ""
        if self.no_auth_user and not (
            self.no_auth_user in self.users or self.no_auth_user in self.nkeys
        ):
            raise ValueError(f"no_auth_user {self.no_auth_user!r} is not a configured user")
        tls = cfg.tls
        self.tls_map = tls is not None and tls.verify_and_map
        # nats-server's reading of the seeds' config: when the only users are the system
        # account's (no other account, no authorization block, no no_auth_user), a client
        # without credentials lands in the global account; credentials are still checked.
        self.anonymous_global = (
            set(self.accounts) == {GLOBAL_ACCOUNT, self.system_account_name}
            and auth is None
            and not self.no_auth_user
            and self.operator is None
        )

    def _add_user(self, u: UserConfig, acc: Account) -> None:
        user = User(
            u.identity, u.password, acc, perms_from_config(u.permissions), nkey=u.nkey,
            connection_types=u.connection_types,
        )
        (self.nkeys if u.nkey else self.users)[u.identity] = user

    @property
    def required(self) -> bool:
        return bool(self.users or self.nkeys or self.token or self.operator)

    @property
    def nonce_required(self) -> bool:
        """INFO carries a ``nonce`` for clients to sign (nkey users or operator mode)."""
        return bool(self.nkeys or self.operator)

    def account_connection_limit(self, account: Account) -> int:
        """Active connections the account allows (its JWT's ``conn``), -1 for no limit."""
        if self.operator is None:
            return -1
        return self.operator.account_connection_limit(account)

    def global_account(self) -> Account:
        return self.accounts[GLOBAL_ACCOUNT]

    def needs_slow_check(self, options: dict[str, Any]) -> bool:
        if self.operator is not None or self.tls_map or options.get("nkey"):
            return False
        user = self.users.get(str(options.get("user", "")))
        return user is not None and _is_bcrypt(user.password)

    def authenticate(
        self, options: dict[str, Any], info: ConnectInfo | None = None
    ) -> User | Account | None:
        """Return the user (or, without auth, the global account) for a CONNECT, else None."""
        if not self.required:
            return self.global_account()
        info = info or ConnectInfo()
        if self.operator is not None:
            return self.operator.authenticate(options, info)
        anonymous = not any(options.get(k) for k in ("user", "pass", "auth_token", "nkey"))
        if self.nkeys:
            key = options.get("nkey")
            if anonymous and self.no_auth_user in self.nkeys:
                return allowed(self.nkeys[self.no_auth_user])
            if isinstance(key, str) and key:
                user = self.nkeys.get(key)
                if user is None or not check_signature(key, info.nonce, options.get("sig")):
                    return None
                return allowed(user)
        if self.users:
            if self.tls_map:
                return self._by_certificate(info)
            name = options.get("user")
            if anonymous and self.no_auth_user in self.users:
                return allowed(self.users[self.no_auth_user])
            if isinstance(name, str) and name:
                user = self.users.get(name)
                password = options.get("pass", "")
                if user is None or not isinstance(password, str):
                    return None
                return allowed(user) if self._check(user.password, password) else None
        if anonymous and self.anonymous_global:
            return self.global_account()
        token = options.get("auth_token")
        if (
            self.token
            and isinstance(token, str)
            and hmac.compare_digest(token.encode(), self.token.encode())
        ):
            return self.global_account()
        return None

    def _by_certificate(self, info: ConnectInfo) -> User | None:
        """``verify_and_map``: the client certificate names the user; CONNECT's user and
        password play no part (nats-server ignores them too)."""
        if info.peer_cert is None:
            return None
        users = self.users
        name = map_certificate(info.peer_cert, users.__contains__, list(users))
        return allowed(users[name]) if name else None

    def _check(self, secret: str, given: str) -> bool:
        return password_matches(secret, given, self._verified)
