"""``authorization {}``, ``accounts {}``, users and permissions -> typed values.

Follows nats-server's opts.go readings (aliases such as pass/password, the old
``publish = "subject"`` permission form, allow_responses defaults). One deliberate
difference in severity: unknown keys inside permissions are errors, not warnings,
because a misspelled ``publsh`` would otherwise silently grant everything
(nats-server also rejects them).
"""

from __future__ import annotations

from dataclasses import replace

from jetraft.config.build_imports import build_exports, build_imports, check_imports
from jetraft.config.build_mappings import build_mappings
from jetraft.config.errors import ConfigError, Pos
from jetraft.config.model import (
    DEFAULT_RESPONSE_EXPIRES_NS,
    GLOBAL_ACCOUNT,
    AccountConfig,
    AccountExport,
    AccountImport,
    AccountJetStreamConfig,
    AuthorizationConfig,
    Permissions,
    ResponsePermission,
    SubjectMapping,
    SubjectPermission,
    UserConfig,
)
from jetraft.config.nkey import PREFIX_USER, is_public
from jetraft.config.syntax import Node
from jetraft.config.values import (
    Ctx,
    as_bool,
    as_duration_ns,
    as_int,
    as_list,
    as_map,
    as_seconds,
    as_size,
    as_str,
    as_str_list,
    check_subjects,
    describe,
    fail,
    refuse,
)

