"""Subject delete markers (stream config ``subject_delete_marker_ttl``).

When the last message of a subject leaves a stream because it aged out (``max_age``) or its
``Nats-TTL`` passed, a stream with a marker TTL stores a marker in its place: an empty
message on that subject whose headers say why (``Nats-Marker-Reason: MaxAge``), how long
the marker itself lives (``Nats-TTL``) and that it replaces what the subject held
(``Nats-Rollup: sub``). Watchers (a KV watch, a consumer) thus learn that the subject is
gone, which a silent removal would never tell them. A marker that expires, and a KV purge
marker, is removed without a marker of its own. Headers as nats-server writes them.
"""

from __future__ import annotations

MARKER_REASON = b"nats-marker-reason"
KV_OPERATION = b"kv-operation"
REASON_MAX_AGE = "MaxAge"


def go_duration(seconds: int) -> str:
    """Whole seconds as Go's ``time.Duration.String`` writes them (``90s`` is ``1m30s``),
    the form nats-server puts in a marker's ``Nats-TTL``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def marker_header(ttl_s: int) -> bytes:
    """The header block of a marker left by an expiry, living ``ttl_s`` seconds."""
    return (
        f"NATS/1.0\r\nNats-Marker-Reason: {REASON_MAX_AGE}\r\n"
        f"Nats-TTL: {go_duration(ttl_s)}\r\nNats-Rollup: sub\r\n\r\n"
    ).encode()


def is_marker(hdr: bytes | None) -> bool:
    """A subject delete marker, or a KV purge marker (``KV-Operation: PURGE``)."""
    if not hdr:
        return False
    for line in hdr.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip().lower()
        if key == MARKER_REASON and value.strip():
            return True
        if key == KV_OPERATION and value.strip() == b"PURGE":
            return True
    return False
