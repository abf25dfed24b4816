"""The ack half of a consumer's runtime (``consumer_runtime.ConsumerRuntime`` mixes it in):
acks, naks, +WPI, +TERM and +NXT on the consumer's ack subjects, one at a time or the acks of
one client read together, and the answers to acks sent as requests, which leave only once
what they changed is durable (one server: the state file's commit; a cluster: the commit of
the consumer group's entry that holds them).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from jetraft.jetstream.acks import parse_ack_subject, parse_nak_delay
from jetraft.jetstream.consumer import Acked, Entry, Nakked, Progress
from jetraft.protocol.client import PubBatch, split_body
from jetraft.server.js.commit import CommitQueue, collect
from jetraft.server.js.consumer_env import Replicator, now_ns
from jetraft.server.js.consumer_pull import PullIntake

log = logging.getLogger("jetraft.js.consumers")


def _ascii_digits(text: str) -> bool:
    # Not str.isdigit() alone: it accepts "²", which int() refuses.
    return text.isascii() and text.isdigit()


class AckIntake(PullIntake):
    """Ack handling of ``ConsumerRuntime``, which sets these attributes and provides the
    methods below that raise here (+NXT is a pull request: ``PullIntake``)."""

    replicator: Replicator | None
    queue: CommitQueue | None
    last_refused: bool
    _ack_prefix: str
    _ack_replies: list[str]  # acks sent as requests, waiting for the next commit

    def propose(self, entry: Entry, notify: bool = True, touch: bool = True) -> list[int]:
        raise NotImplementedError

    def refused(self, entries: Sequence[Entry]) -> None:
        raise NotImplementedError

    def changed(self) -> None:
        raise NotImplementedError

    def _arm_ack_timer(self, now: int, due: int = 0) -> None:
        raise NotImplementedError

    def _on_ack(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if self.closed:
            return
        sseq = dseq = -1
        if subject.startswith(self._ack_prefix):
            # Fast path for our own v1 ack subjects: <dc>.<sseq>.<dseq>.<ts>.<pending>.
            parts = subject[len(self._ack_prefix) :].split(".")
            if len(parts) == 5 and _ascii_digits(parts[1]) and _ascii_digits(parts[2]):
                sseq, dseq = int(parts[1]), int(parts[2])
        if sseq < 0:
            info = parse_ack_subject(subject)
            if info is None:
                return
            sseq, dseq = info.sseq, info.dseq
        self.last_activity_ns = now = now_ns()
        body = data.strip() if data else b""
        if body.startswith(b"+TERM"):
            info = parse_ack_subject(subject)
            self.advise_terminated(sseq, dseq, info.dc if info is not None else 1, body[5:])
        if not reply:
            self._apply_ack(body, sseq, dseq, None, now)
            return
        # An ack sent as a request is answered once what it changed is durable. Common
        # case (one server, limits retention: only our state changes): answers wait in
        # batches on our commit queue, the batch closed when the queue takes it.
        queue = self.queue
        if queue is not None and self.owner.retention == "limits":
            if self._apply_ack(body, sseq, dseq, reply, now):
                batch = self._ack_replies
                batch.append(reply)
                if len(batch) == 1:
                    queue.after_durable(functools.partial(self._acks_answered, batch))
            return
        # Clustered: only the group's log must hold the ack (a stream's retention follows
        # once it is applied); the answer waits for the proposal of this loop turn's
        # changes, which holds it.
        replicator = self.replicator
        if replicator is not None:
            if self._apply_ack(body, sseq, dseq, reply, now):
                replicator.after_durable(functools.partial(self._ack_answered, reply))
            return
        # Otherwise (one server, and the stream changes too under interest or workqueue
        # retention): everything the ack touched is collected.
        with collect() as barrier:
            answer = self._apply_ack(body, sseq, dseq, reply, now)
        if answer:
            barrier.wait(functools.partial(self._ack_answered, reply))

    def _on_ack_run(self, batch: PubBatch, first: int, stop: int) -> int:
        """The acks of one client read (runs of publishes on our ack subjects, which
        ``Router.route_pubs`` hands over together): as ``_on_ack`` for each, with plain
        acks on our own ack subjects taken here in a tight loop and the state touched once.
        Acks sent as requests are answered as ``_on_ack`` answers them, in batches."""
        lines, starts, bodies = batch.lines, batch.starts, batch.bodies
        if self.closed:
            return starts[stop] - starts[first]
        prefix = self._ack_prefix
        cut = len(prefix)
        core = self.core
        st = core.state
        replicator = self.replicator
        notify = self.owner.retention != "limits"
        # Answers to acks sent as requests wait here when what they change is only our
        # state: one server with limits retention (the commit queue's batch), or a cluster.
        answerable = (self.queue is not None and not notify) or replicator is not None
        limit = core.cfg.max_ack_pending
        was_full = 0 < limit <= len(st.pending)
        self.last_activity_ns = now = now_ns()
        replies: list[str] = []
        # Plain acks of an explicit-ack consumer on one server: applied together
        # (``apply_explicit_acks``), before anything else of the run is looked at.
        explicit: list[int] | None = (
            [] if replicator is None and core.cfg.ack_policy == "explicit" else None
        )
        sampling = self._sample_pct > 0 and core.cfg.ack_policy == "explicit"
        taken = 0
        try:
            for r in range(first, stop):
                subject, reply, _total, hdr_len, _tail = lines[r]
                b0, b1 = starts[r], starts[r + 1]
                if (
                    b1 - b0 == 1
                    and hdr_len < 0
                    and (reply is None or answerable)
                    and subject.startswith(prefix)
                ):
                    body = bodies[b0]
                    rest = subject[cut:]
                    if (not body or body == b"+ACK" or body == b"+OK") and rest.isascii():
                        # Our own v1 ack subjects: <dc>.<sseq>.<dseq>.<ts>.<pending>.
                        parts = rest.split(".")
                        if len(parts) == 5 and parts[1].isdigit() and parts[2].isdigit():
                            sseq = int(parts[1])
                            if sseq >= core.sseq and sseq > st.delivered.stream_seq:
                                continue  # not delivered yet: ignored, as by ``_ack``
                            taken += 1
                            if sampling:
                                self.sample_ack(sseq, int(parts[2]), now)
                            if explicit is not None:
                                explicit.append(sseq)
                            elif replicator is None:
                                done = core.apply_ack(sseq, int(parts[2]))
                                if done and notify:
                                    for seq in done:
                                        self.owner.consumer_ack(seq)
                            else:
                                entry = Acked(sseq, int(parts[2]))
                                if not replicator.propose(entry):
                                    self.refused((entry,))
                                    continue  # not answered: the requester retries
                            if reply is not None:
                                replies.append(reply)
                            continue
                if explicit:
                    self._apply_explicit(explicit, notify)
                for i in range(b0, b1):
                    self._on_ack(subject, reply, *split_body(lines[r], bodies[i]))
        finally:
            if explicit:
                self._apply_explicit(explicit, notify)
            if taken:
                core.last_ack_ns = now
                self.changed()
                if was_full and len(st.pending) < limit:
                    self.kick()
            if replies:
                self._answer_acks(replies)
        return starts[stop] - starts[first]

    def _apply_explicit(self, seqs: list[int], notify: bool) -> None:
        done = self.core.apply_explicit_acks(seqs)
        seqs.clear()
        if notify:
            for seq in done:
                self.owner.consumer_ack(seq)

    def _answer_acks(self, replies: list[str]) -> None:
        """Answer acks sent as requests once the changes made so far are durable."""
        if self.replicator is not None:
            self.replicator.after_durable(functools.partial(self._acks_answered, replies))
            return
        batch = self._ack_replies
        batch.extend(replies)
        if len(batch) == len(replies) and self.queue is not None:
            self.queue.after_durable(functools.partial(self._acks_answered, batch))

    def _apply_ack(self, body: bytes, sseq: int, dseq: int, reply: str | None, now: int) -> bool:
        """Carry out one ack message; True when it is answered (if sent as a request)."""
        if not body or body == b"+ACK" or body == b"+OK":
            return self._ack(sseq, dseq)
        elif body.startswith(b"+NXT"):
            self._ack(sseq, dseq)
            if reply:
                self.pull_request(reply, body[4:])
            return False
        elif body.startswith(b"-NAK"):
            self._nak(sseq, dseq, body[4:].strip(), now)
        elif body == b"+WPI":
            if self.core.is_pending(sseq):
                self.propose(Progress(sseq, now))
        elif body.startswith(b"+TERM"):
            return self._ack(sseq, dseq, term=True)
        else:
            return False
        return True

    def _acks_answered(self, replies: list[str], exc: BaseException | None) -> None:
        if exc is None:
            publish = self.client.publish
            for reply in replies:
                publish(reply, b"")
        else:
            self._ack_answered("", exc)

    def _ack_answered(self, reply: str, exc: BaseException | None) -> None:
        if exc is None:
            self.client.publish(reply, b"")
        else:
            # No answer: the requester's ack times out, so it cannot believe in an ack that
            # may be lost.
            core = self.core
            log.error("consumer %s > %s: ack not committed: %s", core.stream, core.name, exc)

    def _ack(self, sseq: int, dseq: int, term: bool = False) -> bool:
        """True when taken. One for what we have not delivered yet, or that the group
        refused, is not answered (as on nats-server): the requester retries."""
        core = self.core
        if sseq >= core.sseq and sseq > core.state.delivered.stream_seq:
            return False
        limit = core.cfg.max_ack_pending
        was_full = 0 < limit <= len(core.state.pending)
        core.last_ack_ns = self.last_activity_ns
        if self._sample_pct and not term and core.cfg.ack_policy == "explicit":
            self.sample_ack(sseq, dseq, self.last_activity_ns)
        self.propose(Acked(sseq, dseq, term))
        if was_full and len(core.state.pending) < limit:
            self.kick()
        return not self.last_refused

    def _nak(self, sseq: int, dseq: int, arg: bytes, now: int) -> None:
        core = self.core
        st = core.state
        if dseq <= st.ack_floor.consumer_seq or dseq >= core.dseq or not core.is_pending(sseq):
            return
        self.advise_nak(sseq, dseq)
        delay = parse_nak_delay(arg)
        ack_wait = self.cfg.ack_wait
        if delay is not None and delay > 0:
            self.propose(Nakked(sseq, now - ack_wait + delay, delayed=True))
            self._arm_ack_timer(now, due=now + delay)
            return
        self.propose(Nakked(sseq, now - ack_wait, delayed=False))
        core.nak_now(sseq)
        self.kick()
