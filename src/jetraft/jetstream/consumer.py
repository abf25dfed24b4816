"""The consumer state machine.

Two halves, as in nats-server's clustered consumers:

* Replicated state (``delivered``, ``ack floor``, ``pending``, ``redelivered``) changes only in
  ``apply(entry)``. Entries are small values stamped by the proposer (the consumer leader) with
  every time they need, so every replica that applies the same entries holds the same state.
  Today "propose" applies locally; the RAFT issue replicates exactly these entries.
* Leader-local state (the stream cursor, the redelivery queue, the last-per-subject skip list,
  the running ``num_pending`` count) only steers what the leader proposes next. A new leader
  rebuilds it from the replicated state (``restore_cursor`` and ``check_pending``).

Nothing here reads a clock or does I/O: the message store is read through ``MsgSource``.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jetraft.jetstream.acks import AckInfo as AckInfo  # re-exported
from jetraft.jetstream.acks import parse_ack_subject as parse_ack_subject
from jetraft.jetstream.consumer_config import ConsumerConfig, parse_rfc3339_ns
from jetraft.jetstream.consumer_entries import (
    Acked,
    Batch,
    Candidate,
    Delivered,
    Dropped,
    Entry,
    Exhausted,
    Msg,
    Nakked,
    Pending,
    Progress,
    Start,
    decode_entries,
    decode_entry,
    encode_entries,
    encode_entry,
)
from jetraft.protocol.subjects import subject_matches

ACK_TERM_LIMITS_REASON = "Unacknowledged message was deleted"

# The replicated entries, their encoding, Candidate and Pending are msgspec Structs kept in
# ``consumer_entries`` (a module that is never compiled, see there); their names stay
# importable from here.
__all__ = [
    "ACK_TERM_LIMITS_REASON",
    "AckInfo",
    "Acked",
    "Batch",
    "Candidate",
    "ConsumerCore",
    "Delivered",
    "Dropped",
    "Entry",
    "Exhausted",
    "Msg",
    "MsgSource",
    "Nakked",
    "Pending",
    "Progress",
    "ReplicatedState",
    "SeqPair",
    "Start",
    "decode_entries",
    "decode_entry",
    "encode_entries",
    "encode_entry",
    "parse_ack_subject",
]


class MsgSource(Protocol):
    """The read side of a stream store that consumers need (see consumer_store.py)."""

    def bounds(self) -> tuple[int, int]:
        """(first_seq, last_seq); (0, 0) for a stream that never stored anything."""
        ...

    def load(self, seq: int) -> Msg | None: ...

    def load_next(self, start_seq: int, filters: Sequence[str]) -> Msg | None:
        """The first message with seq >= start_seq matching any filter (all when empty)."""
        ...

    def last_seq_matching(self, filters: Sequence[str]) -> int: ...

    def last_seqs_per_subject(self, filters: Sequence[str]) -> list[int]:
        """Sorted sequences of the last message of every subject matching the filters."""
        ...

    def num_pending(
        self, start_seq: int, filters: Sequence[str], last_per_subject: bool
    ) -> int: ...

    def seq_for_time(self, ts_ns: int) -> int:
        """The first sequence stored at or after ts_ns (last_seq + 1 when none)."""
        ...

    def fingerprint(self) -> tuple[int, int, int]:
        """Changes whenever the stored set changes (first_seq, last_seq, msgs)."""
        ...


@dataclass(slots=True)
class SeqPair:
    consumer_seq: int = 0
    stream_seq: int = 0


@dataclass(slots=True)
class ReplicatedState:
    """Exactly what a replica holds and what is persisted."""

    delivered: SeqPair = field(default_factory=SeqPair)
    ack_floor: SeqPair = field(default_factory=SeqPair)
    pending: dict[int, Pending] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)  # sseq -> deliveries - 1


class ConsumerCore:
    """A consumer's state machine plus the leader's delivery cursor."""

    def __init__(self, stream: str, name: str, cfg: ConsumerConfig, created_ns: int) -> None:
        self.stream = stream
        self.name = name
        self.cfg = cfg
        self.created_ns = created_ns
        self.state = ReplicatedState()
        # Leader-local.
        self.sseq = 1  # next stream sequence to look at
        self.dseq = 1  # next consumer sequence
        self.rdq: list[int] = []
        self._rdq_set: set[int] = set()
        self.lss: list[int] = []  # last-per-subject sequences still to deliver
        self.lss_resume = 0
        self._lss_taken = 0
        self.npc = 0  # running num_pending
        self._npc_fp: tuple[int, int, int] | None = None
        self._npc_cursor = -1
        self.last_delivered_ns = 0
        self.last_ack_ns = 0
        # Clustered leader: first deliveries proposed but not applied yet, and the highest
        # stream sequence it delivered. Until its entry is applied a delivery counts as
        # pending here (max_ack_pending, ack timers, naks, info), as nats-server's leader
        # tracks a delivery the moment it sends it.
        self.inflight: dict[int, Pending] = {}
        self.noted_sseq = 0
        self._ack_prefix = f"$JS.ACK.{stream}.{name}."
        self._set_filters(cfg)

    # --- config --------------------------------------------------------------------------

    def _set_filters(self, cfg: ConsumerConfig) -> None:
        self.filters: tuple[str, ...] = cfg.filters
        self._literal_filters = frozenset(f for f in self.filters if "*" not in f and ">" not in f)
        self._wild_filters = tuple(f for f in self.filters if f not in self._literal_filters)
        self.max_deliver = max(cfg.max_deliver, 0)

    def update_config(self, cfg: ConsumerConfig) -> None:
        filters_changed = cfg.filters != self.cfg.filters
        self.cfg = cfg
        self._set_filters(cfg)
        if filters_changed:
            self._npc_fp = None

    def matches(self, subject: str) -> bool:
        if not self.filters:
            return True
        if subject in self._literal_filters:
            return True
        return any(subject_matches(f, subject) for f in self._wild_filters)

    # --- start and restore (leader) -------------------------------------------------------

    def select_start(self, src: MsgSource) -> Start:
        """nats-server's selectStartingSeqNo; may prepare the last-per-subject skip list."""
        cfg = self.cfg
        first, last = src.bounds()
        self.lss, self.lss_resume = [], 0
        if cfg.opt_start_seq:
            sseq = cfg.opt_start_seq
        elif cfg.deliver_policy == "all":
            sseq = first
        elif cfg.deliver_policy == "last":
            sseq = src.last_seq_matching(self.filters) if self.filters else last
        elif cfg.deliver_policy == "last_per_subject":
            seqs = src.last_seqs_per_subject(self.filters)
            if seqs:
                self.lss, self.lss_resume = list(seqs), last + 1
                sseq = seqs[0]
            else:
                sseq = last + 1
        elif cfg.deliver_policy == "by_start_time" and cfg.opt_start_time is not None:
            sseq = src.seq_for_time(parse_rfc3339_ns(cfg.opt_start_time))
        else:  # new
            sseq = last + 1
        if first == 0 and not cfg.opt_start_seq:
            sseq = 1
        elif sseq > last and not cfg.opt_start_seq:
            sseq = last + 1
        elif sseq < first:
            sseq = first
        return Start(max(sseq, 1))

    def restore_cursor(self) -> None:
        """Leader-local state from replicated state (new leader, or after a restart)."""
        st = self.state
        self.sseq = st.delivered.stream_seq + 1
        self.dseq = st.delivered.consumer_seq + 1
        self.noted_sseq = st.delivered.stream_seq
        self.inflight.clear()
        self.rdq, self._rdq_set = [], set()
        self.lss, self.lss_resume = [], 0
        self._npc_fp = None

    # --- apply -----------------------------------------------------------------------------

    def apply(self, entry: Entry) -> list[int]:
        """Apply one replicated entry. Returns stream sequences this consumer no longer needs
        (the stream uses them for interest / workqueue retention)."""
        kind = type(entry)
        if kind is Delivered:
            return self._apply_delivered(entry)  # type: ignore[arg-type]
        if kind is Acked:
            return self._apply_acked(entry)  # type: ignore[arg-type]
        if isinstance(entry, Nakked):
            p = self.state.pending.get(entry.sseq)
            if p is not None:
                p.ts_ns = entry.pending_ts_ns
            return []
        if isinstance(entry, Progress):
            p = self.state.pending.get(entry.sseq)
            if p is not None:
                p.ts_ns = entry.ts_ns
            return []
        if isinstance(entry, Exhausted):
            return self._apply_exhausted(entry)
        if isinstance(entry, Dropped):
            return self._apply_dropped(entry)
        assert isinstance(entry, Start)
        return self._apply_start(entry)

    def _apply_start(self, entry: Start) -> list[int]:
        st = self.state
        st.delivered.stream_seq = entry.sseq - 1
        st.ack_floor.stream_seq = entry.sseq - 1
        self.sseq = entry.sseq
        self._npc_fp = None
        return []

    def note_delivered(self, e: Delivered) -> None:
        """The leader's cursor moves past a delivery at once, before its entry is applied
        (in a cluster that is later, once committed); applying it again changes nothing."""
        if e.dseq >= self.dseq:
            self.dseq = e.dseq + 1
        if e.sseq >= self.sseq and e.dc == 1 and not self.lss:
            self.sseq = e.sseq + 1
        self.noted_sseq = max(self.noted_sseq, e.sseq)
        self.last_delivered_ns = e.ts_ns

    def note_inflight(self, e: Delivered) -> None:
        """Clustered leader: ``e`` was proposed; it is pending until applied."""
        if e.dc == 1 and self.cfg.ack_policy != "none" and e.sseq not in self.state.pending:
            self.inflight[e.sseq] = Pending(e.dseq, e.ts_ns)

    def undeliver(self, e: Delivered) -> None:
        """Clustered leader: the entry of delivery ``e`` was refused or dropped (a leadership
        transfer in progress, leadership lost), so the replicated state will not learn of
        it, and a leader that keeps leading would never hand the message out again: the
        cursor already passed it (cluster simulator seed 290, a step-down's transfer that
        expired). The cursor goes back to it. The group refuses every proposal from the
        first one it refuses until the transfer ends, so what follows it was refused too,
        and goes out again in order (at least once). A new leader rebuilds all of this from
        the replicated state anyway (``restore_cursor``)."""
        seq = e.sseq
        self.inflight.pop(seq, None)
        if seq in self.state.pending:
            self.nak_now(seq)  # known as delivered (a redelivery failed): due again now
            return
        if e.dc > 1:
            return  # settled meanwhile (acked, dropped)
        if self.lss:
            if seq not in self.lss:
                insort(self.lss, seq)
                self.npc += 1
            return
        if seq < self.sseq:
            self.sseq = seq
            self._npc_fp = None  # recount from the new cursor

    def is_pending(self, sseq: int) -> bool:
        """Delivered and not acknowledged (counting deliveries not applied yet)."""
        return sseq in self.state.pending or sseq in self.inflight

    def _apply_delivered(self, e: Delivered) -> list[int]:
        st = self.state
        if self.inflight:
            self.inflight.pop(e.sseq, None)
        # note_delivered, inline (once per delivered message)
        dseq, sseq = e.dseq, e.sseq
        if dseq >= self.dseq:
            self.dseq = dseq + 1
        if sseq >= self.sseq and e.dc == 1 and not self.lss:
            self.sseq = sseq + 1
        if sseq > self.noted_sseq:
            self.noted_sseq = sseq
        self.last_delivered_ns = e.ts_ns
        if e.dseq <= st.ack_floor.consumer_seq:
            return []
        if self.cfg.ack_policy == "none":
            if e.dseq > st.delivered.consumer_seq:
                st.delivered.consumer_seq = st.ack_floor.consumer_seq = e.dseq
            if e.sseq > st.delivered.stream_seq:
                st.delivered.stream_seq = st.ack_floor.stream_seq = e.sseq
            return [e.sseq]
        if e.sseq <= st.delivered.stream_seq:
            p = st.pending.get(e.sseq)
            if p is not None:
                p.ts_ns = e.ts_ns  # a redelivery keeps its original consumer sequence
        else:
            st.pending[e.sseq] = Pending(e.dseq, e.ts_ns)
        if e.dseq > st.delivered.consumer_seq:
            st.delivered.consumer_seq = e.dseq
        if e.sseq > st.delivered.stream_seq:
            st.delivered.stream_seq = e.sseq
        if e.dc > 1 and st.redelivered.get(e.sseq, 0) < e.dc - 1:
            st.redelivered[e.sseq] = e.dc - 1
        return []

    def _apply_acked(self, e: Acked) -> list[int]:
        return self.apply_ack(e.sseq, e.dseq)

    def apply_ack(self, sseq: int, dseq: int) -> list[int]:
        """What applying ``Acked(sseq, dseq, term)`` does (``term`` changes nothing here),
        without making the entry: a single server's acks, which are applied at once."""
        st = self.state
        policy = self.cfg.ack_policy
        if policy == "none":
            return []
        if self._rdq_set:
            self._rdq_discard(sseq)
        if st.redelivered:
            st.redelivered.pop(sseq, None)
        if policy == "all":
            if dseq <= st.ack_floor.consumer_seq or sseq <= st.ack_floor.stream_seq:
                return []
            done = [s for s in st.pending if s <= sseq]
            for s in done:
                del st.pending[s]
                st.redelivered.pop(s, None)
                self._rdq_discard(s)
            # The floor takes the delivery sequence this state knows for that message. A
            # leader hands a message out before its Delivered entry commits; when it fails,
            # that entry may be lost and its client acks with a delivery sequence the
            # replicated state never reached. Taken as is, the floor would pass every
            # delivery sequence the next leader hands out, and their entries, applied
            # below the floor, would never count as delivered (cluster simulator seed 3).
            floor = min(dseq, st.delivered.consumer_seq)
            st.ack_floor.consumer_seq = max(floor, st.ack_floor.consumer_seq)
            st.ack_floor.stream_seq = sseq
            if sseq not in done:
                done.append(sseq)
            return sorted(done)
        p = st.pending.pop(sseq, None)
        if p is None:
            # Not pending (already acked, or never delivered): the stream re-checks anyway.
            return [sseq] if sseq <= st.delivered.stream_seq else []
        self._move_ack_floor(p.dseq, sseq)
        return [sseq]

    def apply_explicit_acks(self, seqs: list[int]) -> list[int]:
        """``apply_ack`` for each stream sequence of ``seqs`` in turn (ack policy explicit,
        whose acks do not read the delivery sequence), with the same resulting state, in one
        call: the plain acks of one client read. Returns what ``apply_ack`` returns for all
        of them, in order. The floor moves as ``_move_ack_floor`` moves it, with the
        in-order case (the next message still pending) checked before any scan."""
        st = self.state
        pending = st.pending
        floor = st.ack_floor
        delivered = st.delivered
        done: list[int] = []
        for sseq in seqs:
            if self._rdq_set:
                self._rdq_discard(sseq)
            if st.redelivered:
                st.redelivered.pop(sseq, None)
            p = pending.pop(sseq, None)
            if p is None:
                if sseq <= delivered.stream_seq:
                    done.append(sseq)
                continue
            done.append(sseq)
            if not pending:
                floor.consumer_seq = delivered.consumer_seq
                floor.stream_seq = delivered.stream_seq
            elif p.dseq == floor.consumer_seq + 1:
                nxt = pending.get(sseq + 1) if sseq < delivered.stream_seq else None
                if nxt is not None and nxt.dseq > 0:
                    # What the scan finds first when acks come in order.
                    floor.consumer_seq = nxt.dseq - 1
                    floor.stream_seq = sseq
                else:
                    self._move_ack_floor(p.dseq, sseq)
        return done

    def _move_ack_floor(self, dseq: int, sseq: int) -> None:
        st = self.state
        if not st.pending:
            st.ack_floor.consumer_seq = st.delivered.consumer_seq
            st.ack_floor.stream_seq = st.delivered.stream_seq
            return
        if dseq != st.ack_floor.consumer_seq + 1:
            return
        st.ack_floor.consumer_seq, st.ack_floor.stream_seq = dseq, sseq
        # The floor rises to just below the oldest message still pending. Acks mostly come
        # in order, so look just above first and only scan everything when that fails.
        oldest = 0
        for s in range(sseq + 1, min(sseq + 64, st.delivered.stream_seq + 1)):
            if s in st.pending:
                oldest = s
                break
        if not oldest:
            oldest = min(st.pending)
        p = st.pending[oldest]
        if p.dseq > 0:
            st.ack_floor.consumer_seq = p.dseq - 1
            st.ack_floor.stream_seq = oldest - 1

    def _apply_exhausted(self, e: Exhausted) -> list[int]:
        st = self.state
        self._rdq_discard(e.sseq)
        p = st.pending.pop(e.sseq, None)
        # Keep the redelivered record: interest streams keep such messages (nats-server).
        st.redelivered[e.sseq] = max(st.redelivered.get(e.sseq, 0), e.dc - 1)
        if p is not None:
            self._move_ack_floor(p.dseq, e.sseq)
        return []

    def _apply_dropped(self, e: Dropped) -> list[int]:
        st = self.state
        self._rdq_discard(e.sseq)
        st.redelivered.pop(e.sseq, None)
        p = st.pending.pop(e.sseq, None)
        if p is not None:
            self._move_ack_floor(p.dseq, e.sseq)
        return []

    # --- leader: choosing what to deliver --------------------------------------------------

    def next_step(self, src: MsgSource) -> Candidate | Dropped | Exhausted | None:
        """The next thing the leader should do: deliver a candidate, or propose an entry
        (a redelivery whose message vanished is terminated; one over max_deliver exhausted).
        None: nothing to deliver now (caught up, or max_ack_pending reached)."""
        st = self.state
        while self.rdq:
            seq = self.rdq.pop(0)
            self._rdq_set.discard(seq)
            if not self.is_pending(seq):
                continue
            dc = st.redelivered.get(seq, 0) + 2
            if self.max_deliver and dc > self.max_deliver:
                return Exhausted(seq, dc - 1)
            msg = src.load(seq)
            if msg is None:
                return Dropped(seq)
            return Candidate(msg, dc)
        if 0 < self.cfg.max_ack_pending <= self.num_ack_pending:
            return None
        while self.lss:
            seq = self.lss.pop(0)
            if not self.lss:
                # Skip list done: resume after what the stream held when we started.
                self.sseq = self.lss_resume
            msg = src.load(seq)
            if msg is not None:
                self.npc -= 1
                self._lss_taken = seq
                return Candidate(msg, 1)
        # Unfiltered and in sequence is the common case: a direct load skips the filter work.
        msg = None if self.filters else src.load(self.sseq)
        if msg is None:
            msg = src.load_next(self.sseq, self.filters)
            if msg is None:
                return None
        self.npc -= 1
        return Candidate(msg, 1)

    def requeue(self, cand: Candidate) -> None:
        """A candidate from next_step was not delivered after all: put it back."""
        seq = cand.msg.seq
        if cand.dc > 1:
            if seq not in self._rdq_set:
                self.rdq.insert(0, seq)
                self._rdq_set.add(seq)
            return
        self.npc += 1
        if seq == self._lss_taken:
            if not self.lss:
                self.sseq = seq
            self.lss.insert(0, seq)
        self._lss_taken = 0

    def nak_now(self, sseq: int) -> None:
        """Leader side of an undelayed -NAK: redeliver as soon as possible."""
        if self.is_pending(sseq) and sseq not in self._rdq_set:
            self.rdq.append(sseq)
            self._rdq_set.add(sseq)

    def _rdq_discard(self, seq: int) -> None:
        if seq in self._rdq_set:
            self._rdq_set.discard(seq)
            self.rdq.remove(seq)

    def has_redeliveries(self) -> bool:
        return bool(self.rdq)

    # --- leader: ack timers ----------------------------------------------------------------

    def deadline_ns(self, sseq: int, p: Pending) -> int:
        """When ``sseq`` (pending) is due for redelivery."""
        wait = self.cfg.ack_wait
        if self.cfg.backoff:
            idx = min(self.state.redelivered.get(sseq, 0), len(self.cfg.backoff) - 1)
            wait = self.cfg.backoff[idx]
        return p.ts_ns + wait

    def check_pending(self, now_ns: int) -> tuple[list[Exhausted], int | None]:
        """Queue every pending message whose ack wait ran out; those that used up
        max_deliver come back as entries to propose. Returns (entries, next deadline)."""
        if self.cfg.ack_policy == "none" or self.cfg.ack_wait <= 0:
            return [], None
        expired: list[int] = []
        exhausted: list[Exhausted] = []
        next_due: int | None = None
        for seq, p in self.state.pending.items():
            due = self.deadline_ns(seq, p)
            if due <= now_ns:
                if seq in self._rdq_set:
                    continue
                dc = self.state.redelivered.get(seq, 0) + 1
                if self.max_deliver and dc >= self.max_deliver:
                    exhausted.append(Exhausted(seq, dc))
                else:
                    expired.append(seq)
            elif next_due is None or due < next_due:
                next_due = due
        expired.sort()
        for seq in expired:
            self.rdq.append(seq)
            self._rdq_set.add(seq)
        return exhausted, next_due

    # --- leader: counting ------------------------------------------------------------------

    def num_pending(self, src: MsgSource) -> int:
        """Stream messages for us beyond the cursor (exact; recounted when the store changed)."""
        fp = src.fingerprint()
        if fp != self._npc_fp or self._npc_cursor > self.sseq:
            self.recount(src)
            self._npc_fp = fp
        return max(self.npc, 0)

    def recount(self, src: MsgSource) -> None:
        lps = self.cfg.deliver_policy == "last_per_subject"
        if self.lss:
            # Still walking the skip list: what is left of it plus everything after it.
            self.npc = len(self.lss) + src.num_pending(self.lss_resume, self.filters, lps)
        else:
            self.npc = src.num_pending(self.sseq, self.filters, lps)
        self._npc_cursor = self.sseq

    def on_stored(self, seq: int, subject: str) -> None:
        """A new message was stored in the stream (keeps the running count exact)."""
        if seq >= self.sseq and self.matches(subject) and self._npc_fp is not None:
            self.npc += 1
            fp = self._npc_fp
            self._npc_fp = (fp[0] or seq, seq, fp[2] + 1)

    # --- retention -------------------------------------------------------------------------

    def needs_ack(self, sseq: int, subject: str) -> bool:
        """Does this consumer still need stream message ``sseq`` (interest retention)?

        Called from the stream's apply(), so it reads replicated state only: "not delivered
        yet" is judged by ``delivered.stream_seq``, never by the leader's cursor (which, while
        walking a last-per-subject list, lags behind what was delivered)."""
        if self.filters and not self.matches(subject):
            return False
        st = self.state
        need = False
        if sseq > st.ack_floor.stream_seq:
            if self.cfg.ack_policy != "explicit":
                need = True
            else:
                need = sseq > st.delivered.stream_seq or sseq in st.pending
        return need or sseq in st.redelivered

    def on_removed(self, seqs: Iterable[int]) -> list[Dropped]:
        """Stream messages are gone (limits, delete, retention): pending ones are dropped."""
        st = self.state
        out = []
        for seq in seqs:
            if seq in st.pending:
                out.append(Dropped(seq))
            else:
                st.redelivered.pop(seq, None)
        return out

    def purged(self, first_seq: int, src: MsgSource | None = None) -> list[Dropped]:
        """The stream was purged (everything below ``first_seq`` and, with ``src``, whatever
        else vanished): pending messages that are gone are dropped, the cursor moves past."""
        st = self.state
        out = [
            Dropped(s)
            for s in sorted(st.pending)
            if s < first_seq or (src is not None and src.load(s) is None)
        ]
        for s in [s for s in st.redelivered if s < first_seq and s not in st.pending]:
            del st.redelivered[s]
        if self.sseq < first_seq and not self.lss:
            self.sseq = first_seq
        self._npc_fp = None
        return out

    def purge_floor(self, first_seq: int) -> None:
        """After a purge left nothing pending: the floors rise to just below the stream's new
        first sequence (nats-server). Every replica runs this on the same purge, so it reads
        replicated state only (everything below ``first_seq`` is gone, so nothing there can
        still be owed)."""
        st = self.state
        if st.pending:
            return
        floor = max(st.ack_floor.stream_seq, first_seq - 1)
        st.ack_floor.stream_seq = floor
        st.ack_floor.consumer_seq = st.delivered.consumer_seq
        if st.delivered.stream_seq < floor:
            st.delivered.stream_seq = floor

    # --- info ------------------------------------------------------------------------------

    @property
    def num_ack_pending(self) -> int:
        return len(self.state.pending) + len(self.inflight)

    @property
    def num_redelivered(self) -> int:
        # With max_deliver 1 redeliveries are off; nats-server does not report the count.
        if self.cfg.max_deliver == 1:
            return 0
        return len(self.state.redelivered)

    def ack_reply(self, sseq: int, dseq: int, dc: int, ts_ns: int, pending: int) -> str:
        return f"{self._ack_prefix}{dc}.{sseq}.{dseq}.{ts_ns}.{pending}"
