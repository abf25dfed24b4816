"""``tls {}``, ``jetstream {}`` and ``cluster {}`` blocks -> typed values (nats-server readings)."""

from __future__ import annotations

import re
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
    refuse,
)

# Ignoring these never lowers protection: insecure only concerns outgoing connections'
# checks jetraft does not skip, and jetraft never enables insecure cipher suites.
_TLS_UNSUPPORTED = {"insecure", "allow_insecure_cipher_suites"}
# Refused: each would check or restrict more than jetraft's TLS does. key -> what is missing.
_TLS_REFUSED = {
    "verify_cert_and_check_known_urls": "checking certificates against known URLs",
    "cipher_suites": "choosing cipher suites", "curve_preferences": "choosing curves",
    "cert_store": "OS certificate stores", "cert_match_by": "OS certificate stores",
    "cert_match": "OS certificate stores", "cert_match_skip_invalid": "OS certificate stores",
    "ca_certs_match": "OS certificate stores", "ocsp_peer": "OCSP peer checks",
    "certs": "several certificates", "connection_rate_limit": "TLS connection rate limits",
}
_JS_ENCRYPTION_KEYS = ("key", "ek", "encryption_key")
_JS_PREV_KEYS = ("prev_key", "prev_ek", "prev_encryption_key")
_JS_UNSUPPORTED = {
    "extension_hint", "info_queue_limit", "meta_compact", "meta_compact_size",
    "meta_compact_sync", "max_concurrent_io",
}
_JS_REFUSED = {"tpm": "TPM-sealed encryption keys", "limits": "server-wide JetStream limits"}
_CLUSTER_UNSUPPORTED = {
    "accounts", "compression", "ping_interval", "ping_max", "write_deadline",
    "write_timeout", "connect_backoff",
}
_CLUSTER_REFUSED = {"permissions": "route permissions"}
_CIPHERS = ("chachapoly", "aes")
_TLS_VERSIONS = {"1.2": "1.2", "1.3": "1.3"}
_PIN_RE = re.compile(r"[0-9a-f]{64}")

# JetStream encryption at rest: the single-server file store encrypts with
# ``encryption_key``/``cipher`` (``jetstream.store.cipher``). Re-keying from a previous key is
# not implemented (refused below), nor is encrypting the RAFT log of clustered JetStream
# (refused in ``build._check_jetstream``).
JETSTREAM_ENCRYPTION_IMPLEMENTED = True


def build_tls(node: Node, name: str, ctx: Ctx) -> TLSConfig:
    members = as_map(node, name)
    files = {"cert_file": "", "key_file": "", "ca_file": ""}
    f: dict[str, object] = {}
    for key, child in members.items():
        k = key.lower()
        path = f"{name}.{key}"
        if k in files:
            files[k] = as_str(child, path)
        elif k == "verify":
            f["verify"] = as_bool(child, path) or bool(f.get("verify"))
        elif k == "verify_and_map":
            # As nats-server: mapping implies verify; false leaves verify as it is.
            if as_bool(child, path):
                f["verify"] = f["verify_and_map"] = True
        elif k == "timeout":
            f["timeout_s"] = as_seconds(child, f"{name}.timeout") or TLSConfig().timeout_s
        elif k in ("handshake_first", "first", "immediate"):
            f["handshake_first"] = _handshake_first(child, path, ctx)
        elif k == "pinned_certs":
            f["pinned_certs"] = _pinned_certs(child, path)
        elif k in ("min_version", "minimum_version"):
            f["min_version"] = _tls_version(child, path)
        elif k in _TLS_REFUSED:
            raise refuse(key, child, _TLS_REFUSED[k])
        elif k in _TLS_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, name)
    for required in ("cert_file", "key_file"):
        if not files[required]:
            raise fail(node, f"missing {required!r} in the {name} block")
    return TLSConfig(**files, **f)  # type: ignore[arg-type]


def _pinned_certs(node: Node, name: str) -> tuple[str, ...]:
    if not isinstance(node.value, list):
        raise fail(node, f"expected {name!r} to be a list of hex-encoded sha256 of DER encoded "
                         "SubjectPublicKeyInfo")
    pins: list[str] = []
    for item in as_list(node, name):
        pin = as_str(item, f"{name} element").lower()
        if not _PIN_RE.fullmatch(pin):
            raise fail(item, f"{name!r} key {pin} does not look like hex-encoded sha256 of DER "
                             "encoded SubjectPublicKeyInfo")
        pins.append(pin)
    return tuple(pins)


def _tls_version(node: Node, name: str) -> str:
    text = as_str(node, name).strip()
    version = _TLS_VERSIONS.get(text.upper().removeprefix("TLS").strip().removeprefix("V"))
    if version is None:
        raise fail(node, f"error parsing {name}: unsupported TLS version {text!r} "
                         "(1.2 or 1.3)")
    return version


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
    key_node: tuple[str, Node] | None = None
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
        elif k in _JS_ENCRYPTION_KEYS:
            fields["encryption_key"] = _encryption_key(child, path)
            key_node = (key, child)
        elif k == "cipher":
            fields["cipher"] = _cipher(child, path)
        elif k in _JS_PREV_KEYS:
            raise refuse(key, child, "re-keying stores from a previous encryption key")
        elif k in _JS_REFUSED:
            raise refuse(key, child, _JS_REFUSED[k])
        elif k in _JS_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, "jetstream")
    if key_node is not None and not JETSTREAM_ENCRYPTION_IMPLEMENTED:
        raise refuse(*key_node, "encryption at rest is not implemented yet")
    return enabled, JetStreamConfig(**fields), store_node  # type: ignore[arg-type]


def _encryption_key(node: Node, name: str) -> str:
    key = as_str(node, name)
    if not key:
        raise fail(node, f"{name} must not be empty")
    return key


def _cipher(node: Node, name: str) -> str:
    """nats-server's names, case-insensitive: chacha/chachapoly, aes (default chachapoly)."""
    value = as_str(node, name).strip().lower()
    if value in ("chacha", "chachapoly"):
        return "chachapoly"
    if value == "aes":
        return "aes"
    raise fail(node, f"Unknown cipher type: {node.value!r} (expected one of {', '.join(_CIPHERS)})")


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
            f["tls"] = _route_tls(child, path, ctx)
        elif k in ("cluster_advertise", "advertise"):
            f["advertise"] = as_str(child, path)
        elif k == "no_advertise":
            f["no_advertise"] = as_bool(child, path)
        elif k == "connect_retries":
            f["connect_retries"] = as_int(child, path, lo=0)
        elif k == "pool_size":
            f["pool_size"] = as_int(child, path, lo=-1)
        elif k in _CLUSTER_REFUSED:
            raise refuse(key, child, _CLUSTER_REFUSED[k])
        elif k in _CLUSTER_UNSUPPORTED:
            ctx.unsupported(key, child)
        else:
            ctx.unknown(key, child, "cluster")
    return ClusterConfig(**f)  # type: ignore[arg-type]


def _route_tls(node: Node, name: str, ctx: Ctx) -> TLSConfig:
    """Routes check their peer's chain against ca_file; they do not map or pin certificates."""
    tls = build_tls(node, name, ctx)
    for key, child in as_map(node, name).items():
        k = key.lower()
        if (k == "verify_and_map" and tls.verify_and_map) or (k == "pinned_certs" and
                                                              tls.pinned_certs):
            raise refuse(key, child, "for routes")
    return tls


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
        perms = next(
            (v for k, v in as_map(node, name).items()
             if k.lower() in ("default_permission", "default_permissions", "permissions")),
            node,
        )
        raise refuse("permissions", perms, "route permissions")
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
