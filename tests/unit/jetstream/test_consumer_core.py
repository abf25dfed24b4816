"""The consumer state machine driven directly: explicit time, an in-memory message source."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
import pytest

from jetraft.jetstream.consumer import (
    Acked,
    Candidate,
    ConsumerCore,
    Delivered,
    Dropped,
    Exhausted,
    Nakked,
    Progress,
    Start,
    decode_entry,
    encode_entry,
    parse_ack_subject,
)
from jetraft.jetstream.consumer_config import ConsumerConfig, StreamFacts, apply_defaults
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.protocol.subjects import subject_matches

SEC = 1_000_000_000


@dataclass
class M:
    seq: int
    subject: str
    data: bytes
    ts_ns: int
    hdr: bytes | None = None


class ListSource:
    """A stream store stand-in: messages by sequence, removals leave gaps."""

    def __init__(self) -> None:
        self.msgs: dict[int, M] = {}
        self.last = 0
        self.first_ever = 0

    def add(self, subject: str, ts_ns: int = 0, data: bytes = b"x") -> int:
        self.last += 1
        self.msgs[self.last] = M(self.last, subject, data, ts_ns or self.last * SEC)
        return self.last

    def remove(self, seq: int) -> None:
        self.msgs.pop(seq, None)

    def bounds(self) -> tuple[int, int]:
        if not self.msgs:
            return (self.last + 1 if self.last else 0), self.last
        return min(self.msgs), self.last

    def load(self, seq: int) -> M | None:
        return self.msgs.get(seq)

    def _match(self, m: M, filters: Sequence[str]) -> bool:
        return not filters or any(subject_matches(f, m.subject) for f in filters)

    def load_next(self, start_seq: int, filters: Sequence[str]) -> M | None:
        for seq in sorted(s for s in self.msgs if s >= start_seq):
            if self._match(self.msgs[seq], filters):
                return self.msgs[seq]
        return None

    def last_seq_matching(self, filters: Sequence[str]) -> int:
        seqs = [s for s, m in self.msgs.items() if self._match(m, filters)]
        return max(seqs, default=0)

    def last_seqs_per_subject(self, filters: Sequence[str]) -> list[int]:
        last: dict[str, int] = {}
        for s, m in sorted(self.msgs.items()):
            if self._match(m, filters):
                last[m.subject] = s
        return sorted(last.values())

    def num_pending(self, start_seq: int, filters: Sequence[str], last_per_subject: bool) -> int:
        if last_per_subject:
            return len([s for s in self.last_seqs_per_subject(filters) if s >= start_seq])
        return sum(1 for s, m in self.msgs.items() if s >= start_seq and self._match(m, filters))

    def seq_for_time(self, ts_ns: int) -> int:
        for s in sorted(self.msgs):
            if self.msgs[s].ts_ns >= ts_ns:
                return s
        return self.last + 1

    def fingerprint(self) -> tuple[int, int, int]:
        first, last = self.bounds()
        return first, last, len(self.msgs)


class MemSource(MemoryStore):
    """The real memory store, with the helpers the tests use."""

    def add(self, subject: str, ts_ns: int = 0, data: bytes = b"x") -> int:
        seq, _ = self.store(subject, None, data, ts_ns or (self.bounds()[1] + 1) * SEC)
        return seq


STREAM = StreamFacts(name="S", subjects=("s.>",))


@pytest.fixture(params=["memory-store", "reference"])
def new_source(request: pytest.FixtureRequest) -> Callable[[], ListSource]:
    """Every test runs on the memory stream store and on a naive reference source."""
    if request.param == "reference":
        return ListSource
    return MemSource  # type: ignore[return-value]


def make(src: ListSource, **cfg: object) -> ConsumerCore:
    config = apply_defaults(ConsumerConfig(durable_name="C", **cfg), STREAM)  # type: ignore[arg-type]
    core = ConsumerCore("S", "C", config, created_ns=1)
    core.apply(core.select_start(src))
    return core


def deliver(core: ConsumerCore, src: ListSource, now_ns: int, limit: int = 100) -> list[Delivered]:
    """What the glue does: ask for the next step, propose the resulting entries."""
    out: list[Delivered] = []
    for _ in range(limit):
        step = core.next_step(src)
        if step is None:
            break
        if isinstance(step, Candidate):
            entry = Delivered(core.dseq, step.msg.seq, step.dc, now_ns)
            core.apply(entry)
            out.append(entry)
        else:
            core.apply(step)
    return out


def fill(src: ListSource, n: int, subject: str = "s.a") -> None:
    for _ in range(n):
        src.add(subject)


def test_explicit_acks_move_the_floor_in_order_only(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 5)
    core = make(src, ack_policy="explicit")
    got = deliver(core, src, now_ns=10 * SEC)
    assert [(d.dseq, d.sseq, d.dc) for d in got] == [(i, i, 1) for i in range(1, 6)]
    assert core.num_ack_pending == 5
    assert core.num_pending(src) == 0
    assert core.apply(Acked(2, 2)) == [2]
    assert (core.state.ack_floor.consumer_seq, core.state.ack_floor.stream_seq) == (0, 0)
    core.apply(Acked(1, 1))
    # 1 and 2 acked: the floor jumps to just below the oldest pending (3).
    assert (core.state.ack_floor.consumer_seq, core.state.ack_floor.stream_seq) == (2, 2)
    for s in (3, 4, 5):
        core.apply(Acked(s, s))
    assert (core.state.ack_floor.consumer_seq, core.state.ack_floor.stream_seq) == (5, 5)
    assert core.num_ack_pending == 0
    assert (core.state.delivered.consumer_seq, core.state.delivered.stream_seq) == (5, 5)


def test_ack_all_acks_everything_below(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 4)
    core = make(src, ack_policy="all")
    deliver(core, src, now_ns=SEC)
    assert core.apply(Acked(3, 3)) == [1, 2, 3]
    assert core.num_ack_pending == 1
    assert core.state.ack_floor.stream_seq == 3
    # An ack below the floor changes nothing.
    assert core.apply(Acked(2, 2)) == []


def test_ack_all_with_a_delivery_sequence_lost_in_a_failover(
    new_source: Callable[[], ListSource],
) -> None:
    """A failed leader handed message 3 out as delivery 9, but its Delivered entries never
    committed: the client's ack carries a delivery sequence this state never reached. The
    floor stays within what was delivered, so the next leader's deliveries still count."""
    src = new_source()
    fill(src, 5)
    core = make(src, ack_policy="all")
    for s in (1, 2, 3):
        core.apply(Delivered(s, s, 1, s * SEC))
    assert core.apply(Acked(3, 9)) == [1, 2, 3]
    assert (core.state.ack_floor.consumer_seq, core.state.ack_floor.stream_seq) == (3, 3)
    core.apply(Delivered(4, 4, 1, 4 * SEC))
    assert (core.state.delivered.consumer_seq, core.state.delivered.stream_seq) == (4, 4)
    assert core.num_ack_pending == 1
    assert core.apply(Acked(4, 4)) == [4]
    assert core.num_ack_pending == 0


