"""Sourcing and mirroring, the deterministic part: what each source reads, the
``Nats-Stream-Source`` header nats-server writes on a sourced message (and reads back to
know where it stopped), and how an origin message becomes a message of this stream.

No I/O here: the asyncio edge (``jetraft.server.js.sourcing``) fetches origin messages
and proposes what ``sourced_msg`` / ``mirrored_msg`` return; the stream state machine uses
``parse_source_header`` to drop a message it already holds, so that a leader change or a
restart never stores one twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from jetraft.jetstream.entries import SOURCED, CopyMsg
from jetraft.jetstream.source_config import iname as source_iname
from jetraft.jetstream.stream_config import StreamConfig, StreamSource
from jetraft.protocol.headers import HeaderError, encode_headers, parse_headers
from jetraft.protocol.subjects import subject_matches
from jetraft.protocol.transform import SubjectTransform as Transform

SOURCE_HEADER = "Nats-Stream-Source"
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# Headers a sourced copy does not carry over: an older source header (daisy chains), the
# publisher's expectations (they held for the origin, not for this stream), batch markers.
_DROP_PREFIXES = ("nats-expected-", "nats-batch-")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One source (or the mirror) of a stream, ready to run."""

    iname: str
    origin: str
    filters: tuple[str, ...]  # () = every subject
    transforms: tuple[Transform, ...]
    opt_start_seq: int
    opt_start_time: str | None
    mirror: bool = False

    def matches(self, subject: str) -> bool:
        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

    def fetch_filter(self) -> str:
        """The one filter the origin can apply for us ('' = take all, filter here)."""
        return self.filters[0] if len(self.filters) == 1 else ""

    def subject_for(self, subject: str) -> str:
        for tr in self.transforms:
            out = tr.match(subject, None)
            if out is not None:
                return out
        return subject


def _spec(src: StreamSource, mirror: bool) -> SourceSpec:
    trs = src.subject_transforms or []
    filters = tuple(t.src or ">" for t in trs) if trs else (
        (src.filter_subject,) if src.filter_subject else ()
    )
    if filters == (">",):
        filters = ()
    compiled = (Transform.create(t.src or ">", t.dest or ">") for t in trs if t.dest)
    transforms = tuple(tr for tr in compiled if tr is not None)
    return SourceSpec(
        iname=source_iname(src),
        origin=src.name,
        filters=filters,
        transforms=transforms,
        opt_start_seq=src.opt_start_seq,
        opt_start_time=src.opt_start_time,
        mirror=mirror,
    )


def source_specs(cfg: StreamConfig) -> list[SourceSpec]:
    if cfg.mirror is not None:
        return [_spec(cfg.mirror, True)]
    return [_spec(src, False) for src in cfg.sources]


def stream_ident(created: str) -> str:
    """nats-server's identity of a stream: an 8-character base62 hash of its creation time
    (RFC 3339, nanoseconds); it tells a recreated origin from the one sourced before."""
    digest = hashlib.sha256(created.encode()).digest()
    return "".join(_B62[b % 62] for b in digest[:8])


def build_source_header(iname: str, seq: int, subject: str, ident: str) -> str:
    """``<origin> <seq> <filter> <dest> <original subject> [<ident>]``, as nats-server 2.10+."""
    name, filt, dest = iname.split(" ", 2)
    value = f"{name} {seq} {filt} {dest} {subject}"
    return f"{value} {ident}" if ident else value


class Position(NamedTuple):
    """Where a sourced copy came from: the source's index name, the origin's sequence and
    the origin's identity ('' when the header has none)."""

    iname: str
    seq: int
    ident: str = ""


def parse_source_header(value: str) -> Position | None:
    """The position a Nats-Stream-Source value names, None when malformed."""
    fields = value.split(" ")
    if len(fields) < 4:
        return None
    try:
        seq = int(fields[1])
    except ValueError:
        return None
    ident = fields[5] if len(fields) >= 6 else ""
    return Position(f"{fields[0]} {fields[2]} {fields[3]}", seq, ident)


def source_position(hdr: bytes | None) -> Position | None:
    """The position a stored message was sourced from, if any."""
    if not hdr or b"Nats-Stream-Source" not in hdr:
        return None
    try:
        value = parse_headers(hdr).get(SOURCE_HEADER)
    except HeaderError:
        return None
    return None if value is None else parse_source_header(value)


def _kept_headers(hdr: bytes | None, drop_source: bool) -> list[tuple[str, str]] | None:
    """The header lines a copy keeps (None: the block is not parseable, keep it whole)."""
    if not hdr:
        return []
    try:
        items = parse_headers(hdr).items
    except HeaderError:
        return None
    return [
        (k, v) for k, v in items
        if not (drop_source and k.lower() == "nats-stream-source")
        and not k.lower().startswith(_DROP_PREFIXES)
    ]


