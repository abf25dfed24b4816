"""The pull half of a consumer's runtime (``consumer_runtime.ConsumerRuntime`` stacks on it):
pull requests checked against the consumer's limits and priority groups and queued, and the
wait timer that expires them, sends their idle heartbeats and lets a quiet pinned client's
pin lapse. Handing messages to the queued requests is the delivery run's (the runtime's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jetraft.jetstream.consumer_config import go_duration
from jetraft.jetstream.pull import (
    PullError,
    Status,
    WaitingRequest,
    heartbeat_hdr,
    parse_pull_request,
    status,
)
from jetraft.server.js.consumer_env import ConsumerOwner, has_interest, now_ns
from jetraft.server.js.consumer_pin import PinnedGroups


class PullIntake(PinnedGroups):
    """Pull requests of ``ConsumerRuntime``, which sets these attributes and provides the
    methods below that raise here."""

    owner: ConsumerOwner
    closed: bool
    last_activity_ns: int
    _kicked: bool
    _wait_timer: asyncio.TimerHandle | None

    def _later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        raise NotImplementedError

    def _send_status(self, st: Status) -> None:
        raise NotImplementedError

    def pull_request(self, reply: str, data: bytes) -> None:
        if self.closed or not reply:
            return
        cfg = self.cfg
        if cfg.is_push:
            self._send_status(status(reply, 409, "Consumer is push based"))
            return
        try:
            req = parse_pull_request(data)
        except PullError as exc:
            self._send_status(status(reply, exc.code, exc.description))
            return
        refusal = self._pull_limits(req.batch, req.expires_ns, req.max_bytes)
        if refusal:
            self._send_status(status(reply, 409, refusal))
            return
        now = now_ns()
        if cfg.priority_policy != "none":
            group_refusal = self._pin_refusal(req, now)
            if group_refusal is not None:
                self._send_status(status(reply, *group_refusal))
                return
        self.last_activity_ns = now
        if self.waitq.is_full():
            self._after_run(now, eos=False)
        if req.no_wait:
            waiting = self.core.num_pending(self.owner.source()) + len(self.core.rdq)
            if waiting == 0 and not req.expires_ns:
                self._send_status(status(reply, 404, "No Messages"))
                return
            if waiting:
                # Expired requests and those whose requester left do not count as pending.
                self._after_run(now, eos=False)
            if 0 < waiting < self.waitq.pending_batch():
                self._send_status(status(reply, 408, "Requests Pending"))
                return
        hb = req.idle_heartbeat_ns
        wr = WaitingRequest(
            reply=reply,
            n=req.batch,
            b=req.max_bytes,
            expires_at_ns=now + req.expires_ns if req.expires_ns else 0,
            no_wait=req.no_wait,
            hb_ns=hb,
            next_hb_ns=now + hb if hb else 0,
            received_ns=now,
            group=req.group,
            pin_id=req.pin_id,
        )
        if not self.waitq.add(wr):
            if not hb:
                self._send_status(status(reply, 409, "Exceeded MaxWaiting"))
            return
        self.waitq.last_ns = now
        self.kick()
        self._arm_wait_timer(now)

    def _pull_limits(self, batch: int, expires_ns: int, max_bytes: int) -> str:
        cfg = self.cfg
        if cfg.max_batch > 0 and batch > cfg.max_batch:
            return f"Exceeded MaxRequestBatch of {cfg.max_batch}"
        if expires_ns and cfg.max_expires > 0 and expires_ns > cfg.max_expires:
            return f"Exceeded MaxRequestExpires of {go_duration(cfg.max_expires)}"
        if max_bytes > 0 and cfg.max_bytes > 0 and max_bytes > cfg.max_bytes:
            return f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}"
        return ""

    def _after_run(self, now: int, eos: bool) -> None:
        """A delivery run ended (``eos``: nothing more to deliver now): finish the requests
        that are done and arm the wait timer for the rest."""
        if not self.cfg.is_push:
            for st in self.waitq.process(now, eos, self._interest):
                self._send_status(st)
            self._arm_wait_timer(now)

    def _interest(self, subject: str) -> bool:
        return has_interest(self.env.account, subject)

    def _arm_wait_timer(self, now: int) -> None:
        due = self.waitq.next_deadline()
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        if due and not self.closed:
            self._wait_timer = self._later(max(due - now, 0) / 1e9, self._on_wait_timer)

    def _on_wait_timer(self) -> None:
        self._wait_timer = None
        if self.closed:
            return
        now = now_ns()
        # As nats-server: a timer (a heartbeat or an expiry is due) ends the no_wait requests
        # that already got messages, even while max_ack_pending holds delivery back (else
        # such a request would linger and take messages its requester no longer waits for).
        # A delivery run already scheduled decides for itself.
        for st in self.waitq.process(now, not self._kicked, self._interest):
            self._send_status(st)
        self._lapse_pin(now)
        core = self.core
        for st in self.waitq.heartbeats(now, lambda: heartbeat_hdr(core.dseq - 1, core.sseq - 1)):
            self._send_status(st)
        self._arm_wait_timer(now)
