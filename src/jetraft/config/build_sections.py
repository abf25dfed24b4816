"""``tls {}``, ``jetstream {}`` and ``cluster {}`` blocks -> typed values (nats-server readings)."""

from __future__ import annotations

from urllib.parse import urlsplit

from jetraft.config.build_auth import UserRegistry, build_authorization
from jetraft.config.errors import ConfigError
from jetraft.config.model import DEFAULT_HOST, ClusterConfig, JetStreamConfig, TLSConfig
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
    describe,
    fail,
    parse_go_duration,
    parse_listen,
)

_TLS_UNSUPPORTED = {
    "insecure", "verify_and_map", "verify_cert_and_check_known_urls",
    "allow_insecure_cipher_suites", "cipher_suites", "curve_preferences", "pinned_certs",
    "cert_store", "cert_match_by", "cert_match", "cert_match_skip_invalid", "ca_certs_match",
    "ocsp_peer", "certs", "min_version", "connection_rate_limit",
}
_JS_UNSUPPORTED = {
    "key", "ek", "encryption_key", "prev_key", "prev_ek", "prev_encryption_key", "cipher",
    "extension_hint", "limits", "tpm", "info_queue_limit", "meta_compact",
    "meta_compact_size", "meta_compact_sync", "max_concurrent_io",
}
_CLUSTER_UNSUPPORTED = {
    "permissions", "accounts", "compression", "ping_interval", "ping_max", "write_deadline",
    "write_timeout", "connect_backoff",
}


def build_tls(node: Node, name: str, ctx: Ctx) -> TLSConfig:
    members = as_map(node, name)
    files = {"cert_file": "", "key_file": "", "ca_file": ""}
    verify = handshake_first = False
    timeout_s = TLSConfig().timeout_s
    for key, child in members.items():
        k = key.lower()
        if k in files:
            files[k] = as_str(child, f"{name}.{key}")
        elif k == "verify":
            verify = as_bool(child, f"{name}.{key}")
        elif k == "timeout":
            timeout_s = as_seconds(child, f"{name}.timeout") or timeout_s
        elif k in ("handshake_first", "first", "immediate"):
            handshake_first = _handshake_first(child, f"{name}.{key}", ctx)
        elif k in _TLS_UNSUPPORTED:
            ctx.unsupported(key, child)
            if k == "verify_and_map" and isinstance(child.value, bool) and child.value:
                verify = True
        else:
            ctx.unknown(key, child, name)
    for required in ("cert_file", "key_file"):
        if not files[required]:
            raise fail(node, f"missing {required!r} in the {name} block")
    return TLSConfig(
        files["cert_file"], files["key_file"], files["ca_file"], verify, timeout_s,
        handshake_first,
    )


def _handshake_first(node: Node, name: str, ctx: Ctx) -> bool:
    """A boolean, or (nats-server) a fallback delay string such as "300ms": then it is on."""
    if isinstance(node.value, str):
        value = node.value.lower()
        if value in ("auto", "auto_fallback"):
            ctx.warn(node.pos, f"{name}: the fallback to a late TLS handshake is not supported")
            return True
        try:
            parse_go_duration(node.value)
        except ValueError as exc:
            raise fail(node, f"error parsing {name}: {exc}") from None
        ctx.warn(node.pos, f"{name}: the fallback delay is not supported; handshake first is on")
        return True
    return as_bool(node, name)


def build_jetstream(node: Node, ctx: Ctx) -> tuple[bool, JetStreamConfig, Node | None]:
    """(enabled, settings, the store_dir node if the block set one)."""
    v = node.value
    if isinstance(v, bool):
        return v, JetStreamConfig(), None
    if isinstance(v, str):
        if v.lower() in ("enabled", "enable"):
            return True, JetStreamConfig(), None
        if v.lower() in ("disabled", "disable"):
            return False, JetStreamConfig(), None
        raise fail(node, f"expected 'enabled' or 'disabled' for jetstream, got {v!r}")
    if not isinstance(v, dict):
        raise fail(node, f"expected a block, a boolean or a string to define jetstream, "
                         f"got {describe(node)}")
    enabled = True
    store_node: Node | None = None
    fields: dict[str, object] = {}
    for key, child in v.items():
        k = key.lower()
        path = f"jetstream.{key}"
        if k in ("store", "store_dir", "storedir"):
            fields["store_dir"] = as_str(child, path)
            store_node = child
        elif k in ("enable", "enabled"):
            enabled = as_bool(child, path)
        elif k in ("sync", "sync_interval"):
            fields["sync_interval_ns"] = _sync_interval(child, path, ctx)
        elif k in ("max_memory_store", "max_mem_store", "max_mem"):
            fields["max_memory_store"] = as_size(child, path, lo=-1)
        elif k in ("max_file_store", "max_file"):
            fields["max_file_store"] = as_size(child, path, lo=-1)
        elif k == "domain":
            fields["domain"] = _domain(child, path)
        elif k == "unique_tag":
            fields["unique_tag"] = as_str(child, path).strip().lower()
        elif k == "strict":
            fields["strict"] = as_bool(child, path)
        elif k in ("max_outstanding_catchup", "max_buffered_size"):
            fields[k] = as_size(child, path)
        elif k in ("max_buffered_msgs", "request_queue_limit"):
            fields[k] = as_int(child, path, lo=0)
        elif k in _JS_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, "jetstream")
    return enabled, JetStreamConfig(**fields), store_node  # type: ignore[arg-type]


