"""One consumer on a running server: delivery to pull requests or a push subject, redelivery
and heartbeat timers, flow control, inactivity cleanup, state commits. Acks are
``consumer_acks``', pull requests ``consumer_pull``'s, the pinned client ``consumer_pin``'s.

The decisions about replicated state are the state machine's (``jetstream.consumer``); every
change of it goes through ``ConsumerRuntime.propose`` (the seam where RAFT slots in), which
touches the consumer's ``CommitQueue``. State nobody waits for is committed at most every
``STATE_FLUSH_S``; an answer that confirms a change (an ack sent as a request, create,
update, pause) waits for the commit that covers it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import (
    Candidate,
    ConsumerCore,
    Delivered,
    Entry,
    Exhausted,
)
from jetraft.jetstream.consumer_api import consumer_info
from jetraft.jetstream.consumer_config import ConsumerConfig, parse_rfc3339_ns
from jetraft.jetstream.pull import Status, WaitingRequest, WaitQueue, heartbeat_hdr, status
from jetraft.protocol.headers import encode_headers
from jetraft.server.js.commit import CommitQueue, Durable, Prepared
from jetraft.server.js.consumer_acks import AckIntake
from jetraft.server.js.consumer_env import (
    ConsumerOwner,
    Replicator,
    has_interest,
    headers_only,
    now_ns,
    write_state,
)
from jetraft.server.js.consumer_events import sample_percent
from jetraft.server.js.consumer_pin import new_pin

log = logging.getLogger("jetraft.js.consumers")

STATE_FLUSH_S = 0.05
RUN_BUDGET = 256  # deliveries per loop turn before yielding to other work
FC_MAX_PENDING = 32 * 1024 * 1024
INTEREST_POLL_MIN_S = 0.005
INTEREST_POLL_MAX_S = 0.25
ACTIVE_POLL_S = 1.0
STATE_FILE = "consumer.dat"
MAX_TIMER_S = 3600.0
_FC_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _first_wait_ns(cfg: ConsumerConfig) -> int:
    """How long after a first delivery its ack is due."""
    return min(cfg.backoff) if cfg.backoff else cfg.ack_wait


class ConsumerRuntime(AckIntake):
    """One consumer on this server (today always its leader); its acks: ``AckIntake``, its
    pull requests: ``consumer_pull.PullIntake``, its pinned client:
    ``consumer_pin.PinnedGroups`` (one stack of bases, see ``PinnedGroups``)."""

    def __init__(
        self, owner: ConsumerOwner, core: ConsumerCore, replicator: Replicator | None = None
    ) -> None:
        """``replicator``: a clustered consumer's group; proposals go there and are
        applied when committed (``applied``). Without: applied at once and committed to
        the consumer's state file (single server)."""
        self.owner = owner
        self.env = owner.env
        self.core = core
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self.client = owner.new_client(f"consumer {core.stream} > {core.name}")
        self.waitq = WaitQueue(core.cfg.max_waiting)
        self.waitq.pin = new_pin(core.cfg)
        self._advised_pin = ""
        self._sample_pct = sample_percent(core.cfg)
        self._kicked = False
        self._interest_memo: dict[str, bool] = {}
        self._ack_prefix = f"$JS.ACK.{core.stream}.{core.name}."
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_due_ns = 0
        self._wait_timer: asyncio.TimerHandle | None = None
        self._hb_timer: asyncio.TimerHandle | None = None
        self._poll_timer: asyncio.TimerHandle | None = None
        self._poll_s = INTEREST_POLL_MIN_S
        self._inactive_timer: asyncio.TimerHandle | None = None
        self._pause_timer: asyncio.TimerHandle | None = None
        self._replay_timer: asyncio.TimerHandle | None = None
        self._replay_prev_ts = 0
        self._replay_due_ns = 0
        self._replay_upto = owner.source().bounds()[1]
        self.replicator = replicator
        self.last_refused = False  # clustered: the group refused the last proposal
        self._route = self.env.router.route_message  # deliveries: see consumer_env.deliver_as
        # A pull request's deliveries of one run, routed together (``_flush_outbox``) to
        # ``_outbox_to``: (subject, ack reply, header block or None, payload).
        self._outbox: list[tuple[str, str | None, bytes | None, bytes]] = []
        self._outbox_to = ""
        self._account = self.env.account
        self._first_wait_ns = _first_wait_ns(core.cfg)
        # One server: the state file's commit queue (None when the state is not persisted).
        self.queue: CommitQueue | None = None
        if replicator is None and owner.persistent and not core.cfg.mem_storage:
            self.queue = CommitQueue(
                f"consumer {core.stream} > {core.name}",
                self._prepare_state,
                lazy_delay_s=STATE_FLUSH_S,
                gate=owner.disk_gate(core.name),
            )
        self.commits: Durable | None = replicator if replicator is not None else self.queue
        self._ack_replies: list[str] = []  # acks sent as requests, waiting for the next commit
        # Push state.
        self.active = False
        self.inactive_since_ns = 0
        self.last_sent_ns = 0
        self.pbytes = 0
        self.maxpb = FC_MAX_PENDING // 16
        self.fcid = ""
        self.fcsz = 0
        self.last_activity_ns = now_ns()

    def _later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        """call_later with a cap: huge configured durations must not overflow the loop's
        timer; every handler re-checks its condition, so an early wake-up is harmless."""
        return self.loop.call_later(min(max(delay_s, 0.0), MAX_TIMER_S), callback)

    # --- identity for the stream's consumer registry -------------------------------------

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def filters(self) -> tuple[str, ...]:
        return self.core.filters

    @property
    def cfg(self) -> ConsumerConfig:
        return self.core.cfg

    def needs_ack(self, seq: int, subject: str) -> bool:
        return self.core.needs_ack(seq, subject)

    def deliver_bound(self) -> bool:
        subject = self.cfg.deliver_subject
        return bool(subject) and has_interest(self.env.account, subject)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        core = self.core
        if self.cfg.ack_policy != "none":
            # As nats-server: an AckNone consumer takes no acks, so an ack sent as a request
            # finds no responders (nats.js's ackAck() reports exactly that).
            self.client.subscribe(
                f"$JS.ACK.{core.stream}.{core.name}.>", self._on_ack, run_handler=self._on_ack_run
            )
        if self.cfg.flow_control:
            self.client.subscribe(f"$JS.FC.{core.stream}.{core.name}.>", self._on_fc)
        if core.state.pending:
            # Restored with outstanding deliveries: work out their deadlines right away.
            now = now_ns()
            self._arm_ack_timer(now, due=now)
        if self.cfg.is_push:
            self._check_push_interest()
            self._arm_hb_timer()
        else:
            self._arm_inactive_timer()
        self._paused()  # created paused: the timer that advises the pause's end
        self.kick()

    def stop(self, deleted: bool, leadership: bool = False) -> None:
        """Stop delivering. ``deleted``: tell waiting pull requests (409 Consumer Deleted);
        ``leadership``: this server stopped leading the consumer (409 Leadership Change)."""
        if self.closed:
            return
        self.closed = True
        for handle in (
            self._ack_timer,
            self._wait_timer,
            self._hb_timer,
            self._poll_timer,
            self._inactive_timer,
            self._pause_timer,
            self._replay_timer,
        ):
            if handle is not None:
                handle.cancel()
        if deleted or leadership:
            why = "Consumer Deleted" if deleted else "Leadership Change"
            for wr in self.waitq.drain():
                self._send_status(status(wr.reply, 409, why))
        self.client.close()

    def update_config(self, cfg: ConsumerConfig) -> None:
        old = self.core.cfg
        self.core.update_config(cfg)
        self._first_wait_ns = _first_wait_ns(cfg)
        self._sample_pct = sample_percent(cfg)
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if cfg.pause_until != old.pause_until:
            self.advise_pause()
            self._paused()  # arms the timer that advises the pause's end
        self.waitq.max_waiting = cfg.max_waiting
        self._renew_pin(old, cfg)
        if cfg.deliver_subject != old.deliver_subject:
            # Everything outstanding goes to the new deliver subject.
            self._force_expire_pending()
            self._check_push_interest()
        self.changed()
        self.kick()

    # --- proposing ------------------------------------------------------------------------

    def propose(self, entry: Entry, notify: bool = True, touch: bool = True) -> list[int]:
        """Apply a replicated entry (single server: locally) and carry out its effects.

        ``notify``: tell the stream about sequences we no longer need (retention);
        ``touch``: tell the commits of the change now (else the caller does, once for many:
        a delivery run)."""
        if self.replicator is not None:
            # Clustered: applied when committed (see ``applied``); only the cursor moves now,
            # so the next delivery does not repeat this one.
            if isinstance(entry, Delivered):
                self.core.note_delivered(entry)
                self.core.note_inflight(entry)
            self.last_refused = not self.replicator.propose(entry)
            if self.last_refused:
                self.refused((entry,))
            if touch:
                self.changed()
            return []
        done = self.core.apply(entry)
        if touch:
            self.changed()
        if done and notify and self.owner.retention != "limits":
            for seq in done:
                self.owner.consumer_ack(seq)
        return done

    def refused(self, entries: Sequence[Entry]) -> None:
        """Clustered: the group refused or dropped the proposal of ``entries`` while this
        runtime ran. Deliveries among them go out again (``ConsumerCore.undeliver``); the
        rest needs nothing: an ack's requester was not answered and retries, a lost ack or
        nak means a redelivery after the ack wait, a lost Exhausted or Dropped is found
        again by the next check."""
        if self.closed:
            return
        again = False
        for entry in entries:
            if type(entry) is Delivered:
                self.core.undeliver(entry)
                again = True
        if again:
            self.kick()

    def applied(self, done: list[int], freed: bool) -> None:
        """Clustered: a committed entry was applied to our state. ``done``: sequences we no
        longer need (retention); ``freed``: a pending message was settled, so deliveries
        blocked by max_ack_pending may go on."""
        if done and self.owner.retention != "limits":
            for seq in done:
                self.owner.consumer_ack(seq)
        if freed:
            self.kick()
        # A delivery whose entry took longer than its ack wait to commit has no timer yet.
        self._arm_ack_timer(now_ns())

    # --- delivery -------------------------------------------------------------------------

    def kick(self) -> None:
        if not self._kicked and not self.closed:
            self._kicked = True
            self.loop.call_soon(self._run)

    def _can_send(self) -> bool:
        if self.cfg.is_push:
            return self.active and not (self.maxpb and self.pbytes > self.maxpb and self.fcid)
        return len(self.waitq) > 0

    def _run(self) -> None:
        self._kicked = False
        self._interest_memo.clear()
        if self.closed or self._paused():
            return
        core, src = self.core, self.owner.source()
        now = now_ns()
        if self.cfg.is_push and not self.active:
            self._check_push_interest()
        if not self._can_send():
            self._after_run(now, eos=False)
            return
        core.num_pending(src)  # refresh the running count once per turn
        sent = 0
        pull = not self.cfg.is_push
        reqs = self.waitq.reqs
        replay = self.cfg.replay_policy == "original"
        try:
            while sent < RUN_BUDGET and (reqs if pull else self._can_send()):
                step = core.next_step(src)
                if step is None:
                    break
                if not isinstance(step, Candidate):
                    if type(step) is Exhausted:
                        self.advise_max_deliveries(step.sseq, step.dc)
                    self.propose(step)
                    continue
                if replay and self._replay_wait(step, now):
                    return
                if not self._deliver(step, now):
                    break
                sent += 1
                reqs = self.waitq.reqs  # take() may replace the list
        finally:
            if sent:
                self.changed()  # the deliveries' commit (``_deliver`` leaves it to us)
            self._flush_outbox()
        if sent >= RUN_BUDGET:
            self.kick()
            return
        stalled = 0 < self.cfg.max_ack_pending <= core.num_ack_pending
        self._after_run(now, eos=not stalled)

    def _replay_wait(self, cand: Candidate, now: int) -> bool:
        """replay_policy original: while catching up with what the stream held when the
        consumer started, space first deliveries as the messages were originally spaced.
        True: the candidate went back and a timer resumes delivery."""
        if self.cfg.replay_policy != "original" or cand.dc != 1:
            return False
        msg = cand.msg
        if msg.seq > self._replay_upto:
            return False
        if self._replay_prev_ts and not self._replay_due_ns:
            gap = msg.ts_ns - self._replay_prev_ts
            if gap > 1_000_000:
                self._replay_due_ns = now + gap
        if self._replay_due_ns and now < self._replay_due_ns:
            self.core.requeue(cand)
            if self._replay_timer is None:
                delay = (self._replay_due_ns - now) / 1e9
                self._replay_timer = self._later(delay, self._on_replay_timer)
            return True
        self._replay_due_ns = 0
        self._replay_prev_ts = msg.ts_ns
        return False

    def _on_replay_timer(self) -> None:
        self._replay_timer = None
        self.kick()

    def _deliver(self, cand: Candidate, now: int) -> bool:
        core, msg = self.core, cand.msg
        cfg = core.cfg
        dseq = core.dseq
        sseq = msg.seq
        reply = core.ack_reply(sseq, dseq, cand.dc, msg.ts_ns, core.npc if core.npc > 0 else 0)
        hdr, data = msg.hdr, msg.data
        if cfg.headers_only:
            hdr, data = headers_only(hdr, data), b""
        subject = msg.subject
        size = len(subject) + len(reply) + (len(hdr) if hdr else 0) + len(data)
        wr: WaitingRequest | None = None
        push = bool(cfg.deliver_subject)
        if push:
            dsubj = cfg.deliver_subject
        else:
            wr, statuses = self.waitq.take(size, now, self._interest_in_run)
            if statuses:
                for st in statuses:
                    self._send_status(st)
            if wr is None:
                core.requeue(cand)
                return False
            dsubj = wr.reply
            if wr.pin_id:
                hdr = self._pinned_hdr(hdr, wr.pin_id)
        self.propose(Delivered(dseq, sseq, cand.dc, now), touch=False)
        if self._ack_timer is None or self._ack_due_ns > now + self._first_wait_ns:
            self._arm_ack_timer(now)
        if push:
            n = self._route(None, self._account, subject, reply, hdr, data, dsubj)
        else:
            if dsubj != self._outbox_to:
                self._flush_outbox()
                self._outbox_to = dsubj
            self._outbox.append((subject, reply, hdr, data))
        self.last_sent_ns = now
        self.last_activity_ns = now
        if push:
            if n == 0:
                self._set_inactive(now)
            elif cfg.flow_control:
                self.pbytes += size
                if not self.fcid and self.pbytes > self.maxpb // 2:
                    self._send_flow_control()
        elif wr is not None and wr.n <= 0 and wr.b > 0:
            items = (("Nats-Pending-Messages", "0"), ("Nats-Pending-Bytes", str(wr.b)))
            self._send_status(status(wr.reply, 409, "Batch Completed", items))
        return True

    def _interest_in_run(self, subject: str) -> bool:
        # Interest cannot change while one delivery run holds the loop: remember answers.
        known = self._interest_memo.get(subject)
        if known is None:
            known = self._interest_memo[subject] = has_interest(self.env.account, subject)
        return known

    def _send_status(self, st: Status) -> None:
        self._flush_outbox()  # after the deliveries before it
        self.client.publish(st.reply, b"", None, st.hdr)

    def _flush_outbox(self) -> None:
        out = self._outbox
        if out:
            self._outbox = []
            self.env.router.route_deliveries(self._account, self._outbox_to, out)

    def _paused(self) -> bool:
        pause = self.cfg.pause_until
        if not pause:
            return False
        remaining = parse_rfc3339_ns(pause) - now_ns()
        if remaining <= 0:
            return False
        if self._pause_timer is None:
            self._pause_timer = self._later(remaining / 1e9, self._on_unpause)
        return True

    def _on_unpause(self) -> None:
        self._pause_timer = None
        if self.closed or self._paused():
            return  # closed, or woken early (timers are capped): re-armed
        self.advise_pause()
        self.kick()

    # --- push: interest, heartbeats, flow control -----------------------------------------

    def _check_push_interest(self) -> None:
        now = now_ns()
        if has_interest(self.env.account, self.cfg.deliver_subject):
            if not self.active:
                self.active = True
                self.inactive_since_ns = 0
                self._poll_s = INTEREST_POLL_MIN_S
                self.kick()
            # No interest notifications from the sublist: while bound, look again now and
            # then, so a consumer whose subscriber left is noticed (inactive_threshold).
            thresh = self.cfg.inactive_threshold
            if thresh > 0 and self._poll_timer is None and not self.closed:
                delay = min(ACTIVE_POLL_S, max(thresh / 4e9, INTEREST_POLL_MIN_S))
                self._poll_timer = self._later(delay, self._on_poll)
        else:
            self._set_inactive(now)

    def _set_inactive(self, now: int) -> None:
        if self.active or not self.inactive_since_ns:
            self.inactive_since_ns = now
        self.active = False
        if self._poll_timer is None and not self.closed:
            self._poll_timer = self._later(self._poll_s, self._on_poll)
            self._poll_s = min(self._poll_s * 2, INTEREST_POLL_MAX_S)
        self._arm_inactive_timer()

    def _on_poll(self) -> None:
        self._poll_timer = None
        if not self.closed:
            self._check_push_interest()

    def _arm_hb_timer(self) -> None:
        hb = self.cfg.idle_heartbeat
        if hb > 0 and not self.closed:
            self._hb_timer = self._later(hb / 1e9, self._on_hb_timer)

    def _on_hb_timer(self) -> None:
        self._hb_timer = None
        if self.closed:
            return
        hb = self.cfg.idle_heartbeat
        now = now_ns()
        idle = now - self.last_sent_ns
        if idle >= hb * 0.99:
            if self.active:
                core = self.core
                hdr = heartbeat_hdr(core.dseq - 1, core.sseq - 1, self.fcid)
                self.client.publish(self.cfg.deliver_subject, b"", None, hdr)
                self.last_sent_ns = now
            delay = hb
        else:
            delay = hb - idle
        self._hb_timer = self._later(delay / 1e9, self._on_hb_timer)

    def _send_flow_control(self) -> None:
        core = self.core
        token = "".join(self.env.rng.choice(_FC_CHARS) for _ in range(4))
        self.fcid = f"$JS.FC.{core.stream}.{core.name}.{token}"
        self.fcsz = self.pbytes
        hdr = encode_headers((), status=100, description="FlowControl Request")
        self.client.publish(self.cfg.deliver_subject, b"", self.fcid, hdr)

    def _on_fc(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if subject != self.fcid:
            return
        if self.maxpb < FC_MAX_PENDING:
            self.maxpb = min(self.maxpb * 2, FC_MAX_PENDING)
        self.pbytes = max(self.pbytes - self.fcsz, 0)
        self.fcid, self.fcsz = "", 0
        self.kick()

    def _force_expire_pending(self) -> None:
        for seq in sorted(self.core.state.pending):
            self.core.nak_now(seq)

    # --- ack timer ------------------------------------------------------------------------

    def _arm_ack_timer(self, now: int, due: int = 0) -> None:
        if self.cfg.ack_policy == "none" or self.closed:
            return
        if not due:
            if not self.core.state.pending and not self.core.inflight:
                return
            due = now + _first_wait_ns(self.cfg)
        if self._ack_timer is not None:
            if self._ack_due_ns <= due:
                return
            self._ack_timer.cancel()
        self._ack_due_ns = due
        self._ack_timer = self._later(max(due - now, 0) / 1e9 + 0.001, self._on_ack_timer)

    def _on_ack_timer(self) -> None:
        self._ack_timer = None
        if self.closed:
            return
        now = now_ns()
        exhausted, next_due = self.core.check_pending(now)
        for entry in exhausted:
            self.advise_max_deliveries(entry.sseq, entry.dc)
            self.propose(entry)
        if self.core.has_redeliveries():
            self.kick()
        if next_due is not None:
            self._arm_ack_timer(now, due=next_due)

    # --- inactivity -----------------------------------------------------------------------

    def _arm_inactive_timer(self) -> None:
        thresh = self.cfg.inactive_threshold
        if thresh <= 0 or self.closed or self._inactive_timer is not None:
            return
        self._inactive_timer = self._later(thresh / 1e9, self._on_inactive_timer)

    def _on_inactive_timer(self) -> None:
        self._inactive_timer = None
        if self.closed:
            return
        thresh = self.cfg.inactive_threshold
        now = now_ns()
        if self.cfg.is_push:
            if self.active or has_interest(self.env.account, self.cfg.deliver_subject):
                return
            since = self.inactive_since_ns or now
        else:
            self._after_run(now, eos=False)
            if len(self.waitq):
                self._arm_inactive_timer()
                return
            since = max(self.last_activity_ns, self.waitq.last_ns)
        if now - since >= thresh:
            log.debug("deleting inactive consumer %s > %s", self.core.stream, self.core.name)
            if self.replicator is None:
                # One server: no API answer advises this delete (in a cluster the meta
                # leader does, once the delete is committed).
                self.advise_deleted()
            self.owner.delete(self.core.name)
            return
        self._inactive_timer = self._later((since + thresh - now) / 1e9, self._on_inactive_timer)

    # --- persistence ----------------------------------------------------------------------

    def changed(self) -> None:
        """Replicated state or config changed: commit it (lazily, unless someone waits)."""
        if self.commits is not None:
            self.commits.touch()

    def write_now(self) -> None:
        """Create, update and pause answers: the request being handled waits for a commit of
        the current state (through the request's barrier; never blocks the loop)."""
        self.changed()

    def _prepare_state(self) -> Prepared:
        """On the loop: encode the state now; the atomic write runs in a worker thread."""
        self._ack_replies = []  # the batch of ack answers so far is covered by this commit
        path = self.owner.state_path(self.core.name)
        if path is None:
            return Prepared(None)
        blob = consumer_state.encode(consumer_state.snapshot(self.core), self.owner.cipher)
        return Prepared(functools.partial(write_state, self.owner.disk, path, blob))

    # --- info -----------------------------------------------------------------------------

    def info(self, now: int | None = None) -> dict[str, Any]:
        now = now_ns() if now is None else now
        if not self.cfg.is_push:
            for st in self.waitq.process(now, False, self._interest):
                self._send_status(st)
        push_bound = self.cfg.is_push and has_interest(self.env.account, self.cfg.deliver_subject)
        return consumer_info(
            self.core,
            self.owner.source(),
            now_ns=now,
            num_waiting=len(self.waitq),
            push_bound=push_bound,
            priority_groups=self.priority_groups(),
        )
