"""Everything the memory and file stores share: limits, purge, queries, snapshots.

A concrete store supplies persistence through a handful of hooks (``_append``, ``_read``,
``_raw_record``, ``_before_remove``, ``_compacted``, ``_skipped``) and keeps its index in
``self._ix``. All decisions (which seqs a limit or purge removes) are made here, once, so both
stores decide identically; the file store only records the outcome.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence

from jetraft._mypyc import mypyc_attr
from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._index import SeqIndex
from jetraft.jetstream.store._match import normalize
from jetraft.jetstream.store.types import (
    ERR_MAX_BYTES,
    ERR_MAX_MSG_SIZE,
    ERR_MAX_MSGS,
    ERR_MAX_MSGS_PER_SUBJECT,
    Filters,
    Limits,
    PlainMsg,
    RawMsg,
    StoreClosed,
    StoreCorruption,
    StoredMsg,
    StoreError,
    StoreState,
)

SNAPSHOT_CHUNK = 1 << 20


@mypyc_attr(allow_interpreted_subclasses=True)  # MemoryStore, see there
class BaseStore:
    """The shared half of a stream store (see ``types.StreamStore`` for the contract)."""

    def __init__(self, limits: Limits, file_mode: bool) -> None:
        self._ix: SeqIndex[StoredMsg] = SeqIndex(file_mode)
        self._limits = limits
        self._closed = False

    # --- hooks -----------------------------------------------------------------------------

    def _size_of(self, subject: str, headers: bytes | None, data: bytes) -> int:
        """What a message counts against max_bytes in this kind of store."""
        raise NotImplementedError

    def _append(
        self, seq: int, subject: str, headers: bytes | None, data: bytes, ts: int, size: int
    ) -> int:
        """Persist a message and add it to the index; returns its subject id."""
        raise NotImplementedError

    def _read(self, seq: int) -> StoredMsg:
        """The message at a live ``seq``."""
        raise NotImplementedError

    def _raw_record(self, seq: int) -> bytes:
        """The MSG record of a live ``seq`` (snapshots)."""
        m = self._read(seq)
        buf = bytearray()
        rec.append_msg(buf, m.seq, m.ts_ns, m.subject.encode(), m.headers, m.data)
        return bytes(buf)

    def _before_remove(self, seq: int) -> None:
        """``seq`` (live) is about to be removed from the index."""

    def _compacted(self) -> None:
        """Messages below the index's first seq were removed in bulk."""

    def _skipped(self) -> None:
        """last_seq moved without a message."""

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("stream store is closed")

    # --- writing ---------------------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        return self._limits

    def store(
        self, subject: str, headers: bytes | None, data: bytes, ts_ns: int
    ) -> tuple[int, list[int]]:
        self._check()
        if not subject:
            raise StoreError("empty subject")
        if not headers:
            headers = None
        ix = self._ix
        seq = ix.last + 1
        sid = self._append(
            seq, subject, headers, data, ts_ns, self._size_of(subject, headers, data)
        )
        lim = self._limits
        if lim.max_msgs_per_subject <= 0 and lim.max_msgs <= 0 and lim.max_bytes <= 0:
            return seq, []
        return seq, self._enforce(sid)

    def store_body(
        self, subject: str, body: bytes, hdr_len: int, ts_ns: int
    ) -> tuple[int, list[int]]:
        """``store`` of a publish's body as it arrived: its header block (``hdr_len`` bytes,
        none when -1 or 0) followed by its payload. Here cut in two; the file store, whose
        record holds the two in that order, takes the body whole."""
        if hdr_len <= 0:
            return self.store(subject, None, body, ts_ns)
        return self.store(subject, body[:hdr_len], body[hdr_len:], ts_ns)

    @property
    def prunes_on_store(self) -> bool:
        lim = self._limits
        return lim.max_msgs_per_subject > 0 or lim.max_msgs > 0 or lim.max_bytes > 0

    def store_run(self, msgs: Sequence[PlainMsg]) -> int:
        if self.prunes_on_store:
            raise StoreError("store_run on a store whose limits remove messages")
        first = self._ix.last + 1
        for m in msgs:
            self.store(m.subject, None, m.data, m.ts_ns)
        return first

    def _enforce(self, sid: int) -> list[int]:
        """After a store: the limits that remove older messages; returns what they removed."""
        ix = self._ix
        lim = self._limits
        removed: list[int] = []
        maxp = lim.max_msgs_per_subject
        if maxp > 0:
            while ix.subject_count(sid) > maxp:
                first = ix.subject_first(sid)
                self._remove(first)
                removed.append(first)
        if not lim.discard_new:
            if lim.max_msgs > 0:
                while ix.msgs > lim.max_msgs:
                    first = ix.first
                    self._remove(first)
                    removed.append(first)
            if lim.max_bytes > 0:
                while ix.bytes > lim.max_bytes:
                    first = ix.first
                    self._remove(first)
                    removed.append(first)
        return removed

    def would_exceed(
        self, subject: str, headers: bytes | None, data: bytes, rollup: bool = False
    ) -> str | None:
        """nats-server's discard-new check (and max_msg_size); None when the message fits.

        ``rollup``: the message carries ``Nats-Rollup`` (exempt from the per-subject refusal
        because it purges its subject right after being stored).
        """
        lim = self._limits
        if lim.max_msg_size > 0 and len(data) + (len(headers) if headers else 0) > lim.max_msg_size:
            return ERR_MAX_MSG_SIZE
        if not lim.discard_new:
            return None
        ix = self._ix
        sid = ix.sid(subject)
        maxp = lim.max_msgs_per_subject
        at_subject_limit = maxp > 0 and sid >= 0 and ix.subject_count(sid) >= maxp
        if at_subject_limit and lim.discard_new_per_subject and not rollup:
            return ERR_MAX_MSGS_PER_SUBJECT
        if lim.max_msgs > 0 and ix.msgs >= lim.max_msgs and not at_subject_limit:
            return ERR_MAX_MSGS
        if lim.max_bytes > 0:
            size = self._size_of(subject, headers or None, data)
            if ix.bytes + size > lim.max_bytes:
                if not at_subject_limit:
                    return ERR_MAX_BYTES
                # Storing replaces the subject's oldest message: enough only if that is as big.
                oldest = ix.subject_first(sid)
                if ix.size(oldest) < size:
                    return ERR_MAX_BYTES
        return None

    def skip_msgs(self, seq: int, count: int = 1) -> None:
        self._check()
        if seq != self._ix.last + 1:
            raise StoreError(f"skip must start at {self._ix.last + 1}, not {seq}")
        if count > 0:
            self._ix.skip_to(seq + count - 1)
            self._skipped()

    def _remove(self, seq: int) -> bool:
        if not self._ix.is_live(seq):
            return False
        self._before_remove(seq)
        self._ix.remove(seq)
        return True

    def remove(self, seq: int) -> bool:
        self._check()
        return self._remove(seq)

    def erase(self, seq: int) -> bool:
        """Memory: the same as ``remove`` (the file store also overwrites the bytes)."""
        return self.remove(seq)

    @property
    def deferred_work(self) -> bool:
        return False

    def _compact(self, seq: int) -> int:
        n = self._ix.compact(seq)
        self._compacted()
        return n

    def purge(self, filter_subject: str | None = None, upto_seq: int = 0, keep: int = 0) -> int:
        """nats-server's PurgeEx: ``upto_seq`` removes below it (1 is a no-op), ``keep``
        retains the newest n matching messages (of the whole filtered set)."""
        self._check()
        if upto_seq == 1:
            return 0
        ix = self._ix
        key = normalize(filter_subject)
        if not key:
            if keep <= 0 and upto_seq <= 0:
                return self._compact(ix.last + 1)
            if upto_seq > 1:
                return self._compact(upto_seq)
        sel = ix.select(key)
        total = ix.count(0, sel)
        if total == 0:
            return 0
        maxp = 0
        if keep > 0:
            if keep >= total:
                return 0
            maxp = total - keep
        hi = upto_seq - 1 if upto_seq > 0 else ix.last
        seqs = ix.seqs_between(ix.first, hi, sel)
        if maxp:
            del seqs[maxp:]
        if seqs and sel is None:
            # Unfiltered: always a prefix of the stream, so one bulk compaction.
            return self._compact(seqs[-1] + 1)
        for s in seqs:
            self._remove(s)
        return len(seqs)

    def expire(self, now_ns: int, keep: Collection[int] = ()) -> list[int]:
        """Remove messages with ``ts <= now_ns - max_age`` from the front (as nats-server),
        except those in ``keep`` (a per-message TTL of "never" outlives max_age)."""
        self._check()
        max_age = self._limits.max_age_ns
        ix = self._ix
        if max_age <= 0 or not ix.msgs:
            return []
        cutoff = now_ns - max_age
        removed: list[int] = []
        kept = False
        for seq, c, i in ix.entries(ix.first, ix.last):
            if c.tss[i] > cutoff:
                break
            if keep and seq in keep:
                kept = True
            else:
                removed.append(seq)
        if removed and not kept:
            self._compact(removed[-1] + 1)
        elif removed:
            for seq in removed:
                self._remove(seq)
        return removed

    def oldest_ts(self, keep: Collection[int] = ()) -> int:
        """The timestamp of the oldest stored message not in ``keep`` (0: none)."""
        ix = self._ix
        for seq, c, i in ix.entries(ix.first, ix.last):
            if not keep or seq not in keep:
                return int(c.tss[i])
        return 0

    def update_limits(self, limits: Limits) -> list[int]:
        """Apply a config update; returns the removed seqs (sorted)."""
        self._check()
        old, self._limits = self._limits, limits
        ix = self._ix
        removed: list[int] = []
        if not limits.discard_new:
            drop = 0
            if 0 < limits.max_msgs < ix.msgs:
                drop = ix.msgs - limits.max_msgs
            live: list[int] = []
            if limits.max_bytes > 0 and ix.bytes > limits.max_bytes:
                excess = ix.bytes - limits.max_bytes
                live = ix.seqs_between(ix.first, ix.last, None)
                n = 0
                for _seq, c, i in ix.entries(ix.first, ix.last):
                    if excess <= 0:
                        break
                    excess -= c.sizes[i]
                    n += 1
                drop = max(drop, n)
            if drop:
                front = (live or ix.seqs_between(ix.first, ix.last, None))[:drop]
                removed.extend(front)
                self._compact(front[-1] + 1)
        maxp = limits.max_msgs_per_subject
        if maxp > 0 and (old.max_msgs_per_subject <= 0 or maxp < old.max_msgs_per_subject):
            over = [sid for sid in list(ix.live_sids()) if ix.subject_count(sid) > maxp]
            for sid in over:
                while ix.subject_count(sid) > maxp:
                    first = ix.subject_first(sid)
                    self._remove(first)
                    removed.append(first)
        removed.sort()
        return removed

    # --- reading ---------------------------------------------------------------------------

    def load(self, seq: int) -> StoredMsg | None:
        self._check()
        return self._read(seq) if self._ix.is_live(seq) else None

    def contains(self, seq: int) -> bool:
        return self._ix.is_live(seq)

    def load_next(self, start_seq: int, filters: Filters = None) -> StoredMsg | None:
        """The first message with seq >= start_seq matching any of ``filters``."""
        self._check()
        ix = self._ix
        seq = ix.next_seq(start_seq, ix.select(normalize(filters)))
        return self._read(seq) if seq else None

    def load_run(self, start_seq: int, max_msgs: int, max_bytes: int = 0) -> list[StoredMsg]:
        """What ``load_next`` (no filter) returns called again and again from ``start_seq``
        on: up to ``max_msgs`` live messages in sequence order, deleted sequences skipped,
        stopping after the one that brings their size (subject, headers and data) to
        ``max_bytes`` (0: no byte bound). The batch reads (DIRECT.GET) walk runs of
        consecutive sequences: one call per run, not a load and a search per message."""
        self._check()
        ix = self._ix
        out: list[StoredMsg] = []
        if max_msgs <= 0:
            return out
        seq = start_seq if start_seq > ix.first else ix.first
        last = ix.last
        size = 0
        while seq <= last:
            msg = self.load(seq)  # a direct call: mypyc makes it a native one
            if msg is None:
                seq = ix.next_live(seq)
                if not seq:
                    break
                continue
            out.append(msg)
            if len(out) >= max_msgs:
                break
            if max_bytes:
                size += len(msg.subject) + len(msg.data)
                if msg.headers is not None:
                    size += len(msg.headers)
                if size >= max_bytes:
                    break
            seq += 1
        return out

    def load_raw_run(self, start_seq: int, max_msgs: int, max_bytes: int = 0) -> list[RawMsg]:
        """``load_run`` as (seq, subject, headers, data, ts_ns) tuples. The memory store
        keeps message objects anyway; the file store reads its records straight into the
        tuples (``BlockReads.load_raw_run``)."""
        return [
            (m.seq, m.subject, m.headers, m.data, m.ts_ns)
            for m in self.load_run(start_seq, max_msgs, max_bytes)
        ]

    def load_prev(self, seq: int, filters: Filters = None) -> StoredMsg | None:
        """The last message with seq <= ``seq`` matching any of ``filters``."""
        self._check()
        ix = self._ix
        found = ix.prev_seq(seq, ix.select(normalize(filters)))
        return self._read(found) if found else None

    def load_last(self, filters: Filters = None) -> StoredMsg | None:
        return self.load_prev(self._ix.last, filters)

    def last_seq_for_subject(self, subject: str) -> int:
        """Last seq stored on this literal subject, 0 if none (Expected-Last-Subject-Sequence)."""
        ix = self._ix
        sid = ix.sid(subject)
        return ix.subject_last(sid) if sid >= 0 else 0

    def last_seq_matching(self, filters: Filters) -> int:
        ix = self._ix
        return ix.prev_seq(ix.last, ix.select(normalize(filters)))

    def last_seqs_per_subject(self, filters: Filters) -> list[int]:
        """Sorted seqs of the last message of every subject matching ``filters``."""
        ix = self._ix
        return ix.last_seqs(ix.select(normalize(filters)))

    def num_pending(self, start_seq: int, filters: Filters, last_per_subject: bool = False) -> int:
        """Matching messages with seq >= start_seq; with ``last_per_subject``, the number of
        matching subjects whose last message has seq >= start_seq."""
        ix = self._ix
        sel = ix.select(normalize(filters))
        if last_per_subject:
            return ix.count_last_per_subject(start_seq, sel)
        return ix.count(start_seq, sel)

    def seq_for_time(self, ts_ns: int) -> int:
        """First seq stored at or after ts_ns (last_seq + 1 when none)."""
        return self._ix.seq_for_time(ts_ns)

    def bounds(self) -> tuple[int, int]:
        ix = self._ix
        return (ix.first if ix.last else 0), ix.last

    @property
    def last_seq(self) -> int:
        return self._ix.last

    def fingerprint(self) -> tuple[int, int, int]:
        """(first_seq, last_seq, msgs): changes whenever the stored set changes."""
        ix = self._ix
        return (ix.first if ix.last else 0), ix.last, ix.msgs

    def state(self, deleted: bool = False) -> StoreState:
        ix = self._ix
        return StoreState(
            msgs=ix.msgs,
            bytes=ix.bytes,
            first_seq=ix.first if ix.last else 0,
            first_ts_ns=ix.first_ts(),
            last_seq=ix.last,
            last_ts_ns=ix.last_ts,
            num_subjects=ix.num_subjects,
            num_deleted=ix.num_deleted(),
            deleted=tuple(ix.deleted()) if deleted else (),
        )

    def subjects_state(self, filters: Filters = None) -> dict[str, int]:
        """Message count per subject matching ``filters``."""
        ix = self._ix
        return ix.subject_counts(ix.select(normalize(filters)))

    # --- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> Iterator[bytes]:
        """A full dump as chunks of records: FLOOR(first), MSG..., SKIP(last), END(msgs).

        The iterator must be drained before the store changes; it raises StoreError if the
        store changed in between rather than yield an inconsistent snapshot.
        """
        self._check()
        ix = self._ix
        mark = self.fingerprint()
        buf = bytearray()
        rec.append_control(buf, rec.KIND_FLOOR, ix.first, ix.last_ts)
        # Walks the index rather than a list of its sequences: a dump of a large store
        # (streamed to a file by a clustered replica) holds one chunk in memory, not one
        # int per message. The walk resumes only after the fingerprint check below.
        for seq, _c, _i in ix.entries(ix.first, ix.last):
            buf += self._raw_record(seq)
            if len(buf) >= SNAPSHOT_CHUNK:
                yield bytes(buf)
                buf.clear()
                if self.fingerprint() != mark:
                    raise StoreError("stream store changed while a snapshot was read")
        rec.append_control(buf, rec.KIND_SKIP, ix.last, ix.last_ts)
        rec.append_control(buf, rec.KIND_END, ix.msgs, 0)
        yield bytes(buf)

    def _apply_snapshot(self, chunks: Iterable[bytes]) -> None:
        """Load a snapshot into this (empty, fresh) store; raises StoreCorruption when the
        snapshot is damaged or incomplete. Limits are not applied: the snapshot is the truth."""
        ix = self._ix
        pending = bytearray()
        consumed = 0
        ended = False
        for chunk in chunks:
            pending += chunk
            off = 0
            while off < len(pending):
                try:
                    _, kind, rlen, slen, seq, ts, hlen = rec.check_one(pending, off)
                except rec.BadRecord as e:
                    if e.truncated:
                        break
                    raise StoreCorruption("<snapshot>", consumed + off, e.reason) from None
                if ended:
                    raise StoreCorruption("<snapshot>", consumed + off, "data after the end")
                if pending[off + rec.FLAGS_AT] & rec.FLAG_SEALED or kind == rec.KIND_ERASED:
                    raise StoreCorruption("<snapshot>", consumed + off, "not a snapshot record")
                if kind == rec.KIND_MSG:
                    body = bytes(rec.plain_body(pending, off, rlen, None))
                    subj, headers, data = rec.msg_fields(body, slen, hlen)
                    subject = subj.decode()
                    if seq <= ix.last:
                        raise StoreCorruption("<snapshot>", consumed + off, "sequence order")
                    self._append(
                        seq, subject, headers, data, ts, self._size_of(subject, headers, data)
                    )
                elif kind == rec.KIND_FLOOR:
                    ix.compact(seq)
                    ix.last_ts = ts
                    self._compacted()
                elif kind == rec.KIND_SKIP:
                    ix.skip_to(seq)
                    ix.last_ts = ts
                    self._skipped()
                elif kind == rec.KIND_END:
                    if seq != ix.msgs:
                        raise StoreCorruption("<snapshot>", consumed + off, "message count")
                    ended = True
                off += rlen
            del pending[:off]
            consumed += off
        if pending or not ended:
            raise StoreCorruption("<snapshot>", consumed, "snapshot is incomplete")