def _sync_interval(node: Node, name: str, ctx: Ctx) -> int:
    """0 (fsync before every ack) for "always"; else a lazy interval."""
    if isinstance(node.value, str) and node.value.strip().lower() == "always":
        return 0
    return as_duration_ns(node, name, ctx)


def _domain(node: Node, name: str) -> str:
    domain = as_str(node, name)
    if any(c in domain for c in ".*> \t"):
        raise fail(node, f"invalid {name} {domain!r}: may not contain '.', '*', '>' or spaces")
    return domain


def build_cluster(node: Node, ctx: Ctx) -> ClusterConfig:
    members = as_map(node, "cluster")
    f: dict[str, object] = {}
    for key, child in members.items():
        k = key.lower()
        path = f"cluster.{key}"
        if k == "name":
            name = as_str(child, path)
            if " " in name:
                raise fail(child, "cluster name cannot contain spaces")
            f["name"] = name
        elif k == "listen":
            host, port = parse_listen(child, path)
            f["port"] = port
            if host:
                f["host"] = host
        elif k == "port":
            f["port"] = _port(child, path)
        elif k in ("host", "net"):
            f["host"] = as_str(child, path) or DEFAULT_HOST
        elif k == "authorization":
            _cluster_auth(child, path, ctx, f)
        elif k == "routes":
            f["routes"] = _routes(child, path, ctx)
        elif k == "tls":
            f["tls"] = build_tls(child, path, ctx)
        elif k in ("cluster_advertise", "advertise"):
            f["advertise"] = as_str(child, path)
        elif k == "no_advertise":
            f["no_advertise"] = as_bool(child, path)
        elif k == "connect_retries":
            f["connect_retries"] = as_int(child, path, lo=0)
        elif k == "pool_size":
            f["pool_size"] = as_int(child, path, lo=-1)
        elif k in _CLUSTER_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, "cluster")
    return ClusterConfig(**f)  # type: ignore[arg-type]


def _port(node: Node, name: str) -> int:
    port = as_int(node, name)
    if not -1 <= port <= 65535:
        raise fail(node, f"{name!r}: port {port} is out of range (-1 for random, 0-65535)")
    return port


def _cluster_auth(node: Node, name: str, ctx: Ctx, f: dict[str, object]) -> None:
    auth, had_users = build_authorization(node, name, ctx, UserRegistry())
    if had_users:
        raise fail(node, "cluster authorization does not allow multiple users")
    if auth.token:
        raise fail(node, "cluster authorization does not support tokens")
    if auth.default_permissions is not None:
        ctx.warn(node.pos, "permissions in cluster authorization are not supported; ignored")
    f["user"], f["password"], f["auth_timeout_s"] = auth.user, auth.password, auth.timeout_s


def _routes(node: Node, name: str, ctx: Ctx) -> tuple[str, ...]:
    items = [node] if isinstance(node.value, str) else as_list(node, name)
    routes: list[str] = []
    for item in items:
        url = as_str(item, f"{name} element").strip()
        if url in routes:
            ctx.warn(item.pos, f"duplicate route entry {url!r} ignored")
            continue
        check_route_url(url, item)
        routes.append(url)
    return tuple(routes)


def check_route_url(url: str, node: Node | None) -> None:
    """Routes are URLs such as nats://host:6222 or nats-route://user:pass@host:6222."""
    problem = ""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        problem = str(exc)
    else:
        if not parts.scheme or not parts.hostname:
            problem = "expected scheme://host:port"
    if problem:
        message = f"error parsing route url {url!r}: {problem}"
        if node is None:
            raise ConfigError(message)
        raise fail(node, message)
