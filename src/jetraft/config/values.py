"""Typed reads of tree nodes: strings, sizes, durations, listen addresses.

Every failed read raises ConfigError at the value's position; soft problems go to
``Ctx.warnings`` as ``file:line:col: text``.
"""

from __future__ import annotations

import re
from datetime import datetime

from jetraft.config.errors import ConfigError, Pos
from jetraft.config.syntax import Node

NS_PER_S = 1_000_000_000
_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # Go accepts both micro signs (U+00B5 and U+03BC)
    "μs": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
}
_DURATION_PART_RE = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
# String sizes follow nats-server's getStorageSize (K/M/G/T are powers of 1024) and,
# beyond it, the suffixes a bare number may carry ("1GB", "512MiB").
_STRING_SIZE_RE = re.compile(r"\s*(-?[0-9]+)\s*([A-Za-z]*)\s*")
_STRING_SIZE_MULT = {
    "": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5, "e": 1024**6,
}


class Ctx:
    """Collects warnings while a tree is turned into typed values."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, pos: Pos | None, message: str) -> None:
        self.warnings.append(f"{pos}: {message}" if pos is not None else message)

    def unknown(self, key: str, node: Node, where: str = "") -> None:
        """An unrecognised key; silent when the key was defined to be used as a variable."""
        if not node.used:
            suffix = f" in {where}" if where else ""
            self.warn(node.key_pos or node.pos, f"unknown field {key!r}{suffix}")

    def unsupported(self, key: str, node: Node) -> None:
        """A key jetraft ignores because ignoring it never lowers protection."""
        if not node.used:
            self.warn(
                node.key_pos or node.pos,
                f"field {key!r} is not supported by jetraft and is ignored",
            )


def refuse(key: str, node: Node, what: str = "") -> ConfigError:
    """A security-relevant key jetraft cannot honour: the server must not start without it.

    Running on would give less protection than the config asks for (a listener without its
    auth, data in clear, a certificate check skipped), so this is an error, never a warning.
    """
    detail = f" ({what})" if what else ""
    return ConfigError(
        f"{key!r} is not supported by jetraft{detail}; refusing to start rather than "
        "run with less protection than configured",
        node.key_pos or node.pos,
    )


def describe(node: Node) -> str:
    v = node.value
    if isinstance(v, bool):
        return f"boolean {'true' if v else 'false'}"
    if isinstance(v, int):
        return f"integer {node.text or v}"
    if isinstance(v, float):
        return f"number {node.text or v}"
    if isinstance(v, str):
        return f"string {v!r}"
    if isinstance(v, dict):
        return "a block {...}"
    if isinstance(v, list):
        return "an array [...]"
    if isinstance(v, datetime):
        return f"datetime {node.text}"
    return type(v).__name__  # pragma: no cover - the parser makes no other types


def fail(node: Node, message: str) -> ConfigError:
    return ConfigError(message, node.pos)


def as_str(node: Node, name: str) -> str:
    if isinstance(node.value, str):
        return node.value
    hint = " (quote it)" if isinstance(node.value, int | float) else ""
    raise fail(node, f"{name!r} must be a string, got {describe(node)}{hint}")


def as_bool(node: Node, name: str) -> bool:
    if isinstance(node.value, bool):
        return node.value
    raise fail(node, f"{name!r} must be true or false, got {describe(node)}")


def as_int(node: Node, name: str, *, lo: int | None = None, hi: int | None = None) -> int:
    v = node.value
    if isinstance(v, bool) or not isinstance(v, int):
        raise fail(node, f"{name!r} must be an integer, got {describe(node)}")
    return check_range(node, name, v, lo, hi)


def check_range(node: Node, name: str, v: int, lo: int | None, hi: int | None) -> int:
    if lo is not None and v < lo:
        raise fail(node, f"{name!r} must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise fail(node, f"{name!r} must be at most {hi}, got {v}")
    return v


def as_size(node: Node, name: str, *, lo: int | None = 0, hi: int | None = None) -> int:
    """A byte count: an integer (suffixes already applied by the parser) or a string such
    as "1G" (K/M/G/T = powers of 1024, as nats-server reads sizes given as strings)."""
    v = node.value
    if isinstance(v, bool):
        raise fail(node, f"{name!r} must be a size such as 1MB, got {describe(node)}")
    if isinstance(v, int):
        return check_range(node, name, v, lo, hi)
    if isinstance(v, str):
        return check_range(node, name, _string_size(node, name, v), lo, hi)
    raise fail(node, f"{name!r} must be a size such as 1MB, got {describe(node)}")


def _string_size(node: Node, name: str, text: str) -> int:
    if text == "":
        return 0
    m = _STRING_SIZE_RE.fullmatch(text)
    if m is not None:
        suffix = m.group(2).lower()
        if suffix.endswith("ib"):
            suffix = suffix[:-2]
        elif suffix.endswith(("b", "i")) and len(suffix) == 2:
            suffix = suffix[:-1]
        mult = _STRING_SIZE_MULT.get(suffix)
        if mult is not None:
            return int(m.group(1)) * mult
    raise fail(node, f"{name!r} must be a size such as 1MB or \"512M\", got string {text!r}")


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string ("1h30m", "500ms", "-2s", "0").

    Raises ValueError with a message in the spirit of Go's time.ParseDuration.
    """
    s = text
    negative = s[:1] == "-"
    if s[:1] in ("-", "+"):
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    while s:
        m = _DURATION_PART_RE.match(s)
        if m is None or m.end() == 0:  # pragma: no cover - the pattern always matches
            raise ValueError(f"invalid duration {text!r}")
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        if not whole and not frac:
            raise ValueError(f"invalid duration {text!r}")
        if not unit:
            raise ValueError(f"missing unit in duration {text!r}")
        scale = _DURATION_UNITS_NS.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r} in duration {text!r}")
        total += int(whole or "0") * scale
        if frac:
            total += int(frac) * scale // 10 ** len(frac)
        s = s[m.end() :]
    if total > 2**63 - 1:
        raise ValueError(f"invalid duration {text!r}: out of range")
    return -total if negative else total