def test_ack_none_floor_follows_delivery(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 3)
    core = make(src, ack_policy="none")
    got = deliver(core, src, now_ns=SEC)
    assert len(got) == 3
    assert core.num_ack_pending == 0
    assert core.state.ack_floor.stream_seq == 3
    assert core.check_pending(100 * SEC) == ([], None)


def test_redelivery_after_ack_wait_counts_deliveries(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 2)
    core = make(src, ack_policy="explicit", ack_wait=5 * SEC)
    deliver(core, src, now_ns=10 * SEC)
    core.apply(Acked(2, 2))
    entries, due = core.check_pending(14 * SEC)
    assert entries == [] and due == 15 * SEC
    entries, due = core.check_pending(15 * SEC)
    assert entries == [] and due is None
    again = deliver(core, src, now_ns=15 * SEC)
    assert [(d.dseq, d.sseq, d.dc) for d in again] == [(3, 1, 2)]
    assert core.num_redelivered == 1
    # The redelivered message keeps its original consumer sequence for the floor.
    core.apply(Acked(1, 3))
    assert core.num_redelivered == 0
    assert (core.state.ack_floor.consumer_seq, core.state.ack_floor.stream_seq) == (3, 2)


def test_max_deliver_exhausts_and_keeps_the_record(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 1)
    core = make(src, ack_policy="explicit", ack_wait=SEC, max_deliver=2)
    deliver(core, src, now_ns=0)
    core.check_pending(SEC)
    assert [d.dc for d in deliver(core, src, now_ns=SEC)] == [2]
    entries, _ = core.check_pending(2 * SEC)
    assert entries == [Exhausted(1, 2)]
    core.apply(entries[0])
    assert core.num_ack_pending == 0
    assert deliver(core, src, now_ns=3 * SEC) == []
    # Interest streams keep a message a consumer gave up on.
    assert core.needs_ack(1, "s.a")
    assert core.num_redelivered == 1


