"""Parsing what clients send on a consumer's ack subject: the ``$JS.ACK...`` reply subjects
themselves and the arguments of ``-NAK``. Pure functions."""

from __future__ import annotations

import json
import re
from typing import NamedTuple


class AckInfo(NamedTuple):
    """The numbers carried in a ``$JS.ACK...`` subject."""

    stream: str
    consumer: str
    dc: int
    sseq: int
    dseq: int
    ts_ns: int
    pending: int


def parse_ack_subject(subject: str) -> AckInfo | None:
    """Parse a v1 (9 token) or v2 (11+ token) ack subject; None if it is not one."""
    toks = subject.split(".")
    n = len(toks)
    if (n != 9 and n < 11) or toks[0] != "$JS" or toks[1] != "ACK":
        return None
    off = 2 if n == 9 else 4
    try:
        nums = [int(t) for t in toks[off + 2 : off + 7]]
    except ValueError:
        return None
    if any(x < 0 for x in nums):
        return None
    return AckInfo(toks[off], toks[off + 1], nums[0], nums[1], nums[2], nums[3], nums[4])


def parse_nak_delay(arg: bytes) -> int | None:
    """``-NAK {"delay": ns}`` or ``-NAK <go duration>``; None when absent or unreadable."""
    if not arg:
        return None
    if arg[:1] == b"{":
        try:
            value = json.loads(arg).get("delay")
        except (ValueError, AttributeError):
            return None
        return int(value) if isinstance(value, int) else None
    return parse_go_duration(arg.decode("utf-8", "replace"))


_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


def parse_go_duration(text: str) -> int | None:
    """A Go duration such as ``1.5s`` or ``2m30s``; None if it is not one."""
    text = text.strip()
    if not text:
        return None
    total = 0.0
    pos = 0
    for m in re.finditer(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNITS_NS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        return None
    return int(total)
