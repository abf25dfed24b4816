"""JetStream API calls the connector makes, over the wire through nats-py.

Every call here is a plain ``$JS.API.*`` request with a JSON body. Transient failures (no
responders while a server restarts, request timeouts, 503 "temporarily unavailable" while a
leader is elected) are retried with a bounded backoff; permanent ones raise JetStreamError
with the server's description.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client

from jetraft.spark.codec import format_rfc3339_ns

API = "$JS.API"
TRANSIENT_ERR_CODES = frozenset({10008, 10023, 10118})


class JetStreamError(RuntimeError):
    """An API error answer: ``code`` is HTTP-like, ``err_code`` the JetStream code."""

    def __init__(self, code: int, err_code: int, description: str, subject: str) -> None:
        super().__init__(f"{description} (code {code}, err_code {err_code}) on {subject}")
        self.code = code
        self.err_code = err_code
        self.description = description


class StreamNotFound(JetStreamError):
    pass


@dataclass(frozen=True, slots=True)
class StreamState:
    name: str
    first_seq: int
    last_seq: int
    messages: int
    allow_direct: bool
    subjects: tuple[str, ...]
    duplicate_window_ns: int


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry schedule: attempts and the delay before each retry (capped doubling)."""

    attempts: int = 20
    first_delay_s: float = 0.05
    max_delay_s: float = 1.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.first_delay_s * (2 ** min(attempt, 10))))


async def api_request(
    nc: Client,
    subject: str,
    body: dict[str, Any] | None,
    timeout_s: float,
    backoff: Backoff = Backoff(),
) -> dict[str, Any]:
    """JSON request/response with retry on transient failures; raises JetStreamError."""
    payload = json.dumps(body).encode() if body is not None else b""
    last: Exception | None = None
    for attempt in range(backoff.attempts + 1):
        if attempt:
            await asyncio.sleep(backoff.delay(attempt))
        try:
            msg = await nc.request(subject, payload, timeout=timeout_s)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            last = exc
            continue
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as exc:
            last = exc
            continue
        reply: dict[str, Any] = json.loads(msg.data) if msg.data else {}
        err = reply.get("error")
        if err:
            error = _api_error(err, subject)
            if error.err_code in TRANSIENT_ERR_CODES or error.code == 503:
                last = error
                continue
            raise error
        return reply
    raise TimeoutError(f"no answer to {subject} after {backoff.attempts + 1} tries: {last}")


def _api_error(err: dict[str, Any], subject: str) -> JetStreamError:
    code = int(err.get("code", 0))
    err_code = int(err.get("err_code", 0))
    desc = str(err.get("description", "unknown error"))
    if err_code == 10059:
        return StreamNotFound(code, err_code, desc, subject)
    return JetStreamError(code, err_code, desc, subject)


async def stream_state(nc: Client, stream: str, timeout_s: float) -> StreamState:
    info = await api_request(nc, f"{API}.STREAM.INFO.{stream}", None, timeout_s)
    cfg = info.get("config", {})
    st = info.get("state", {})
    return StreamState(
        name=stream,
        first_seq=int(st.get("first_seq", 0)),
        last_seq=int(st.get("last_seq", 0)),
        messages=int(st.get("messages", 0)),
        allow_direct=bool(cfg.get("allow_direct", False)),
        subjects=tuple(cfg.get("subjects") or ()),
        duplicate_window_ns=int(cfg.get("duplicate_window", 0)),
    )


@dataclass(frozen=True, slots=True)
class StoredMsg:
    seq: int
    subject: str
    time: str
    data: bytes
    headers: bytes | None


async def msg_get(
    nc: Client, stream: str, body: dict[str, Any], timeout_s: float
) -> StoredMsg | None:
    """STREAM.MSG.GET from the stream leader; None when there is no such message."""
    try:
        reply = await api_request(nc, f"{API}.STREAM.MSG.GET.{stream}", body, timeout_s)
    except JetStreamError as exc:
        if exc.err_code == 10037 or exc.code == 404:
            return None
        raise
    m = reply["message"]
    hdrs = m.get("hdrs")
    return StoredMsg(
        seq=int(m["seq"]),
        subject=str(m["subject"]),
        time=str(m.get("time", "")),
        data=base64.b64decode(m.get("data") or ""),
        headers=base64.b64decode(hdrs) if hdrs else None,
    )


async def first_seq_at_or_after(
    nc: Client, stream: str, epoch_ns: int, timeout_s: float
) -> int | None:
    """Sequence of the first message stored at or after a time; None if there is none."""
    body = {"start_time": format_rfc3339_ns(epoch_ns)}
    msg = await msg_get(nc, stream, body, timeout_s)
    return None if msg is None else msg.seq


async def next_existing(
    nc: Client, stream: str, seq: int, subject_filter: str, timeout_s: float
) -> StoredMsg | None:
    """The leader's first message at or after ``seq`` on a filter (">" = any subject)."""
    return await msg_get(nc, stream, {"seq": seq, "next_by_subj": subject_filter}, timeout_s)
