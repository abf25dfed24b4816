"""One private asyncio loop per Python worker process, and the connections that live on it.

Spark calls a reader's ``read()`` and a writer's ``write()`` as plain (blocking) Python in a
worker process, and reuses that process for later tasks. nats-py is asyncio, so each process
runs one event loop in a daemon thread and submits coroutines to it; connections are cached per
``ConnOptions`` and reused by every task the process runs. Spark forks workers, so everything
is keyed by pid: a forked child never touches its parent's loop or sockets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

import nats
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol import command as prot_command

from jetraft.spark.bulkparse import BulkParser, BulkSink
from jetraft.spark.options import ConnOptions

T = TypeVar("T")


class RawHeaders(dict[str, str]):
    """nats-py's header dict plus the raw block, so repeated names are not lost."""

    raw: bytes = b""



class JetClient(Client):
    """nats-py client with additions for bulk traffic.

    - bulk subscriptions: the protocol parser (``bulkparse``) hands each run of messages for
      them to a synchronous sink as raw frames, skipping nats-py's per-message coroutine,
      ``Msg`` object, header dict, queue and task switch;
    - publishing prebuilt protocol frames (many HPUBs in one write) and single messages with
      a prebuilt header block (nats-py's dict form cannot repeat names).
    Every other subscription behaves exactly as in nats-py.
    """

    def __init__(self) -> None:
        super().__init__()
        self._bulk = BulkParser(self)
        self._ps = self._bulk

    async def bulk_subscribe(self, subject: str, sink: BulkSink) -> Subscription:
        sub = await self.subscribe(subject, pending_msgs_limit=-1, pending_bytes_limit=-1)
        self._bulk.sinks[sub._id] = sink
        return sub

    async def bulk_unsubscribe(self, sub: Subscription) -> None:
        self._bulk.sinks.pop(sub._id, None)
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()

    async def publish_frames(self, frames: bytes) -> None:
        """Write prebuilt PUB/HPUB frames (the caller checked subjects and sizes). Raises as
        nats-py's publish does when the connection is closed or its buffer is full."""
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if not self.is_connected and (
            self._max_pending_size <= 0
            or len(frames) + self._pending_data_size > self._max_pending_size
        ):
            raise nats.errors.OutboundBufferLimitError
        await self._send_command(frames)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        # Replaces nats-py's parser (same resulting dict: "Status", "Description" and the
        # headers, last value wins), which costs ~100 us per message checking every character
        # of every name; direct-get answers carry six headers each, so it dominated reads.
        if not headers:
            return None
        out = RawHeaders()
        out.raw = bytes(headers)
        lines = out.raw.split(b"\r\n")
        first = lines[0]
        if len(first) > 9 and first[8:9] == b" ":
            code, _, desc = first[9:].strip().partition(b" ")
            if code.isdigit():
                out["Status"] = code.decode()
            if desc:
                out["Description"] = desc.strip().decode("utf-8", "replace")
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            key = name.strip().decode("ascii", "replace")
            if not key or " " in key or "\t" in key:
                continue
            out[key] = value.strip().decode("utf-8", "replace")
        return out or None

    async def publish_with_header_block(
        self, subject: str, reply: str, header_block: bytes, payload: bytes
    ) -> None:
        """HPUB with headers encoded by the caller (nats-py's dict form cannot repeat names)."""
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if len(payload) + len(header_block) > self._max_payload:
            raise nats.errors.MaxPayloadError
        cmd = prot_command.hpub_cmd(subject, reply, header_block, payload)
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += len(payload)
        await self._send_command(cmd)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()


class _Runtime:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[ConnOptions, JetClient] = {}
        self.locks: dict[ConnOptions, asyncio.Lock] = {}
        self.thread = threading.Thread(target=self._run, name="jetraft-spark-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def _get_runtime() -> _Runtime:
    global _runtime
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = _Runtime()
        return _runtime


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]], timeout_s: float | None = None) -> T:
    """Run a coroutine on this process's loop and wait for its result."""
    runtime = _get_runtime()
    future = asyncio.run_coroutine_threadsafe(factory(), runtime.loop)
    return future.result(timeout=timeout_s)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start a coroutine on this process's loop without waiting for it."""
    return asyncio.run_coroutine_threadsafe(coro, _get_runtime().loop)


def call_soon(callback: Callable[[], object]) -> None:
    """Run a plain callable on this process's loop thread (thread-safe)."""
    _get_runtime().loop.call_soon_threadsafe(callback)


def _tls_context(opts: ConnOptions) -> ssl.SSLContext | None:
    wants_tls = any(s.startswith("tls://") for s in opts.servers)
    if not (opts.tls_ca_file or opts.tls_cert_file or wants_tls):
        return None
    ctx = ssl.create_default_context(cafile=opts.tls_ca_file)
    if opts.tls_cert_file and opts.tls_key_file:
        ctx.load_cert_chain(opts.tls_cert_file, opts.tls_key_file)
    return ctx


