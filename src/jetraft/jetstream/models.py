"""Small shared pieces of the JetStream wire model: times, and JSON helpers.

Go encodes ``time.Time`` as RFC 3339 with nanoseconds and trailing zeros trimmed, and the zero
time as ``0001-01-01T00:00:00Z``; durations are integer nanoseconds. nats-py parses times by
replacing ``Z`` and splitting on ``+``, so we always emit UTC with ``Z``.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

ZERO_TIME: Final = "0001-01-01T00:00:00Z"
NS_PER_S: Final = 1_000_000_000

_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# The last second formatted, (seconds, text): consecutive calls (the messages of a batch)
# mostly share it. One tuple, replaced whole, so threads never see a mixed pair; kept in a
# Final list rather than a rebound global, which the compiled build reads without a
# module-dict lookup.
_LAST_SECOND: Final[list[tuple[int, str]]] = [(-1, "")]
_NINE_DIGITS: Final = 100_000_000


def format_time(ns: int) -> str:
    """Nanoseconds since the epoch as Go's RFC3339Nano in UTC; 0 is Go's zero time."""
    if ns <= 0:
        return ZERO_TIME
    secs = ns // NS_PER_S  # not divmod: // and - on ints stay native in the compiled build
    frac = ns - secs * NS_PER_S
    last = _LAST_SECOND[0]
    if last[0] == secs:
        text = last[1]
    else:
        text = _second_text(secs)
        _LAST_SECOND[0] = (secs, text)
    if frac:
        if frac >= _NINE_DIGITS and frac % 10:
            # Nine digits, the last not a zero (nine times in ten): the fraction as it is.
            return f"{text}.{frac}Z"
        # The fraction with its leading zeros, trailing zeros cut.
        return f"{text}.{str(frac + NS_PER_S)[1:].rstrip('0')}Z"
    return text + "Z"


@functools.lru_cache(maxsize=1024)
def _second_text(secs: int) -> str:
    # strftime is the dear part of formatting a time, and the messages of a batch (direct
    # get, consumer info, stream listings) mostly share their seconds.
    return datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_time(text: str) -> int:
    """An RFC 3339 time as nanoseconds since the epoch (ValueError when malformed)."""
    m = _RFC3339_RE.match(text)
    if m is None:
        raise ValueError(f'parsing time "{text}" as RFC 3339 failed')
    year, mon, day, hh, mm, ss = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "").ljust(9, "0")
    base = datetime(year, mon, day, hh, mm, ss, tzinfo=UTC)
    offset_s = 0
    if m.group(9):
        sign = 1 if m.group(9) == "+" else -1
        offset_s = sign * (int(m.group(10)) * 3600 + int(m.group(11)) * 60)
    delta = base - _EPOCH
    return (delta.days * 86400 + delta.seconds - offset_s) * NS_PER_S + int(frac)


_ENCODER = msgspec.json.Encoder()


def encode_json(obj: Any) -> bytes:
    return _ENCODER.encode(obj)


_GO_TYPE = {
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "bool",
    "array": "array",
    "object": "object",
    "null": "null",
}
_UNKNOWN_RE = re.compile(r"Object contains unknown field `([^`]*)`")
_EXPECTED_RE = re.compile(r"Expected `([^`]*)`, got `([^`]*)`(?: - at `\$\.?([^`]*)`)?")
_UNSIGNED_RE = re.compile(r"Expected `int` >= 0(?: - at `\$\.?([^`]*)`)?")


def go_json_error(exc: Exception, struct_name: str) -> str:
    """Word a msgspec decode error the way Go's encoding/json does (nats-server's texts)."""
    text = str(exc)
    m = _UNKNOWN_RE.search(text)
    if m is not None:
        return f'json: unknown field "{m.group(1)}"'
    m = _UNSIGNED_RE.search(text)
    if m is not None:
        return (
            f"json: cannot unmarshal number into Go struct field {struct_name}.{m.group(1)} "
            "of type uint64"
        )
    m = _EXPECTED_RE.search(text)
    if m is not None:
        want, got, path = m.group(1), m.group(2), m.group(3) or ""
        got_go = _GO_TYPE.get(got, got)
        if not path:
            return f"json: cannot unmarshal {got_go} into Go value of type server.{struct_name}"
        want_go = {"int": "int64", "str": "string", "bool": "bool"}.get(want, want)
        return (
            f"json: cannot unmarshal {got_go} into Go struct field "
            f"{struct_name}.{path} of type {want_go}"
        )
    if "JSON is malformed" in text or "truncated" in text or "Input data" in text:
        return f"invalid character in JSON ({text})"
    return text
