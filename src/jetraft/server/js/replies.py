"""Sending what a ``$JS.API`` handler returned (see ``jetstream.api``'s contract)."""

from __future__ import annotations

from typing import Any, Protocol

from jetraft.jetstream.api import RawReply, StatusReply
from jetraft.jetstream.models import encode_json
from jetraft.protocol.headers import encode_headers


class Publisher(Protocol):
    def publish(
        self, subject: str, data: bytes = b"", reply: str | None = None, hdr: bytes | None = None
    ) -> int: ...


def send_response(client: Publisher, reply: str, out: Any) -> None:
    """A dict goes as JSON, ``RawReply`` as a message with headers (a list of them as
    several messages), ``StatusReply`` as a bare status; None sends nothing."""
    if not reply or out is None:
        return
    publish = client.publish
    if isinstance(out, dict):
        publish(reply, encode_json(out))
    elif isinstance(out, RawReply):
        publish(reply, out.data, None, out.hdr)
    elif isinstance(out, StatusReply):
        publish(reply, b"", None, encode_headers((), out.status, out.description))
    elif isinstance(out, list):
        for item in out:
            publish(reply, item.data, None, item.hdr)
