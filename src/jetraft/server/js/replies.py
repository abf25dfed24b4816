"""Sending what a ``$JS.API`` handler returned (see ``jetstream.api``'s contract)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any, Protocol

from jetraft.jetstream.api_types import RawReply, StatusReply
from jetraft.jetstream.direct_get import DIRECT_SLICE_BYTES, Answer
from jetraft.jetstream.models import encode_json
from jetraft.protocol.headers import encode_headers

log = logging.getLogger("jetraft.js")


class Publisher(Protocol):
    def publish(
        self, subject: str, data: bytes = b"", reply: str | None = None, hdr: bytes | None = None
    ) -> int: ...

    def publish_replies(self, subject: str, items: list[tuple[bytes | None, bytes]]) -> int:
        """Several messages to one subject in order; how many took the last (0: nobody)."""
        ...


def send_response(client: Publisher, reply: str, out: Any) -> None:
    """A dict goes as JSON, ``RawReply`` as a message with headers (a list of them as
    several messages, an iterator of them lazily: see ``send_slices``), ``StatusReply`` as a
    bare status; None sends nothing."""
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
    elif isinstance(out, Iterator):
        send_slices(client, reply, out)


def send_slices(client: Publisher, reply: str, replies: Iterator[Answer]) -> None:
    """A lazy answer (DIRECT.GET batches): one slice per loop turn, so that a large batch
    neither builds up in memory nor holds the loop; stops when the requester is gone."""
    sent = 0
    items: list[Answer] = []
    more = False
    try:
        for item in replies:
            items.append(item)  # (hdr, data) pairs, RawReply ones too
            hdr = item[0]
            sent += len(item[1]) if hdr is None else len(item[1]) + len(hdr)
            if sent >= DIRECT_SLICE_BYTES:
                more = True
                break
    except Exception:  # the stream went away mid-answer (deleted, stopped)
        log.debug("direct get to %s stopped", reply, exc_info=True)
    # The slice goes out in one call (the reply subject matched once); a requester that
    # went away stops the rest.
    if items and client.publish_replies(reply, items) and more:
        asyncio.get_running_loop().call_soon(send_slices, client, reply, replies)
