"""Talking to servers: one nats-py connection, JetStream API requests, $SYS fan-out requests.

The CLI never imports server code: everything goes over the wire as $JS.API and
$SYS.REQ.SERVER requests, so it administers nats-server and jetraft alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import nats
import nats.errors

from jetraft.cli.errors import ApiError, CliError
from jetraft.cli.options import ConnOptions

T = TypeVar("T")

# nats-py's type; the library ships no stubs the project checks against.
Client = Any

# Asynchronous errors each connection reported (nats-py only calls back for permission
# violations), so a request that timed out can say it was refused instead.
_ASYNC_ERRORS: weakref.WeakKeyDictionary[Any, list[BaseException]] = weakref.WeakKeyDictionary()


def permission_denied(nc: Client, subject: str) -> bool:
    """Whether the server reported a permissions violation for publishing to ``subject``
    (nats-py hands the error text over lower-cased)."""
    for exc in _ASYNC_ERRORS.get(nc, []):
        text = str(exc).lower()
        if "permissions violation" in text and f'"{subject.lower()}"' in text:
            return True
    return False


def run(coro: Awaitable[T]) -> T:
    """Runs one command's coroutine to completion on a fresh event loop."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


def _tls_context(opts: ConnOptions) -> ssl.SSLContext | None:
    if not (
        opts.tlsca
        or opts.tlscert
        or opts.tlsfirst
        or any(s.startswith("tls://") for s in opts.servers)
    ):
        return None
    try:
        ctx = ssl.create_default_context(cafile=opts.tlsca or None)
        if opts.tlscert:
            ctx.load_cert_chain(opts.tlscert, opts.tlskey or None)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"could not load TLS files: {exc}") from None
    return ctx


def _urls(opts: ConnOptions) -> list[str]:
    urls = []
    for s in opts.servers:
        urls.append(s if "://" in s else f"nats://{s}")
    return urls


async def connect(opts: ConnOptions) -> Client:
    """Connects or raises CliError naming the servers and why it failed.

    No reconnection: nats-py would retry the first connection for ever, and a one-shot
    command is better told at once that the server went away.
    """
    last: list[BaseException] = []

    async def on_error(exc: Exception) -> None:
        last.append(exc)

    kwargs: dict[str, Any] = {
        "servers": _urls(opts),
        "name": opts.connection_name,
        "connect_timeout": max(1.0, min(opts.timeout_s, 10.0)),
        "allow_reconnect": False,
        # nats-py retries forever when max_reconnect_attempts is 0; 1 means each server is
        # tried at most twice, quickly, before NoServersError.
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.05,
        "error_cb": on_error,
    }
    if opts.user:
        kwargs["user"], kwargs["password"] = opts.user, opts.password
    if opts.token:
        kwargs["token"] = opts.token
    if opts.creds:
        kwargs["user_credentials"] = opts.creds
    if opts.nkey:
        kwargs["nkeys_seed"] = opts.nkey
    if opts.inbox_prefix:
        kwargs["inbox_prefix"] = opts.inbox_prefix
    tls = _tls_context(opts)
    if tls is not None:
        kwargs["tls"] = tls
        kwargs["tls_handshake_first"] = opts.tlsfirst
    try:
        nc = await nats.connect(**kwargs)
    except nats.errors.NoServersError:
        why = _describe(last[-1]) if last else "no server answered"
        raise CliError(f"could not connect to {opts.server_label}: {why}") from None
    except (TimeoutError, nats.errors.Error, OSError) as exc:
        raise CliError(f"could not connect to {opts.server_label}: {_describe(exc)}") from None
    _ASYNC_ERRORS[nc] = last
    return nc


