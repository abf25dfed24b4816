"""Republish (stream config ``republish``): where a stored message is copied to, and the copy.

The stream state machine decides what is stored; on the one server that publishes copies
(the stream leader, see ``Stream.republisher``) each stored message whose subject the
republish transform matches is handed on with headers that say where it is stored: the
stream, subject, sequence, time and the previous sequence on that subject, and with
``headers_only`` the body's size instead of the body.
"""

from __future__ import annotations

from jetraft.jetstream.entries import StoreMsg
from jetraft.jetstream.models import format_time
from jetraft.jetstream.stream_config import RePublish
from jetraft.protocol.subjects import is_valid_subject
from jetraft.protocol.transform import SubjectTransform as Transform


def republish_subject(rtr: Transform | None, subject: str) -> str:
    """Where a message stored on ``subject`` is republished ('' for nowhere: no
    republish, no match, or an invalid result)."""
    if rtr is None:
        return ""
    out = rtr.match(subject)
    return out if out is not None and is_valid_subject(out) else ""


def republished(
    rp: RePublish, stream: str, e: StoreMsg, hdr: bytes | None, seq: int, prev: int
) -> tuple[bytes, bytes]:
    """The copy of ``e``, stored at ``seq`` after ``prev`` on its subject: (headers, body)."""
    lines = (
        f"Nats-Stream: {stream}\r\nNats-Subject: {e.subject}\r\n"
        f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: {format_time(e.ts_ns)}\r\n"
        f"Nats-Last-Sequence: {prev}\r\n"
    )
    if rp.headers_only:
        lines += f"Nats-Msg-Size: {len(e.data)}\r\n"
    head = hdr[:-2] if hdr else b"NATS/1.0\r\n"
    return head + lines.encode() + b"\r\n", b"" if rp.headers_only else e.data
