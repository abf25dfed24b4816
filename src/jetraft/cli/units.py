"""Parsing and printing of durations, sizes, counts and times, the way the nats CLI shows them.

Durations on the wire are integer nanoseconds; users type Go-style durations (``1h30m``,
``500ms``) or plain seconds. Sizes accept ``1KB``/``1KiB`` style suffixes (both mean 1024, as
the nats CLI treats them). Everything here is pure so it can be unit tested without servers.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

NS_PER_S = 1_000_000_000

_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
    "w": 7 * 86400 * NS_PER_S,
    "y": 365 * 86400 * NS_PER_S,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d|w|y)")

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
    "T": 1024**4,
    "TB": 1024**4,
    "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_ns(text: str) -> int:
    """``"1h5m"``, ``"500ms"``, ``"2.5s"`` or a bare number of seconds -> nanoseconds.

    ``-1``/``"unlimited"``/``"never"``/``"0"`` mean no limit and give 0 (the API's
    "unset" value for every duration field).
    """
    raw = text.strip().lower()
    if raw in ("", "0", "-1", "unlimited", "never", "inf"):
        return 0
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return round(float(raw) * NS_PER_S)
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS_NS[match.group(2)]
        pos = match.end()
    if pos != len(raw) or pos == 0:
        raise ValueError(f"invalid duration {text!r} (examples: 10s, 1m30s, 500ms, 2h, 1d)")
    return round(total)


def parse_size(text: str) -> int:
    """``"1GB"``, ``"512MiB"``, ``"100"`` -> bytes; ``-1``/``unlimited`` -> -1."""
    raw = text.strip()
    if raw.lower() in ("-1", "unlimited", ""):
        return -1
    match = _SIZE.match(raw)
    if match is None or match.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"invalid size {text!r} (examples: 1024, 512KB, 1GiB, -1 for unlimited)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


def human_duration_ns(ns: int | float) -> str:
    """Seconds with two decimals under a minute (``0.07s``, as the seeds show), else
    ``1m5s``, ``2h0m5s``, ``3d2h0m0s``, ``1y2d...``."""
    if ns >= 2**63 - 1:
        return "never"
    secs = ns / NS_PER_S
    if secs < 60:
        return f"{secs:.2f}s"
    total = int(secs)
    years, rest = divmod(total, 365 * 86400)
    days, rest = divmod(rest, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if years:
        return f"{years}y{days}d{hours}h{minutes}m{seconds}s"
    if days:
        return f"{days}d{hours}h{minutes}m{seconds}s"
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    return f"{minutes}m{seconds}s"


def go_duration_ns(ns: int) -> str:
    """A compact Go-style duration (``2m0s``, ``30s``, ``500ms``) for config values."""
    if ns <= 0:
        return "0s"
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:g}µs"
    if ns < NS_PER_S:
        return f"{ns / 1_000_000:g}ms"
    return human_duration_ns(ns) if ns >= 60 * NS_PER_S else f"{ns / NS_PER_S:g}s"


def ibytes(n: int | float) -> str:
    """Bytes in binary units with one decimal, as go-humanize's IBytes: ``1.5 KiB``."""
    n = float(n)
    if n < 1024:
        return f"{int(n)} B"
    units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    exp = min(int(math.log(n, 1024)), len(units))
    value = n / 1024**exp
    text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
    return f"{text} {units[exp - 1]}"


def comma(n: int | float) -> str:
    """Thousands separators: ``1,234,567``."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.2f}"
    return f"{int(n):,}"


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time from the server (nanosecond fractions allowed) -> aware datetime."""
    if not text:
        return None
    raw = text.strip()
    if raw.endswith("Z"):
        raw = raw[:-1] + "+00:00"
    # Python keeps microseconds; trim longer fractions before parsing.
    raw = re.sub(r"(\.\d{6})\d+", r"\1", raw)
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if parsed.year <= 1:
        return None  # Go's zero time: "never"
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def local_rfc3339(when: datetime) -> str:
    """``2021-02-05T12:07:34+01:00``: local time with offset, as the seeds print creation."""
    return when.astimezone().isoformat(timespec="seconds")


def local_stamp(when: datetime) -> str:
    """``2021-02-05 12:07:34``: local time for table cells."""
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def since_ns(when: datetime | None, now: datetime) -> int:
    """Nanoseconds from ``when`` to ``now`` (0 when unknown or in the future)."""
    if when is None:
        return 0
    return max(0, int((now - when).total_seconds() * NS_PER_S))