def _describe(exc: BaseException) -> str:
    auth = "authorization violation" in str(exc).lower()
    if auth or isinstance(exc, nats.errors.AuthorizationError):
        return "authorization violation (check the user, password, token, creds or nkey)"
    if isinstance(exc, asyncio.TimeoutError | nats.errors.TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failure: {exc.reason or exc}"
    text = str(exc).strip() or type(exc).__name__
    return text.removeprefix("nats: ")


@asynccontextmanager
async def connected(opts: ConnOptions) -> AsyncIterator[Client]:
    nc = await connect(opts)
    try:
        yield nc
    finally:
        with contextlib.suppress(TimeoutError, nats.errors.Error, OSError):
            await asyncio.wait_for(nc.close(), 5)


class Api:
    """JetStream API requests with the server's JSON back, or ApiError/CliError."""

    def __init__(self, nc: Client, opts: ConnOptions) -> None:
        self.nc = nc
        self.prefix = opts.js_api_prefix
        self.timeout_s = opts.timeout_s

    async def request(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        full = f"{self.prefix}.{subject}"
        try:
            msg = await self.nc.request(full, payload, timeout=self.timeout_s)
        except nats.errors.NoRespondersError:
            raise CliError(
                "no JetStream responders: JetStream is not enabled for this account "
                f"(no reply on {full})"
            ) from None
        except nats.errors.TimeoutError:
            if permission_denied(self.nc, full):
                raise CliError(
                    f'permission denied: this user may not publish to "{full}"'
                ) from None
            raise CliError(
                f"timed out after {self.timeout_s:g}s waiting for a reply on {full}"
            ) from None
        return decode_reply(msg.data, full)


def decode_reply(data: bytes, subject: str) -> dict[str, Any]:
    try:
        reply = json.loads(data) if data else {}
    except ValueError:
        raise CliError(f"the reply on {subject} is not JSON: {data[:80]!r}") from None
    if not isinstance(reply, dict):
        raise CliError(f"the reply on {subject} is not a JSON object")
    error = reply.get("error")
    if isinstance(error, dict):
        raise ApiError.from_reply(error)
    return reply


async def gather(
    nc: Client,
    subject: str,
    body: dict[str, Any] | None,
    timeout_s: float,
    expect: int = 0,
    settle_s: float = 0.3,
) -> list[dict[str, Any]]:
    """Publishes one request and collects every reply (a $SYS.REQ.SERVER.PING fan-out).

    Stops when ``expect`` replies arrived, or (``expect`` 0) ``settle_s`` after the last
    reply, or at ``timeout_s``. A 503 status means nobody listens: usually the user is not in
    the system account.
    """
    inbox = nc.new_inbox()
    replies: list[dict[str, Any]] = []
    done = asyncio.Event()
    last_at = [0.0]
    statuses: list[str] = []

    async def on_msg(msg: Any) -> None:
        status = (msg.headers or {}).get("Status")
        if status:
            statuses.append(status)
            if status == "503" and not replies:
                done.set()  # nobody subscribes to the subject
            return
        try:
            value = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(value, dict):
            replies.append(value)
            last_at[0] = time.monotonic()
            if expect and len(replies) >= expect:
                done.set()

    sub = await nc.subscribe(inbox, cb=on_msg)
    try:
        await nc.publish(subject, json.dumps(body or {}).encode(), reply=inbox, headers=None)
        await nc.flush()
        deadline = time.monotonic() + timeout_s
        while not done.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if not expect and replies and now - last_at[0] >= settle_s:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), min(0.05, deadline - now))
    finally:
        await sub.unsubscribe()
    if not replies:
        why = "no responders" if "503" in statuses else f"no reply within {timeout_s:g}s"
        raise CliError(
            "no results received, ensure the account used has system privileges and "
            f"appropriate permissions ({why} on {subject})"
        )
    return replies


async def poll(
    what: str, step: Callable[[], Awaitable[T | None]], deadline_s: float, every_s: float = 0.5
) -> T:
    """Calls ``step`` every ``every_s`` until it returns a value; CliError after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        await asyncio.sleep(every_s)
        value = await step()
        if value is not None:
            return value
        if time.monotonic() >= end:
            raise CliError(f"{what} did not happen within {deadline_s:g}s")
