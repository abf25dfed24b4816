"""Tree -> ServerConfig: top-level keys, cross-field checks, and the public entry points.

Keys match case-insensitively (nats-server lowercases them); unknown keys and
nats-server features jetraft does not implement become warnings, never errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from jetraft.config.build_auth import UserRegistry, build_accounts, build_authorization
from jetraft.config.build_mappings import build_mappings
from jetraft.config.build_operator import OperatorNodes, build_operator
from jetraft.config.build_sections import build_cluster, build_jetstream, build_tls
from jetraft.config.errors import ConfigError, Pos
from jetraft.config.model import (
    DEFAULT_LAME_DUCK_DURATION_NS,
    DEFAULT_LAME_DUCK_GRACE_PERIOD_NS,
    DEFAULT_MAX_CONTROL_LINE,
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_MAX_PENDING,
    DEFAULT_PING_INTERVAL_NS,
    DEFAULT_PING_MAX,
    DEFAULT_PORT,
    DEFAULT_WRITE_DEADLINE_NS,
    NS_PER_S,
    JetStreamConfig,
    ServerConfig,
)
from jetraft.config.syntax import Node, parse_file_tree, parse_tree, to_plain
from jetraft.config.values import (
    Ctx,
    as_bool,
    as_duration_ns,
    as_int,
    as_size,
    as_str,
    as_str_list,
    fail,
    parse_listen,
    refuse,
)

_INT32_MAX = 2**31 - 1
# Ignored with a warning: ignoring them never gives less protection than asked for.
_UNSUPPORTED_TOP = {
    "syslog", "remote_syslog", "ports_file_dir", "prof_port",
    "prof_block_rate", "allow_non_tls", "write_timeout", "logfile_size_limit",
    "log_size_limit", "logfile_max_num", "log_max_num", "max_traced_msg_len",
    "connect_error_reports", "reconnect_error_reports", "disable_sublist_cache",
    "no_sublist_cache", "default_sentinel", "server_metadata", "feature_flags",
    "default_js_domain", "no_fast_producer_stall", "max_closed_clients", "proxies",
    "proxy_protocol", "trace_headers",
}
# Refused: listeners jetraft does not have (their auth and TLS blocks would be dropped with
# them), trust settings and limits it cannot enforce. key -> what is missing.
_REFUSED_TOP = {
    "gateway": "gateways", "leaf": "leaf nodes", "leafnodes": "leaf nodes",
    "websocket": "websocket listener", "ws": "websocket listener", "mqtt": "MQTT listener",
    "ocsp": "OCSP stapling", "ocsp_cache": "OCSP", "resolver_tls": "URL account resolvers",
    "https": "monitoring over TLS", "https_port": "monitoring over TLS",
    "max_sub_tokens": "subscription token limit",
    "max_subscription_tokens": "subscription token limit",
}

Reader = Callable[[Node, str], Any]


def _port(node: Node, name: str) -> int:
    port = as_int(node, name, lo=-1, hi=65535)
    return port


def _bool_field(field: str) -> tuple[str, Reader]:
    return field, as_bool


def _str_field(field: str) -> tuple[str, Reader]:
    return field, as_str


# nats-server key -> (ServerConfig field, reader) for keys that need nothing else.
_SIMPLE: dict[str, tuple[str, Reader]] = {
    "host": _str_field("host"),
    "net": _str_field("host"),
    "client_advertise": _str_field("client_advertise"),
    "http_base_path": _str_field("http_base_path"),
    "log_file": _str_field("log_file"),
    "logfile": _str_field("log_file"),
    "pid_file": _str_field("pid_file"),
    "pidfile": _str_field("pid_file"),
    "no_auth_user": _str_field("no_auth_user"),
    "system_account": _str_field("system_account"),
    "system": _str_field("system_account"),
    "debug": _bool_field("debug"),
    "trace": _bool_field("trace"),
    "logtime": _bool_field("logtime"),
    "logtime_utc": _bool_field("logtime_utc"),
    "no_header_support": _bool_field("no_header_support"),
    "no_system_account": _bool_field("no_system_account"),
    "no_system": _bool_field("no_system_account"),
    "no_sys_acc": _bool_field("no_system_account"),
    "server_tags": ("server_tags", as_str_list),
    "port": ("port", _port),
    "http_port": ("http_port", _port),
    "monitor_port": ("http_port", _port),
    "max_subscriptions": ("max_subscriptions", lambda n, k: as_int(n, k, lo=0)),
    "max_subs": ("max_subscriptions", lambda n, k: as_int(n, k, lo=0)),
    "ping_max": ("ping_max", lambda n, k: as_int(n, k, lo=0) or DEFAULT_PING_MAX),
    "max_payload": (
        "max_payload", lambda n, k: as_size(n, k, hi=_INT32_MAX) or DEFAULT_MAX_PAYLOAD
    ),
    "max_control_line": (
        "max_control_line",
        lambda n, k: as_size(n, k, hi=_INT32_MAX) or DEFAULT_MAX_CONTROL_LINE,
    ),
    "max_pending": ("max_pending", lambda n, k: as_size(n, k) or DEFAULT_MAX_PENDING),
}

# Durations: key -> (field, default used for 0, as nats-server's baseline options do).
_DURATIONS: dict[str, tuple[str, int]] = {
    "ping_interval": ("ping_interval_ns", DEFAULT_PING_INTERVAL_NS),
    "write_deadline": ("write_deadline_ns", DEFAULT_WRITE_DEADLINE_NS),
    "lame_duck_duration": ("lame_duck_duration_ns", DEFAULT_LAME_DUCK_DURATION_NS),
    "lame_duck_grace_period": ("lame_duck_grace_period_ns", DEFAULT_LAME_DUCK_GRACE_PERIOD_NS),
}


class _Builder:
    def __init__(self, tree: dict[str, Node], filename: str) -> None:
        self.tree = tree
        self.file = filename
        self.ctx = Ctx()
        self.f: dict[str, Any] = {}
        self.registry = UserRegistry()
        self.js_node: Node | None = None
        self.store_dir_node: Node | None = None
        self.positions: dict[str, Pos] = {}
        self.operator_nodes = OperatorNodes()

    def build(self) -> ServerConfig:
        for key, node in self.tree.items():
            k = key.lower()
            self.positions[k] = node.pos
            if k in _SIMPLE:
                field, reader = _SIMPLE[k]
                self.f[field] = reader(node, key)
            elif k in _DURATIONS:
                field, default = _DURATIONS[k]
                self.f[field] = as_duration_ns(node, key, self.ctx) or default
            elif k in _REFUSED_TOP and not node.used:
                raise refuse(key, node, _REFUSED_TOP[k])
            elif not self.special(k, key, node):
                if k in _UNSUPPORTED_TOP:
                    self.ctx.unsupported(key, node)
                else:
                    self.ctx.unknown(key, node)
        self.finish_jetstream()
        if self.operator_nodes.any():
            self.finish_operator()
        if self.f.get("no_system_account") and "system_account" not in self.f:
            self.f["system_account"] = ""
        if self.f.get("port") == 0:
            self.f["port"] = DEFAULT_PORT
        cfg = ServerConfig(
            **self.f, config_file=self.file, raw=to_plain(self.tree),
            warnings=tuple(self.ctx.warnings),
        )
        return finalize(cfg, self.positions)

    def special(self, k: str, key: str, node: Node) -> bool:
        """Keys that set several fields or hold blocks; False when k is not one of them."""
        f = self.f
        if k in ("listen", "http"):
            host, port = parse_listen(node, key)
            prefix = "" if k == "listen" else "http_"
            f["port" if k == "listen" else "http_port"] = port
            if host:
                f[prefix + "host"] = host
        elif k == "server_name":
            name = as_str(node, key)
            if " " in name:
                raise fail(node, "server name cannot contain spaces")
            f["server_name"] = name
        elif k in ("max_connections", "max_conn"):
            # nats-server reads 0 as -1, which refuses every client.
            f["max_connections"] = as_int(node, key, lo=-1) or -1
        elif k == "trace_verbose":
            f["trace_verbose"] = as_bool(node, key)
            if f["trace_verbose"]:
                f["trace"] = True
        elif k == "accounts":
            f["accounts"] = build_accounts(node, self.ctx, self.registry)
        elif k in ("mappings", "maps"):
            f["mappings"] = build_mappings(node, key)
        elif k == "authorization":
            f["authorization"], _ = build_authorization(node, key, self.ctx, self.registry)
        elif k == "tls":
            f["tls"] = build_tls(node, key, self.ctx)
        elif k == "cluster":
            f["cluster"] = build_cluster(node, self.ctx)
        elif k == "jetstream":
            self.js_node = node
        elif k in ("store_dir", "storedir"):
            self.store_dir_node = node
        elif not self.operator_nodes.add(k, node):
            return False
        return True

    def finish_operator(self) -> None:
        if self.f.get("accounts"):
            raise ConfigError("operators do not allow Accounts to be configured directly",
                              self.positions.get("accounts"))
        if self.f.get("authorization") is not None:
            raise ConfigError("operators do not allow authorization blocks or users to be "
                              "configured directly", self.positions.get("authorization"))
        sys_node = next(
            (n for k, n in self.tree.items() if k.lower() in ("system_account", "system")), None
        )
        base_dir = str(Path(self.file).parent) if self.file != "<string>" else "."
        op, accounts, system = build_operator(self.operator_nodes, self.ctx, base_dir, sys_node)
        self.f["operator"] = op
        self.f["accounts"] = accounts
        self.f["system_account"] = system

    def finish_jetstream(self) -> None:
        enabled, settings, block_store = False, None, None
        if self.js_node is not None:
            enabled, settings, block_store = build_jetstream(self.js_node, self.ctx)
        if self.store_dir_node is not None:
            if block_store is not None:
                raise fail(block_store, "duplicate 'store_dir' configuration "
                                        f"(also set at {self.store_dir_node.pos})")
            store_dir = as_str(self.store_dir_node, "store_dir")
            settings = replace(settings or JetStreamConfig(), store_dir=store_dir)
        self.f["jetstream"] = settings if enabled else None
        self.f["jetstream_settings"] = settings


def _auth_timeout_ns(cfg: ServerConfig) -> int:
    """nats-server: the authorization timeout if set, else TLS timeout + 1 s with TLS, else 2 s."""
    if cfg.authorization is not None and cfg.authorization.timeout_s > 0:
        seconds = cfg.authorization.timeout_s
    elif cfg.tls is not None:
        seconds = cfg.tls.timeout_s + 1.0
    else:
        seconds = 2.0
    return round(seconds * NS_PER_S)


def finalize(cfg: ServerConfig, positions: Mapping[str, Pos] | None = None) -> ServerConfig:
    """Recompute derived fields and run cross-field checks (after the file and after flags)."""
    where = positions or {}
    cfg = replace(cfg, auth_timeout_ns=_auth_timeout_ns(cfg))
    warnings = list(cfg.warnings)

    def error(message: str, key: str) -> ConfigError:
        return ConfigError(message, where.get(key), file=cfg.config_file)

    def warn(message: str) -> None:
        text = f"{cfg.config_file}: {message}" if cfg.config_file else message
        if text not in warnings:
            warnings.append(text)

    if " " in cfg.server_name:
        raise error("server name cannot contain spaces", "server_name")
    if cfg.lame_duck_grace_period_ns >= cfg.lame_duck_duration_ns:
        raise error(
            f"lame duck grace period ({_secs(cfg.lame_duck_grace_period_ns)}) should be "
            f"strictly lower than lame duck duration ({_secs(cfg.lame_duck_duration_ns)})",
            "lame_duck_grace_period",
        )
    if cfg.lame_duck_duration_ns < 30 * NS_PER_S:
        warn(f"lame_duck_duration of {_secs(cfg.lame_duck_duration_ns)} is below "
             "nats-server's minimum of 30s")
    if cfg.max_payload > cfg.max_pending:
        # nats-server refuses to start here; jetraft only warns (tests use small max_pending).
        warn(f"max_payload ({cfg.max_payload}) is higher than max_pending ({cfg.max_pending})")
    _check_auth(cfg, error)
    _check_jetstream(cfg, error)
    return replace(cfg, warnings=tuple(warnings))


def _check_auth(cfg: ServerConfig, error: Callable[[str, str], ConfigError]) -> None:
    account_users = any(acc.users for acc in cfg.accounts)
    auth = cfg.authorization
    if auth is not None and account_users:
        if auth.user:
            raise error("can not have a single user/pass and accounts", "authorization")
        if auth.token:
            raise error("can not have a token and accounts", "authorization")
    if cfg.no_auth_user and cfg.operator is not None:
        raise error("no_auth_user not compatible with Trusted Operator", "no_auth_user")
    if cfg.no_auth_user:
        names = {u.identity for u in cfg.all_users()}
        if not names:
            raise error(f"no_auth_user: {cfg.no_auth_user!r} present, but users are not "
                        "defined", "no_auth_user")
        if cfg.no_auth_user not in names:
            raise error(f"no_auth_user: {cfg.no_auth_user!r} not present as user in "
                        "authorization block or account configuration", "no_auth_user")


def _check_jetstream(cfg: ServerConfig, error: Callable[[str, str], ConfigError]) -> None:
    if cfg.jetstream is None:
        return
    system = cfg.account(cfg.system_account) if cfg.system_account else None
    if system is not None and system.jetstream is not None:
        raise error("not allowed to enable JetStream on the system account", "accounts")
    if cfg.cluster is not None:
        if not cfg.server_name:
            raise error("jetstream cluster requires `server_name` to be set", "cluster")
        if not cfg.cluster.name:
            raise error("jetstream cluster requires `cluster.name` to be set", "cluster")
        if cfg.jetstream.encryption_key:
            # Clustered streams live in the RAFT log, which is not encrypted yet: refuse
            # rather than store in clear what the config asks to encrypt.
            raise error(
                "'encryption_key' is not supported by jetraft with a cluster (the RAFT log "
                "is not encrypted yet); refusing to start rather than store data in clear",
                "jetstream",
            )


def _secs(ns: int) -> str:
    return f"{ns / NS_PER_S:g}s"


def config_from_tree(tree: dict[str, Node], filename: str = "<string>") -> ServerConfig:
    return _Builder(tree, filename).build()


def parse_raw(text: str, filename: str = "<string>") -> dict[str, Any]:
    """The untyped tree: dicts, lists, str, int, float, bool, datetime."""
    plain: dict[str, Any] = to_plain(parse_tree(text, filename))
    return plain


def parse_config(
    text: str,
    filename: str = "<string>",
    *,
    env: Mapping[str, str] | None = None,
    base_dir: str | Path | None = None,
) -> ServerConfig:
    """Parse and validate config text. ``env`` defaults to os.environ."""
    return config_from_tree(parse_tree(text, filename, base_dir=base_dir, env=env), filename)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Read, parse and validate a config file; includes are relative to its directory."""
    return config_from_tree(parse_file_tree(path, env=env), str(path))
