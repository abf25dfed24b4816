"""Reading one partition (a contiguous range of stream sequences) over the wire.

Two ways, same contract: every stored message whose sequence is in ``[start, end]`` and whose
subject matches the filter is returned exactly once, in sequence order, and the call only
returns when the range is complete; messages beyond ``end`` are never returned.

- Direct get (``allow_direct`` streams): ``DIRECT.GET.<stream>`` batch requests
  ``{"seq", "batch", "max_bytes"[, "next_by_subj"]}`` answered by any replica with messages
  and a ``204 EOB`` status. Unfiltered ranges are cut into sub-ranges fetched concurrently.
- Consumer: an ephemeral pull consumer (ack none, in memory, by_start_sequence) recreated at
  the next sequence whenever it fails.

A replica can lag behind the leader, so "nothing more" from a direct get is confirmed with the
leader (STREAM.MSG.GET next_by_subj) before a range is declared complete. Requests that time
out (a server restarting, a leader moving) are retried from the last sequence received.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from jetraft.spark import wire
from jetraft.spark._frames import Frame, after, fields, place
from jetraft.spark.loop import JetClient

log = logging.getLogger("jetraft.spark")

MAX_BATCH_BYTES = 4 * 1024 * 1024
DIRECT_WINDOW = 4


class DataLossError(RuntimeError):
    """The range starts below the stream's first sequence: messages were removed by limits."""


@dataclass(slots=True)
class Chunk:
    """Column lists for a run of messages, as raw as they came: subjects as UTF-8 bytes,
    ``times`` as RFC 3339 bytes (direct get) or epoch ns ints (consumer deliveries)."""

    seqs: list[int] = field(default_factory=list)
    subjects: list[bytes] = field(default_factory=list)
    times: list[Any] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    headers: list[bytes | None] = field(default_factory=list)
    times_are_ns: bool = False

    def __len__(self) -> int:
        return len(self.seqs)

    def extend(self, other: Chunk) -> None:
        self.seqs.extend(other.seqs)
        self.subjects.extend(other.subjects)
        self.times.extend(other.times)
        self.data.extend(other.data)
        self.headers.extend(other.headers)


@dataclass(frozen=True, slots=True)
class RangeSpec:
    stream: str
    start: int
    end: int  # inclusive
    filter_subject: str | None  # one server-side filter; several are applied by the caller
    filter_subjects: tuple[str, ...]
    batch: int
    timeout_s: float
    max_retries: int
    fail_on_data_loss: bool


class _Retries:
    """Counts consecutive failures; a success resets it. Raises past the limit."""

    def __init__(self, spec: RangeSpec, what: str) -> None:
        self.limit = spec.max_retries
        self.what = what
        self.count = 0

    async def failed(self, cause: object) -> None:
        self.count += 1
        if self.count > self.limit:
            raise TimeoutError(f"{self.what}: gave up after {self.limit} retries: {cause}")
        await asyncio.sleep(min(1.0, 0.05 * (2 ** min(self.count, 6))))

    def ok(self) -> None:
        self.count = 0


async def check_data_loss(nc: Client, spec: RangeSpec, cursor: int) -> int:
    """If the stream's first sequence moved past ``cursor``, fail or skip ahead (per option)."""
    state = await wire.stream_state(nc, spec.stream, spec.timeout_s)
    if state.first_seq <= cursor or (state.messages == 0 and state.last_seq < cursor):
        return cursor
    lost_to = min(state.first_seq - 1, spec.end)
    text = (
        f"stream {spec.stream}: sequences {cursor}..{lost_to} were removed (first sequence is "
        f"now {state.first_seq}) before they were read"
    )
    if spec.fail_on_data_loss:
        raise DataLossError(text + "; set failOnDataLoss=false to skip them with a warning instead")
    log.warning("%s; skipping them (failOnDataLoss=false)", text)
    return state.first_seq


# -- direct get -------------------------------------------------------------------------


def header_value(raw: bytes, name: bytes) -> bytes:
    """One header's value from a raw block (last occurrence), b"" if absent."""
    j = after(raw, b"\r\n" + name + b":")
    if j < 0:
        return b""
    k = raw.find(b"\r\n", j)
    return raw[j:k].strip()


