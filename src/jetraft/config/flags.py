"""nats-server style command-line flags, and building a config from file + flags.

Go's flag package accepts every flag with one dash or two (``-port``, ``--port``) and
``-flag=value``; booleans are given bare or as ``-js=false``. argparse matches declared
option strings exactly first, so multi-letter single-dash flags (``-js``, ``-sd``,
``-DV``) work once declared; abbreviations are switched off. Flags override the file.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from jetraft.config.build import finalize, load_config
from jetraft.config.build_sections import check_route_url
from jetraft.config.errors import ConfigError
from jetraft.config.model import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    AuthorizationConfig,
    ClusterConfig,
    JetStreamConfig,
    ServerConfig,
    TLSConfig,
)


@dataclass(frozen=True, slots=True)
class Overrides:
    """Values given on the command line; None means "not given"."""

    port: int | None = None
    host: str | None = None
    server_name: str | None = None
    client_advertise: str | None = None
    http_port: int | None = None
    https_port: int | None = None
    jetstream: bool | None = None
    store_dir: str | None = None
    cluster_listen: str | None = None
    cluster_name: str | None = None
    cluster_advertise: str | None = None
    no_advertise: bool | None = None
    connect_retries: int | None = None
    routes: str | None = None
    debug: bool | None = None
    trace: bool | None = None
    trace_verbose: bool | None = None
    logtime: bool | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls: bool | None = None
    tls_verify: bool | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca_cert: str | None = None
    pid_file: str | None = None
    log_file: str | None = None
    check_config: bool | None = None
    signal: str | None = None


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _go_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


# (names, dest, type or "bool", help)
_FLAGS: tuple[tuple[tuple[str, ...], str, Any, str], ...] = (
    (("c", "config"), "config", str, "configuration file"),
    (("p", "port"), "port", int, "port to listen on (-1: random)"),
    (("a", "addr", "net"), "host", str, "network host to listen on"),
    (("n", "name", "server_name"), "server_name", str, "server name"),
    (("client_advertise",), "client_advertise", str, "client URL to advertise"),
    (("m", "http_port"), "http_port", int, "HTTP port for monitoring"),
    (("ms", "https_port"), "https_port", int, "HTTPS port for monitoring"),
    (("js", "jetstream"), "jetstream", "bool", "enable JetStream"),
    (("sd", "store_dir"), "store_dir", str, "JetStream storage directory"),
    (("cluster", "cluster_listen"), "cluster_listen", str,
     "cluster URL for solicited routes, e.g. nats://127.0.0.1:6222"),
    (("cluster_name",), "cluster_name", str, "cluster name"),
    (("cluster_advertise",), "cluster_advertise", str, "cluster URL to advertise"),
    (("no_advertise",), "no_advertise", "bool", "do not advertise known cluster URLs"),
    (("connect_retries",), "connect_retries", int, "connect retries for implicit routes"),
    (("routes",), "routes", str, "routes to solicit, comma separated"),
    (("D", "debug"), "debug", "bool", "enable debug logging"),
    (("V", "trace"), "trace", "bool", "enable trace logging"),
    (("VV",), "vv", "bool", "enable verbose trace logging"),
    (("DV",), "dv", "bool", "enable debug and trace logging"),
    (("DVV",), "dvv", "bool", "enable debug and verbose trace logging"),
    (("T", "logtime"), "logtime", "bool", "timestamp log entries"),
    (("user",), "user", str, "user required for connections"),
    (("pass",), "password", str, "password required for connections"),
    (("auth",), "token", str, "authorization token required for connections"),
    (("tls",), "tls", "bool", "enable TLS"),
    (("tlsverify",), "tls_verify", "bool", "enable TLS with client verification"),
    (("tlscert",), "tls_cert", str, "server certificate file"),
    (("tlskey",), "tls_key", str, "private key for the server certificate"),
    (("tlscacert",), "tls_ca_cert", str, "client certificate CA for verification"),
    (("P", "pid"), "pid_file", str, "file to store the process id"),
    (("l", "log"), "log_file", str, "file to store logging output"),
    (("t", "test"), "check_config", "bool", "check the configuration and exit"),
    (("sl", "signal"), "signal", str,
     "send a running server a signal and exit: CMD[=PID], CMD one of ldm, stop, quit, term, "
     "reopen, reload; PID a process id or a pid file"),
)


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"command line: {message}")


def _version() -> str:
    from importlib import metadata  # looked up only when asked: it slows every start

    try:
        return metadata.version("jetraft")
    except metadata.PackageNotFoundError:  # pragma: no cover - only in odd installs
        return "unknown"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"jetraft {_version()}")
        parser.exit()


def make_arg_parser(prog: str = "jetraft server") -> argparse.ArgumentParser:
    parser = _ArgParser(prog=prog, add_help=False, allow_abbrev=False)
    for names, dest, kind, help_text in _FLAGS:
        strings = [f"-{n}" for n in names] + [f"--{n}" for n in names]
        if kind == "bool":
            parser.add_argument(
                *strings, dest=dest, nargs="?", const=True, type=_go_bool, default=None,
                metavar="BOOL", help=help_text,
            )
        else:
            parser.add_argument(*strings, dest=dest, type=kind, default=None, help=help_text)
    parser.add_argument("-h", "-help", "--help", action="help", help="show this message")
    parser.add_argument(
        "-v", "-version", "--version", action=_VersionAction, default=argparse.SUPPRESS,
        help="print the version",
    )
    return parser


def parse_args(argv: list[str]) -> tuple[Path | None, Overrides]:
    """Parse flags into (config file or None, overrides). Bad flags raise ConfigError."""
    ns = make_arg_parser().parse_args(argv)
    values = {f.name: getattr(ns, f.name, None) for f in fields(Overrides)}
    # -VV / -DV / -DVV set several values at once, as in nats-server.
    if ns.vv is not None:
        values["trace"] = values["trace_verbose"] = ns.vv
    if ns.dv is not None:
        values["debug"] = values["trace"] = ns.dv
    if ns.dvv is not None:
        values["debug"] = values["trace"] = values["trace_verbose"] = ns.dvv
    config = Path(ns.config) if ns.config else None
    return config, Overrides(**values)


def apply_overrides(cfg: ServerConfig, ov: Overrides) -> ServerConfig:
    """A new config: ``cfg`` with every given flag applied, re-validated."""
    f: dict[str, Any] = {}
    if ov.port is not None:
        f["port"] = _flag_port(ov.port, "port") or DEFAULT_PORT
    for name in ("http_port", "https_port"):
        value = getattr(ov, name)
        if value is not None:
            f[name] = _flag_port(value, name)
    for name in ("host", "server_name", "client_advertise", "debug", "trace", "trace_verbose",
                 "logtime", "pid_file", "log_file"):
        value = getattr(ov, name)
        if value is not None:
            f[name] = value
    if ov.trace_verbose:
        f["trace"] = True
    f.update(_jetstream(cfg, ov))
    f.update(_authorization(cfg, ov))
    f.update(_tls(ov))
    f["cluster"] = _cluster(cfg, ov)
    return finalize(replace(cfg, **f))


def build_config(argv: list[str]) -> ServerConfig:
    """nats-server's order: defaults, then the ``-c`` file, then the flags."""
    path, ov = parse_args(argv)
    cfg = load_config(path) if path is not None else finalize(ServerConfig())
    return apply_overrides(cfg, ov)


