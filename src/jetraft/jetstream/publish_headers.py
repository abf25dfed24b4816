"""The ``Nats-*`` headers of a publish that the stream state machine reads.

Header names (lower-cased: lookups are case-insensitive, as in nats-server), the one-pass
parse of a header block (with a shortcut for the most common block, a lone ``Nats-Msg-Id``),
``Nats-TTL`` values (a Go duration, integer seconds or ``never``), and the checks that come
before dedupe (``Nats-Expected-*``, a Nats-TTL the stream does not allow): they read the
config and the store and change nothing; ``stream.py`` applies what they decide.
"""

from __future__ import annotations

import re
from typing import Final

from jetraft.jetstream import errors as E
from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.store.types import StreamStore
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.subjects import is_literal

NS_PER_S = 1_000_000_000
MAX_HEADER_LEN: Final = 65535

# Header names, lower-cased (lookups are case-insensitive, as in nats-server).
MSG_ID = "nats-msg-id"
EXPECTED_STREAM = "nats-expected-stream"
EXPECTED_LAST_SEQ = "nats-expected-last-sequence"
EXPECTED_LAST_SUBJ_SEQ = "nats-expected-last-subject-sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "nats-expected-last-subject-sequence-subject"
EXPECTED_LAST_MSG_ID = "nats-expected-last-msg-id"
ROLLUP = "nats-rollup"
MSG_TTL = "nats-ttl"
REQUEST_INFO = "nats-request-info"  # who sent a request through an account import


LONE_MSG_ID: Final = b"NATS/1.0\r\nNats-Msg-Id:"  # how a block holding only a dedupe id starts
_LONE_AT: Final = 22  # len(LONE_MSG_ID), as a literal: a constant in the compiled code


def lone_msg_id(hdr: bytes) -> str | None:
    """The id of a header block that holds a ``Nats-Msg-Id`` and nothing else (the most
    common block by far: a publisher's dedupe id), else None."""
    if hdr.startswith(LONE_MSG_ID) and hdr.find(b"\r\n", _LONE_AT) == len(hdr) - 4:
        return hdr[_LONE_AT:-4].strip().decode("utf-8", "replace")
    return None


def _blank(c: int) -> bool:
    """Whether ``bytes.strip()`` removes the byte ``c`` (space, tab, LF, VT, FF, CR): integer
    tests, native in the compiled build (membership in a bytes constant is a generic call)."""
    return c == 32 or 9 <= c <= 13


def lone_msg_id_in(body: bytes, hdr_len: int) -> str | None:
    """``lone_msg_id(body[:hdr_len])`` without slicing the header block off first (the
    publish path has the header block and the payload as one body), and without a method
    call in the usual case (``Nats-Msg-Id: <id>``): the compiled build indexes, slices and
    tests membership directly, a method such as ``find`` or ``strip`` is a generic call."""
    end = hdr_len - 4
    if end < _LONE_AT or not body.startswith(LONE_MSG_ID):
        return None
    # The first CRLF after the name ends the block's only line, right before the closing
    # CRLF: one at ``end`` (a CRLF cannot start at end - 1, body[end] being CR) and none
    # inside the value.
    if body[end] != 13 or body[end + 1] != 10:
        return None
    start = _LONE_AT
    if start < end and body[start] == 32:
        start += 1  # the one space after the colon, skipped without a slice of its own
    raw = body[start:end]
    if b"\r\n" in raw:  # (a CRLF cannot begin with that space: the same test as on all)
        return None
    if raw and (_blank(raw[0]) or _blank(raw[-1])):
        raw = raw.strip()
    return raw.decode("utf-8", "replace")


def nats_headers(hdr: bytes) -> dict[str, str]:
    """The ``Nats-*`` headers of a block, by lower-cased name (first value wins); one pass,
    and nothing at all for the common block without any."""
    msg_id = lone_msg_id(hdr)
    if msg_id is not None:
        return {MSG_ID: msg_id}  # no general parse
    out: dict[str, str] = {}
    if b"\r\nnats-" not in hdr.lower():
        return out
    for line in hdr.split(b"\r\n")[1:]:
        if line[:5].lower() != b"nats-":
            continue
        name, sep, value = line.partition(b":")
        if sep:
            key = name.strip().decode("utf-8", "replace").lower()
            if key not in out:
                out[key] = value.strip().decode("utf-8", "replace")
    return out


def without_request_info(hdr: bytes) -> bytes | None:
    """The block without its ``Nats-Request-Info`` lines (None when nothing else is left):
    a publish that came through a service import carries the requester's account there,
    which nats-server does not store with the message."""
    lines = hdr.split(b"\r\n")
    kept = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() != b"nats-request-info"]
    if not any(kept):
        return None
    return b"\r\n".join([lines[0], *kept])


def parse_ttl_s(text: str) -> int:
    """``Nats-TTL`` as seconds: -1 = never, 0 = none; raises ApiError 10165 when invalid.

    Accepts ``never``, a Go duration of at least 1s (``90s``, ``1h``) or integer seconds."""
    text = text.strip()
    if not text:
        return 0
    if text.lower() == "never":
        return -1
    if _is_ascii_number(text):
        return int(text)
    ns = _go_duration_ns(text)
    if ns is None or ns < NS_PER_S:
        raise E.ttl_invalid()
    return ns // NS_PER_S


_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def _go_duration_ns(text: str) -> int | None:
    total = 0.0
    pos = 0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        return None
    return int(total)


def _is_ascii_number(text: str) -> bool:
    # str.isdigit() alone also accepts "²" and other digits int() refuses or reads differently
    # from nats-server, which only knows ASCII.
    return text.isascii() and text.isdigit()


def parse_seq(text: str) -> int:
    """A header sequence number; anything unparsable never matches (nats-server reads it as
    -1, i.e. the largest uint64)."""
    text = text.strip()
    return int(text) if _is_ascii_number(text) else -1


def check_headers(
    cfg: StreamConfig, store: StreamStore, subject: str, sourced: bool, h: dict[str, str]
) -> ApiError | None:
    """The Nats-Expected-* and Nats-TTL checks that come before dedupe, for a publish to
    ``subject`` with the Nats-* headers ``h`` (``sourced``: a copy from a stream source)."""
    if not sourced and "nats-stream-source" in h:
        return E.api_error(10227)  # only a source may say where a message came from
    expected = h.get(EXPECTED_STREAM)
    if expected and expected != cfg.name:
        return E.expected_stream_mismatch()
    ttl_text = h.get(MSG_TTL)
    if ttl_text is not None and not cfg.allow_msg_ttl and not sourced:
        try:
            ttl = parse_ttl_s(ttl_text)
        except ApiError:
            ttl = 0  # reported as invalid later, as nats-server does
        if ttl != 0:
            return E.ttl_disabled()
    subj_seq = h.get(EXPECTED_LAST_SUBJ_SEQ)
    seq_subject = h.get(EXPECTED_LAST_SUBJ_SEQ_SUBJ)
    if subj_seq is not None:
        on = seq_subject or subject
        # The subject given for the check may be a filter: its last matching message.
        last = store.last_seq_for_subject(on) if is_literal(on) else store.last_seq_matching(on)
        if parse_seq(subj_seq) != last:
            return E.wrong_last_sequence(last)
    elif seq_subject:
        return E.expected_last_seq_per_subject_invalid()
    last_seq = h.get(EXPECTED_LAST_SEQ)
    if last_seq is not None:
        stream_last = store.bounds()[1]
        if parse_seq(last_seq) != stream_last:
            return E.wrong_last_sequence(stream_last)
    return None