def test_backoff_sets_each_redelivery_delay(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 1)
    core = make(src, ack_policy="explicit", backoff=(SEC, 3 * SEC), max_deliver=5)
    assert core.cfg.ack_wait == SEC
    deliver(core, src, now_ns=0)
    assert core.check_pending(SEC - 1) == ([], SEC)
    core.check_pending(SEC)
    deliver(core, src, now_ns=SEC)
    # Second wait is the second backoff value, and the last one repeats.
    assert core.check_pending(SEC + 1) == ([], 4 * SEC)
    core.check_pending(4 * SEC)
    deliver(core, src, now_ns=4 * SEC)
    assert core.check_pending(4 * SEC + 1) == ([], 7 * SEC)


def test_nak_now_and_nak_with_delay(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 2)
    core = make(src, ack_policy="explicit", ack_wait=30 * SEC)
    deliver(core, src, now_ns=100 * SEC)
    core.apply(Nakked(1, 100 * SEC - 30 * SEC, delayed=False))
    core.nak_now(1)
    assert [(d.sseq, d.dc) for d in deliver(core, src, now_ns=101 * SEC)] == [(1, 2)]
    # Delay 5 s: due at now + 5 s.
    core.apply(Nakked(2, 101 * SEC - 30 * SEC + 5 * SEC, delayed=True))
    assert core.check_pending(105 * SEC)[1] == 106 * SEC
    core.check_pending(106 * SEC)
    assert [(d.sseq, d.dc) for d in deliver(core, src, now_ns=106 * SEC)] == [(2, 2)]


def test_progress_restarts_the_ack_timer(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 1)
    core = make(src, ack_policy="explicit", ack_wait=10 * SEC)
    deliver(core, src, now_ns=0)
    core.apply(Progress(1, 8 * SEC))
    assert core.check_pending(10 * SEC) == ([], 18 * SEC)


def test_term_stops_redelivery(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 1)
    core = make(src, ack_policy="explicit", ack_wait=SEC)
    deliver(core, src, now_ns=0)
    assert core.apply(Acked(1, 1, term=True)) == [1]
    core.check_pending(5 * SEC)
    assert deliver(core, src, now_ns=5 * SEC) == []


def test_max_ack_pending_stalls_until_acked(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 5)
    core = make(src, ack_policy="explicit", max_ack_pending=2)
    assert len(deliver(core, src, now_ns=0)) == 2
    assert core.num_pending(src) == 3
    core.apply(Acked(1, 1))
    assert [d.sseq for d in deliver(core, src, now_ns=0)] == [3]


def test_vanished_message_on_redelivery_is_dropped(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 2)
    core = make(src, ack_policy="explicit", ack_wait=SEC)
    deliver(core, src, now_ns=0)
    src.remove(1)
    core.check_pending(SEC)
    step = core.next_step(src)
    assert step == Dropped(1)
    core.apply(step)
    assert core.num_ack_pending == 1
    assert isinstance(core.next_step(src), Candidate)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({"deliver_policy": "all"}, [1, 2, 3, 4, 5]),
        ({"deliver_policy": "last"}, [5]),
        ({"deliver_policy": "new"}, []),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 3}, [3, 4, 5]),
        ({"deliver_policy": "by_start_time", "opt_start_time": "1970-01-01T00:00:04Z"}, [4, 5]),
        ({"deliver_policy": "last_per_subject", "filter_subject": "s.>"}, [3, 4, 5]),
        ({"filter_subject": "s.b"}, [2, 4]),
        ({"filter_subjects": ("s.b", "s.c")}, [2, 4, 5]),
        ({"deliver_policy": "last", "filter_subject": "s.b"}, [4]),
    ],
)
def test_deliver_policies_and_filters(
    new_source: Callable[[], ListSource], cfg: dict[str, object], expected: list[int]
) -> None:
    src = new_source()
    for subject in ("s.a", "s.b", "s.a", "s.b", "s.c"):
        src.add(subject)
    core = make(src, ack_policy="none", **cfg)
    assert core.num_pending(src) == len(expected)
    got = deliver(core, src, now_ns=0)
    assert [d.sseq for d in got] == expected
    assert core.num_pending(src) == 0
    src.add("s.b")
    assert core.num_pending(src) == 1


def test_new_messages_after_deliver_new(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 3)
    core = make(src, ack_policy="explicit", deliver_policy="new")
    assert (core.state.delivered.stream_seq, core.state.ack_floor.stream_seq) == (3, 3)
    assert deliver(core, src, now_ns=0) == []
    src.add("s.a")
    assert [d.sseq for d in deliver(core, src, now_ns=0)] == [4]


