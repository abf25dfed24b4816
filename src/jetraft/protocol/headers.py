"""The NATS header block: ``NATS/1.0[ <status>[ <description>]]\\r\\n`` then ``Name: value`` lines
and a blank line. Names keep their case; a repeated name is a multi-value header.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

VERSION_LINE = b"NATS/1.0"
_CRLF = b"\r\n"


class HeaderError(ValueError):
    """A header block that is not ``NATS/1.0 ...`` framed."""


@dataclass(frozen=True, slots=True)
class Headers:
    status: int | None = None
    description: str = ""
    items: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def get(self, name: str, default: str | None = None) -> str | None:
        """First value of ``name`` (exact case first, then case-insensitive)."""
        for key, value in self.items:
            if key == name:
                return value
        lname = name.lower()
        for key, value in self.items:
            if key.lower() == lname:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        return [v for k, v in self.items if k == name]

    def as_dict(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for key, value in self.items:
            out.setdefault(key, []).append(value)
        return out


def parse_headers(block: bytes) -> Headers:
    """Parse a raw header block (as carried in HPUB/HMSG)."""
    if not block.startswith(VERSION_LINE):
        raise HeaderError("header block must start with NATS/1.0")
    lines = block.split(_CRLF)
    first = lines[0][len(VERSION_LINE) :].strip()
    status: int | None = None
    description = ""
    if first:
        code, _, desc = first.partition(b" ")
        if len(code) != 3 or not code.isdigit():
            raise HeaderError("bad status in header block")
        status = int(code)
        description = desc.strip().decode("utf-8", "replace")
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            raise HeaderError("header line without a name")
        items.append((name.decode("utf-8", "replace"), value.strip().decode("utf-8", "replace")))
    return Headers(status, description, tuple(items))


def encode_headers(
    items: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    status: int | None = None,
    description: str = "",
) -> bytes:
    """Build a header block; with ``status`` it is a status message (e.g. 503, 408)."""
    first = VERSION_LINE
    if status is not None:
        first += b" %03d" % status
        if description:
            first += b" " + description.encode()
    pairs = items.items() if isinstance(items, Mapping) else items
    parts = [first]
    parts.extend(f"{k}: {v}".encode() for k, v in pairs)
    return _CRLF.join(parts) + b"\r\n\r\n"


def header_value(block: bytes | None, name: str) -> str | None:
    """Cheap lookup of one header in a raw block without building a Headers value."""
    if not block:
        return None
    needle = b"\r\n" + name.encode().lower() + b":"
    idx = block.lower().find(needle)
    if idx < 0:
        return None
    start = idx + len(needle)
    end = block.find(_CRLF, start)
    return block[start:end].strip().decode("utf-8", "replace")
