"""Connection options: flags (anywhere on the line), NATS_* environment, then the context.

Every command accepts the connection flags, before or after its own arguments, as the nats
CLI does. A value is taken from the first place that has it: the flag on the command, the
flag before the command, the environment variable, the selected (or ``--context``) context,
the default.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click

from jetraft.cli import contexts
from jetraft.cli.errors import CliError
from jetraft.cli.units import NS_PER_S, parse_duration_ns

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Flag:
    dest: str
    decls: tuple[str, ...]
    env: str
    help: str
    context_key: str = ""
    is_flag: bool = False


FLAGS: tuple[_Flag, ...] = (
    _Flag("server", ("-s", "--server"), "NATS_URL", "NATS server URLs, comma separated", "url"),
    _Flag("user", ("--user",), "NATS_USER", "Username, or token when no password", "user"),
    _Flag("password", ("--password",), "NATS_PASSWORD", "Password", "password"),
    _Flag("token", ("--token",), "NATS_TOKEN", "Token", "token"),
    _Flag("creds", ("--creds",), "NATS_CREDS", "User credentials file", "creds"),
    _Flag("nkey", ("--nkey",), "NATS_NKEY", "User NKEY seed file", "nkey"),
    _Flag("tlscert", ("--tlscert",), "NATS_CERT", "TLS client certificate", "cert"),
    _Flag("tlskey", ("--tlskey",), "NATS_KEY", "TLS client private key", "key"),
    _Flag("tlsca", ("--tlsca",), "NATS_CA", "TLS certificate authority chain", "ca"),
    _Flag(
        "tlsfirst", ("--tlsfirst",), "", "TLS handshake before the server's INFO", "tls_first", True
    ),
    _Flag("timeout", ("--timeout",), "NATS_TIMEOUT", "Time to wait for responses (default 5s)"),
    _Flag("context", ("--context",), "NATS_CONTEXT", "Configuration context to use"),
    _Flag("no_context", ("--no-context",), "", "Ignore the selected context", is_flag=True),
    _Flag("connection_name", ("--connection-name",), "", "Name of the connection"),
    _Flag("js_domain", ("--js-domain",), "", "JetStream domain", "jetstream_domain"),
    _Flag(
        "js_api_prefix",
        ("--js-api-prefix",),
        "",
        "Subject prefix of the JetStream API",
        "jetstream_api_prefix",
    ),
    _Flag("inbox_prefix", ("--inbox-prefix",), "", "Prefix of reply inboxes", "inbox_prefix"),
)
_DESTS = {f.dest for f in FLAGS}


@dataclass(frozen=True)
class ConnOptions:
    servers: tuple[str, ...]
    user: str = ""
    password: str = ""
    token: str = ""
    creds: str = ""
    nkey: str = ""
    tlscert: str = ""
    tlskey: str = ""
    tlsca: str = ""
    tlsfirst: bool = False
    timeout_s: float = 5.0
    connection_name: str = "jetraft CLI"
    js_api_prefix: str = "$JS.API"
    inbox_prefix: str = ""
    context_name: str = ""

    @property
    def server_label(self) -> str:
        return ",".join(self.servers)


def add_flags(hidden: bool) -> Callable[[F], F]:
    """Adds every connection flag to a click command (hidden on sub-commands)."""

    def deco(fn: F) -> F:
        for f in reversed(FLAGS):
            if f.is_flag:
                opt = click.option(
                    *f.decls, f.dest, is_flag=True, default=None, help=f.help, hidden=hidden
                )
            else:
                opt = click.option(
                    *f.decls, f.dest, default=None, help=f.help, hidden=hidden, metavar="VALUE"
                )
            fn = opt(fn)
        return fn

    return deco


def connection(fn: F) -> F:
    """Decorates a command: accepts the connection flags and passes ``conn=ConnOptions``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        leaf = {k: kwargs.pop(k) for k in list(kwargs) if k in _DESTS}
        root = click.get_current_context().find_root().params
        merged = {d: leaf.get(d) if leaf.get(d) is not None else root.get(d) for d in _DESTS}
        kwargs["conn"] = resolve(merged)
        return fn(*args, **kwargs)

    return cast(F, add_flags(hidden=True)(wrapper))


def resolve(given: dict[str, Any]) -> ConnOptions:
    """Flags, then environment, then context, then defaults."""

    def pick(f: _Flag, ctx: dict[str, Any]) -> Any:
        value = given.get(f.dest)
        if value is None and f.env:
            value = os.environ.get(f.env) or None  # an empty variable counts as unset
        if value is None and f.context_key:
            value = ctx.get(f.context_key) or None
        return value

    ctx_name, ctx_body = _context(given)
    values = {f.dest: pick(f, ctx_body) for f in FLAGS}
    servers = tuple(
        s.strip() for s in (values["server"] or "nats://127.0.0.1:4222").split(",") if s.strip()
    )
    user, password, token = values["user"] or "", values["password"] or "", values["token"] or ""
    if user and not password and not token:
        user, token = "", user  # the nats CLI's rule: a user without password is a token
    timeout_s = 5.0
    if values["timeout"]:
        try:
            timeout_s = parse_duration_ns(str(values["timeout"])) / NS_PER_S
        except ValueError as exc:
            raise CliError(f"--timeout: {exc}", 2) from None
        if timeout_s <= 0:
            raise CliError("--timeout must be more than zero", 2)
    prefix = values["js_api_prefix"] or (
        f"$JS.{values['js_domain']}.API" if values["js_domain"] else "$JS.API"
    )
    return ConnOptions(
        servers=servers,
        user=user,
        password=password,
        token=token,
        creds=values["creds"] or "",
        nkey=values["nkey"] or "",
        tlscert=values["tlscert"] or "",
        tlskey=values["tlskey"] or "",
        tlsca=values["tlsca"] or "",
        tlsfirst=bool(values["tlsfirst"]),
        timeout_s=timeout_s,
        connection_name=values["connection_name"] or "jetraft CLI",
        js_api_prefix=prefix.rstrip("."),
        inbox_prefix=values["inbox_prefix"] or "",
        context_name=ctx_name,
    )


def _context(given: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if given.get("no_context"):
        return "", {}
    explicit = given.get("context") or os.environ.get("NATS_CONTEXT") or ""
    name = explicit or contexts.selected()
    if not name:
        return "", {}
    return name, contexts.load_raw(name)
