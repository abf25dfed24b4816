"""JetStream advisories: the events nats-server publishes on ``$JS.EVENT.ADVISORY.*`` when a
stream or consumer is created, changed or deleted through the API, when a pinned_client
consumer's group gets or loses its pinned client, and when a consumer's message is nakked,
terminated or runs out of deliveries, or the consumer is paused or resumed; and the sampled
ack metric on ``$JS.EVENT.METRIC.CONSUMER.ACK.*``. Tools and client libraries (nats.js's
``jsm.advisories()``, dead-letter handlers watching MAX_DELIVERIES) watch for them.

One server: an action advisory is derived from the API answer that made the change (so only
successful changes advise), and published once that answer has gone out. A cluster: from
the changes the meta group committed (``committed_actions``), by the meta leader that
proposed them. The pin, delivery and pause advisories come from the consumer's leader
(``consumer_events``). A JetStream domain, when configured, is named in each (``domain``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from jetraft.jetstream.meta import Change, StreamChanged
from jetraft.jetstream.models import format_time

PREFIX = "$JS.EVENT.ADVISORY."
METRIC_PREFIX = "$JS.EVENT.METRIC."
_API = "io.nats.jetstream.api.v1."
_STREAM_TYPE = "io.nats.jetstream.advisory.v1.stream_action"
_CONSUMER_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"
_PINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_pinned"
_UNPINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"
_MAX_DELIVER_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"
_NAK_TYPE = "io.nats.jetstream.advisory.v1.nak"
_TERMINATED_TYPE = "io.nats.jetstream.advisory.v1.terminated"
_PAUSE_TYPE = "io.nats.jetstream.advisory.v1.consumer_pause"
_ACK_METRIC_TYPE = "io.nats.jetstream.metric.v1.consumer_ack"
_STREAM_LEADER_TYPE = "io.nats.jetstream.advisory.v1.stream_leader_elected"
_CONSUMER_LEADER_TYPE = "io.nats.jetstream.advisory.v1.consumer_leader_elected"
_DOMAIN_LEADER_TYPE = "io.nats.jetstream.advisory.v1.domain_leader_elected"
_STREAM_QUORUM_TYPE = "io.nats.jetstream.advisory.v1.stream_quorum_lost"
_CONSUMER_QUORUM_TYPE = "io.nats.jetstream.advisory.v1.consumer_quorum_lost"
# Go's zero time, which nats-server's pause advisory carries when no pause is set.
_ZERO_TIME = "0001-01-01T00:00:00Z"


def _event(kind: str, now_ns: int, domain: str = "", **fields: object) -> bytes:
    body = {"type": kind, "id": secrets.token_hex(11), "timestamp": format_time(now_ns), **fields}
    if domain:
        body["domain"] = domain
    return json.dumps(body, separators=(",", ":")).encode()


def stream_action(name: str, action: str, now_ns: int, domain: str = "") -> tuple[str, bytes]:
    """A stream's action advisory; ``action``: create, modify or delete."""
    what = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action]
    body = _event(_STREAM_TYPE, now_ns, domain, stream=name, action=action)
    return f"{PREFIX}STREAM.{what}.{name}", body


def consumer_action(
    stream: str, name: str, action: str, now_ns: int, domain: str = ""
) -> tuple[str, bytes]:
    """A consumer's action advisory; ``action``: create or delete (nats-server advises no
    consumer update)."""
    what = {"create": "CREATED", "delete": "DELETED"}[action]
    body = _event(_CONSUMER_TYPE, now_ns, domain, stream=stream, consumer=name, action=action)
    return f"{PREFIX}CONSUMER.{what}.{stream}.{name}", body


# --- a consumer's deliveries, acks and pause (sent by its leader) -----------------------------

