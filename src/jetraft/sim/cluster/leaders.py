"""What a stream's or consumer's leader does, on simulated time.

Mirrors server/js/clustered/stream_replica.py and consumer_replica.py plus the consumer
runtime's delivery and ack rules (server/js/consumer_runtime.py), without asyncio: the
server's coroutines become generators that yield a condition to wait for (``Wait``),
resumed by the world's tick once it holds or its deadline passed.

* Stream leader: takes publishes (a ``StoreMsg`` stamped with its clock; the PubAck is
  the applied result), and when it takes over or its assignment changes, runs the
  reconcile task: propose the assignment's config if it differs, then up to 20 steps of
  jetstream.reconcile.next_step (as RaftGroup.reconcile_members carries them out).
* Consumer leader: on taking over rebuilds its cursor from the replicated state,
  proposes ``Start`` once per replica life if the consumer has not started, runs the
  reconcile task; delivers on fetch (the ``Delivered`` entries of one fetch proposed as
  one, the messages handed out at once, and again if that entry is refused or dropped),
  re-queues expired messages for redelivery, proposes ``Exhausted``; takes acks (one
  "not delivered yet" by its state is ignored). An ack sent as a request is answered
  as the runtime answers it: once the newest proposal of the group (the ack's, when it
  made one) has an outcome, at once when there is none pending.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetraft.jetstream.consumer import (
    Acked,
    Candidate,
    Delivered,
    Entry,
    encode_entries,
    encode_entry,
)
from jetraft.jetstream.reconcile import StepKind, next_step
from jetraft.jetstream.stream import PubAck, StoreMsg, UpdateConfig
from jetraft.jetstream.stream import encode_entry as encode_stream_entry
from jetraft.raft.driver import Applied, Item
from jetraft.raft.ready import RaftError, Role, SoftState

if TYPE_CHECKING:
    from .server import Replica

RECONCILE_ROUNDS = 20
CATCH_UP_TICKS = 600  # 30 s
CHANGE_TIMEOUT_TICKS = 200  # PROPOSAL_TIMEOUT_S, 10 s
PROPOSE_TIMEOUT_TICKS = 100  # PROPOSE_TIMEOUT_S, 5 s
RETRY_TICKS = 4  # asyncio.sleep(0.2)
RECHECK_TICKS = 20  # the fix reconcile_retried: an idle leader checks its group each second


@dataclass
class Wait:
    """Resume when `until()` holds or at tick `deadline`."""

    until: Callable[[], bool]
    deadline: int


Task = Generator[Wait, None, None]


class _Answer:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ANSWERED = _Answer("answered")  # the ack request is answered at once
NO_ANSWER = _Answer("no answer")  # it never is (the requester times out)


class Box:
    """The outcome of one proposal (None: none yet), and who waits for it."""

    __slots__ = ("outcome", "waiters")

    def __init__(self, waiter: Callable[[object], None] | None = None) -> None:
        self.outcome: object = None
        self.waiters: list[Callable[[object], None]] = [waiter] if waiter else []

    def __call__(self, outcome: object) -> None:
        if self.outcome is None:
            self.outcome = outcome
            for w in self.waiters:
                w(outcome)

    def then(self, waiter: Callable[[object], None]) -> None:
        if self.outcome is not None:
            waiter(self.outcome)
        else:
            self.waiters.append(waiter)

    @property
    def done(self) -> bool:
        return self.outcome is not None

    @property
    def ok(self) -> bool:
        return isinstance(self.outcome, Applied)


class Duty:
    """The leader's side of one replica (both kinds)."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.world = replica.server.world
        self.task: Task | None = None
        self.wait: Wait | None = None

    # --- plumbing --------------------------------------------------------------------------
    def propose(self, item: Item, box: Box | None = None) -> Box | None:
        """Propose on this replica's node; None when refused at once (not the leader)."""
        box = box or Box()
        err = self.world.propose(self.replica.server, self.replica.node, item, box)
        return None if err is not None else box

    def propose_wait(self, item: Item, ticks: int) -> Generator[Wait, None, object]:
        box = self.propose(item)
        if box is None:
            return RaftError("not the leader")
        yield Wait(lambda: box.done, self.world.tick_no + ticks)
        return box.outcome if box.done else TimeoutError()

    def sleep(self, ticks: int) -> Wait:
        return Wait(lambda: False, self.world.tick_no + ticks)

    def run_task(self) -> None:
        """Advance the task if what it waits for holds (called every tick)."""
        task = self.task
        if task is None:
            return
        w = self.wait
        if w is not None and not w.until() and self.world.tick_no < w.deadline:
            return
        try:
            self.wait = next(task)
        except StopIteration:
            self.task = self.wait = None

    def start_reconcile(self) -> None:
        if self.task is None:
            self.task = self.reconcile()
            self.wait = None

    def reconcile(self) -> Task:
        raise NotImplementedError

    def members_step(self, want: tuple[str, ...]) -> Generator[Wait, None, bool]:
        """RaftGroup.reconcile_members."""
        node = self.replica.node
        d = node.driver
        if d is None or not self.replica.raft_leader:
            return False
        core = d.core
        m = core.membership
        caught_up = [p for p in m.learners if core.learner_caught_up(p)]
        step = next_step(want, m.voters, m.learners, self.replica.server.name, caught_up)
        if step is None:
            return False
        if step.kind is StepKind.TRANSFER:
            self.world.transfer(self.replica.server, node, step.peer)
            return False
        if step.kind is StepKind.CATCH_UP:
            peer = step.peer
            # The server waits for the learner (or lost leadership) only; the fix also
            # stops waiting when the assignment changed (the learner may be unwanted now).
            wakes = self.world.fixed("reconcile_wakes_on_assignment")

            def done() -> bool:
                moved = wakes and self.want() != want
                return core.learner_caught_up(peer) or not self.replica.raft_leader or moved

            yield Wait(done, self.world.tick_no + CATCH_UP_TICKS)
            if not done():
                yield self.sleep(RETRY_TICKS)  # the wait timed out
            return True
        change = step.change()
        assert change is not None
        self.world.trace(f"{self.replica.server.name}: {self.replica.group}: "
                         f"{step.kind.value} {step.peer}")
        outcome = yield from self.propose_wait(change, CHANGE_TIMEOUT_TICKS)
        if not isinstance(outcome, Applied):
            yield self.sleep(RETRY_TICKS)
        return True

    # --- hooks -------------------------------------------------------------------------------
    def want(self) -> tuple[str, ...]:
        """The servers the current assignment names."""
        r = self.replica
        if r.sa is not None:
            return r.sa.peers
        return r.ca.peers if r.ca is not None else ()

    def on_role(self, ss: SoftState) -> None:
        raise NotImplementedError

    def assignment_changed(self) -> None:
        raise NotImplementedError

    def closed(self) -> None:
        self.task = self.wait = None

    def tick(self) -> None:
        self.run_task()
        if (self.task is None and self.world.fixed("reconcile_retried")
                and self.world.tick_no % RECHECK_TICKS == 0 and self.serving()
                and self.out_of_line()):
            self.start_reconcile()

    def serving(self) -> bool:
        raise NotImplementedError

    def out_of_line(self) -> bool:
        """The group differs from its assignment (members or, for a stream, config)."""
        d = self.replica.node.driver
        if d is None:
            return False
        m = d.core.membership
        return bool(m.learners) or set(m.voters) != set(self.want())