def sourced_msg(
    spec: SourceSpec, seq: int, subject: str, hdr: bytes | None, data: bytes, ts_ns: int,
    ident: str,
) -> CopyMsg:
    """The copy of origin message ``seq`` this stream stores (its own sequence, new time)."""
    items = _kept_headers(hdr, True) or []
    items.append((SOURCE_HEADER, build_source_header(spec.iname, seq, subject, ident)))
    return CopyMsg(spec.subject_for(subject), "", encode_headers(items), data, ts_ns, SOURCED)


def mirrored_msg(
    spec: SourceSpec, seq: int, subject: str, hdr: bytes | None, data: bytes, origin_ts_ns: int
) -> CopyMsg:
    """A mirror keeps the origin's sequence, time, subject (unless transformed) and headers,
    less the publisher's expectations and batch markers (as nats-server)."""
    if (hdr and b"Nats-Expected-" in hdr) or (hdr and b"Nats-Batch-" in hdr):
        items = _kept_headers(hdr, False)
        if items is not None:
            hdr = encode_headers(items) if items else None
    return CopyMsg(spec.subject_for(subject), "", hdr or None, data, origin_ts_ns, seq)


def recover_positions(
    inames: Iterable[str], newest_first: Iterable[bytes | None], limit: int = 1_000_000
) -> dict[str, Position]:
    """The last origin sequence stored per source, from the stream's messages read newest
    first (their header blocks); stops once every source is found or after ``limit``."""
    wanted = set(inames)
    found: dict[str, Position] = {}
    for n, hdr in enumerate(newest_first):
        if n >= limit or not wanted:
            break
        pos = source_position(hdr)
        if pos is not None and pos.iname in wanted:
            found[pos.iname] = pos
            wanted.discard(pos.iname)
    return found


def start_position(spec: SourceSpec, stored: int | None) -> int:
    """The origin sequence to read first: after what the stream holds, else the configured
    start (``opt_start_seq``; -1 for ``opt_start_time``: the reader asks the origin for the
    first message at or after that time), else the beginning."""
    if stored is not None:
        return stored + 1
    if spec.opt_start_seq > 0:
        return spec.opt_start_seq
    if spec.opt_start_time is not None:
        return -1
    return 1


@dataclass
class SourceStatus:
    """What STREAM.INFO shows for one source (or the mirror); kept by the sourcing leader."""

    spec: SourceSpec
    lag: int = 0
    last_seq: int = 0
    active_ns: int = -1  # monotonic time the origin last answered; -1: never
    error: dict[str, Any] | None = None


def source_info(
    cfg: StreamConfig, status: Mapping[str, SourceStatus], now_ns: int
) -> dict[str, Any]:
    """The ``mirror`` or ``sources`` members of STREAM.INFO, as nats-server words them."""
    srcs: list[StreamSource] = [cfg.mirror] if cfg.mirror is not None else list(cfg.sources)
    out: list[dict[str, Any]] = []
    for spec, src in zip(source_specs(cfg), srcs, strict=True):
        st = status.get(spec.iname)
        item: dict[str, Any] = {"name": spec.origin, "lag": st.lag if st else 0}
        if st is not None and st.last_seq and not spec.mirror:
            item["seq"] = st.last_seq
        item["active"] = now_ns - st.active_ns if st and st.active_ns >= 0 else -1
        if st is not None and st.error is not None:
            item["error"] = st.error
        if src.filter_subject:
            item["filter_subject"] = src.filter_subject
        if src.subject_transforms:
            item["subject_transforms"] = [
                {"src": t.src, "dest": t.dest} for t in src.subject_transforms
            ]
        out.append(item)
    if cfg.mirror is not None:
        return {"mirror": out[0]}
    return {"sources": out} if out else {}


class SourcePositions:
    """Per source, the last origin message this stream holds: read back from the stored
    headers the first time it is needed (after a start, a restore or a config change),
    then kept as messages are applied. Every replica holds the same, as it is derived from
    applied entries only; the state machine drops a sourced copy at or below it, unless it
    comes from a recreated origin (another identity), which starts over."""

    def __init__(self) -> None:
        self._pos: dict[str, Position] | None = None

    def reset(self) -> None:
        self._pos = None

    def get(
        self, cfg: StreamConfig, newest_first: Callable[[], Iterable[bytes | None]]
    ) -> dict[str, Position]:
        if self._pos is None:
            inames = [spec.iname for spec in source_specs(cfg) if not spec.mirror]
            self._pos = recover_positions(inames, newest_first()) if inames else {}
        return self._pos

    def is_duplicate(
        self, cfg: StreamConfig, pos: Position,
        newest_first: Callable[[], Iterable[bytes | None]],
    ) -> bool:
        known = self.get(cfg, newest_first).get(pos.iname)
        return known is not None and known.ident == pos.ident and pos.seq <= known.seq

    def advance(self, pos: Position) -> None:
        if self._pos is None:
            return
        known = self._pos.get(pos.iname)
        if known is None or known.ident != pos.ident or pos.seq > known.seq:
            self._pos[pos.iname] = pos