def _connect_kwargs(opts: ConnOptions, tls: ssl.SSLContext | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "servers": list(opts.servers),
        "connect_timeout": opts.connect_timeout_s,
        # Few attempts while connecting for the first time, so a wrong URL fails fast;
        # unlimited once connected (set in _open), so a restarting server is ridden out.
        "max_reconnect_attempts": 2,
        "reconnect_time_wait": 0.25,
        "allow_reconnect": True,
        "name": "jetraft-spark",
    }
    if opts.user:
        kwargs["user"] = opts.user
    if opts.password:
        kwargs["password"] = opts.password
    if opts.token:
        kwargs["token"] = opts.token
    if opts.creds_file:
        kwargs["user_credentials"] = opts.creds_file
    if opts.nkey_seed_file:
        kwargs["nkeys_seed"] = opts.nkey_seed_file
    if tls is not None:
        kwargs["tls"] = tls
    return kwargs


_HANG_UPS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, EOFError)


def _connect_error(opts: ConnOptions, tls_used: bool, cause: BaseException) -> ConnectionError:
    text = str(cause) or type(cause).__name__
    # A server that verifies client certificates hangs up right after the handshake (TLS 1.3)
    # when the client sent none; the client mostly sees only the connection end.
    hung_up = isinstance(cause, _HANG_UPS)
    if tls_used and hung_up:
        text = "the server closed the connection during the TLS handshake"
    if tls_used and not opts.tls_cert_file and (hung_up or "certificate required" in text):
        text += " (if it verifies client certificates, give tlsCertFile and tlsKeyFile)"
    return ConnectionError(f"jetstream source: cannot connect to {', '.join(opts.servers)}: {text}")


async def _open(opts: ConnOptions) -> JetClient:
    client = JetClient()
    tls = _tls_context(opts)
    kwargs = _connect_kwargs(opts, tls)
    errors: list[BaseException] = []
    fatal = asyncio.Event()

    async def _record(exc: Exception) -> None:
        # nats-py reports through error_cb; keep the first cause for a clear message.
        if len(errors) < 8:
            errors.append(exc)
        if isinstance(exc, ssl.SSLError):
            fatal.set()  # a bad certificate does not heal by retrying

    kwargs["error_cb"] = _record
    connect = asyncio.ensure_future(client.connect(**kwargs))
    failed = asyncio.ensure_future(fatal.wait())
    # Bounded: after a failed TLS handshake nats-py (2.16) waits forever for the dead socket
    # to close, so connect() would never return.
    bound_s = opts.connect_timeout_s * 4 + 2
    await asyncio.wait({connect, failed}, timeout=bound_s, return_when=asyncio.FIRST_COMPLETED)
    failed.cancel()
    if not connect.done():
        connect.cancel()
        await asyncio.wait({connect}, timeout=1)
    exc = connect.exception() if connect.done() and not connect.cancelled() else None
    if exc is not None or not connect.done() or connect.cancelled():
        cause = errors[0] if errors else (exc or TimeoutError(f"no answer in {bound_s:g} s"))
        raise _connect_error(opts, tls is not None, cause) from exc
    if not client.is_connected:
        # nats-py returns from connect() without an error when the server hangs up before
        # its PONG: no connection, and nothing said.
        await asyncio.wait({asyncio.ensure_future(_close_quietly(client))}, timeout=1)
        raise _connect_error(opts, tls is not None, EOFError("connection closed by the server"))
    client.options["max_reconnect_attempts"] = -1
    errors.clear()
    return client


async def connection(opts: ConnOptions) -> JetClient:
    """The process-wide connection for these options, opened on first use.

    The initial connect does not retry forever (a wrong URL must fail the task quickly);
    once connected, nats-py reconnects without limit, so a restarting server is ridden out.
    """
    runtime = _get_runtime()
    lock = runtime.locks.setdefault(opts, asyncio.Lock())
    async with lock:
        client = runtime.clients.get(opts)
        if client is not None and not client.is_closed:
            return client
        client = await _open(opts)
        runtime.clients[opts] = client
        return client


async def fresh_connection(opts: ConnOptions) -> JetClient:
    """A connection that is not cached: for one-off checks on the driver."""
    return await _open(opts)


def close_all() -> None:
    """Close this process's cached connections (tests and benchmarks)."""
    runtime = _get_runtime()

    async def _close() -> None:
        for client in list(runtime.clients.values()):
            await _close_quietly(client)
        runtime.clients.clear()

    run_sync(_close, timeout_s=10)


async def _close_quietly(client: Client) -> None:
    try:
        await client.close()
    except Exception:  # closing a dead connection can raise; nothing to do about it
        return


async def with_timeout(aw: Awaitable[T], timeout_s: float) -> T:
    return cast(T, await asyncio.wait_for(aw, timeout_s))
