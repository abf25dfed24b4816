"""Values, errors and the ``StreamStore`` protocol shared by the memory and file stores.

Contracts every implementation keeps (the parametrized tests check them on both):

* Single-threaded and synchronous. Nothing reads a clock: message timestamps and ``now_ns``
  come from the caller (the stream state machine), so every replica that applies the same
  operations in the same order holds the same store.
* Sequences only grow. ``last_seq`` never goes down (removing the last message leaves a
  deleted sequence behind, as in nats-server); an empty store has ``first_seq = last_seq + 1``
  (reported as ``first_seq = 0`` until anything was ever stored or skipped).
* Limits: ``store()`` applies ``max_msgs_per_subject`` always and ``max_msgs``/``max_bytes``
  only with discard=old; discard=new is the caller's check through ``would_exceed()`` before
  ``store()``. ``max_age`` is applied by ``expire(now_ns)`` only.
* Durability (file store): nothing is durable until ``sync()`` returned; ``sync()`` makes
  everything stored, removed or purged before it durable with one fsync (group commit).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import msgspec

# discard=new refusals, the exact texts nats-server returns (error 10077 at the API).
ERR_MAX_MSGS = "maximum messages exceeded"
ERR_MAX_BYTES = "maximum bytes exceeded"
ERR_MAX_MSGS_PER_SUBJECT = "maximum messages per subject exceeded"
# The stream layer answers this one with error 10054 (any discard policy).
ERR_MAX_MSG_SIZE = "message size exceeds maximum allowed"

Filters = str | Sequence[str] | None
"""A filter argument: None, "" or ">" (everything), one filter, or several (union)."""


class StoreError(Exception):
    """The store cannot do what was asked (closed, failed write, bad argument)."""


class StoreClosed(StoreError):
    pass


class StoreCorruption(StoreError):
    """A record failed its checksum or framing somewhere other than a torn tail.

    The store never drops or deletes such data by itself; the replica has to be repaired
    (from peers or by an operator). ``path`` and ``offset`` locate the first bad byte.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"corrupt stream store record in {path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


def file_msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """nats-server's file store accounting: record length + seq + ts + subject length + hash."""
    if headers:
        return 34 + len(subject) + len(headers) + len(data)
    return 30 + len(subject) + len(data)


def memory_msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """nats-server's memory store accounting: payload plus 16 for seq and timestamp."""
    return 16 + len(subject) + (len(headers) if headers else 0) + len(data)


RawMsg = tuple[int, str, bytes | None, bytes, int]
"""(seq, subject, headers or None, data, ts_ns): a stored message's fields without the
message object, what ``load_raw_run`` returns (the batch reads' per-row cost)."""


class StoredMsg(msgspec.Struct, frozen=True):
    """One stored message (a Struct: one is made per read, and building a frozen dataclass
    costs several times as much)."""

    seq: int
    subject: str
    headers: bytes | None  # the raw "NATS/1.0\r\n...\r\n\r\n" block, None when absent
    data: bytes
    ts_ns: int

    @property
    def hdr(self) -> bytes | None:
        """Alias of ``headers`` (the consumer side's ``Msg`` protocol uses this name)."""
        return self.headers


@dataclass(frozen=True, slots=True)
class StoreState:
    msgs: int
    bytes: int
    first_seq: int
    first_ts_ns: int  # 0 when empty
    last_seq: int
    last_ts_ns: int  # time of the last message ever stored (kept after it is removed)
    num_subjects: int
    num_deleted: int  # sequences in [first_seq, last_seq] without a message
    deleted: tuple[int, ...] = ()  # only filled by state(deleted=True)


@dataclass(frozen=True, slots=True)
class Limits:
    """The stream config values the store enforces (-1 / 0 = unlimited, as in the config)."""

    max_msgs: int = -1
    max_bytes: int = -1
    max_age_ns: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard_new: bool = False
    discard_new_per_subject: bool = False


class PlainMsg(Protocol):
    """A message without headers, as ``StreamStore.store_run`` takes it (a stream entry)."""

    @property
    def subject(self) -> str: ...

    @property
    def data(self) -> bytes: ...

    @property
    def ts_ns(self) -> int: ...


