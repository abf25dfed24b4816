"""Random operations against a naive reference model, the memory store and the file store.

The model is a plain dict of seq -> message following nats-server's rules literally (linear
scans everywhere). The memory store runs with the file store's byte accounting so that
max_bytes limits remove the same messages; the file store reopens (a clean restart) and
restores snapshots along the way, with tiny blocks so rotation and block rewrites happen.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jetraft.jetstream.store import (
    ERR_MAX_BYTES,
    ERR_MAX_MSG_SIZE,
    ERR_MAX_MSGS,
    ERR_MAX_MSGS_PER_SUBJECT,
    FileStore,
    Limits,
    MemoryStore,
    StoreState,
    _index,
    _index_chunks,
    file_msg_size,
)
from jetraft.jetstream.store._base import BaseStore
from jetraft.protocol.subjects import subject_matches

SUBJECTS = ["a", "b.x", "b.y", "c.d.e", "k.x"]
FILTERS: list[str | list[str] | None] = [None, "a", "b.*", "b.>", "*.x", "c.d.e", ["a", "b.x"]]
HDR = b"NATS/1.0\r\nX: y\r\n\r\n"


class FileSizedMemory(MemoryStore):
    def _size_of(self, subject: str, headers: bytes | None, data: bytes) -> int:
        return file_msg_size(subject, headers, data)


Msg = tuple[str, bytes | None, bytes, int]


def matches(filters: str | list[str] | None, subject: str) -> bool:
    if filters is None:
        return True
    fs = [filters] if isinstance(filters, str) else filters
    return not fs or any(f in ("", ">") or subject_matches(f, subject) for f in fs)


@dataclass
class Model:
    limits: Limits = field(default_factory=Limits)
    msgs: dict[int, Msg] = field(default_factory=dict)
    first: int = 1
    last: int = 0
    last_ts: int = 0

    def size(self, m: Msg) -> int:
        return file_msg_size(m[0], m[1], m[2])

    def nbytes(self) -> int:
        return sum(self.size(m) for m in self.msgs.values())

    def _fix(self) -> None:
        self.first = min(self.msgs) if self.msgs else self.last + 1

    def _drop(self, seq: int, out: list[int]) -> None:
        del self.msgs[seq]
        out.append(seq)
        self._fix()

    def of(self, subject: str) -> list[int]:
        return sorted(q for q, m in self.msgs.items() if m[0] == subject)

    def would_exceed(self, subject: str, hdr: bytes | None, data: bytes) -> str | None:
        lim = self.limits
        if lim.max_msg_size > 0 and len(data) + len(hdr or b"") > lim.max_msg_size:
            return ERR_MAX_MSG_SIZE
        if not lim.discard_new:
            return None
        mine = self.of(subject)
        asl = lim.max_msgs_per_subject > 0 and len(mine) >= lim.max_msgs_per_subject
        if asl and lim.discard_new_per_subject:
            return ERR_MAX_MSGS_PER_SUBJECT
        if lim.max_msgs > 0 and len(self.msgs) >= lim.max_msgs and not asl:
            return ERR_MAX_MSGS
        size = file_msg_size(subject, hdr, data)
        over = lim.max_bytes > 0 and self.nbytes() + size > lim.max_bytes
        if over and (not asl or self.size(self.msgs[mine[0]]) < size):
            return ERR_MAX_BYTES
        return None

    def store(self, subject: str, hdr: bytes | None, data: bytes, ts: int) -> tuple[int, list[int]]:
        self.last += 1
        self.msgs[self.last] = (subject, hdr, data, ts)
        self.last_ts = ts
        self._fix()
        out: list[int] = []
        lim = self.limits
        if lim.max_msgs_per_subject > 0:
            while len(self.of(subject)) > lim.max_msgs_per_subject:
                self._drop(self.of(subject)[0], out)
        if not lim.discard_new:
            while lim.max_msgs > 0 and len(self.msgs) > lim.max_msgs:
                self._drop(self.first, out)
            while lim.max_bytes > 0 and self.nbytes() > lim.max_bytes:
                self._drop(self.first, out)
        return self.last, out

    def remove(self, seq: int) -> bool:
        if seq not in self.msgs:
            return False
        self._drop(seq, [])
        return True

    def compact(self, upto: int) -> int:
        if upto <= self.first:
            return 0
        gone = [q for q in self.msgs if q < upto]
        for q in gone:
            del self.msgs[q]
        self.last = max(self.last, upto - 1)
        self._fix()
        return len(gone)

    def purge(self, filt: str | None, upto: int, keep: int) -> int:
        if upto == 1:
            return 0
        if filt in (None, "", ">"):
            if keep <= 0 and upto <= 0:
                return self.compact(self.last + 1)
            if upto > 1:
                return self.compact(upto)
        match = [q for q in sorted(self.msgs) if matches(filt, self.msgs[q][0])]
        if not match or (keep > 0 and keep >= len(match)):
            return 0
        hi = upto - 1 if upto > 0 else self.last
        cands = [q for q in match if q <= hi]
        if keep > 0:
            cands = cands[: len(match) - keep]
        out: list[int] = []
        for q in cands:
            self._drop(q, out)
        return len(out)

    def skip(self, n: int) -> None:
        self.last += n
        self._fix()

    def expire(self, now: int) -> list[int]:
        out: list[int] = []
        if self.limits.max_age_ns <= 0:
            return out
        for q in sorted(self.msgs):
            if self.msgs[q][3] > now - self.limits.max_age_ns:
                break
            self._drop(q, out)
        return out

    def update_limits(self, new: Limits) -> list[int]:
        old, self.limits = self.limits, new
        out: list[int] = []
        if not new.discard_new:
            while new.max_msgs > 0 and len(self.msgs) > new.max_msgs:
                self._drop(self.first, out)
            while new.max_bytes > 0 and self.nbytes() > new.max_bytes:
                self._drop(self.first, out)
        maxp = new.max_msgs_per_subject
        if maxp > 0 and (old.max_msgs_per_subject <= 0 or maxp < old.max_msgs_per_subject):
            for subject in {m[0] for m in self.msgs.values()}:
                while len(self.of(subject)) > maxp:
                    self._drop(self.of(subject)[0], out)
        return sorted(out)

    def state(self) -> StoreState:
        holes = tuple(q for q in range(self.first, self.last + 1) if q not in self.msgs)
        return StoreState(
            msgs=len(self.msgs),
            bytes=self.nbytes(),
            first_seq=self.first if self.last else 0,
            first_ts_ns=self.msgs[self.first][3] if self.msgs else 0,
            last_seq=self.last,
            last_ts_ns=self.last_ts,
            num_subjects=len({m[0] for m in self.msgs.values()}),
            num_deleted=len(holes),
            deleted=holes,
        )


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="jetraft-store-model-")
        self.model = Model()
        self.mem: BaseStore = FileSizedMemory()
        self.file = FileStore(self.dir, block_size=512)
        self.now = 1_000

    def stores(self) -> list[BaseStore]:
        return [self.mem, self.file]

    def teardown(self) -> None:
        self.file.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        subject=st.sampled_from(SUBJECTS),
        hdr=st.booleans(),
        size=st.integers(0, 120),
        dt=st.integers(0, 40),
    )
    def store(self, subject: str, hdr: bool, size: int, dt: int) -> None:
        self.now += dt
        headers = HDR if hdr else None
        data = bytes([self.now % 251]) * size
        verdict = self.model.would_exceed(subject, headers, data)
        assert [s.would_exceed(subject, headers, data) for s in self.stores()] == [verdict] * 2
        if verdict is None:
            want = self.model.store(subject, headers, data, self.now)
            assert [s.store(subject, headers, data, self.now) for s in self.stores()] == [want] * 2

    @rule(k=st.integers(-2, 40))
    def remove(self, k: int) -> None:
        seq = self.model.first + k
        want = self.model.remove(seq)
        assert [s.remove(seq) for s in self.stores()] == [want] * 2

    @rule(
        filt=st.sampled_from([None, "a", "b.*", "b.>", "*.x", "c.d.e", "zz"]),
        upto=st.sampled_from([0, 0, 1, 2, 5, 10]),
        keep=st.sampled_from([0, 0, 1, 2, 5]),
    )
    def purge(self, filt: str | None, upto: int, keep: int) -> None:
        upto = self.model.first + upto if upto > 2 else upto
        want = self.model.purge(filt, upto, keep)
        assert [s.purge(filt, upto, keep) for s in self.stores()] == [want] * 2

    @rule(n=st.integers(1, 3))
    def skip(self, n: int) -> None:
        seq = self.model.last + 1
        self.model.skip(n)
        for s in self.stores():
            s.skip_msgs(seq, n)

    @rule(dt=st.integers(0, 300))
    def expire(self, dt: int) -> None:
        self.now += dt
        want = self.model.expire(self.now)
        assert [s.expire(self.now) for s in self.stores()] == [want] * 2

    @rule(
        max_msgs=st.sampled_from([-1, 3, 8, 20]),
        max_bytes=st.sampled_from([-1, 300, 1500]),
        max_age=st.sampled_from([0, 0, 200]),
        per_subject=st.sampled_from([-1, 1, 2, 3]),
        discard_new=st.booleans(),
        per_subject_new=st.booleans(),
        max_msg_size=st.sampled_from([-1, -1, 100]),
    )
    def limits(
        self,
        max_msgs: int,
        max_bytes: int,
        max_age: int,
        per_subject: int,
        discard_new: bool,
        per_subject_new: bool,
        max_msg_size: int,
    ) -> None:
        new = Limits(
            max_msgs=max_msgs,
            max_bytes=max_bytes,
            max_age_ns=max_age,
            max_msgs_per_subject=per_subject,
            max_msg_size=max_msg_size,
            discard_new=discard_new,
            discard_new_per_subject=discard_new and per_subject_new and per_subject > 0,
        )
        want = self.model.update_limits(new)
        assert [s.update_limits(new) for s in self.stores()] == [want] * 2

    @rule()
    def sync(self) -> None:
        self.file.sync()
        assert not self.file.needs_sync

    @rule()
    def reopen(self) -> None:
        self.file.close()
        self.file = FileStore(self.dir, self.model.limits, block_size=512)
        assert self.file.truncated == []

    @precondition(lambda self: self.model.last > 0)
    @rule(from_file=st.booleans())
    def snapshot_restore(self, from_file: bool) -> None:
        src, dst = (self.file, self.mem) if from_file else (self.mem, self.file)
        dst.restore(list(src.snapshot()))

    @invariant()
    def same_state(self) -> None:
        want = self.model.state()
        for s in self.stores():
            assert s.state(deleted=True) == want
            assert s.bounds() == (want.first_seq, want.last_seq)

    @invariant()
    def same_messages(self) -> None:
        m = self.model
        for q in range(max(1, m.first - 1), m.last + 2):
            exp = m.msgs.get(q)
            for s in self.stores():
                got = s.load(q)
                assert (got and (got.subject, got.headers, got.data, got.ts_ns)) == exp

    @invariant()
    def same_queries(self) -> None:
        m = self.model
        starts = sorted({0, m.first, m.first + 1, (m.first + m.last) // 2, m.last, m.last + 1})
        for f in FILTERS:
            seqs = sorted(q for q, v in m.msgs.items() if matches(f, v[0]))
            lasts: dict[str, int] = {}
            for q in seqs:
                lasts[m.msgs[q][0]] = q
            for s in self.stores():
                last = s.load_last(f)
                assert (last.seq if last else 0) == (seqs[-1] if seqs else 0)
                assert s.last_seqs_per_subject(f) == sorted(lasts.values())
                counts: dict[str, int] = {}
                for q in seqs:
                    counts[m.msgs[q][0]] = counts.get(m.msgs[q][0], 0) + 1
                assert s.subjects_state(f) == counts
                for start in starts:
                    nxt = s.load_next(start, f)
                    exp = next((q for q in seqs if q >= start), 0)
                    assert (nxt.seq if nxt else 0) == exp
                    assert s.num_pending(start, f) == len([q for q in seqs if q >= start])
                    lps = len([v for v in lasts.values() if v >= start])
                    assert s.num_pending(start, f, last_per_subject=True) == lps
        for subject in SUBJECTS:
            mine = m.of(subject)
            for s in self.stores():
                assert s.last_seq_for_subject(subject) == (mine[-1] if mine else 0)
        self._same_runs()
        for ts in (0, self.now - 100, self.now, self.now + 1):
            exp = next((q for q in sorted(m.msgs) if m.msgs[q][3] >= ts), m.last + 1)
            for s in self.stores():
                assert s.seq_for_time(ts) == exp


    def _same_runs(self) -> None:
        """``load_run`` (and ``load_raw_run``, as tuples) returns what repeated unfiltered
        ``load_next`` calls return, cut by its message count and byte bound (the model's
        own walk is the reference)."""
        m = self.model
        starts = sorted({0, m.first, m.first + 1, (m.first + m.last) // 2, m.last, m.last + 1})
        for start in starts:
            live = [q for q in sorted(m.msgs) if q >= start]
            sizes = [len(m.msgs[q][0]) + len(m.msgs[q][1] or b"") + len(m.msgs[q][2]) for q in live]
            # Byte bounds at, just below and just above the size of the first messages.
            exact = [sum(sizes[:k]) + d for k in (1, 2) for d in (-1, 0, 1) if k <= len(sizes)]
            cases = [(0, 0), (1, 0), (3, 0), (1000, 0), (1000, 150), (2, 1)]
            cases += [(1000, b) for b in exact if b > 0]
            for max_msgs, max_bytes in cases:
                want = []
                size = 0
                for q in live[: max(max_msgs, 0)]:
                    subject, headers, data, ts = m.msgs[q]
                    want.append((q, subject, headers, data, ts))
                    size += len(subject) + len(headers or b"") + len(data)
                    if max_bytes and size >= max_bytes:
                        break
                for s in self.stores():
                    got = s.load_run(start, max_msgs, max_bytes)
                    assert [(g.seq, g.subject, g.headers, g.data, g.ts_ns) for g in got] == want
                    # The rows without message objects: the same fields, the same bounds.
                    assert s.load_raw_run(start, max_msgs, max_bytes) == want
                    if max_msgs > 0:  # the first is exactly what load_next returns
                        assert (got[0] if got else None) == s.load_next(start)


StoreMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreMachine.TestCase


class TinyChunkMachine(StoreMachine):
    """The same rules with index chunks of 4 sequences that are rewritten after 2
    tombstones: chunk boundaries, dropped chunks, sparse chunks and rewrites happen all
    the time."""

    def __init__(self) -> None:
        # The chunk's methods read the chunk geometry from _index_chunks, the index's own
        # from the names _index imported: both are changed.
        self._saved = (_index_chunks.SHIFT, _index_chunks.MASK, _index_chunks.CHUNK,
                       _index.SHIFT, _index.MASK, _index._MIN_REWRITE)
        _index_chunks.SHIFT, _index_chunks.MASK, _index_chunks.CHUNK = 2, 3, 4
        _index.SHIFT, _index.MASK, _index._MIN_REWRITE = 2, 3, 2
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            (_index_chunks.SHIFT, _index_chunks.MASK, _index_chunks.CHUNK,
             _index.SHIFT, _index.MASK, _index._MIN_REWRITE) = self._saved


TinyChunkMachine.TestCase.settings = StoreMachine.TestCase.settings
TestStoreModelTinyChunks = TinyChunkMachine.TestCase