# Keys jetraft cannot honour that would leave a user, the auth block or an account with less
# protection (or other behaviour) than configured: refused, key -> what is missing.
_USER_REFUSED = {"proxy_required": "trusted proxies"}
_AUTH_REFUSED = {
    "auth_callout": "authorization callouts", "auth_hook": "authorization callouts",
    "proxy_required": "trusted proxies",
}
_ACCOUNT_REFUSED = {"limits": "account limits"}
_ACCOUNT_UNSUPPORTED = {"nkey", "msg_trace", "trace_dest"}
# nats-server's connection types; jetraft serves only STANDARD (plain NATS clients).
CONNECTION_TYPES = frozenset(
    {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS"}
)


class UserRegistry:
    """User names must be unique across the authorization block and all accounts."""

    def __init__(self) -> None:
        self.seen: dict[str, Pos] = {}

    def add(self, name: str, node: Node) -> None:
        first = self.seen.get(name)
        if first is not None:
            what = "nkey" if is_public(name, PREFIX_USER) else "user"
            raise fail(node, f"duplicate {what} {name!r} (first defined at {first})")
        self.seen[name] = node.pos


def _key_error(key: str, node: Node, message: str) -> ConfigError:
    return ConfigError(message, node.key_pos or node.pos)


def build_permissions(node: Node, name: str, ctx: Ctx) -> Permissions:
    members = as_map(node, name)
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    responses: ResponsePermission | None = None
    for key, child in members.items():
        k = key.lower()
        if k in ("pub", "publish", "import"):
            publish = _subject_permission(child, f"{name}.{key}", queues=False)
        elif k in ("sub", "subscribe", "export"):
            subscribe = _subject_permission(child, f"{name}.{key}", queues=True)
        elif k in ("publish_allow_responses", "allow_responses"):
            responses = _allow_responses(child, f"{name}.{key}", ctx)
        elif not child.used:
            raise _key_error(key, child, f"unknown field {key!r} in permissions")
    return Permissions(publish, subscribe, responses)


def _subject_permission(node: Node, name: str, *, queues: bool) -> SubjectPermission | None:
    if isinstance(node.value, dict):
        if not node.value:
            return None
        allow: tuple[str, ...] = ()
        deny: tuple[str, ...] = ()
        for key, child in node.value.items():
            k = key.lower()
            if k == "allow":
                allow = _subjects(child, f"{name}.allow", queues)
            elif k == "deny":
                deny = _subjects(child, f"{name}.deny", queues)
            elif not child.used:
                raise _key_error(
                    key, child,
                    f"unknown field {key!r} in {name}: only 'allow' or 'deny' are permitted",
                )
        return SubjectPermission(allow, deny)
    return SubjectPermission(allow=_subjects(node, name, queues))


def _subjects(node: Node, name: str, queues: bool) -> tuple[str, ...]:
    if not isinstance(node.value, str | list):
        raise fail(node, f"{name!r} must be a subject or an array of subjects, "
                         f"got {describe(node)}")
    subjects = as_str_list(node, name)
    check_subjects(node, name, subjects, queues=queues)
    return subjects


def _allow_responses(node: Node, name: str, ctx: Ctx) -> ResponsePermission | None:
    if isinstance(node.value, bool):
        return ResponsePermission() if node.value else None
    if not isinstance(node.value, dict):
        raise fail(node, f"{name!r} must be a boolean or a block {{max, expires}}, "
                         f"got {describe(node)}")
    max_msgs, expires_ns = 1, DEFAULT_RESPONSE_EXPIRES_NS
    for key, child in node.value.items():
        k = key.lower()
        if k in ("max", "max_msgs", "max_messages", "max_responses"):
            # 0 keeps the default; negative means unlimited (as nats-server).
            max_msgs = as_int(child, f"{name}.{key}") or max_msgs
        elif k in ("expires", "expiration", "ttl"):
            if not isinstance(child.value, str):
                raise fail(child, f"{name}.{key} must be a duration string such as \"1m\"")
            expires_ns = as_duration_ns(child, f"{name}.{key}", ctx, allow_negative=True) or (
                expires_ns
            )
        elif not child.used:
            raise _key_error(key, child, f"unknown field {key!r} in {name}")
    return ResponsePermission(max_msgs, expires_ns)


def build_users(
    node: Node, name: str, ctx: Ctx, account: str, registry: UserRegistry
) -> tuple[UserConfig, ...]:
    users: list[UserConfig] = []
    for item in as_list(node, name):
        if not isinstance(item.value, dict):
            raise fail(item, f"entries of {name!r} must be blocks like {{user: a, password: b}}, "
                             f"got {describe(item)}")
        user = password = nkey = ""
        perms: Permissions | None = None
        conn_types: tuple[str, ...] = ()
        for key, child in item.value.items():
            k = key.lower()
            if k in ("user", "username"):
                user = as_str(child, key)
            elif k in ("pass", "password"):
                password = as_str(child, key)
            elif k in ("permission", "permissions", "authorization"):
                perms = build_permissions(child, key, ctx)
            elif k == "nkey":
                nkey = as_str(child, key)
            elif k in ("allowed_connection_types", "connection_types", "clients"):
                conn_types = _connection_types(child, key)
            elif k in _USER_REFUSED:
                raise refuse(key, child, _USER_REFUSED[k])
            else:
                ctx.unknown(key, child, "user entry")
        if nkey:
            if not is_public(nkey, PREFIX_USER):
                raise fail(item, "not a valid public nkey for a user")
            if user or password:
                raise fail(item, "nkey users do not take usernames or passwords")
            registry.add(nkey, item)
        elif not user:
            raise fail(item, "user entry requires a 'user'")
        else:
            registry.add(user, item)
        users.append(UserConfig(user, password, perms, account, nkey, conn_types))
    return tuple(users)


def _connection_types(node: Node, name: str) -> tuple[str, ...]:
    """``allowed_connection_types``: names checked as nats-server does, kept upper case."""
    types: list[str] = []
    for value in as_str_list(node, name):
        upper = value.upper()
        if upper not in CONNECTION_TYPES:
            raise fail(node, f"unknown connection type {value!r}")
        types.append(upper)
    return tuple(types)


def _with_defaults(
    users: tuple[UserConfig, ...], perms: Permissions | None
) -> tuple[UserConfig, ...]:
    if perms is None:
        return users
    return tuple(u if u.permissions is not None else replace(u, permissions=perms) for u in users)


def build_authorization(
    node: Node, name: str, ctx: Ctx, registry: UserRegistry
) -> tuple[AuthorizationConfig, bool]:
    """The block, and whether it had a ``users`` array (even an empty one)."""
    members = as_map(node, name)
    user = password = token = ""
    users: tuple[UserConfig, ...] | None = None
    timeout_s = 0.0
    defaults: Permissions | None = None
    for key, child in members.items():
        k = key.lower()
        if k in ("user", "username"):
            user = as_str(child, key)
        elif k in ("pass", "password"):
            password = as_str(child, key)
        elif k == "token":
            token = as_str(child, key)
        elif k == "timeout":
            timeout_s = as_seconds(child, f"{name}.timeout")
            if timeout_s > 60:
                ctx.warn(child.pos, f"timeout of {timeout_s:g} seconds is high, consider keeping "
                                    "it under 60 seconds (an unquoted 1m is a number; use \"1m\")")
        elif k == "users":
            users = build_users(child, f"{name}.users", ctx, "", registry)
        elif k in ("default_permission", "default_permissions", "permissions"):
            defaults = build_permissions(child, key, ctx)
        elif k in _AUTH_REFUSED:
            raise refuse(key, child, _AUTH_REFUSED[k])
        else:
            ctx.unknown(key, child, name)
    if (user or password) and token:
        raise fail(node, "cannot have a user/pass and token")
    if users is not None and user:
        raise fail(node, "can not have a single user/pass and a users array")
    if users is not None and token:
        raise fail(node, "can not have a token and a users array")
    if user:
        registry.add(user, node)
    auth = AuthorizationConfig(
        user, password, token, _with_defaults(users or (), defaults), timeout_s, defaults
    )
    return auth, users is not None


def build_accounts(node: Node, ctx: Ctx, registry: UserRegistry) -> tuple[AccountConfig, ...]:
    if isinstance(node.value, list):
        return _account_names(node)
    members = as_map(node, "accounts")
    accounts: list[AccountConfig] = []
    for name, child in members.items():
        if child.used:
            continue  # a variable defined inside the block, as nats-server skips them
        if not isinstance(child.value, dict):
            raise fail(child, f"account {name!r} must be a block {{...}}, got {describe(child)}")
        if name == GLOBAL_ACCOUNT:
            raise _key_error(name, child, f"{name!r} is a reserved account")
        accounts.append(_account(name, child.value, ctx, registry))
    check_imports(accounts)
    return tuple(accounts)


def _account_names(node: Node) -> tuple[AccountConfig, ...]:
    seen: set[str] = set()
    accounts: list[AccountConfig] = []
    for item in as_list(node, "accounts"):
        name = as_str(item, "accounts element")
        if name == GLOBAL_ACCOUNT:
            raise fail(item, f"{name!r} is a reserved account")
        if name in seen:
            raise fail(item, f"duplicate account entry: {name}")
        seen.add(name)
        accounts.append(AccountConfig(name))
    return tuple(accounts)


def _account(
    name: str, members: dict[str, Node], ctx: Ctx, registry: UserRegistry
) -> AccountConfig:
    users: tuple[UserConfig, ...] = ()
    jetstream: AccountJetStreamConfig | None = None
    defaults: Permissions | None = None
    mappings: tuple[SubjectMapping, ...] = ()
    exports: tuple[AccountExport, ...] = ()
    imports: tuple[AccountImport, ...] = ()
    for key, child in members.items():
        k = key.lower()
        if k in ("mappings", "maps"):
            mappings = build_mappings(child, f"accounts.{name}.{key}")
        elif k == "exports":
            exports = build_exports(child)
        elif k == "imports":
            imports = build_imports(child)
        elif k == "users":
            users = build_users(child, f"accounts.{name}.users", ctx, name, registry)
        elif k == "jetstream":
            jetstream = _account_jetstream(child, f"accounts.{name}.jetstream", ctx)
        elif k == "default_permissions":
            defaults = build_permissions(child, key, ctx)
        elif k in _ACCOUNT_REFUSED:
            raise refuse(key, child, _ACCOUNT_REFUSED[k])
        elif k in _ACCOUNT_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, f"account {name!r}")
    return AccountConfig(
        name, _with_defaults(users, defaults), jetstream, defaults, mappings, exports, imports
    )


