"""allow_responses bookkeeping, on a clock of our own."""

from __future__ import annotations

from jetraft.server.core.reply_permits import PRUNE_COUNT, ReplyPermits

S = 1_000_000_000


def test_responses_are_counted_and_expire() -> None:
    permits = ReplyPermits()
    permits.grant("r.1", 2, 0, now_ns=0)
    permits.grant("r.2", 1, 5 * S, now_ns=0)
    assert permits.use("r.1", 10 * S) and permits.use("r.1", 10 * S)
    assert not permits.use("r.1", 10 * S)  # both responses spent
    assert not permits.use("r.2", 6 * S)  # expired
    assert not permits.use("r.3", 0)  # never granted
    assert len(permits) == 0


def test_used_up_and_expired_entries_go_at_the_next_prune() -> None:
    permits = ReplyPermits()
    for i in range(10):
        permits.grant(f"r.{i}", 1, S, now_ns=0)
    assert permits.use("r.0", 0)
    assert len(permits) == 9
    # Within a second and fewer than PRUNE_COUNT additions: nothing is pruned yet.
    permits.grant("late", 1, S, now_ns=S // 2)
    assert len(permits) == 10
    # A second after the last prune: the expired ones go.
    permits.grant("later", 1, S, now_ns=2 * S + 1)
    assert len(permits) == 1
    # ...or after PRUNE_COUNT additions, whatever the time.
    permits = ReplyPermits(prune_ns=10**18)
    for i in range(PRUNE_COUNT + 10):
        permits.grant(f"n.{i}", 0, 0, now_ns=0)  # granted used up: pruned at the next prune
    assert permits.since_prune < PRUNE_COUNT
    assert len(permits) == permits.since_prune


def test_the_table_has_a_hard_cap_keeping_the_newest() -> None:
    permits = ReplyPermits(max_kept=100)
    for i in range(500):
        permits.grant(f"r.{i}", 1, 3600 * S, now_ns=0)
    assert len(permits) == 100
    assert permits.use("r.499", 0) and not permits.use("r.0", 0)


def test_a_subject_granted_again_moves_to_the_end() -> None:
    permits = ReplyPermits(max_kept=2)
    permits.grant("a", 1, 0, now_ns=0)
    permits.grant("b", 1, 0, now_ns=0)
    permits.grant("a", 1, 0, now_ns=0)
    permits.grant("c", 1, 0, now_ns=0)  # "b" is now the oldest
    assert permits.use("a", 0) and permits.use("c", 0) and not permits.use("b", 0)
