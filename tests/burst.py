"""A burst of publishes that a server reads at once, and what each subscription must get from
it: the server routes such a burst in groups (runs of one subject, runs of one control line),
and every subscription still gets its messages in order, each framed as if sent alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from tests.rawclient import Frame

HDR = b"NATS/1.0\r\nA: b\r\n\r\n"


class Pub(NamedTuple):
    subject: str
    reply: str | None
    hdr: bytes | None
    payload: bytes


def burst(subjects: Sequence[str] = ("burst.a",)) -> list[Pub]:
    """Long runs of one control line, sizes changing on one subject, replies, headers, and
    other subjects in between."""
    out: list[Pub] = []
    for subject in subjects:
        out += [Pub(subject, None, None, b"abc")] * 200
        out += [Pub(subject, None, None, b"x" * n) for n in range(12)]
        out += [Pub(subject, "r.1", None, b"zz")] * 3
        out += [Pub(subject, None, HDR, b"hi")] * 2
        out += [Pub(subject, "r.2", HDR, b""), Pub(subject, None, None, b"")]
        out += [Pub("burst.other", None, None, b"q"), Pub(subject, None, None, b"abc")]
    return out


def encode(pubs: Sequence[Pub]) -> bytes:
    out = []
    for p in pubs:
        reply = f" {p.reply}" if p.reply else ""
        if p.hdr is None:
            out.append(f"PUB {p.subject}{reply} {len(p.payload)}\r\n".encode())
        else:
            size = len(p.hdr) + len(p.payload)
            out.append(f"HPUB {p.subject}{reply} {len(p.hdr)} {size}\r\n".encode() + p.hdr)
        out.append(p.payload + b"\r\n")
    return b"".join(out)


def expected(
    pubs: Sequence[Pub],
    sid: str,
    wanted: Callable[[str], bool],
    *,
    headers: bool = True,
    limit: int | None = None,
) -> list[Frame]:
    frames = [
        Frame(p.subject, sid, p.reply, p.hdr if headers else None, p.payload)
        for p in pubs
        if wanted(p.subject)
    ]
    return frames[:limit] if limit is not None else frames


def by_sid(frames: Sequence[Frame]) -> dict[str, list[Frame]]:
    out: dict[str, list[Frame]] = defaultdict(list)
    for f in frames:
        out[f.sid].append(f)
    return dict(out)