class StreamDuty(Duty):
    def __init__(self, replica: Replica) -> None:
        super().__init__(replica)
        self.leading = False

    @property
    def is_leader(self) -> bool:
        return self.leading and self.replica.raft_leader

    def serving(self) -> bool:
        return self.leading and not self.replica.closed

    def out_of_line(self) -> bool:
        sa = self.replica.sa
        m = self.replica.stream_machine
        config_differs = sa is not None and m is not None and sa.config != m.stream.config
        return config_differs or super().out_of_line()

    def on_role(self, ss: SoftState) -> None:
        if self.replica.closed:
            return
        if ss.role is Role.LEADER and not self.leading:
            self.leading = True
            self.world.trace(f"{self.replica.server.name}: new stream leader for "
                             f"{self.replica.key[1]} (term {ss.term})")
            self.start_reconcile()
        elif ss.role is not Role.LEADER and self.leading:
            self.leading = False

    def assignment_changed(self) -> None:
        if self.leading:
            self.start_reconcile()

    def closed(self) -> None:
        super().closed()
        self.leading = False

    def reconcile(self) -> Task:
        for _ in range(RECONCILE_ROUNDS):
            if self.replica.closed or not self.leading:
                return
            sa = self.replica.sa
            assert sa is not None
            if sa.config != self.replica.stream().stream.config:
                entry = encode_stream_entry(UpdateConfig(sa.config))
                outcome = yield from self.propose_wait(entry, PROPOSE_TIMEOUT_TICKS)
                if not isinstance(outcome, Applied):
                    return
                continue
            if not (yield from self.members_step(sa.peers)):
                return

    def publish(self, subject: str, hdr: bytes, data: bytes,
                on_ack: Callable[[PubAck], None]) -> bool:
        """The leader's _on_publish: True when proposed; on_ack hears the PubAck."""
        if not self.leading:
            return False
        entry = StoreMsg(subject, "reply", hdr, data, self.world.now_ns(self.replica.server))

        def answered(outcome: object) -> None:
            if isinstance(outcome, Applied) and isinstance(outcome.result, PubAck):
                on_ack(outcome.result)

        return self.propose(encode_stream_entry(entry), Box(answered)) is not None


