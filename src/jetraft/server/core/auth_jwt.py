"""Operator mode: clients prove themselves with a user JWT and a signature of the nonce.

The chain a user JWT must satisfy, as nats-server checks it: the JWT is well formed and
signed by its issuer; it has not expired and is already valid; the issuer is the account
itself or one of its signing keys (``issuer_account`` names the account then); that account
was preloaded and its JWT is signed by a trusted operator key and has not expired; the account
is pinned when pinning is configured; the user is not revoked and needs no trusted proxy
(jetraft has none); the connection type, source address and connect times allow it; and,
unless the JWT is a bearer token the account accepts, CONNECT's ``sig`` is the user key's
signature of the INFO nonce. The user's
permissions come from the JWT (or the signing key's scope template, or the account's default
permissions); its subscription and payload limits from the JWT and the account.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jetraft.config import OperatorConfig
from jetraft.config import jwt as nats_jwt
from jetraft.server.core.accounts import Account
from jetraft.server.core.identity import (
    CONNECTION_TYPE,
    ConnectInfo,
    Permissions,
    SubjectRule,
    User,
    check_signature,
)

log = logging.getLogger("jetraft.auth")

_DEFAULT_RESPONSE_TTL_NS = 120 * 1_000_000_000
_UNLIMITED = 1 << 62
_KNOWN_CONNECTION_TYPES = {
    "STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS",
}


@dataclass(slots=True)
class JwtAccount:
    """A preloaded account: its JWT's claims and the subject space it stands for."""

    claims: nats_jwt.Claims
    account: Account
    trusted: bool
    signing_keys: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    revocations: dict[str, int] = field(default_factory=dict)
    default_permissions: Permissions | None = None

    @property
    def limits(self) -> dict[str, Any]:
        value = self.claims.nats.get("limits")
        return value if isinstance(value, dict) else {}


class OperatorAuthority:
    """Accounts from ``resolver_preload`` and the user-JWT check against them."""

    def __init__(
        self, cfg: OperatorConfig, accounts: dict[str, Account], clock: Callable[[], float]
    ) -> None:
        self.trusted = set(cfg.trusted_keys)
        self.pinned = set(cfg.pinned_accounts)
        self.clock = clock
        self.accounts: dict[str, JwtAccount] = {}
        for key, token in cfg.accounts:
            claims = nats_jwt.decode(token, "account")  # checked by the config already
            trusted = claims.issuer in self.trusted
            if not trusted:
                log.warning("account %s is not signed by a trusted operator; its users will "
                            "be refused", key)
            acc = accounts.setdefault(key, Account(key))
            revocations = claims.nats.get("revocations") or {}
            self.accounts[key] = JwtAccount(
                claims, acc, trusted, nats_jwt.signing_keys(claims),
                {str(k): int(v) for k, v in revocations.items()},
                permissions_from_jwt(claims.nats.get("default_permissions") or {}),
            )

    def authenticate(self, options: dict[str, Any], info: ConnectInfo) -> User | None:
        token = options.get("jwt")
        if not isinstance(token, str) or not token:
            return None
        try:
            user = nats_jwt.decode(token, "user")
        except nats_jwt.JwtError as exc:
            log.debug("user JWT not valid: %s", exc)
            return None
        now = self.clock()
        if user.expired(now) or user.not_yet_valid(now):
            return None
        issuer_account = str(user.nats.get("issuer_account", "") or "")
        entry = self.accounts.get(issuer_account or user.issuer)
        if entry is None or not entry.trusted:
            return None
        if self.pinned and entry.claims.subject not in self.pinned:
            return None
        if entry.claims.expired(now):
            return None
        nats = self._effective_claims(entry, user)
        if nats is None:
            return None
        if nats.get("bearer_token"):
            if entry.limits.get("disallow_bearer"):
                return None
        elif not check_signature(user.subject, info.nonce, options.get("sig")):
            return None
        if _revoked(entry.revocations, user.subject, user.issued_at):
            return None
        if nats.get("proxy_required"):
            return None  # only through a trusted proxy, and jetraft has no proxy support
        if not _connection_type_ok(nats.get("allowed_connection_types")):
            return None
        if not _source_ok(nats.get("src"), info.client_ip):
            return None
        if not _times_ok(nats.get("times"), nats.get("times_location"), now):
            return None
        return self._user(entry, user, nats)

    def _effective_claims(
        self, entry: JwtAccount, user: nats_jwt.Claims
    ) -> dict[str, Any] | None:
        """The user's permissions and limits: its own, or a scoped signing key's template."""
        if user.issuer == entry.claims.subject:
            return user.nats
        if user.issuer not in entry.signing_keys:
            return None
        scope = entry.signing_keys[user.issuer]
        if scope is None:
            return user.nats
        if _has_permissions_or_limits(user.nats):
            return None  # a scoped signer's users carry no permissions of their own
        template = scope.get("template")
        template = dict(template) if isinstance(template, dict) else {}
        if "{{" in repr(template):
            return None  # templated permissions ({{name()}}...) are not implemented
        return {**user.nats, **template}

    def _user(
        self, entry: JwtAccount, user: nats_jwt.Claims, nats: dict[str, Any]
    ) -> User:
        perms = permissions_from_jwt(nats)
        if perms is None:
            perms = entry.default_permissions
        expiries = [(float(user.expires), "User Authentication Expired")]
        if entry.claims.expires:
            expiries.append((float(entry.claims.expires), "Account Authentication Expired"))
        expires = min((e for e in expiries if e[0] > 0), default=(0.0, ""))
        return User(
            name=user.subject, password="", account=entry.account, permissions=perms,
            nkey=user.subject,
            expires_at_s=expires[0], expired_text=expires[1] or "User Authentication Expired",
            max_subscriptions=_min_limit(
                _limit(user, nats, "subs"), _limit(entry.claims, entry.limits, "subs")
            ),
            max_payload=_min_limit(
                _limit(user, nats, "payload"), _limit(entry.claims, entry.limits, "payload")
            ),
        )

    def account_connection_limit(self, account: Account) -> int:
        """The account JWT's ``conn`` limit, -1 for none."""
        entry = self.accounts.get(account.name)
        if entry is None:
            return -1
        return _min_limit(_limit(entry.claims, entry.limits, "conn"))


