"""``ConsumerCore.apply_explicit_acks`` (the plain acks of one client read, applied together)
leaves exactly the state that applying the same acks one by one (``apply_ack``) leaves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.consumer import ConsumerCore, Delivered
from jetraft.jetstream.consumer_config import ConsumerConfig, StreamFacts, apply_defaults

STREAM = StreamFacts(name="S", subjects=("s.>",))


def explicit_core() -> ConsumerCore:
    cfg = apply_defaults(ConsumerConfig(durable_name="C", ack_policy="explicit"), STREAM)
    return ConsumerCore("S", "C", cfg, created_ns=1)


def snapshot(core: ConsumerCore) -> object:
    s = core.state
    return (
        (s.delivered.consumer_seq, s.delivered.stream_seq),
        (s.ack_floor.consumer_seq, s.ack_floor.stream_seq),
        {seq: (p.dseq, p.ts_ns) for seq, p in s.pending.items()},
        dict(s.redelivered),
        list(core.rdq),
    )


Op = tuple[str, int, int, int]  # ("deliver", dseq, sseq, dc) | ("nak", sseq, 0, 0) | ("ack", ...)


def build(ops: list[Op]) -> ConsumerCore:
    """A consumer brought to a state by ``ops`` (two are built alike and compared: a compiled
    ConsumerCore cannot be copied)."""
    core = explicit_core()
    for op, a, b, c in ops:
        if op == "deliver":
            core.apply(Delivered(a, b, c, 1000 + a))
        elif op == "nak":
            core.nak_now(a)
        else:
            core.apply_ack(a, 0)
    return core


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Op], list[int]]:
    """Deliveries (gaps in the stream sequences, as a filter leaves them; some redelivered,
    some due again after a nak), some acks already applied, and a run of acks to apply: any
    order, repeats, and sequences never delivered or beyond."""
    n = draw(st.integers(1, 150))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    ops: list[Op] = []
    seqs: list[int] = []
    sseq = 0
    for i, gap in enumerate(gaps):
        sseq += gap
        seqs.append(sseq)
        ops.append(("deliver", i + 1, sseq, 1))
    for seq in draw(st.lists(st.sampled_from(seqs), max_size=10)):
        ops.append(("deliver", seqs.index(seq) + 1, seq, 2))
    ops += [("nak", seq, 0, 0) for seq in draw(st.lists(st.sampled_from(seqs), max_size=10))]
    ops += [("ack", seq, 0, 0) for seq in draw(st.lists(st.sampled_from(seqs), max_size=n))]
    pool = st.sampled_from(seqs) | st.integers(0, sseq + 5)
    if draw(st.booleans()):  # the common case: in order, from the floor up
        pending = build(ops).state.pending
        run = [s for s in seqs if s in pending][: draw(st.integers(0, n))]
    else:
        run = draw(st.lists(pool, max_size=2 * n))
    return ops, run


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_a_run_of_acks_leaves_the_state_acks_one_by_one_leave(
    scenario: tuple[list[Op], list[int]],
) -> None:
    ops, run = scenario
    one_by_one, together = build(ops), build(ops)
    assert snapshot(together) == snapshot(one_by_one)
    done_each: list[int] = []
    for seq in run:
        done_each += one_by_one.apply_ack(seq, 0)
    done_run = together.apply_explicit_acks(list(run))
    assert done_run == done_each
    assert snapshot(together) == snapshot(one_by_one)


def test_acks_in_order_raise_the_floor_to_below_the_oldest_still_pending() -> None:
    core = explicit_core()
    for i in range(1, 11):
        core.apply(Delivered(i, 2 * i, 1, 100))  # stream sequences 2, 4, ..., 20
    assert core.apply_explicit_acks([2, 4, 6, 10]) == [2, 4, 6, 10]
    floor = core.state.ack_floor
    assert (floor.consumer_seq, floor.stream_seq) == (3, 7)  # 8 (delivery 4) is pending
    assert core.apply_explicit_acks([8, 12, 14, 16, 18, 20]) == [8, 12, 14, 16, 18, 20]
    assert (floor.consumer_seq, floor.stream_seq) == (10, 20)
    assert core.state.pending == {}
