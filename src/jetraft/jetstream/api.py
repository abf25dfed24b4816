"""The ``$JS.API`` table: subject pattern -> handler, plus the dispatch rules every request
shares (API level header, error trap, counters, response shapes).

Contract for handlers (stream ones live in ``stream_api``, consumer ones in ``consumer_api``;
the shapes and constants they share in ``api_types``)::

    handler(ctx, subject, reply, data) -> Response

* ``ctx`` is the JetStream account context the server's manager passes in; each handler module
  declares the narrow Protocol it needs and the manager's context implements all of them.
* ``subject`` is the full request subject, always in the ``$JS.API.`` form (a domain prefix
  ``$JS.<domain>.API.`` is rewritten before dispatch), ``reply`` the requester's inbox ("" when
  none), ``data`` the raw body.
* The return value is one of: a dict (JSON-encoded and sent to ``reply``), ``RawReply`` (a
  message with headers, for DIRECT.GET; a list of them for batched answers), ``StatusReply``
  (a bare status such as 503, what a requester sees when nobody serves the subject), or None
  (the handler answered by itself, or nothing must be answered). The legacy form
  ``{"__status__": 503}`` means ``StatusReply(503)``.

Patterns are relative to ``$JS.API.`` and use NATS wildcards; the first registered pattern that
matches wins. Unknown API subjects are not answered at all, as nats-server does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from jetraft.jetstream import consumer_api, stream_api
from jetraft.jetstream.api_types import (
    API_LEVEL,
    API_PREFIX,
    REQUIRED_LEVEL_HEADER,
    TYPE_PREFIX,
    ApiStats,
    Handler,
    Response,
    StatusReply,
)
from jetraft.jetstream.errors import ApiError, api_error, error_body
from jetraft.protocol.headers import header_value
from jetraft.protocol.subjects import subject_matches

log = logging.getLogger("jetraft.js.api")


# Response type suffix by pattern prefix, for errors produced centrally (API level, crashes).
_KINDS: tuple[tuple[str, str], ...] = (
    ("INFO", "account_info_response"),
    ("STREAM.CREATE.", "stream_create_response"),
    ("STREAM.UPDATE.", "stream_update_response"),
    ("STREAM.INFO.", "stream_info_response"),
    ("STREAM.DELETE.", "stream_delete_response"),
    ("STREAM.PURGE.", "stream_purge_response"),
    ("STREAM.NAMES", "stream_names_response"),
    ("STREAM.LIST", "stream_list_response"),
    ("STREAM.MSG.GET.", "stream_msg_get_response"),
    ("STREAM.MSG.DELETE.", "stream_msg_delete_response"),
    ("STREAM.LEADER.STEPDOWN.", "stream_leader_stepdown_response"),
    ("STREAM.PEER.REMOVE.", "stream_remove_peer_response"),
    ("CONSUMER.CREATE.", "consumer_create_response"),
    ("CONSUMER.DURABLE.CREATE.", "consumer_create_response"),
    ("CONSUMER.INFO.", "consumer_info_response"),
    ("CONSUMER.DELETE.", "consumer_delete_response"),
    ("CONSUMER.NAMES.", "consumer_names_response"),
    ("CONSUMER.LIST.", "consumer_list_response"),
    ("CONSUMER.PAUSE.", "consumer_pause_response"),
    ("CONSUMER.UNPIN.", "consumer_unpin_response"),
    ("CONSUMER.LEADER.STEPDOWN.", "consumer_leader_stepdown_response"),
)


def kind_for(pattern: str) -> str:
    """The response type suffix for a pattern ("" for raw answers such as DIRECT.GET)."""
    for prefix, kind in _KINDS:
        if pattern == prefix or pattern.startswith(prefix):
            return kind
    return ""


@dataclass(frozen=True, slots=True)
class Route:
    pattern: str  # relative to $JS.API.
    full: str  # with the prefix, for subject matching
    handler: Handler
    kind: str  # response type suffix; "" = no JSON envelope


@dataclass(slots=True)
class ApiTable:
    routes: list[Route] = field(default_factory=list)
    stats: ApiStats = field(default_factory=ApiStats)

    def register(self, pattern: str, handler: Handler, kind: str | None = None) -> None:
        """Serve ``$JS.API.<pattern>`` with ``handler``. ``kind`` is the response type suffix
        used for errors raised centrally; by default derived from the pattern."""
        pattern = pattern.removeprefix(API_PREFIX)
        self.routes.append(
            Route(
                pattern, API_PREFIX + pattern, handler, kind_for(pattern) if kind is None else kind
            )
        )

    def lookup(self, subject: str) -> Route | None:
        for route in self.routes:
            if subject_matches(route.full, subject):
                return route
        return None

    def dispatch(
        self, ctx: Any, subject: str, reply: str, hdr: bytes | None, data: bytes
    ) -> Response:
        """Serve one request; the caller sends what comes back to ``reply``."""
        route = self.lookup(subject)
        if route is None:
            log.debug("no JetStream API handler for %s", subject)
            return None
        if route.kind and hdr:
            level = header_value(hdr, REQUIRED_LEVEL_HEADER)
            if level is not None and _level_too_high(level):
                self.stats.total += 1
                self.stats.errors += 1
                return error_response(route.kind, api_error(10185))
        try:
            out = route.handler(ctx, subject, reply, data)
        except ApiError as exc:
            out = error_response(route.kind or "system_response", exc)
        except Exception:
            # A bug must never take the server down or leave the requester hanging.
            log.exception("JetStream API handler for %s failed", subject)
            failure = api_error(
                10051 if not route.kind.startswith("consumer") else 10012, err="internal error"
            )
            out = error_response(route.kind or "system_response", failure)
        # Counted once answered: $JS.API.INFO reports the requests before itself, as
        # nats-server's does.
        self.stats.total += 1
        if isinstance(out, dict):
            status = out.get("__status__")
            if status is not None:
                return StatusReply(int(status))
            if "error" in out:
                self.stats.errors += 1
        return out  # type: ignore[no-any-return]


def _level_too_high(text: str) -> bool:
    try:
        return int(text.strip()) > API_LEVEL
    except ValueError:
        return True


def error_response(kind: str, err: ApiError) -> dict[str, Any]:
    return error_body(TYPE_PREFIX + kind, err)


def normalise_subject(subject: str, domain: str | None) -> str | None:
    """``$JS.<domain>.API.x`` -> ``$JS.API.x`` for our domain; None when it is not an API
    subject we serve."""
    if subject.startswith(API_PREFIX):
        return subject
    if domain:
        prefix = f"$JS.{domain}.API."
        if subject.startswith(prefix):
            return API_PREFIX + subject[len(prefix) :]
    return None


# --- the shared table --------------------------------------------------------------------------

_EXTRA: list[tuple[str, Handler, str | None]] = []


def register(pattern: str, handler: Handler, kind: str | None = None) -> None:
    """Add a handler to every table built from now on (``build_table``)."""
    _EXTRA.append((pattern, handler, kind))


def build_table() -> ApiTable:
    """The full API: stream handlers, consumer handlers, and anything ``register``-ed."""
    table = ApiTable()
    for pattern, handler in stream_api.HANDLERS.items():
        table.register(pattern, handler)
    for pattern, handler in consumer_api.HANDLERS.items():
        table.register(pattern, handler)
    for pattern, handler, kind in _EXTRA:
        table.register(pattern, handler, kind)
    return table