def _flag_port(port: int, name: str) -> int:
    if not -1 <= port <= 65535:
        raise ConfigError(f"command line: {name} {port} is out of range (-1 for random, 0-65535)")
    return port


def _jetstream(cfg: ServerConfig, ov: Overrides) -> dict[str, Any]:
    settings = cfg.jetstream or cfg.jetstream_settings
    if ov.store_dir is not None:
        settings = replace(settings or JetStreamConfig(), store_dir=ov.store_dir)
    enabled = cfg.jetstream is not None if ov.jetstream is None else ov.jetstream
    return {
        "jetstream": (settings or JetStreamConfig()) if enabled else None,
        "jetstream_settings": settings,
    }


def _authorization(cfg: ServerConfig, ov: Overrides) -> dict[str, Any]:
    changes = {
        name: getattr(ov, name)
        for name in ("user", "password", "token")
        if getattr(ov, name) is not None
    }
    if not changes:
        return {}
    auth = replace(cfg.authorization or AuthorizationConfig(), **changes)
    if (auth.user or auth.password) and auth.token:
        raise ConfigError("command line: cannot have a user/pass and token")
    if auth.user and auth.users:
        raise ConfigError("command line: can not have a single user/pass and a users array")
    return {"authorization": auth}


def _tls(ov: Overrides) -> dict[str, Any]:
    given = (ov.tls, ov.tls_verify, ov.tls_cert, ov.tls_key, ov.tls_ca_cert)
    if all(v is None for v in given):
        return {}
    if ov.tls is False:
        return {"tls": None}
    if not ov.tls_cert:
        raise ConfigError("command line: TLS server certificate must be present and valid")
    if not ov.tls_key:
        raise ConfigError("command line: TLS server private key must be present and valid")
    return {"tls": TLSConfig(ov.tls_cert, ov.tls_key, ov.tls_ca_cert or "", bool(ov.tls_verify))}


def _cluster(cfg: ServerConfig, ov: Overrides) -> ClusterConfig | None:
    cluster = cfg.cluster
    if ov.cluster_listen is not None:
        if ov.cluster_listen == "":
            cluster = None
        else:
            host, port, user, password = parse_cluster_url(ov.cluster_listen)
            cluster = replace(
                cluster or ClusterConfig(), host=host, port=port, user=user, password=password
            )
    if ov.routes is not None:
        if cluster is None:
            raise ConfigError(
                "command line: solicited routes require cluster capabilities, e.g. --cluster"
            )
        routes = tuple(r.strip() for r in ov.routes.split(",") if r.strip())
        for route in routes:
            check_route_url(route, None)
        cluster = replace(cluster, routes=routes)
    if cluster is None:
        return None
    changes: dict[str, Any] = {}
    if ov.cluster_name is not None:
        if " " in ov.cluster_name:
            raise ConfigError("command line: cluster name cannot contain spaces")
        changes["name"] = ov.cluster_name
    if ov.cluster_advertise is not None:
        changes["advertise"] = ov.cluster_advertise
    if ov.no_advertise is not None:
        changes["no_advertise"] = ov.no_advertise
    if ov.connect_retries is not None:
        changes["connect_retries"] = ov.connect_retries
    return replace(cluster, **changes)


def parse_cluster_url(text: str) -> tuple[str, int, str, str]:
    """``nats://[user:pass@]host:port`` (scheme optional) -> (host, port, user, password).

    A ``:-1`` port asks for a random port, as in nats-server.
    """
    raw = text.strip()
    if "://" not in raw:
        raw = "nats://" + raw
    random_port = raw.endswith(":-1")
    if random_port:
        raw = raw[:-3] + ":0"
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"command line: cluster URL {text!r}: {exc}") from None
    if port is None:
        raise ConfigError(f"command line: cluster URL {text!r} has no port")
    if parts.username is not None and parts.password is None:
        raise ConfigError("command line: expected cluster password to be set")
    host = parts.hostname or DEFAULT_HOST
    return host, -1 if random_port else port, parts.username or "", parts.password or ""
