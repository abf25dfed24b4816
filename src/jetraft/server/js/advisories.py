"""JetStream action advisories: the events nats-server publishes on ``$JS.EVENT.ADVISORY.*``
when a stream or consumer is created, changed or deleted through the API. Tools and client
libraries (nats.js's ``jsm.advisories()``) watch for them.

Derived from the API answer that made the change (so only successful changes advise), and
published once that answer has gone out.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from jetraft.jetstream.models import format_time

PREFIX = "$JS.EVENT.ADVISORY."
_API = "io.nats.jetstream.api.v1."
_STREAM_TYPE = "io.nats.jetstream.advisory.v1.stream_action"
_CONSUMER_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"


def _event(kind: str, now_ns: int, **fields: str) -> bytes:
    body = {"type": kind, "id": secrets.token_hex(11), "timestamp": format_time(now_ns), **fields}
    return json.dumps(body, separators=(",", ":")).encode()


def existed_before(api_subject: str, lookup: Callable[[str, str], bool]) -> bool:
    """Whether the stream or named consumer a create request names exists already (a repeated
    create changes nothing and advises nothing). ``lookup(stream, consumer)``, consumer ""
    for the stream itself."""
    toks = api_subject.split(".")
    if toks[2:4] == ["STREAM", "CREATE"] and len(toks) == 5:
        return lookup(toks[4], "")
    if toks[2:4] == ["CONSUMER", "CREATE"] and len(toks) >= 6:
        return lookup(toks[4], toks[5])
    if toks[2:5] == ["CONSUMER", "DURABLE", "CREATE"] and len(toks) == 7:
        return lookup(toks[5], toks[6])
    return False


def action_advisory(
    api_subject: str, out: Any, existed: bool, now_ns: int
) -> tuple[str, bytes] | None:
    """(subject, body) of the advisory an API answer calls for, None when none does."""
    if not isinstance(out, dict) or "error" in out:
        return None
    kind = str(out.get("type", ""))
    if not kind.startswith(_API):
        return None
    kind = kind[len(_API) :]
    toks = api_subject.split(".")
    if kind in ("stream_create_response", "stream_update_response"):
        if kind == "stream_create_response" and existed:
            return None
        name = str(out.get("config", {}).get("name", ""))
        what, action = ("CREATED", "create") if kind.startswith("stream_create") else (
            "UPDATED", "modify")
        return f"{PREFIX}STREAM.{what}.{name}", _event(_STREAM_TYPE, now_ns, stream=name,
                                                     action=action)
    if kind == "stream_delete_response" and out.get("success") and len(toks) == 5:
        name = toks[4]
        return f"{PREFIX}STREAM.DELETED.{name}", _event(_STREAM_TYPE, now_ns, stream=name,
                                                      action="delete")
    if kind == "consumer_create_response" and not existed:
        stream, name = str(out.get("stream_name", "")), str(out.get("name", ""))
        return f"{PREFIX}CONSUMER.CREATED.{stream}.{name}", _event(
            _CONSUMER_TYPE, now_ns, stream=stream, consumer=name, action="create")
    if kind == "consumer_delete_response" and out.get("success") and len(toks) == 6:
        stream, name = toks[4], toks[5]
        return f"{PREFIX}CONSUMER.DELETED.{stream}.{name}", _event(
            _CONSUMER_TYPE, now_ns, stream=stream, consumer=name, action="delete")
    return None