def test_start_on_empty_stream_and_beyond_the_end(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    core = make(src, ack_policy="none")
    assert core.sseq == 1
    fill(src, 2)
    later = make(src, ack_policy="none", deliver_policy="by_start_sequence", opt_start_seq=10)
    assert later.sseq == 10
    assert deliver(later, src, now_ns=0) == []


def test_last_per_subject_pending_counts_remaining_skip_list(
    new_source: Callable[[], ListSource],
) -> None:
    src = new_source()
    for subject in ("s.a", "s.a", "s.b", "s.c", "s.c"):
        src.add(subject)
    core = make(src, ack_policy="none", deliver_policy="last_per_subject", filter_subject="s.*")
    assert core.num_pending(src) == 3
    step = core.next_step(src)
    assert isinstance(step, Candidate) and step.msg.seq == 2
    core.apply(Delivered(core.dseq, 2, 1, 0))
    assert core.num_pending(src) == 2
    # Undelivered candidates go back where they came from.
    step = core.next_step(src)
    assert isinstance(step, Candidate) and step.msg.seq == 3
    core.requeue(step)
    assert core.num_pending(src) == 2
    assert [d.sseq for d in deliver(core, src, now_ns=0)] == [3, 5]


def test_needs_ack_for_interest_retention(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 3)
    src.add("s.other")
    core = make(src, ack_policy="explicit", filter_subject="s.a")
    assert core.needs_ack(1, "s.a")
    assert not core.needs_ack(4, "s.other")
    deliver(core, src, now_ns=0, limit=2)
    core.apply(Acked(1, 1))
    assert not core.needs_ack(1, "s.a")
    assert core.needs_ack(2, "s.a")  # pending
    assert core.needs_ack(3, "s.a")  # not delivered yet


def test_restore_cursor_from_replicated_state(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 5)
    core = make(src, ack_policy="explicit")
    deliver(core, src, now_ns=0, limit=3)
    core.apply(Acked(1, 1))
    copy = ConsumerCore("S", "C", core.cfg, created_ns=1)
    copy.state = msgspec.convert(msgspec.to_builtins(core.state), type(core.state))
    copy.restore_cursor()
    assert (copy.sseq, copy.dseq) == (4, 4)
    assert [d.sseq for d in deliver(copy, src, now_ns=0)] == [4, 5]


def test_replicas_agree_when_applying_the_same_entries(
    new_source: Callable[[], ListSource],
) -> None:
    src = new_source()
    fill(src, 6)
    leader = make(src, ack_policy="explicit", ack_wait=SEC)
    follower = ConsumerCore("S", "C", leader.cfg, created_ns=1)
    log: list[object] = [Start(1)]
    follower.apply(Start(1))
    for entry in deliver(leader, src, now_ns=0):
        log.append(entry)
    for e in [Acked(2, 2), Acked(1, 1), Nakked(4, 0, False), Progress(5, SEC // 2)]:
        leader.apply(e)
        log.append(e)
    for e in log[1:]:
        follower.apply(e)  # type: ignore[arg-type]
    assert msgspec.to_builtins(follower.state) == msgspec.to_builtins(leader.state)


def test_replicas_agree_on_needs_ack_while_walking_last_per_subject(
    new_source: Callable[[], ListSource],
) -> None:
    """needs_ack decides interest retention inside the stream's apply(), so it may only read
    replicated state: a follower that applied the same entries must answer the same, also
    while the leader walks its (leader-local) last-per-subject skip list."""
    src = new_source()
    # Last per subject: s.c 1, s.b 3, s.a 5; seqs 2 and 4 lie between them in the walk.
    for subject in ("s.c", "s.a", "s.b", "s.a", "s.a"):
        src.add(subject)
    leader = make(src, ack_policy="explicit", deliver_policy="last_per_subject")
    follower = ConsumerCore("S", "C", leader.cfg, created_ns=1)
    follower.apply(Start(leader.sseq))

    def agree() -> None:
        for seq in range(1, src.bounds()[1] + 1):
            msg = src.load(seq)
            if msg is not None:
                assert leader.needs_ack(seq, msg.subject) == follower.needs_ack(seq, msg.subject), (
                    seq
                )

    agree()
    delivered: list[Delivered] = []
    for _ in range(4):
        step = leader.next_step(src)
        if not isinstance(step, Candidate):
            break
        entry = Delivered(leader.dseq, step.msg.seq, step.dc, 0)
        delivered.append(entry)
        for core in (leader, follower):
            core.apply(entry)
        agree()
    assert [d.sseq for d in delivered] == [1, 3, 5]
    for d in reversed(delivered):
        for core in (leader, follower):
            core.apply(Acked(d.sseq, d.dseq))
        agree()
    src.add("s.c")  # a new message after the walk: both must still need it
    agree()
    assert leader.needs_ack(6, "s.c") and follower.needs_ack(6, "s.c")


def test_parse_ack_subject_v1_and_v2() -> None:
    v1 = parse_ack_subject("$JS.ACK.S.C.2.10.7.1700000000.3")
    assert v1 is not None and (v1.stream, v1.consumer, v1.dc, v1.sseq, v1.dseq, v1.pending) == (
        "S",
        "C",
        2,
        10,
        7,
        3,
    )
    v2 = parse_ack_subject("$JS.ACK.dom.acchash.S.C.1.5.4.99.0.tok")
    assert v2 is not None and (v2.stream, v2.sseq, v2.dseq) == ("S", 5, 4)
    assert parse_ack_subject("$JS.ACK.S.C.x.1.1.1.1") is None
    assert parse_ack_subject("$JS.ACK.S.C.1.1.1") is None


def test_entries_round_trip_through_bytes() -> None:
    entries = [
        Start(3),
        Delivered(4, 9, 2, 123),
        Acked(9, 4, True),
        Nakked(9, 77, False),
        Progress(9, 88),
        Exhausted(9, 3),
        Dropped(9),
    ]
    for entry in entries:
        back = decode_entry(encode_entry(entry))
        assert back == entry and type(back) is type(entry)
    with pytest.raises(ValueError):
        decode_entry(b"\x93\x63\x01\x02")


def _hand_out(core: ConsumerCore, src: ListSource, n: int, now_ns: int) -> list[Delivered]:
    """A clustered leader hands messages out: its cursor moves at once, the entries are
    applied only once the group commits them."""
    out = []
    for _ in range(n):
        step = core.next_step(src)
        assert isinstance(step, Candidate)
        d = Delivered(core.dseq, step.msg.seq, step.dc, now_ns)
        core.note_delivered(d)
        core.note_inflight(d)
        out.append(d)
    return out


def test_deliveries_whose_entries_the_group_refused_go_out_again(
    new_source: Callable[[], ListSource],
) -> None:
    """A step-down's leadership transfer refuses proposals until it ends; when it expires
    the leader keeps leading, and what it handed out meanwhile must go out again."""
    src = new_source()
    fill(src, 4)
    core = make(src, ack_policy="explicit")
    sent = _hand_out(core, src, 4, SEC)
    core.apply(sent[0])
    core.apply(sent[1])  # committed
    for d in sent[2:]:
        core.undeliver(d)  # refused
    assert core.num_ack_pending == 2
    assert core.num_pending(src) == 2
    again = deliver(core, src, now_ns=2 * SEC)
    assert [(d.sseq, d.dc) for d in again] == [(3, 1), (4, 1)]
    assert sorted(core.state.pending) == [1, 2, 3, 4]
    assert core.state.delivered.stream_seq == 4


def test_a_refused_redelivery_is_due_again(new_source: Callable[[], ListSource]) -> None:
    src = new_source()
    fill(src, 2)
    core = make(src, ack_policy="explicit", ack_wait=SEC)
    for d in _hand_out(core, src, 2, SEC):
        core.apply(d)
    core.check_pending(3 * SEC)  # both ack waits ran out: queued for redelivery
    step = core.next_step(src)
    assert isinstance(step, Candidate) and (step.msg.seq, step.dc) == (1, 2)
    redelivery = Delivered(core.dseq, 1, 2, 3 * SEC)
    core.note_delivered(redelivery)
    core.undeliver(redelivery)
    got = deliver(core, src, now_ns=4 * SEC)
    assert [(d.sseq, d.dc) for d in got] == [(2, 2), (1, 2)]


def test_a_new_leader_forgets_what_its_predecessor_wanted_to_redo(
    new_source: Callable[[], ListSource],
) -> None:
    src = new_source()
    fill(src, 3)
    core = make(src, ack_policy="explicit")
    sent = _hand_out(core, src, 3, SEC)
    core.apply(sent[0])
    core.undeliver(sent[1])
    core.restore_cursor()  # leadership lost and won again: the replicated state decides
    assert core.sseq == 2 and not core.inflight
    assert [d.sseq for d in deliver(core, src, now_ns=2 * SEC)] == [2, 3]