_ACCOUNT_JS_SIZES = {
    "max_memory": "max_memory", "max_mem": "max_memory", "mem": "max_memory",
    "memory": "max_memory", "max_store": "max_store", "max_file": "max_store",
    "max_disk": "max_store", "store": "max_store", "disk": "max_store",
    "mem_max_stream_bytes": "memory_max_stream_bytes",
    "memory_max_stream_bytes": "memory_max_stream_bytes",
    "disk_max_stream_bytes": "store_max_stream_bytes",
    "store_max_stream_bytes": "store_max_stream_bytes",
}
_ACCOUNT_JS_COUNTS = {
    "max_streams": "max_streams", "streams": "max_streams",
    "max_consumers": "max_consumers", "consumers": "max_consumers",
    "max_ack_pending": "max_ack_pending",
}


def _account_jetstream(node: Node, name: str, ctx: Ctx) -> AccountJetStreamConfig | None:
    v = node.value
    if isinstance(v, bool):
        return AccountJetStreamConfig() if v else None
    if isinstance(v, str):
        if v.lower() in ("enabled", "enable"):
            return AccountJetStreamConfig()
        if v.lower() in ("disabled", "disable"):
            return None
        raise fail(node, f"expected 'enabled' or 'disabled' for {name}, got {v!r}")
    if not isinstance(v, dict):
        raise fail(node, f"{name!r} must be a block, a boolean or enabled/disabled, "
                         f"got {describe(node)}")
    limits: dict[str, int | bool] = {}
    for key, child in v.items():
        k = key.lower()
        if k in _ACCOUNT_JS_SIZES:
            limits[_ACCOUNT_JS_SIZES[k]] = as_size(child, f"{name}.{key}", lo=-1)
        elif k in _ACCOUNT_JS_COUNTS:
            limits[_ACCOUNT_JS_COUNTS[k]] = as_int(child, f"{name}.{key}", lo=-1)
        elif k in ("max_bytes_required", "max_stream_bytes", "max_bytes"):
            limits["max_bytes_required"] = as_bool(child, f"{name}.{key}")
        elif k == "cluster_traffic":
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, name)
    return AccountJetStreamConfig(**limits)  # type: ignore[arg-type]