def permissions_from_jwt(nats: dict[str, Any]) -> Permissions | None:
    """``pub``/``sub``/``resp`` of a user JWT (or an account's default permissions)."""
    pub = _rule(nats.get("pub"))
    sub = _rule(nats.get("sub"))
    resp = nats.get("resp")
    if pub is None and sub is None and not isinstance(resp, dict):
        return None
    if not isinstance(resp, dict):
        return Permissions(pub, sub)
    if pub is None or not pub.allow:
        # As for config users: responses only, unless publish rules allow more.
        pub = SubjectRule(allow=(), deny=(">",) + (pub.deny if pub else ()))
    # nats-server's defaults for 0: one response within two minutes; negative: unlimited.
    max_msgs = int(resp.get("max", 0) or 0) or 1
    expires_ns = int(resp.get("ttl", 0) or 0) or _DEFAULT_RESPONSE_TTL_NS
    return Permissions(pub, sub, max_msgs if max_msgs > 0 else _UNLIMITED, max(expires_ns, 0))


def _rule(value: object) -> SubjectRule | None:
    if not isinstance(value, dict):
        return None
    allow = tuple(str(s) for s in value.get("allow") or ())
    deny = tuple(str(s) for s in value.get("deny") or ())
    return SubjectRule(allow, deny) if allow or deny else None


def _has_permissions_or_limits(nats: dict[str, Any]) -> bool:
    for key in ("pub", "sub"):
        value = nats.get(key)
        if isinstance(value, dict) and (value.get("allow") or value.get("deny")):
            return True
    if nats.get("resp") or nats.get("src") or nats.get("times") or nats.get("bearer_token"):
        return True
    # nats-server compares with the zero value: even "no limit" (-1) is a limit set here.
    return any(nats.get(k) not in (None, 0) for k in ("subs", "data", "payload"))


def _limit(claims: nats_jwt.Claims, fields: dict[str, Any], key: str) -> int:
    """A NATS limit of a claim; -1 is none. A missing one reads as 0 in version 2 claims (Go
    decodes the absent field as zero, and nats-server enforces it), and as no limit in
    version 1 claims (their decoder starts from no limits)."""
    value = fields.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return -1 if claims.version < 2 else 0


def _min_limit(*values: int) -> int:
    limits = [v for v in values if v >= 0]
    return min(limits) if limits else -1


def _revoked(revocations: dict[str, int], key: str, issued_at: int) -> bool:
    for name in (key, "*"):
        at = revocations.get(name)
        if at is not None and issued_at <= at:
            return True
    return False


def _connection_type_ok(value: object) -> bool:
    """Allowed when unset; refused when no listed type is known (nats-server's reading)."""
    if not value:
        return True
    types = {str(t).upper() for t in value} if isinstance(value, list) else set()
    return CONNECTION_TYPE in (types & _KNOWN_CONNECTION_TYPES)


def _source_ok(value: object, client_ip: str) -> bool:
    if not value:
        return True
    cidrs = value.split(",") if isinstance(value, str) else value
    if not isinstance(cidrs, list) or not client_ip:
        return False
    try:
        ip = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    for cidr in cidrs:
        try:
            if ip in ipaddress.ip_network(str(cidr).strip(), strict=False):
                return True
        except ValueError:
            return False
    return False


def _times_ok(value: object, location: object, now: float) -> bool:
    """Connect time windows (``HH:MM:SS`` start and end, in ``times_location``)."""
    if not value:
        return True
    if not isinstance(value, list):
        return False
    try:
        zone = ZoneInfo(str(location)) if location else None
    except (ZoneInfoNotFoundError, ValueError):
        return False
    current = datetime.fromtimestamp(now, zone).time() if zone else datetime.fromtimestamp(
        now).time()
    for window in value:
        if not isinstance(window, dict):
            return False
        try:
            start = datetime.strptime(str(window.get("start")), "%H:%M:%S").time()
            end = datetime.strptime(str(window.get("end")), "%H:%M:%S").time()
        except ValueError:
            return False
        inside = start <= current <= end if start <= end else current >= start or current <= end
        if inside:
            return True
    return False