def _fields(hdr: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(subject, sequence, time stamp) of a direct-get answer's header block in any layout
    (the general reader ``_Collector.take`` falls back to)."""
    return fields(hdr)


class _Collector:
    """The answers to one direct-get request, parsed into columns as they arrive, until the
    request's final status (``204 EOB`` for a batch, or an error status)."""

    __slots__ = ("chunk", "count", "done", "end", "last", "pending", "status")

    def __init__(self, end: int) -> None:
        self.chunk = Chunk()
        self.end = end
        self.last = 0  # sequence of the last message received
        self.count = 0  # messages received, in range or not
        self.status: int | None = None
        self.pending: int | None = None
        self.done = asyncio.get_running_loop().create_future()

    def take(self, frames: list[Frame], lo: int, hi: int) -> None:
        """Frames ``lo .. hi - 1`` of a run, all answers to this request."""
        if self.done.done():
            return
        chunk = self.chunk
        columns = (chunk.seqs, chunk.subjects, chunk.times, chunk.data, chunk.headers)
        placed = place(frames, lo, hi, self.end, columns)
        if placed.count:
            self.last = placed.last
            self.count += placed.count
        if placed.stop < hi:
            self._finish(frames[placed.stop][2])

    def _finish(self, hdr: bytes) -> None:
        code = hdr[9:12]
        self.status = int(code) if code.isdigit() else 0
        if self.status == 204:
            self.pending = int(header_value(hdr, b"Nats-Num-Pending") or b"0")
        self.done.set_result(None)


class _Inbox:
    """One wildcard bulk subscription; each request gets its own token and collector."""

    def __init__(self, nc: JetClient) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self.skip = len(self.prefix) + 1
        self.sub: Subscription | None = None
        self.waiting: dict[bytes, _Collector] = {}
        self.counter = 0

    async def start(self) -> None:
        self.sub = await self.nc.bulk_subscribe(self.prefix + ".*", self._on_frames)

    async def stop(self) -> None:
        if self.sub is not None:
            await self.nc.bulk_unsubscribe(self.sub)

    def _on_frames(self, frames: list[Frame]) -> None:
        # Answers to one request mostly come in long runs: look the collector up per run.
        lo, n, skip = 0, len(frames), self.skip
        while lo < n:
            subject = frames[lo][0]
            hi = lo + 1
            while hi < n and frames[hi][0] == subject:
                hi += 1
            collector = self.waiting.get(subject[skip:])
            if collector is not None:
                collector.take(frames, lo, hi)
            lo = hi

    def new(self, end: int) -> tuple[str, _Collector]:
        self.counter += 1
        token = str(self.counter)
        collector = _Collector(end)
        self.waiting[token.encode()] = collector
        return f"{self.prefix}.{token}", collector

    def forget(self, reply: str) -> None:
        self.waiting.pop(reply.rsplit(".", 1)[1].encode(), None)


async def _direct_request(
    inbox: _Inbox, spec: RangeSpec, cursor: int, count: int, end: int
) -> _Collector:
    body: dict[str, Any] = {"seq": cursor, "batch": count, "max_bytes": _max_bytes(inbox.nc)}
    if spec.filter_subject:
        body["next_by_subj"] = spec.filter_subject
    reply, collector = inbox.new(end)
    try:
        await inbox.nc.publish(
            f"{wire.API}.DIRECT.GET.{spec.stream}", json.dumps(body).encode(), reply=reply
        )
        await asyncio.wait_for(asyncio.shield(collector.done), spec.timeout_s)
    except (TimeoutError, nats.errors.Error):
        collector.status = collector.status or 408
    finally:
        inbox.forget(reply)
    return collector


def _max_bytes(nc: Client) -> int:
    """Bytes per answer: big enough for any single message the server accepts."""
    return max(MAX_BATCH_BYTES, int(getattr(nc, "_max_payload", 0) or 0) + 65536)


async def _confirm_end(nc: Client, spec: RangeSpec, cursor: int) -> int | None:
    """Ask the leader for the next message at/after ``cursor``: its sequence if it is in range
    (a replica was behind), None if the range really is complete."""
    found: list[int] = []
    for filt in spec.filter_subjects or (">",):
        msg = await wire.next_existing(nc, spec.stream, cursor, filt, spec.timeout_s)
        if msg is not None and msg.seq <= spec.end:
            found.append(msg.seq)
    return min(found) if found else None


async def _read_direct_subrange(inbox: _Inbox, spec: RangeSpec, start: int, end: int) -> Chunk:
    chunk = Chunk()
    cursor = start
    retries = _Retries(spec, f"direct get {spec.stream} {start}..{end}")
    while cursor <= end:
        count = min(spec.batch, end - cursor + 1)
        got = await _direct_request(inbox, spec, cursor, count, end)
        chunk.extend(got.chunk)
        if got.count and got.status == 204:
            retries.ok()
        if got.last >= end:
            return chunk
        if got.last:
            cursor = got.last + 1
        if got.status == 204 and got.pending != 0:
            continue  # cut short by max_bytes: go on from the last message
        if got.status in (204, 404):
            # Nothing more on the replica that answered; the leader has the last word.
            nxt = await _confirm_end(inbox.nc, spec, cursor)
            if nxt is None:
                return chunk
            await retries.failed(f"replica behind at sequence {nxt}")
            continue
        await retries.failed(f"status {got.status}")
    return chunk


def _subranges(spec: RangeSpec, start: int) -> list[tuple[int, int]]:
    if spec.filter_subject or spec.filter_subjects:
        return [(start, spec.end)]  # sparse matches: one cursor, no wasted fetches
    step = max(1, spec.batch)
    return [(s, min(s + step - 1, spec.end)) for s in range(start, spec.end + 1, step)]


async def read_direct(nc: JetClient, spec: RangeSpec) -> AsyncIterator[Chunk]:
    """Yield chunks covering ``[start, end]`` in order, via batched direct gets."""
    start = await check_data_loss(nc, spec, spec.start)
    inbox = _Inbox(nc)
    await inbox.start()
    pending: deque[asyncio.Task[Chunk]] = deque()
    ranges = deque(_subranges(spec, start))
    try:
        while ranges or pending:
            while ranges and len(pending) < DIRECT_WINDOW:
                lo, hi = ranges.popleft()
                pending.append(asyncio.create_task(_read_direct_subrange(inbox, spec, lo, hi)))
            chunk = await pending.popleft()
            if (
                chunk.seqs
                and chunk.seqs[0] > start
                and not (spec.filter_subject or spec.filter_subjects)
            ):
                await check_data_loss(nc, spec, start)
            start = (chunk.seqs[-1] + 1) if chunk.seqs else start
            yield chunk
    finally:
        for task in pending:
            task.cancel()
        await inbox.stop()


# -- pull consumer ------------------------------------------------------------------------


def _consumer_config(spec: RangeSpec, name: str, cursor: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "name": name,
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": cursor,
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": 30_000_000_000,
        "num_replicas": 1,
        "mem_storage": True,
        "max_waiting": 4,
    }
    if len(spec.filter_subjects) > 1:
        cfg["filter_subjects"] = list(spec.filter_subjects)
    elif spec.filter_subjects:
        cfg["filter_subject"] = spec.filter_subjects[0]
    return cfg


class _Pull:
    """Deliveries of one no_wait pull request, parsed into columns as they arrive: the
    stream sequence, time and pending count come from each delivery's ack subject."""

    def __init__(self, end: int, want: int) -> None:
        self.end = end
        self.want = want
        self.chunk = Chunk(times_are_ns=True)
        self.received = 0
        self.last = 0
        self.pending = -1
        self.status = 0  # the status that ended the pull (0 = none yet)
        self.progress = asyncio.Event()

    @property
    def finished(self) -> bool:
        return self.status != 0 or self.received >= self.want

    def on_frames(self, frames: list[Frame]) -> None:
        chunk = self.chunk
        seqs, subjects, times, data, headers = (
            chunk.seqs, chunk.subjects, chunk.times, chunk.data, chunk.headers
        )
        end = self.end
        for subject, reply, hdr, payload in frames:
            if self.finished:
                break  # whatever follows the end is not this pull's to count
            if not reply:
                if hdr[8:9] == b" " and hdr[9:12] != b"100":  # 100: a heartbeat
                    code = hdr[9:12]
                    self.status = int(code) if code.isdigit() else 1
                continue
            tokens = reply.split(b".")
            if len(tokens) == 9:
                seq, ts, pending = int(tokens[5]), int(tokens[7]), int(tokens[8])
            elif len(tokens) >= 12:
                seq, ts, pending = int(tokens[7]), int(tokens[9]), int(tokens[10])
            else:
                continue
            self.received += 1
            self.last, self.pending = seq, pending
            if seq > end:
                continue
            seqs.append(seq)
            subjects.append(subject)
            times.append(ts)
            data.append(payload)
            headers.append(hdr or None)
        self.progress.set()

    def take(self) -> Chunk:
        """What arrived since the last take."""
        out, self.chunk = self.chunk, Chunk(times_are_ns=True)
        return out

    async def wait(self, timeout_s: float) -> bool:
        """Until something arrives; False when nothing did for ``timeout_s``."""
        try:
            await asyncio.wait_for(self.progress.wait(), timeout_s)
        except TimeoutError:
            return False
        self.progress.clear()
        return True


async def _delete_consumer(nc: Client, spec: RangeSpec, name: str) -> None:
    # Best effort: a consumer left behind expires on its own (inactive_threshold).
    with contextlib.suppress(nats.errors.Error):
        await nc.request(
            f"{wire.API}.CONSUMER.DELETE.{spec.stream}.{name}", b"", timeout=spec.timeout_s
        )


async def read_consumer(nc: JetClient, spec: RangeSpec) -> AsyncIterator[Chunk]:
    """Yield chunks covering ``[start, end]`` in order, via an ephemeral pull consumer:
    one no_wait pull of up to ``batch`` messages at a time, its deliveries handed on as they
    arrive."""
    cursor = await check_data_loss(nc, spec, spec.start)
    retries = _Retries(spec, f"consumer read {spec.stream} {spec.start}..{spec.end}")
    while cursor <= spec.end:
        name = "jrspark_" + nc.new_inbox().rsplit(".", 1)[1]
        try:
            await wire.api_request(
                nc,
                f"{wire.API}.CONSUMER.CREATE.{spec.stream}.{name}",
                {"stream_name": spec.stream, "config": _consumer_config(spec, name, cursor)},
                spec.timeout_s,
            )
            while cursor <= spec.end:
                pull = _Pull(spec.end, min(spec.batch, spec.end - cursor + 1))
                # One subscription per pull: deliveries carry the stored subject, so only
                # the subscription tells whose they are; what comes after a pull ended (a
                # trailing status, a late delivery) never mixes with the next pull's.
                inbox = nc.new_inbox()
                sub = await nc.bulk_subscribe(inbox, pull.on_frames)
                try:
                    body = {"batch": pull.want, "no_wait": True, "max_bytes": _max_bytes(nc)}
                    subject = f"{wire.API}.CONSUMER.MSG.NEXT.{spec.stream}.{name}"
                    await nc.publish(subject, json.dumps(body).encode(), reply=inbox)
                    async for chunk in _drain(nc, spec, pull, cursor):
                        cursor = chunk.seqs[-1] + 1
                        yield chunk
                finally:
                    await nc.bulk_unsubscribe(sub)
                if pull.received:
                    retries.ok()
                    cursor = max(cursor, pull.last + 1)
                if pull.last >= spec.end:
                    return
                if (pull.received and pull.pending == 0) or (
                    pull.status == 404 and not pull.received
                ):
                    # The consumer reads its server's replica, which may lag the leader:
                    # "nothing more" is final only when the leader agrees.
                    nxt = await _confirm_end(nc, spec, cursor)
                    if nxt is None:
                        return
                    await retries.failed(f"replica behind at sequence {nxt}")
                    break  # recreate the consumer at the cursor
                if not _pull_ended_normally(pull):
                    await retries.failed(f"pull status {pull.status or 408}")
                    break  # recreate the consumer at the cursor
        finally:
            await _delete_consumer(nc, spec, name)


def _pull_ended_normally(pull: _Pull) -> bool:
    """A full batch, or a 409 byte or batch limit after some messages; a 408 after some
    messages is a no_wait pull that found no more."""
    if pull.received >= pull.want:
        return True
    if not pull.received:
        return False
    return pull.status in (404, 408, 409)


async def _drain(
    nc: JetClient, spec: RangeSpec, pull: _Pull, cursor: int
) -> AsyncIterator[Chunk]:
    """The pull's deliveries in range, chunk by chunk as they arrive, until it ends (or
    nothing came for the request timeout)."""
    while True:
        arrived = await pull.wait(spec.timeout_s)
        chunk = pull.take()
        # Decided before yielding: what arrives while the caller holds the chunk is taken
        # on the next turn, even if it completes the pull.
        ended = pull.finished or not arrived
        if ended and not arrived and not pull.status:
            pull.status = 408
        if chunk.seqs:
            if chunk.seqs[0] > cursor and not spec.filter_subjects:
                await check_data_loss(nc, spec, cursor)
            cursor = chunk.seqs[-1] + 1
            yield chunk
        if ended:
            return
