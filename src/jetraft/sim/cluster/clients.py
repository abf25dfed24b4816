"""The simulated clients: publishers, pull consumers and an administrator.

* A publisher per stream sends messages with a Nats-Msg-Id to every server whose replica
  claims to lead the stream (the leader subscribes to the stream's subjects: a stale
  leader gets the message too), and sends it again with the same id when no PubAck came
  within its timeout, until one does. Every PubAck is recorded: what the cluster promised.
* A pull client per consumer fetches batches from every replica that runs the consumer,
  and acks what it got after a while: some acks plain, some sent as requests (double
  acks), whose answer means the ack must hold from then on; some messages it never acks
  (they come back after ack_wait).
* The administrator sends one JetStream API request at a time to the meta leader, which
  plans it (admin.py) and proposes the resulting meta entries one after the other, each
  once the previous was applied (as the server awaits each proposal).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jetraft.jetstream.consumer import Acked
from jetraft.jetstream.meta import MetaEntry, encode_entry
from jetraft.jetstream.stream import PubAck
from jetraft.raft.driver import Applied

from .leaders import ANSWERED, Box, ConsumerDuty, StreamDuty, Wait

if TYPE_CHECKING:
    from .world import ClusterWorld

PUBLISH_TIMEOUT_TICKS = 40  # the client's request timeout (2 s)
ACK_TIMEOUT_TICKS = 40


@dataclass
class Outgoing:
    msg_id: str
    subject: str
    data: bytes
    sent_at: int = -1
    tries: int = 0


@dataclass
class Publisher:
    stream: str
    incarnation: int  # streams deleted and made again get new message ids
    subject: str
    outstanding: dict[str, Outgoing] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)  # msg id -> seq
    rejected: set[str] = field(default_factory=set)
    sent: int = 0


@dataclass
class ConfirmedAck:
    sseq: int
    dseq: int
    index: int  # the consumer group's index from which the ack must hold
    at_tick: int


@dataclass
class Puller:
    key: tuple[str, str, str]
    ack_all: bool
    received: dict[int, tuple[int, int]] = field(default_factory=dict)  # sseq -> (dseq, due)
    seen: set[int] = field(default_factory=set)  # every sseq ever received
    confirmed: dict[int, ConfirmedAck] = field(default_factory=dict)
    waiting: list[tuple[int, int, Box, str, int]] = field(default_factory=list)


class Clients:
    def __init__(self, world: ClusterWorld) -> None:
        self.w = world
        self.rng = random.Random(f"clients:{world.seed}")
        self.publishers: dict[tuple[str, int], Publisher] = {}
        self.pullers: dict[tuple[str, str, str], Puller] = {}
        self.admin_task: object = None

    # ------------------------------------------------------------------ publishing
    def publisher(self, stream: str, incarnation: int, subject: str) -> Publisher:
        key = (stream, incarnation)
        pub = self.publishers.get(key)
        if pub is None:
            pub = self.publishers[key] = Publisher(stream, incarnation, subject)
        return pub

    def publish_tick(self, pub: Publisher, new: bool) -> None:
        w, r = self.w, self.rng
        if new and len(pub.outstanding) < 4 and r.random() < 0.5:
            pub.sent += 1
            msg_id = f"{pub.stream}.{pub.incarnation}.{pub.sent}"
            size = r.choice((8, 16, 40, 100))
            data = (msg_id.encode() + b"|" + b"x" * size)[:size + len(msg_id)]
            pub.outstanding[msg_id] = Outgoing(msg_id, pub.subject, data)
        for out in list(pub.outstanding.values()):
            if out.sent_at >= 0 and w.tick_no - out.sent_at < PUBLISH_TIMEOUT_TICKS:
                continue
            self._send(pub, out)

    def _send(self, pub: Publisher, out: Outgoing) -> None:
        w = self.w
        out.sent_at = w.tick_no
        out.tries += 1
        hdr = f"NATS/1.0\r\nNats-Msg-Id: {out.msg_id}\r\n\r\n".encode()
        for duty in w.stream_duties(pub.stream):
            duty.publish(out.subject, hdr, out.data,
                         functools.partial(self._pub_ack, pub, out, duty=duty))

    def _pub_ack(self, pub: Publisher, out: Outgoing, ack: PubAck, *, duty: StreamDuty
                 ) -> None:
        w = self.w
        if ack.error is not None:
            pub.rejected.add(out.msg_id)
            pub.outstanding.pop(out.msg_id, None)
            return
        seen = pub.acked.get(out.msg_id)
        if seen is not None and seen != ack.seq:
            w.violation(f"stream {pub.stream}: message {out.msg_id} acknowledged at seq "
                        f"{seen} and at seq {ack.seq}")
        pub.acked[out.msg_id] = ack.seq
        pub.outstanding.pop(out.msg_id, None)
        w.stats["pub_acks"] += 1
        w.trace(f"{duty.replica.server.name}: PubAck {out.msg_id} seq {ack.seq}"
                f"{' (duplicate)' if ack.duplicate else ''}")

    # ------------------------------------------------------------------ consuming
    def puller(self, key: tuple[str, str, str], ack_all: bool) -> Puller:
        p = self.pullers.get(key)
        if p is None:
            p = self.pullers[key] = Puller(key, ack_all)
        return p

    def consume_tick(self, p: Puller, drain: bool) -> None:
        w, r = self.w, self.rng
        duties = w.consumer_duties(p.key)
        if drain or r.random() < 0.4:
            batch = r.randint(1, 5) if not drain else 20
            for duty in duties:
                for sseq, dseq, _dc in duty.fetch(batch):
                    p.seen.add(sseq)
                    delay = 0 if drain else r.randint(0, 30)
                    if sseq not in p.received or p.received[sseq][0] < dseq:
                        p.received[sseq] = (dseq, w.tick_no + delay)
                    w.stats["deliveries"] += 1
        due = [s for s, (_, at) in p.received.items() if at <= w.tick_no]
        newest = max(due, key=lambda s: p.received[s][0]) if due else 0
        for sseq in sorted(due):
            dseq, _ = p.received.pop(sseq)
            if not drain and r.random() < 0.1:
                continue  # never acked: redelivered after ack_wait
            if p.ack_all and sseq != newest:
                continue  # one ack of the newest delivery covers the ones before
            request = drain or r.random() < 0.5
            self._ack(p, sseq, dseq, request, duties)
        self._check_answers(p)

    def _ack(self, p: Puller, sseq: int, dseq: int, request: bool,
             duties: list[ConsumerDuty]) -> None:
        w = self.w
        w.stats["acks"] += 1
        for duty in w.consumer_runtimes(p.key):
            answer = duty.ack(sseq, dseq)
            if not request:
                continue
            if answer is ANSWERED:
                self._confirm_at(p, sseq, dseq, duty.replica.consumer().index,
                                 duty.replica.server.name)
                return
            if isinstance(answer, Box):
                p.waiting.append((sseq, dseq, answer, duty.replica.server.name,
                                  self.w.tick_no))

    def _check_answers(self, p: Puller) -> None:
        keep = []
        for item in p.waiting:
            sseq, dseq, box, server, sent = item
            if not box.done:
                if self.w.tick_no - sent < ACK_TIMEOUT_TICKS:
                    keep.append(item)  # else the request timed out: not confirmed
            elif isinstance(box.outcome, Applied) and sseq not in p.confirmed:
                self._confirm_at(p, sseq, dseq, box.outcome.index, server)
        p.waiting = keep

    def _confirm_at(self, p: Puller, sseq: int, dseq: int, index: int, server: str) -> None:
        w = self.w
        if sseq in p.confirmed:
            return
        p.confirmed[sseq] = ConfirmedAck(sseq, dseq, index, w.tick_no)
        w.stats["confirmed_acks"] += 1
        w.trace(f"{server}: ack of {p.key[2]} seq {sseq} confirmed (holds from {index})")
        w.checks.ack_confirmed(p, sseq, index)

    # ------------------------------------------------------------------ administration
    def admin(self, entries: list[MetaEntry], what: str) -> None:
        """Propose `entries` on the meta leader, one after the other."""
        self.w.trace(f"api: {what}")
        self.w.stats["api_" + what.split()[0]] += 1
        self.admin_task = self._run_admin(entries, what)

    def _run_admin(self, entries: list[MetaEntry], what: str) -> object:
        w = self.w
        for entry in entries:
            leader = w.meta_leader()
            if leader is None:
                return
            box = Box()
            if w.propose(leader, leader.meta_node, encode_entry(entry), box) is not None:
                return
            yield Wait(lambda b=box: b.done, w.tick_no + 100)  # type: ignore[misc]
            if not box.ok:
                w.trace(f"api: {what}: {box.outcome!r}")
                return
        w.stats["api_done"] += 1


__all__ = ["Acked", "Clients"]