def as_duration_ns(
    node: Node, name: str, ctx: Ctx, *, allow_negative: bool = False
) -> int:
    """A duration: a Go duration string; or a number of seconds (with a warning, as
    nats-server); an unquoted ``2m`` (which nats-server would read as the number
    2,000,000) is read as two minutes, with a warning."""
    v = node.value
    if isinstance(v, str):
        try:
            ns = parse_go_duration(v.strip())
        except ValueError as exc:
            raise fail(node, f"error parsing {name}: {exc}") from None
    elif isinstance(v, bool) or not isinstance(v, int | float):
        raise fail(node, f"{name!r} must be a duration such as \"2m\" or \"500ms\", "
                         f"got {describe(node)}")
    elif node.text.endswith("m") and _is_int_text(node.text[:-1]):
        ns = int(node.text[:-1]) * 60 * NS_PER_S
        ctx.warn(node.pos, f"{name}: unquoted {node.text} read as {node.text[:-1]} minutes; "
                           f"quote it (\"{node.text}\"), nats-server reads it as a number")
    else:
        ns = round(v * NS_PER_S)
        ctx.warn(node.pos, f"{name} should be a duration string such as \"{v}s\"; "
                           f"read as {v} seconds")
    if ns < 0 and not allow_negative:
        raise fail(node, f"{name!r} must not be negative")
    return ns


def _is_int_text(s: str) -> bool:
    return bool(re.fullmatch(r"-?[0-9]+", s))


def as_seconds(node: Node, name: str) -> float:
    """A timeout in seconds: an integer, a float, or a duration string."""
    v = node.value
    if isinstance(v, str):
        try:
            seconds = parse_go_duration(v.strip()) / NS_PER_S
        except ValueError as exc:
            raise fail(node, f"error parsing {name}: {exc}") from None
    elif isinstance(v, bool) or not isinstance(v, int | float):
        raise fail(node, f"{name!r} must be a number of seconds or a duration, "
                         f"got {describe(node)}")
    else:
        seconds = float(v)
    if seconds < 0:
        raise fail(node, f"{name!r} must not be negative")
    return seconds


def as_map(node: Node, name: str) -> dict[str, Node]:
    if isinstance(node.value, dict):
        return node.value
    raise fail(node, f"{name!r} must be a block {{...}}, got {describe(node)}")


def as_list(node: Node, name: str) -> list[Node]:
    if isinstance(node.value, list):
        return node.value
    raise fail(node, f"{name!r} must be an array [...], got {describe(node)}")


def as_str_list(node: Node, name: str) -> tuple[str, ...]:
    """A string or an array of strings."""
    if isinstance(node.value, str):
        return (node.value,)
    return tuple(as_str(item, f"{name} element") for item in as_list(node, name))


def parse_listen(node: Node, name: str) -> tuple[str, int]:
    """``4222``, ``"4222"``, ``":4222"``, ``"host:4222"`` or ``"[::1]:4222"`` -> (host, port).

    The host is "" when not given; -1 asks for a random port, as in nats-server.
    """
    v = node.value
    if isinstance(v, int) and not isinstance(v, bool):
        return "", check_port(node, name, v)
    if not isinstance(v, str):
        raise fail(node, f"{name!r} expects a port or host:port, got {describe(node)}")
    text = v.strip()
    if _is_int_text(text):
        return "", check_port(node, name, int(text))
    host, port_text = split_host_port(text)
    if port_text is None:
        raise fail(node, f"could not parse address string {text!r} for {name!r}: "
                         "expected host:port")
    if not _is_int_text(port_text):
        raise fail(node, f"could not parse port {port_text!r} for {name!r}")
    return host, check_port(node, name, int(port_text))


def split_host_port(text: str) -> tuple[str, str | None]:
    """Go's net.SplitHostPort, loosely: port None when the text has no usable port."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            return "", None
        return text[1:end], text[end + 2 :]
    if text.count(":") != 1:
        return "", None
    host, port = text.split(":")
    return host, port


def check_port(node: Node, name: str, port: int) -> int:
    if not -1 <= port <= 65535:
        raise fail(node, f"{name!r}: port {port} is out of range (-1 for random, 0-65535)")
    return port


def check_subjects(node: Node, name: str, subjects: tuple[str, ...], *, queues: bool) -> None:
    """Light subject syntax check, as nats-server does for permissions."""
    for subject in subjects:
        parts = subject.split()
        plain = len(parts) == 1 and parts[0] == subject
        if not plain and not (queues and len(parts) == 2):
            raise fail(node, f"{name}: subject {subject!r} is not a valid subject")
        for cand in parts:
            tokens = cand.split(".")
            if any(t == "" for t in tokens) or ">" in tokens[:-1]:
                raise fail(node, f"{name}: subject {subject!r} is not a valid subject")
