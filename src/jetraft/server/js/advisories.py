"""JetStream advisories: the events nats-server publishes on ``$JS.EVENT.ADVISORY.*`` when a
stream or consumer is created, changed or deleted through the API, and when a pinned_client
consumer's group gets or loses its pinned client. Tools and client libraries (nats.js's
``jsm.advisories()``) watch for them.

One server: an action advisory is derived from the API answer that made the change (so only
successful changes advise), and published once that answer has gone out. A cluster: from
the changes the meta group committed (``committed_actions``), by the meta leader that
proposed them. The pin advisories come from the consumer's leader (``consumer_pin``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from jetraft.jetstream.meta import Change, StreamChanged
from jetraft.jetstream.models import format_time

PREFIX = "$JS.EVENT.ADVISORY."
_API = "io.nats.jetstream.api.v1."
_STREAM_TYPE = "io.nats.jetstream.advisory.v1.stream_action"
_CONSUMER_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"
_PINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_pinned"
_UNPINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"


def _event(kind: str, now_ns: int, **fields: str) -> bytes:
    body = {"type": kind, "id": secrets.token_hex(11), "timestamp": format_time(now_ns), **fields}
    return json.dumps(body, separators=(",", ":")).encode()


def stream_action(name: str, action: str, now_ns: int) -> tuple[str, bytes]:
    """A stream's action advisory; ``action``: create, modify or delete."""
    what = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action]
    body = _event(_STREAM_TYPE, now_ns, stream=name, action=action)
    return f"{PREFIX}STREAM.{what}.{name}", body


def consumer_action(stream: str, name: str, action: str, now_ns: int) -> tuple[str, bytes]:
    """A consumer's action advisory; ``action``: create or delete (nats-server advises no
    consumer update)."""
    what = {"create": "CREATED", "delete": "DELETED"}[action]
    body = _event(_CONSUMER_TYPE, now_ns, stream=stream, consumer=name, action=action)
    return f"{PREFIX}CONSUMER.{what}.{stream}.{name}", body


def committed_actions(changes: Iterable[Change], now_ns: int) -> list[tuple[str, bytes]]:
    """The action advisories of changes the meta group committed, in their order (removing
    a stream removes its consumers first: each is advised, as nats-server does). A changed
    consumer advises nothing."""
    out: list[tuple[str, bytes]] = []
    for change in changes:
        if change.old is None and change.new is None:
            continue
        action = "create" if change.old is None else "delete" if change.new is None else "modify"
        if isinstance(change, StreamChanged):
            out.append(stream_action(change.key[1], action, now_ns))
        elif action != "modify":
            out.append(consumer_action(change.key[1], change.key[2], action, now_ns))
    return out


def pinned(
    account: str, stream: str, consumer: str, group: str, pin_id: str, now_ns: int
) -> tuple[str, bytes]:
    """A priority group got a new pinned client (``pin_id``, its Nats-Pin-Id)."""
    body = _event(
        _PINNED_TYPE,
        now_ns,
        account=account,
        stream=stream,
        consumer=consumer,
        group=group,
        pinned_id=pin_id,
    )
    return f"{PREFIX}CONSUMER.PINNED.{stream}.{consumer}", body


def unpinned(
    account: str, stream: str, consumer: str, group: str, reason: str, now_ns: int
) -> tuple[str, bytes]:
    """A priority group's pin was taken (``reason`` "admin": CONSUMER.UNPIN) or lapsed
    ("timeout": the pinned client sent no pull request for priority_timeout)."""
    body = _event(
        _UNPINNED_TYPE,
        now_ns,
        account=account,
        stream=stream,
        consumer=consumer,
        group=group,
        reason=reason,
    )
    return f"{PREFIX}CONSUMER.UNPINNED.{stream}.{consumer}", body


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


def doomed_consumers(api_subject: str, consumers_of: Callable[[str], Iterable[str]]) -> list[str]:
    """The consumers a STREAM.DELETE request would take with the stream (each is advised as
    deleted, before the stream); none for any other request."""
    toks = api_subject.split(".")
    if toks[2:4] == ["STREAM", "DELETE"] and len(toks) == 5:
        return list(consumers_of(toks[4]))
    return []


def action_advisories(
    api_subject: str, out: Any, existed: bool, doomed: Iterable[str], now_ns: int
) -> list[tuple[str, bytes]]:
    """(subject, body) of the advisories an API answer calls for; ``doomed``: what
    ``doomed_consumers`` found before the request."""
    advisory = _action_advisory(api_subject, out, existed, now_ns)
    if advisory is None:
        return []
    if advisory[0].startswith(f"{PREFIX}STREAM.DELETED."):
        stream = api_subject.split(".")[4]
        return [consumer_action(stream, name, "delete", now_ns) for name in doomed] + [advisory]
    return [advisory]


def _action_advisory(
    api_subject: str, out: Any, existed: bool, now_ns: int
) -> tuple[str, bytes] | None:
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
        return stream_action(
            name, "create" if kind == "stream_create_response" else "modify", now_ns
        )
    if kind == "stream_delete_response" and out.get("success") and len(toks) == 5:
        return stream_action(toks[4], "delete", now_ns)
    if kind == "consumer_create_response" and not existed:
        stream, name = str(out.get("stream_name", "")), str(out.get("name", ""))
        return consumer_action(stream, name, "create", now_ns)
    if kind == "consumer_delete_response" and out.get("success") and len(toks) == 6:
        return consumer_action(toks[4], toks[5], "delete", now_ns)
    return None