@runtime_checkable
class StreamStore(Protocol):
    """What the stream, consumers, KV, direct get, purge and RAFT snapshots use."""

    # --- writing ---------------------------------------------------------------------------
    def store(
        self, subject: str, headers: bytes | None, data: bytes, ts_ns: int
    ) -> tuple[int, list[int]]:
        """Append; returns (new seq, seqs removed by per-subject / discard-old limits)."""
        ...

    def store_body(
        self, subject: str, body: bytes, hdr_len: int, ts_ns: int
    ) -> tuple[int, list[int]]:
        """``store(subject, body[:hdr_len] or None, body[hdr_len:], ts_ns)`` (no headers
        when ``hdr_len`` is -1): a publish's header block and payload as they arrived."""
        ...

    def store_run(self, msgs: Sequence[PlainMsg]) -> int:
        """``store(m.subject, None, m.data, m.ts_ns)`` for each message, in order, in one
        call (a batch of publishes); returns the seq of the first. Only on a store whose
        limits remove nothing to make room (``prunes_on_store`` False)."""
        ...

    @property
    def prunes_on_store(self) -> bool:
        """Whether a store may remove older messages (max_msgs, max_bytes, per subject)."""
        ...

    def would_exceed(
        self, subject: str, headers: bytes | None, data: bytes, rollup: bool = False
    ) -> str | None:
        """The ERR_* text of the limit this message would break (discard=new, max_msg_size)."""
        ...

    def skip_msgs(self, seq: int, count: int = 1) -> None:
        """Consume ``count`` sequences starting at ``seq`` (== last_seq + 1) without messages."""
        ...

    def remove(self, seq: int) -> bool: ...

    def erase(self, seq: int) -> bool:
        """``remove`` that also overwrites the message's bytes on disk (secure erase)."""
        ...

    def purge(self, filter_subject: str | None = None, upto_seq: int = 0, keep: int = 0) -> int:
        """nats-server PurgeEx: ``upto_seq`` removes below it; ``keep`` retains the newest n."""
        ...

    def expire(self, now_ns: int, keep: Collection[int] = ()) -> list[int]:
        """Remove what max_age lets go from the front, except the sequences in ``keep``."""
        ...

    def oldest_ts(self, keep: Collection[int] = ()) -> int:
        """The timestamp of the oldest stored message not in ``keep`` (0: none)."""
        ...

    def update_limits(self, limits: Limits) -> list[int]: ...

    @property
    def limits(self) -> Limits: ...

    # --- reading ---------------------------------------------------------------------------
    def load(self, seq: int) -> StoredMsg | None: ...

    def contains(self, seq: int) -> bool: ...

    def load_next(self, start_seq: int, filters: Filters = None) -> StoredMsg | None: ...

    def load_run(self, start_seq: int, max_msgs: int, max_bytes: int = 0) -> list[StoredMsg]:
        """Up to ``max_msgs`` live messages from ``start_seq`` on, as repeated unfiltered
        ``load_next`` calls would return them; stops after the one that brings their size
        (subject, headers, data) to ``max_bytes`` (0: no byte bound)."""
        ...

    def load_raw_run(self, start_seq: int, max_msgs: int, max_bytes: int = 0) -> list[RawMsg]:
        """``load_run``'s messages as (seq, subject, headers, data, ts_ns) tuples, the same
        fields, bounds and checks (a damaged record raises ``StoreCorruption`` alike)."""
        ...

    def load_prev(self, seq: int, filters: Filters = None) -> StoredMsg | None: ...

    def load_last(self, filters: Filters = None) -> StoredMsg | None: ...

    def last_seq_for_subject(self, subject: str) -> int: ...

    def last_seq_matching(self, filters: Filters) -> int: ...

    def last_seqs_per_subject(self, filters: Filters) -> list[int]: ...

    def num_pending(
        self, start_seq: int, filters: Filters, last_per_subject: bool = False
    ) -> int: ...

    def seq_for_time(self, ts_ns: int) -> int: ...

    def state(self, deleted: bool = False) -> StoreState: ...

    def subjects_state(self, filters: Filters = None) -> dict[str, int]: ...

    def bounds(self) -> tuple[int, int]: ...

    @property
    def last_seq(self) -> int:
        """The last sequence stored or skipped (0 when none): ``bounds()[1]``, cheaper."""
        ...

    def fingerprint(self) -> tuple[int, int, int]: ...

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def needs_sync(self) -> bool: ...

    @property
    def deferred_work(self) -> bool:
        """Durable-after-the-next-sync work is waiting for another sync round (the file
        store overwrites an erased record only once its delete record is durable)."""
        ...

    def flush(self) -> None: ...

    def sync(self) -> None: ...

    def begin_sync(self) -> Callable[[], None] | None:
        """Split ``sync()``: write now, return the fsync half for a worker thread."""
        ...

    def snapshot(self) -> Iterator[bytes]: ...

    def restore(self, chunks: Iterable[bytes]) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None:
        """Close without writing anything more (the stream is being deleted)."""
        ...

    def delete(self) -> None: ...
