"""Operator mode (decentralised JWT auth): ``operator``, ``trusted_keys``, ``resolver``,
``resolver_preload``, ``resolver_pinned_accounts`` -> OperatorConfig.

jetraft implements the MEMORY resolver: every account JWT is given in ``resolver_preload``
(what nats.py's own tests use). Operator and account JWTs are decoded and their signatures
checked here, so a broken one stops the server at its position in the file. An account JWT
asking for something jetraft cannot honour (imports, subject mappings, external
authorization, tiered JetStream limits) refuses to start; exports only ever grant access to
others, and nsc puts some on every system account, so they are ignored with a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from jetraft.config import jwt
from jetraft.config.errors import ConfigError
from jetraft.config.model import AccountConfig, AccountJetStreamConfig, OperatorConfig
from jetraft.config.nkey import PREFIX_ACCOUNT, PREFIX_OPERATOR, is_public
from jetraft.config.syntax import Node
from jetraft.config.values import Ctx, as_list, as_map, as_str, fail, refuse

OPERATOR_KEYS = ("operator", "operators", "root", "roots", "root_operator", "root_operators")
TRUSTED_KEYS = ("trusted", "trusted_keys")
RESOLVER_KEYS = ("resolver", "account_resolver", "accounts_resolver")
_REFUSED_ACCOUNT_CLAIMS = {
    "imports": "account imports", "mappings": "subject mappings",
    "tiered_limits": "tiered JetStream limits",
}


@dataclass(slots=True)
class OperatorNodes:
    """The operator-mode keys met at the top level, built once all are known."""

    operators: list[Node] = field(default_factory=list)
    trusted: list[Node] = field(default_factory=list)
    resolver: Node | None = None
    preload: Node | None = None
    pinned: Node | None = None

    def add(self, k: str, node: Node) -> bool:
        if k in OPERATOR_KEYS:
            self.operators.append(node)
        elif k in TRUSTED_KEYS:
            self.trusted.append(node)
        elif k in RESOLVER_KEYS:
            self.resolver = node
        elif k == "resolver_preload":
            self.preload = node
        elif k == "resolver_pinned_accounts":
            self.pinned = node
        else:
            return False
        return True

    def any(self) -> bool:
        return bool(self.operators or self.trusted or self.resolver or self.preload)


def _strings(node: Node, name: str) -> list[Node]:
    return [node] if isinstance(node.value, str) else as_list(node, name)


def _read_operator(item: Node, base_dir: str) -> jwt.Claims:
    """An operator JWT: a file path (relative to the config file) or the JWT inline."""
    text = as_str(item, "operator")
    if not text.startswith("eyJ"):
        path = text if os.path.isabs(text) else os.path.join(base_dir, text)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise fail(item, f"error reading operator JWT {path!r}: {exc.strerror}") from None
    try:
        return jwt.decode(jwt.undecorate(text), "operator")
    except jwt.JwtError as exc:
        raise fail(item, f"operator JWT not valid: {exc}") from None


def build_operator(
    nodes: OperatorNodes, ctx: Ctx, base_dir: str, system_account: Node | None
) -> tuple[OperatorConfig, tuple[AccountConfig, ...], str]:
    """(operator config, accounts whose JWT enables JetStream, system account or "")."""
    operators = [_read_operator(i, base_dir) for n in nodes.operators for i in _strings(n, "op")]
    trusted: list[str] = []
    for node in nodes.trusted:
        for item in _strings(node, "trusted_keys"):
            key = as_str(item, "trusted_keys")
            if not is_public(key, PREFIX_OPERATOR):
                raise fail(item, f"trust key {key!r} required to be a valid public operator "
                                 "nkey")
            trusted.append(key)
    if operators and trusted:
        raise fail(nodes.trusted[0], "conflicting options for 'TrustedKeys' and "
                                     "'TrustedOperators'")
    for op in operators:
        if not op.nats.get("strict_signing_key_usage"):
            trusted.append(op.subject)
        trusted.extend(jwt.signing_keys(op))
    first = next(n for n in (*nodes.operators, *nodes.trusted, nodes.resolver, nodes.preload)
                 if n is not None)
    if nodes.resolver is None:
        raise fail(first, "operators require an account resolver to be configured")
    _check_resolver(nodes.resolver)
    system = _system_account(operators, system_account)
    accounts = _preload(nodes.preload, ctx) if nodes.preload is not None else ()
    pinned = _pinned(nodes.pinned, system) if nodes.pinned is not None else ()
    trusted_set = set(trusted)
    js_accounts = tuple(
        AccountConfig(key, jetstream=_jetstream(claims))
        for key, claims in accounts
        if claims.issuer in trusted_set and _jetstream(claims) is not None
    )
    cfg = OperatorConfig(
        operators=tuple(op.token for op in operators), trusted_keys=tuple(trusted),
        accounts=tuple((key, claims.token) for key, claims in accounts), pinned_accounts=pinned,
    )
    return cfg, js_accounts, system


def _check_resolver(node: Node) -> None:
    value = node.value
    kind = value if isinstance(value, str) else ""
    if isinstance(value, dict):
        members = as_map(node, "resolver")
        kind_node = next((v for k, v in members.items() if k.lower() == "type"), None)
        kind = as_str(kind_node, "resolver.type") if kind_node is not None else "full"
    if kind.strip().upper() != "MEMORY":
        raise refuse("resolver", node, "only the MEMORY resolver with resolver_preload is "
                                       "implemented")


def _system_account(operators: list[jwt.Claims], node: Node | None) -> str:
    from_jwt = [str(op.nats.get("system_account", "")) for op in operators]
    configured = as_str(node, "system_account") if node is not None else ""
    if configured:
        if any(from_jwt) and configured not in from_jwt:
            assert node is not None
            raise fail(node, "system_account in config and operator JWT must be identical")
        return configured
    return next((s for s in from_jwt if s), "")


def _preload(node: Node, ctx: Ctx) -> tuple[tuple[str, jwt.Claims], ...]:
    out: list[tuple[str, jwt.Claims]] = []
    for key, child in as_map(node, "resolver_preload").items():
        if child.used:
            continue
        if not is_public(key, PREFIX_ACCOUNT):
            raise ConfigError(f"preload account error for {key!r}: not a public account nkey",
                              child.key_pos or child.pos)
        try:
            claims = jwt.decode(jwt.undecorate(as_str(child, key)), "account")
        except jwt.JwtError as exc:
            raise fail(child, f"preload account error for {key!r}: {exc}") from None
        if claims.subject != key:
            raise fail(child, f"preload account error for {key!r}: the JWT is for account "
                              f"{claims.subject!r}")
        for claim, what in _REFUSED_ACCOUNT_CLAIMS.items():
            if claims.nats.get(claim):
                raise refuse(f"{claim} in the account JWT of {key}", child, what)
        external = claims.nats.get("authorization") or {}
        if isinstance(external, dict) and external.get("auth_users"):
            raise refuse(f"authorization in the account JWT of {key}", child,
                         "authorization callouts")
        if claims.nats.get("exports"):
            ctx.warn(child.pos, f"exports in the account JWT of {key} are ignored (jetraft has "
                                "no imports)")
        out.append((key, claims))
    return tuple(out)


def _pinned(node: Node, system: str) -> tuple[str, ...]:
    keys: list[str] = []
    for item in _strings(node, "resolver_pinned_accounts"):
        key = as_str(item, "resolver_pinned_accounts")
        if not is_public(key, PREFIX_ACCOUNT):
            raise fail(item, f"pinned account key {key!r} is not a valid public account nkey")
        keys.append(key)
    if system and keys:
        keys.append(system)  # the operator's system account may always connect
    return tuple(keys)


def _jetstream(claims: jwt.Claims) -> AccountJetStreamConfig | None:
    """nats-server's reading: JetStream is on when memory or disk storage is not 0."""
    limits = claims.nats.get("limits") or {}
    if not isinstance(limits, dict):
        return None
    mem, disk = _num(limits, "mem_storage"), _num(limits, "disk_storage")
    if mem == 0 and disk == 0:
        return None

    def unlimited(value: int) -> int:
        return value if value > 0 else -1

    return AccountJetStreamConfig(
        max_memory=mem, max_store=disk,
        max_streams=unlimited(_num(limits, "streams")),
        max_consumers=unlimited(_num(limits, "consumer")),
        max_ack_pending=unlimited(_num(limits, "max_ack_pending")),
        memory_max_stream_bytes=unlimited(_num(limits, "mem_max_stream_bytes")),
        store_max_stream_bytes=unlimited(_num(limits, "disk_max_stream_bytes")),
        max_bytes_required=bool(limits.get("max_bytes_required", False)),
    )


def _num(limits: dict[str, object], key: str) -> int:
    value = limits.get(key, 0)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