# Each event's subject prefix and body type. MAX_DELIVERIES: a message was delivered
# max_deliver times without an ack and will not be delivered again (dead-letter handlers
# watch for it); MSG_NAKED, MSG_TERMINATED: a -NAK of a pending message, a +TERM; PAUSE: the
# pause was set, changed, lifted or ran out; ACK: a sampled ack (the consumer's sample_freq),
# a metric rather than an advisory.
CONSUMER_EVENTS: dict[str, tuple[str, str]] = {
    "MAX_DELIVERIES": (f"{PREFIX}CONSUMER.MAX_DELIVERIES.", _MAX_DELIVER_TYPE),
    "MSG_NAKED": (f"{PREFIX}CONSUMER.MSG_NAKED.", _NAK_TYPE),
    "MSG_TERMINATED": (f"{PREFIX}CONSUMER.MSG_TERMINATED.", _TERMINATED_TYPE),
    "PAUSE": (f"{PREFIX}CONSUMER.PAUSE.", _PAUSE_TYPE),
    "ACK": (f"{METRIC_PREFIX}CONSUMER.ACK.", _ACK_METRIC_TYPE),
}


def consumer_event_subject(event: str, stream: str, consumer: str) -> str:
    """The subject of one of ``CONSUMER_EVENTS`` for a consumer."""
    return f"{CONSUMER_EVENTS[event][0]}{stream}.{consumer}"


def consumer_event(
    event: str, stream: str, consumer: str, now_ns: int, domain: str, **fields: object
) -> bytes:
    """The body of one of ``CONSUMER_EVENTS``: the stream and consumer, then ``fields`` as
    nats-server names them (consumer_seq, stream_seq, deliveries, reason, ack_time, paused,
    pause_until)."""
    kind = CONSUMER_EVENTS[event][1]
    return _event(kind, now_ns, domain, stream=stream, consumer=consumer, **fields)


def pause_fields(pause_until: str, paused: bool) -> dict[str, object]:
    """The PAUSE event's fields: ``pause_until`` the configured end ("" when none: Go's zero
    time, as nats-server sends), ``paused`` False once it ran out or was lifted."""
    return {"paused": paused, "pause_until": pause_until or _ZERO_TIME}


# --- clustered: a group elected a leader (sent by the new leader) ----------------------------


def stream_leader_elected(
    account: str,
    stream: str,
    leader: str,
    replicas: list[dict[str, Any]],
    now_ns: int,
    domain: str = "",
) -> tuple[str, bytes]:
    """A stream's group has a new leader (this server). ``account`` "" for the copy sent
    into the stream's own account; the system account's copy names it."""
    fields: dict[str, object] = {"account": account} if account else {}
    body = _event(
        _STREAM_LEADER_TYPE,
        now_ns,
        domain,
        **fields,
        stream=stream,
        leader=leader,
        replicas=replicas,
    )
    return f"{PREFIX}STREAM.LEADER_ELECTED.{stream}", body


def consumer_leader_elected(
    account: str,
    stream: str,
    consumer: str,
    leader: str,
    replicas: list[dict[str, Any]],
    now_ns: int,
    domain: str = "",
) -> tuple[str, bytes]:
    """A consumer's group has a new leader (as ``stream_leader_elected``)."""
    fields: dict[str, object] = {"account": account} if account else {}
    body = _event(
        _CONSUMER_LEADER_TYPE,
        now_ns,
        domain,
        **fields,
        stream=stream,
        consumer=consumer,
        leader=leader,
        replicas=replicas,
    )
    return f"{PREFIX}CONSUMER.LEADER_ELECTED.{stream}.{consumer}", body


def stream_quorum_lost(
    account: str, stream: str, replicas: list[dict[str, Any]], now_ns: int, domain: str = ""
) -> tuple[str, bytes]:
    """A stream's leader (this server) stepped down: it could not hear a quorum, so the
    stream accepts nothing until one forms again. ``account`` as in stream_leader_elected."""
    fields: dict[str, object] = {"account": account} if account else {}
    body = _event(_STREAM_QUORUM_TYPE, now_ns, domain, **fields, stream=stream, replicas=replicas)
    return f"{PREFIX}STREAM.QUORUM_LOST.{stream}", body


