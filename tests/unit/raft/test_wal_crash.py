"""Crashes against a model: random appends, conflicts, hard states, snapshots, compactions,
syncs, crashes between operations and crashes in the middle of them (MemDisk.arm_crash).

After a crash between operations the log must be exactly what was synced. After a crash in
the middle of an operation it must be one of the states that operation passes through, at
record granularity: a prefix of the records being written, never half an entry, and the hard
state only together with every entry written before it. No crash may look like corruption.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from jetraft.raft.disk import MemDisk, SimulatedCrash
from jetraft.raft.types import Entry, EntryKind, HardState, Membership, Snapshot, SnapshotMeta
from jetraft.raft.wal import Recovered, Wal

SEGMENT_BYTES = 350  # small: rotation and compaction happen all the time


@dataclass(frozen=True, slots=True)
class State:
    snap: Snapshot | None
    entries: tuple[Entry, ...]  # after the snapshot, contiguous
    hs: HardState

    @property
    def base(self) -> int:
        return self.snap.meta.index if self.snap else 0

    @property
    def last(self) -> int:
        return self.entries[-1].index if self.entries else self.base

    def term_at(self, index: int) -> int:
        if index == self.base:
            return self.snap.meta.term if self.snap else 0
        return self.entries[index - self.base - 1].term

    def append(self, batch: list[Entry]) -> State:
        first = batch[0].index
        kept = tuple(e for e in self.entries if e.index < first)
        return replace(self, entries=kept + tuple(batch))

    def with_snapshot(self, s: Snapshot) -> State:
        i = s.meta.index
        if i <= self.last and self.term_at(i) == s.meta.term:
            return replace(self, snap=s, entries=tuple(e for e in self.entries if e.index > i))
        return replace(self, snap=s, entries=())


def entry(index: int, term: int, size: int) -> Entry:
    return Entry(term, index, EntryKind.NORMAL, bytes((index * 7 + j) % 256 for j in range(size)))


class Harness:
    def __init__(self) -> None:
        self.disk = MemDisk()
        self.wal, rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
        self.durable = State(None, (), HardState())
        self.current = self.durable
        self.pending: list[Entry] = []  # records the WAL will write at the next sync
        self.term = 1
        self.check(rec, [self.durable])

    # -- operations (parameters come from a seeded rng or from hypothesis) --------------------

    def append(self, back: int, count: int, bump: bool, size: int) -> None:
        cur = self.current
        first = max(cur.base + 1, cur.last + 1 - back)
        if bump:
            self.term += 1
        term = max(self.term, cur.term_at(first - 1))
        batch = [entry(first + k, term, size) for k in range(count)]
        self.wal.append(batch)
        self.current = cur.append(batch)
        self.pending = [e for e in self.pending if e.index < first] + batch

    def set_hard_state(self, vote: str, commit: int) -> None:
        hs = HardState(max(self.term, self.current.hs.term), vote, min(commit, self.current.last))
        self.wal.set_hard_state(hs)
        self.current = replace(self.current, hs=hs)

    def sync(self) -> None:
        self.wal.sync()
        self._synced()

    def snapshot(self, kind: int, offset: int) -> None:
        cur = self.current
        if kind == 0 and cur.entries:  # the log agrees with the snapshot
            i = cur.base + 1 + offset % len(cur.entries)
            s = self._snap(i, cur.term_at(i))
        elif kind == 1 and cur.entries:  # another history at that index
            i = cur.base + 1 + offset % len(cur.entries)
            self.term += 1
            s = self._snap(i, self.term)
        else:  # ahead of the log
            self.term += 1
            s = self._snap(cur.last + 1 + offset % 5, self.term)
        self.wal.save_snapshot(s)
        self.current = self.current.with_snapshot(s)
        self._synced()

    def compact(self, offset: int) -> None:
        self.wal.compact(offset % (self.current.base + 1))
        self._synced()

    def reopen(self) -> None:
        self.wal.close()
        self._synced()
        self.wal, rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
        self.check(rec, [self.durable])

    def crash(self, seed: int) -> None:
        """Power loss between operations: exactly the synced state comes back."""
        self.disk.crash(random.Random(seed))
        self.pending = []
        self.current = self.durable
        self.wal, rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
        self.check(rec, [self.durable])

    def crash_during(
        self, op: int, after_ops: int, seed: int, offset: int, power: bool = True
    ) -> None:
        """Power loss (or, without ``power``, a process death) in the middle of sync /
        save_snapshot / compact / close+open. After a process death what the next open
        returns must survive a power loss right after it."""
        allowed = self._sync_states()
        final = allowed[-1]
        if op == 1:
            s = self._snap(final.last + 1, self.term + 1)
            if final.entries and offset % 2:
                i = final.base + 1 + offset % len(final.entries)
                s = self._snap(i, final.term_at(i))
            final = final.with_snapshot(s)
            allowed.append(final)
        self.disk.arm_crash(after_ops)
        try:
            if op == 0:
                self.wal.sync()
            elif op == 1:
                self.wal.save_snapshot(s)
            elif op == 2:
                self.wal.compact(final.base)
            else:
                self.wal.close()
                self.wal, _rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
        except SimulatedCrash:
            if power:
                self.disk.crash(random.Random(seed))
            else:
                self.disk.kill_process()
            self.wal, rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
            got = self.check(rec, allowed)
            if not power:
                self.disk.crash(random.Random(seed))
                self.wal, rec = Wal.open(self.disk, "grp", segment_bytes=SEGMENT_BYTES)
                self.check(rec, [got])
            self.durable = self.current = got
            self.pending = []
            return
        self.disk.disarm()
        self.durable = self.current = final
        self.pending = []

    # -- model ---------------------------------------------------------------------------------

    def _snap(self, index: int, term: int) -> Snapshot:
        return Snapshot(SnapshotMeta(index, term, Membership(("a", "b"))), b"s%d" % index)

    def _synced(self) -> None:
        self.durable = self.current
        self.pending = []

    def _sync_states(self) -> list[State]:
        """What a crash during sync may leave: each prefix of the records being written,
        the new hard state only after all of them; the last element is the synced state."""
        state = self.durable
        states = [state]
        for e in self.pending:
            state = state.append([e])
            states.append(state)
        assert state.entries == self.current.entries
        states.append(replace(state, hs=self.current.hs))
        return states

    def check(self, rec: Recovered, allowed: list[State]) -> State:
        got = State(rec.snapshot, tuple(rec.entries), rec.hard_state)
        assert rec.corrupt is None, rec.corrupt
        assert got in allowed, (got, allowed)
        assert (self.wal.first_index, self.wal.last_index) == (got.base + 1, got.last)
        assert self.disk.open_handles <= 1
        return got


def run_random(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    h = Harness()
    for _ in range(steps):
        r = rng.random()
        if r < 0.35:
            h.append(
                rng.choice((0, 0, 0, 1, 3)),
                rng.randint(1, 5),
                rng.random() < 0.1,
                rng.randint(0, 60),
            )
        elif r < 0.45:
            h.set_hard_state(rng.choice("abc"), rng.randint(0, 1000))
        elif r < 0.65:
            h.sync()
        elif r < 0.70:
            h.snapshot(rng.randint(0, 2), rng.randint(0, 100))
        elif r < 0.73:
            h.compact(rng.randint(0, 100))
        elif r < 0.80:
            h.crash(rng.randint(0, 1 << 30))
        elif r < 0.83:
            h.reopen()
        else:
            h.crash_during(
                rng.randint(0, 3),
                rng.randint(0, 8),
                rng.randint(0, 1 << 30),
                rng.randint(0, 100),
                power=rng.random() < 0.7,
            )


def test_random_crashes_never_lose_synced_state() -> None:
    for seed in range(200):
        try:
            run_random(seed, 60)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc


class WalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()

    @rule(
        back=st.sampled_from([0, 0, 1, 2, 4]),
        count=st.integers(1, 6),
        bump=st.booleans(),
        size=st.integers(0, 80),
    )
    def append(self, back: int, count: int, bump: bool, size: int) -> None:
        self.h.append(back, count, bump, size)

    @rule(vote=st.sampled_from(["", "a", "b"]), commit=st.integers(0, 500))
    def set_hard_state(self, vote: str, commit: int) -> None:
        self.h.set_hard_state(vote, commit)

    @rule()
    def sync(self) -> None:
        self.h.sync()

    @rule(kind=st.integers(0, 2), offset=st.integers(0, 100))
    def snapshot(self, kind: int, offset: int) -> None:
        self.h.snapshot(kind, offset)

    @rule(offset=st.integers(0, 100))
    def compact(self, offset: int) -> None:
        self.h.compact(offset)

    @rule(seed=st.integers(0, 1 << 30))
    def crash(self, seed: int) -> None:
        self.h.crash(seed)

    @rule()
    def reopen(self) -> None:
        self.h.reopen()

    @rule(
        op=st.integers(0, 3),
        after_ops=st.integers(0, 10),
        seed=st.integers(0, 1 << 30),
        offset=st.integers(0, 100),
        power=st.booleans(),
    )
    def crash_during(self, op: int, after_ops: int, seed: int, offset: int, power: bool) -> None:
        self.h.crash_during(op, after_ops, seed, offset, power)

    @invariant()
    def indexes_match_the_model(self) -> None:
        cur = self.h.current
        assert (self.h.wal.first_index, self.h.wal.last_index) == (cur.base + 1, cur.last)


WalMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestWalMachine = WalMachine.TestCase
