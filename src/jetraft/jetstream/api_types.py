"""The words every ``$JS.API`` handler module shares: subject and type prefixes, the API
level, the non-JSON answer shapes and the request counters. Kept below the API table
(``api``), which imports the handler modules, so that those can use them without a loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

API_PREFIX = "$JS.API."
TYPE_PREFIX = "io.nats.jetstream.api.v1."
# The JetStream API level we implement (nats-server 2.11 semantics); requests carrying a
# ``Nats-Required-Api-Level`` above it are refused with 10185.
API_LEVEL = 1
REQUIRED_LEVEL_HEADER = "Nats-Required-Api-Level"


class RawReply(NamedTuple):
    """A non-JSON answer: a message with headers (DIRECT.GET)."""

    hdr: bytes | None
    data: bytes


class StatusReply(NamedTuple):
    """A bare status message (empty body), e.g. 503 as if nobody served the subject."""

    status: int
    description: str = ""


Response = dict[str, Any] | RawReply | list[RawReply] | StatusReply | None
Handler = Callable[[Any, str, str, bytes], Any]


@dataclass(slots=True)
class ApiStats:
    total: int = 0
    errors: int = 0