def consumer_quorum_lost(
    account: str,
    stream: str,
    consumer: str,
    replicas: list[dict[str, Any]],
    now_ns: int,
    domain: str = "",
) -> tuple[str, bytes]:
    """A consumer's leader stepped down for want of a quorum (as stream_quorum_lost)."""
    fields: dict[str, object] = {"account": account} if account else {}
    body = _event(
        _CONSUMER_QUORUM_TYPE,
        now_ns,
        domain,
        **fields,
        stream=stream,
        consumer=consumer,
        replicas=replicas,
    )
    return f"{PREFIX}CONSUMER.QUORUM_LOST.{stream}.{consumer}", body


def domain_leader_elected(
    leader_id: str, replicas: list[dict[str, Any]], cluster: str, now_ns: int, domain: str = ""
) -> tuple[str, bytes]:
    """The meta group has a new leader (this server; ``leader_id`` its RAFT peer id, as
    nats-server names it here). Sent into the system account only."""
    body = _event(
        _DOMAIN_LEADER_TYPE,
        now_ns,
        domain,
        leader=leader_id,
        replicas=replicas,
        cluster=cluster,
    )
    return f"{PREFIX}DOMAIN.LEADER_ELECTED", body


def committed_actions(
    changes: Iterable[Change], now_ns: int, domain: str = ""
) -> list[tuple[str, bytes]]:
    """The action advisories of changes the meta group committed, in their order (removing
    a stream removes its consumers first: each is advised, as nats-server does). A changed
    consumer advises nothing."""
    out: list[tuple[str, bytes]] = []
    for change in changes:
        if change.old is None and change.new is None:
            continue
        action = "create" if change.old is None else "delete" if change.new is None else "modify"
        if isinstance(change, StreamChanged):
            out.append(stream_action(change.key[1], action, now_ns, domain))
        elif action != "modify":
            out.append(consumer_action(change.key[1], change.key[2], action, now_ns, domain))
    return out


def pinned(
    account: str,
    stream: str,
    consumer: str,
    group: str,
    pin_id: str,
    now_ns: int,
    domain: str = "",
) -> tuple[str, bytes]:
    """A priority group got a new pinned client (``pin_id``, its Nats-Pin-Id)."""
    body = _event(
        _PINNED_TYPE,
        now_ns,
        domain,
        account=account,
        stream=stream,
        consumer=consumer,
        group=group,
        pinned_id=pin_id,
    )
    return f"{PREFIX}CONSUMER.PINNED.{stream}.{consumer}", body


def unpinned(
    account: str,
    stream: str,
    consumer: str,
    group: str,
    reason: str,
    now_ns: int,
    domain: str = "",
) -> tuple[str, bytes]:
    """A priority group's pin was taken (``reason`` "admin": CONSUMER.UNPIN) or lapsed
    ("timeout": the pinned client sent no pull request for priority_timeout)."""
    body = _event(
        _UNPINNED_TYPE,
        now_ns,
        domain,
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
    api_subject: str,
    out: Any,
    existed: bool,
    doomed: Iterable[str],
    now_ns: int,
    domain: str = "",
) -> list[tuple[str, bytes]]:
    """(subject, body) of the advisories an API answer calls for; ``doomed``: what
    ``doomed_consumers`` found before the request."""
    advisory = _action_advisory(api_subject, out, existed, now_ns, domain)
    if advisory is None:
        return []
    if advisory[0].startswith(f"{PREFIX}STREAM.DELETED."):
        stream = api_subject.split(".")[4]
        deleted = [consumer_action(stream, name, "delete", now_ns, domain) for name in doomed]
        return [*deleted, advisory]
    return [advisory]


def _action_advisory(
    api_subject: str, out: Any, existed: bool, now_ns: int, domain: str
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
            name, "create" if kind == "stream_create_response" else "modify", now_ns, domain
        )
    if kind == "stream_delete_response" and out.get("success") and len(toks) == 5:
        return stream_action(toks[4], "delete", now_ns, domain)
    if kind == "consumer_create_response" and not existed:
        stream, name = str(out.get("stream_name", "")), str(out.get("name", ""))
        return consumer_action(stream, name, "create", now_ns, domain)
    if kind == "consumer_delete_response" and out.get("success") and len(toks) == 6:
        return consumer_action(toks[4], toks[5], "delete", now_ns, domain)
    return None
