"""The asyncio edge of sourcing and mirroring: one task per source (or the mirror), run by
the server that leads the sourcing stream.

Origin messages are read through the account's JetStream API (``STREAM.MSG.GET`` with
``next_by_subj``, ``STREAM.INFO`` for the origin's identity and last sequence), like any
client would, so the origin may be led by another server: the request takes the route to
its leader. Each copy is handed to ``store`` (the stream's propose: applied at once on one
server, through the stream's RAFT group in a cluster), so every replica gets the copies in
the same order; the state machine drops a copy it already holds, which makes re-reading
after a restart or a leader change harmless. Where to start is read from the stream itself
(the last Nats-Stream-Source header per source; a mirror's last sequence).

Reading is one request per message (copies are proposed in batches) and an idle source
polls (``IDLE_POLL_S``); that is the price of working the same way for a local and a remote
origin.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jetraft.jetstream.entries import PubAck, StoreMsg
from jetraft.jetstream.models import parse_time
from jetraft.jetstream.sourcing import (
    SourceSpec,
    SourceStatus,
    mirrored_msg,
    source_info,
    source_specs,
    sourced_msg,
    start_position,
    stream_ident,
)
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.server.core.internal import InternalClient

log = logging.getLogger("jetraft.sourcing")

IDLE_POLL_S = 0.1
INFO_EVERY_S = 1.0
RETRY_S = 0.5
REQUEST_TIMEOUT_S = 2.0
BATCH_MSGS = 256  # copies proposed together
BATCH_BYTES = 1 << 20
ERR_STREAM_NOT_FOUND = 10059
ERR_NO_MESSAGE = 10037

# Proposes copies in order (one log entry in a cluster); one PubAck each, once applied.
Store = Callable[[list[StoreMsg]], Awaitable[list[PubAck]]]


class _Origin:
    """The origin stream as the API shows it."""

    def __init__(self, client: InternalClient, name: str) -> None:
        self.client = client
        self.name = name

    async def _call(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        got = await self.client.request(
            f"$JS.API.{api}.{self.name}", json.dumps(body).encode(), REQUEST_TIMEOUT_S
        )
        if got is None:
            return {"error": {"code": 503, "err_code": 0, "description": "no response"}}
        doc: dict[str, Any] = json.loads(got[1])
        return doc

    async def info(self) -> dict[str, Any]:
        return await self._call("STREAM.INFO", {})

    async def next_msg(self, seq: int, filt: str, start_time: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"next_by_subj": filt or ">"}
        if start_time is not None:
            body["start_time"] = start_time
        else:
            body["seq"] = seq
        return await self._call("STREAM.MSG.GET", body)


class Sourcer:
    """Runs a stream's mirror or sources while this server leads the stream."""

    def __init__(
        self, client: InternalClient, stream: Callable[[], Stream], store: Store, name: str
    ) -> None:
        self.client = client
        self._stream = stream
        self._store = store
        self.name = name
        self.status: dict[str, SourceStatus] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._config: StreamConfig | None = None

    def running(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Start (or restart after a config change) one task per source."""
        cfg = self._stream().config
        if self._tasks and cfg.mirror == (self._config and self._config.mirror) and (
            self._config is not None and cfg.sources == self._config.sources
        ):
            return
        self.stop()
        self._config = cfg
        old = self.status
        self.status = {}
        for spec in source_specs(cfg):
            prev = old.get(spec.iname)
            st = self.status[spec.iname] = SourceStatus(spec)
            if prev is not None:
                st.last_seq, st.active_ns = prev.last_seq, prev.active_ns
            self._tasks.append(
                asyncio.get_running_loop().create_task(self._run(st), name=f"source {spec.iname}")
            )

    def follow_config(self) -> None:
        """Run what the stream's config asks for now: its mirror or sources (started, or
        restarted if they changed), or nothing; the stream's info then shows their state."""
        stream = self._stream()
        cfg = stream.config
        if cfg.mirror is not None or cfg.sources:
            stream.source_info = self.info
            self.start()
        else:
            self.stop()

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self._config = None

    # --- one source ------------------------------------------------------------------------

    def _stored_position(self, spec: SourceSpec, ident: str) -> int | None:
        """The last origin sequence the stream holds from this source; None when it holds
        none, or only copies of an earlier origin of that name (it was recreated)."""
        stream = self._stream()
        if spec.mirror:
            last = stream.last_seq
            return last if last > 0 else None
        known = stream.source_positions.get(
            stream.config, stream.stored_headers_newest_first
        ).get(spec.iname)
        if known is None or (known.ident and ident and known.ident != ident):
            return None
        return known.seq

    async def _run(self, st: SourceStatus) -> None:
        spec = st.spec
        origin = _Origin(self.client, spec.origin)
        ident: str | None = None
        pos = 0  # next origin sequence to read; 0 = not decided yet
        info_due = 0.0
        while True:
            try:
                now = time.monotonic()
                if now >= info_due:
                    info = await origin.info()
                    info_due = now + INFO_EVERY_S
                    if "error" in info:
                        st.error = info["error"]
                        await asyncio.sleep(RETRY_S)
                        continue
                    st.error = None
                    new_ident = stream_ident(info.get("created", ""))
                    if ident is not None and new_ident != ident:
                        pos = start_position(spec, None)  # the origin was recreated
                        log.info("stream %s: origin %s was recreated", self.name, spec.origin)
                    ident = new_ident
                    last = int(info["state"]["last_seq"])
                    if pos == 0:
                        pos = start_position(spec, self._stored_position(spec, new_ident))
                    st.lag = max(0, last - max(pos - 1, 0))
                pos = await self._drain(st, origin, pos, ident or "")
                await asyncio.sleep(IDLE_POLL_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any one failure
                log.warning("stream %s: source %s: %s", self.name, spec.iname, exc)
                st.error = {"code": 500, "err_code": 10029, "description": str(exc)}
                pos = 0
                info_due = 0.0
                await asyncio.sleep(RETRY_S)

    async def _drain(self, st: SourceStatus, origin: _Origin, pos: int, ident: str) -> int:
        """Copy every origin message from ``pos`` on, a batch at a time; returns the next
        position to read."""
        spec = st.spec
        while True:
            batch: list[tuple[int, StoreMsg]] = []
            size = 0
            nxt = pos
            done = False
            while len(batch) < BATCH_MSGS and size < BATCH_BYTES:
                by_time = spec.opt_start_time if nxt == -1 else None
                got = await origin.next_msg(max(nxt, 1), spec.fetch_filter(), by_time)
                st.active_ns = time.monotonic_ns()
                err = got.get("error")
                if err is not None:
                    if err.get("err_code") == ERR_NO_MESSAGE:
                        st.lag = 0
                    else:
                        st.error = err
                    done = True
                    break
                msg = got["message"]
                seq = int(msg["seq"])
                if spec.matches(msg["subject"]):
                    entry = self._copy(spec, msg, seq, ident)
                    batch.append((seq, entry))
                    size += len(entry.data) + len(entry.hdr or b"")
                nxt = seq + 1
            if batch:
                acks = await self._store([e for _, e in batch])
                for (seq, _), ack in zip(batch, acks, strict=True):
                    if ack.error is not None:
                        st.error = ack.error.to_wire()
                        await asyncio.sleep(RETRY_S)
                        return seq  # read again from the one refused
                    st.last_seq = seq
            st.lag = max(0, st.lag - len(batch))
            pos = nxt
            if done:
                return pos

    @staticmethod
    def _copy(spec: SourceSpec, msg: dict[str, Any], seq: int, ident: str) -> StoreMsg:
        subject = msg["subject"]
        hdr = base64.b64decode(msg["hdrs"]) if msg.get("hdrs") else None
        data = base64.b64decode(msg.get("data", ""))
        if spec.mirror:
            return mirrored_msg(spec, seq, subject, hdr, data, parse_time(msg["time"]))
        return sourced_msg(spec, seq, subject, hdr, data, time.time_ns(), ident)

    # --- info ------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The ``mirror`` / ``sources`` members of STREAM.INFO."""
        return source_info(self._stream().config, self.status, time.monotonic_ns())