AckAnswer = _Answer | Box  # a Box: answered once it completes, if it succeeded


class ConsumerDuty(Duty):
    def __init__(self, replica: Replica) -> None:
        super().__init__(replica)
        self.runtime = False
        self.start_proposed = False
        self.last: Box | None = None  # the newest proposal (the runtime's _last)
        self.epoch = 0  # counts runtimes: a refusal reaches only the one that proposed

    @property
    def is_leader(self) -> bool:
        return self.runtime and self.replica.raft_leader

    def serving(self) -> bool:
        return self.runtime and not self.replica.closed

    def on_role(self, ss: SoftState) -> None:
        if self.replica.closed:
            return
        if ss.role is Role.LEADER and not self.runtime:
            self.world.trace(f"{self.replica.server.name}: new consumer leader for "
                             f"{self.replica.key[2]} (term {ss.term})")
            self._lead()
        elif ss.role is not Role.LEADER and self.runtime:
            self.runtime = False

    def _lead(self) -> None:
        m = self.replica.consumer()
        core = m.core
        core.restore_cursor()
        self.runtime = True
        self.epoch += 1
        src = self.source()
        if not m.started and not self.start_proposed and src is not None:
            self.start_proposed = True
            self.propose_entry(core.select_start(src))  # type: ignore[arg-type]
        self.start_reconcile()

    def assignment_changed(self) -> None:
        if self.runtime:
            self.start_reconcile()

    def closed(self) -> None:
        super().closed()
        self.runtime = False

    def source(self) -> object | None:
        """The stream store deliveries read. The server's consumer replica keeps the
        stream replica of its server that existed when it was made, even once that one
        is destroyed (the server left the stream) and another made (it came back): it
        then delivers from a store nobody updates. The fix reads the server's current
        stream replica (none: nothing to deliver)."""
        ref = self.replica.stream_ref
        if self.world.fixed("consumer_reads_current_stream"):
            server, key = self.replica.server, self.replica.key[:2]
            ref = server.streams.get(key) or server.leaving.get(key)
        if ref is None or ref.closed or ref.stream_machine is None:
            return None
        return ref.stream().stream.store

    def reconcile(self) -> Task:
        for _ in range(RECONCILE_ROUNDS):
            if self.replica.closed or not self.runtime:
                return
            ca = self.replica.ca
            assert ca is not None
            if not (yield from self.members_step(ca.peers)):
                return

    def propose_entry(self, entry: Entry) -> Box | None:
        """ConsumerReplica.propose: fire and forget; the runtime remembers the newest."""
        if not self.replica.raft_leader:
            return None
        box = self.propose(encode_entry(entry))
        if box is not None:
            self.last = box
        return box

    # --- the runtime ---------------------------------------------------------------------
    def fetch(self, batch: int) -> list[tuple[int, int, int]]:
        """A pull request for `batch` messages: (sseq, dseq, dc) handed out."""
        if not self.is_leader:
            return []
        core = self.replica.consumer().core
        src = self.source()
        if src is None:
            return []
        out: list[tuple[int, int, int]] = []
        now = self.world.now_ns(self.replica.server)
        entries: list[Entry] = []  # the runtime's changes of one loop turn: one proposal
        for _ in range(batch * 2):
            if len(out) >= batch:
                break
            step = core.next_step(src)  # type: ignore[arg-type]
            if step is None:
                break
            if not isinstance(step, Candidate):
                entries.append(step)
                continue
            d = Delivered(core.dseq, step.msg.seq, step.dc, now)
            core.note_delivered(d)
            entries.append(d)
            out.append((d.sseq, d.dseq, d.dc))
        if entries:
            self._watch(entries, self.propose_entries(entries))
        return out

    def propose_entries(self, entries: list[Entry]) -> Box | None:
        """ConsumerReplica's batch: the entries of one loop turn as one proposal."""
        if not self.replica.raft_leader:
            return None
        box = self.propose(encode_entries(entries))
        if box is not None:
            self.last = box
        return box

    def _watch(self, entries: list[Entry], box: Box | None) -> None:
        """The fix delivery_refused_requeued: deliveries whose entry the group refused or
        dropped go out again while this runtime keeps leading (ConsumerRuntime.refused)."""
        if not self.world.fixed("delivery_refused_requeued"):
            return
        epoch = self.epoch

        def settled(outcome: object) -> None:
            if not isinstance(outcome, Applied) and self.runtime and self.epoch == epoch:
                core = self.replica.consumer().core
                for e in entries:
                    if isinstance(e, Delivered):
                        core.undeliver(e)

        if box is None:
            settled(None)
        else:
            box.then(settled)

    def ack(self, sseq: int, dseq: int) -> AckAnswer:
        """An ack reaching the runtime (ConsumerRuntime._ack), and how an ack sent as a
        request is answered (its barrier: the newest proposal of the group)."""
        if not self.runtime:
            return NO_ANSWER  # nobody is subscribed to the ack subject here
        core = self.replica.consumer().core
        if sseq >= core.sseq and sseq > core.state.delivered.stream_seq:
            self.world.trace(f"{self.replica.server.name}: {self.replica.key[2]}: ack of "
                             f"{sseq} ignored (not delivered yet here)")
            if self.world.fixed("ignored_ack_unanswered"):
                return NO_ANSWER
            return ANSWERED  # "not delivered yet": ignored, and nothing to wait for
        box = self.propose_entry(Acked(sseq, dseq))
        if box is None and self.world.fixed("ignored_ack_unanswered"):
            return NO_ANSWER  # not proposed (no longer the leader): nothing to wait for
        last = self.last
        if last is None:
            return ANSWERED
        if last.done:
            return ANSWERED if last.ok else NO_ANSWER
        return last

    def tick(self) -> None:
        super().tick()
        if not self.is_leader:
            return
        core = self.replica.consumer().core
        exhausted, _ = core.check_pending(self.world.now_ns(self.replica.server))
        for entry in exhausted:
            self.propose_entry(entry)
