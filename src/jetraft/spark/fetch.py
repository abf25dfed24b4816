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
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jetraft.spark import wire
from jetraft.spark.codec import parse_ack_subject
from jetraft.spark.loop import JetClient

log = logging.getLogger("jetraft.spark")

MAX_BATCH_BYTES = 4 * 1024 * 1024
DIRECT_WINDOW = 4


class DataLossError(RuntimeError):
    """The range starts below the stream's first sequence: messages were removed by limits."""


@dataclass(slots=True)
class Chunk:
    """Column lists for a run of messages; ``times`` are RFC 3339 strings or epoch ns ints."""

    seqs: list[int] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    times: list[Any] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    headers: list[bytes | None] = field(default_factory=list)
    times_are_ns: bool = False

    def __len__(self) -> int:
        return len(self.seqs)


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


class _Inbox:
    """One wildcard fast subscription; each request gets its own token and collector."""

    def __init__(self, nc: JetClient) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self.skip = len(self.prefix) + 1
        self.sub: Subscription | None = None
        self.waiting: dict[bytes, _Collector] = {}
        self.counter = 0

    async def start(self) -> None:
        self.sub = await self.nc.fast_subscribe(self.prefix + ".*", self._dispatch)

    async def stop(self) -> None:
        if self.sub is not None:
            await self.nc.fast_unsubscribe(self.sub)

    def _dispatch(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        collector = self.waiting.get(subject[self.skip :])
        if collector is not None:
            collector.add(data, headers)

    def new(self) -> tuple[str, _Collector]:
        self.counter += 1
        token = str(self.counter)
        collector = _Collector()
        self.waiting[token.encode()] = collector
        return f"{self.prefix}.{token}", collector

    def forget(self, reply: str) -> None:
        self.waiting.pop(reply.rsplit(".", 1)[1].encode(), None)


def header_value(raw: bytes, name: bytes) -> bytes:
    """One header's value from a raw block (first occurrence), b"" if absent."""
    i = raw.find(b"\r\n" + name + b":")
    if i < 0:
        return b""
    j = i + len(name) + 3
    k = raw.find(b"\r\n", j)
    return raw[j:k].strip()


class _Collector:
    """The answers to one direct-get request: raw (payload, headers) pairs until a status."""

    def __init__(self) -> None:
        self.msgs: list[tuple[bytes, bytes]] = []
        self.status: int | None = None
        self.pending: int | None = None
        self.done = asyncio.get_running_loop().create_future()

    def add(self, data: bytes, headers: bytes) -> None:
        if self.done.done():
            return
        if not data and headers[8:9] == b" ":
            code = headers[9:12]
            self.status = int(code) if code.isdigit() else 0
            if self.status == 204:
                self.pending = int(header_value(headers, b"Nats-Num-Pending") or b"0")
            self.done.set_result(None)
            return
        self.msgs.append((data, headers))


def _append_direct(chunk: Chunk, data: bytes, headers: bytes, end: int) -> int:
    """Add one direct-get answer to the chunk (if in range); returns its sequence."""
    seq = int(header_value(headers, b"Nats-Sequence") or b"0")
    if seq <= end:
        chunk.seqs.append(seq)
        chunk.subjects.append(header_value(headers, b"Nats-Subject").decode())
        chunk.times.append(header_value(headers, b"Nats-Time-Stamp").decode())
        chunk.data.append(data)
        chunk.headers.append(headers)
    return seq


async def _direct_request(inbox: _Inbox, spec: RangeSpec, cursor: int, count: int) -> _Collector:
    body: dict[str, Any] = {"seq": cursor, "batch": count, "max_bytes": MAX_BATCH_BYTES}
    if spec.filter_subject:
        body["next_by_subj"] = spec.filter_subject
    reply, collector = inbox.new()
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
        got = await _direct_request(inbox, spec, cursor, count)
        last = 0
        for data, headers in got.msgs:
            last = max(last, _append_direct(chunk, data, headers, end))
        if got.msgs and got.status == 204:
            retries.ok()
        if last >= end:
            return chunk
        if last:
            cursor = last + 1
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


# -- ordered pull consumer ----------------------------------------------------------------


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


async def _pull(nc: Client, spec: RangeSpec, name: str, count: int) -> tuple[list[Msg], int]:
    """One no_wait pull; returns the messages and the terminating status (0 = none)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, pending_msgs_limit=-1, pending_bytes_limit=-1)
    msgs: list[Msg] = []
    status = 0
    try:
        body = {"batch": count, "no_wait": True, "max_bytes": MAX_BATCH_BYTES}
        subject = f"{wire.API}.CONSUMER.MSG.NEXT.{spec.stream}.{name}"
        await nc.publish(subject, json.dumps(body).encode(), reply=inbox)
        while len(msgs) < count:
            msg = await sub.next_msg(timeout=spec.timeout_s)
            hdrs = msg.headers
            code = hdrs.get("Status") if hdrs else None
            if code is not None and not msg.data:
                if code == "100":
                    continue  # heartbeat
                status = int(code)
                break
            msgs.append(msg)
    except nats.errors.TimeoutError:
        status = 408 if not msgs else 0
    finally:
        await sub.unsubscribe()
    return msgs, status


async def _delete_consumer(nc: Client, spec: RangeSpec, name: str) -> None:
    # Best effort: a consumer left behind expires on its own (inactive_threshold).
    with contextlib.suppress(nats.errors.Error):
        await nc.request(
            f"{wire.API}.CONSUMER.DELETE.{spec.stream}.{name}", b"", timeout=spec.timeout_s
        )


async def read_consumer(nc: Client, spec: RangeSpec) -> AsyncIterator[Chunk]:
    """Yield chunks covering ``[start, end]`` in order, via an ephemeral pull consumer."""
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
                msgs, status = await _pull(nc, spec, name, min(spec.batch, spec.end - cursor + 1))
                chunk, last, pending = _consumer_chunk(msgs, spec.end)
                if chunk.seqs and chunk.seqs[0] > cursor and not spec.filter_subjects:
                    await check_data_loss(nc, spec, cursor)
                if msgs:
                    retries.ok()
                    cursor = last + 1
                    if chunk.seqs:
                        yield chunk
                if last >= spec.end:
                    return
                if (msgs and pending == 0) or (status == 404 and not msgs):
                    # The consumer reads its server's replica, which may lag the leader:
                    # "nothing more" is final only when the leader agrees.
                    nxt = await _confirm_end(nc, spec, cursor)
                    if nxt is None:
                        return
                    await retries.failed(f"replica behind at sequence {nxt}")
                    break  # recreate the consumer at the cursor
                if status not in (0, 404, 408) or (status == 408 and not msgs):
                    await retries.failed(f"pull status {status}")
                    break  # recreate the consumer at the cursor
        finally:
            await _delete_consumer(nc, spec, name)


def _consumer_chunk(msgs: list[Msg], end: int) -> tuple[Chunk, int, int]:
    chunk = Chunk(times_are_ns=True)
    last = 0
    pending = -1
    for msg in msgs:
        meta = parse_ack_subject(msg.reply)
        last, pending = meta.stream_seq, meta.pending
        if meta.stream_seq > end:
            continue
        chunk.seqs.append(meta.stream_seq)
        chunk.subjects.append(msg.subject)
        chunk.times.append(meta.timestamp_ns)
        chunk.data.append(msg.data)
        chunk.headers.append(getattr(msg.headers, "raw", None) if msg.headers else None)
    return chunk, last, pending
