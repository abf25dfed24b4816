"""The stream state machine: ``apply(entry) -> result``, deterministic.

Every replica that applies the same entries in the same order ends with the same store, the
same dedupe table and the same answers. Nothing here reads a clock or anything local: message
times and "now" for expiry come inside the entries, stamped by the proposer. The asyncio glue
(subscriptions, group commit, timers, replies) lives in ``jetraft.server``.

Entries (msgspec Structs defined in ``entries`` and re-exported here; ``encode_entry``/
``decode_entry`` give bytes for a log):

* ``StoreMsg``: a publish to one of the stream's subjects. All checks happen here, in nats-
  server's order: sealed, Nats-Expected-Stream, Nats-TTL allowed, Nats-Expected-Last-Subject-
  Sequence(-Subject), Nats-Expected-Last-Sequence, Nats-Msg-Id dedupe, Nats-Expected-Last-Msg-Id,
  Nats-Rollup, max_msg_size, discard=new limits; then the message is stored and rolled up.
  The result is a ``PubAck``.
* ``StoreBatch``: several ``StoreMsg`` in one log entry (a clustered stream leader proposes
  what arrived in one loop turn as one entry); ``apply_batch`` applies them one after the
  other, exactly as the same ``StoreMsg`` entries in a row, with one ``PubAck`` each.
* ``Purge``, ``DeleteMsg``, ``UpdateConfig``: the API operations; the result is ``OpResult``.
* ``Expire(now_ns)``: max_age and per-message TTL expiry.
* ``ConsumerAck(seq)``: a consumer no longer needs ``seq`` (interest / workqueue retention).

Observers (consumers) hear about stored, removed and purged messages after the stream's own
state is updated; they must not re-enter ``apply`` synchronously except through
``on_consumer_ack``, which is idempotent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from jetraft.jetstream import errors as E
from jetraft.jetstream.dedupe import DedupeWindow
from jetraft.jetstream.entries import (
    SOURCED,
    ConsumerAck,
    CopyMsg,
    DeleteMsg,
    Entry,
    Expire,
    LogEntry,
    PubAck,
    Purge,
    Retire,
    StoreBatch,
    StoreMsg,
    UpdateConfig,
    decode_entry,
    decode_log_entry,
    encode_entry,
)
from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.expiry import (
    TtlSchedule,
    expire,
    expire_leaving_markers,
    next_expiry_ns,
    scan,
)
from jetraft.jetstream.publish_headers import (
    EXPECTED_LAST_MSG_ID,
    LONE_MSG_ID,
    MAX_HEADER_LEN,
    MSG_ID,
    MSG_TTL,
    NS_PER_S,
    REQUEST_INFO,
    ROLLUP,
    check_headers,
    lone_msg_id,
    lone_msg_id_in,
    nats_headers,
    parse_ttl_s,
    without_request_info,
)
from jetraft.jetstream.republish import republish_subject, republished
from jetraft.jetstream.retention import (
    RetentionConsumer,
    has_interest,
    remove_unneeded,
    unneeded,
)
from jetraft.jetstream.sourcing import SourcePositions, source_position
from jetraft.jetstream.store.types import ERR_MAX_MSG_SIZE, Limits, StoredMsg, StreamStore
from jetraft.jetstream.stream_config import RePublish, StreamConfig
from jetraft.protocol.transform import SubjectTransform as Transform

# Sequences are uint64 on disk and on the wire, and the first sequence of an emptied stream is
# last + 1, so the last message may take 2**64 - 2. A purge to a huge sequence can bring a
# stream there; from then on publishes are refused (nats-server would wrap around to 0).
MAX_SEQ: Final = 2**64 - 2

# The entries and PubAck live in ``entries`` (a module that is never compiled, see there),
# the header parsing in ``publish_headers``; their names stay importable from here.
__all__ = [
    "LONE_MSG_ID",
    "SOURCED",
    "ConsumerAck",
    "CopyMsg",
    "DeleteMsg",
    "Entry",
    "Expire",
    "LogEntry",
    "OpResult",
    "PubAck",
    "Purge",
    "Result",
    "RetentionConsumer",
    "Retire",
    "StoreBatch",
    "StoreMsg",
    "Stream",
    "UpdateConfig",
    "decode_entry",
    "decode_log_entry",
    "encode_entry",
    "lone_msg_id",
    "lone_msg_id_in",
    "nats_headers",
    "parse_ttl_s",
]


@dataclass(frozen=True, slots=True)
class OpResult:
    ok: bool = True
    count: int = 0
    error: ApiError | None = None


Result = PubAck | OpResult


# --- who the stream talks to ---------------------------------------------------------------


class StreamObserver(Protocol):
    """Told about changes after they happened (consumers keep counts and pending in step)."""

    def on_stored(self, seq: int, subject: str) -> None: ...

    def on_removed(self, seqs: Sequence[int]) -> None: ...

    def on_purged(self, first_seq: int, filter_subject: str) -> None: ...


def limits_of(cfg: StreamConfig) -> Limits:
    return Limits(
        max_msgs=cfg.max_msgs,
        max_bytes=cfg.max_bytes,
        max_age_ns=cfg.max_age,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        max_msg_size=cfg.max_msg_size,
        discard_new=cfg.discard_new,
        discard_new_per_subject=cfg.discard_new_per_subject,
    )


def _copy_seq(e: StoreMsg) -> int:
    """A copy's origin sequence (mirror) or SOURCED; 0 for a publish."""
    return e.seq if isinstance(e, CopyMsg) else 0



# --- the state machine ---------------------------------------------------------------------


class Stream:
    """One stream: its config, its store, and the state apply() keeps beside the store."""

    def __init__(
        self, config: StreamConfig, store: StreamStore, created_ns: int, domain: str = ""
    ) -> None:
        self.config = config
        self.store = store
        self.created_ns = created_ns
        self.domain = domain
        self.consumers: dict[str, RetentionConsumer] = {}
        self._listeners: list[Callable[[int], None]] = []
        self._observers: list[StreamObserver] = []
        self._store_observers: list[StreamObserver] = []  # those told of each stored message
        self._dedupe = DedupeWindow()
        self.last_msg_id = ""
        self._ttl = TtlSchedule()
        self.store.update_limits(limits_of(config))
        # Where stored messages are copied to: set by the runtime on the one server that
        # publishes them (the stream leader); (subject, headers, body).
        self.republisher: Callable[[str, bytes, bytes], None] | None = None
        self._itr: Transform | None = None  # subject_transform
        self._rtr: Transform | None = None  # republish
        self._compile_transforms()
        self.source_positions = SourcePositions()
        # STREAM.INFO's ``mirror``/``sources`` members: set by the runtime that runs them
        # (the stream leader); None elsewhere (the members then show no activity).
        self.source_info: Callable[[], dict[str, Any]] | None = None

    def _compile_transforms(self) -> None:
        self._itr = self.config.input_transform()
        self._rtr = self.config.republish_transform()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_seq(self) -> int:
        return self.store.bounds()[1]

    # --- wiring ----------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[int], None]) -> None:
        """``callback(last_seq)`` after new messages were stored."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[int], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def add_observer(self, observer: StreamObserver, stores: bool = True) -> None:
        """``stores=False``: an observer with nothing to do on ``on_stored`` is not called
        for every stored message (a call through the protocol is a generic one)."""
        self._observers.append(observer)
        if stores:
            self._store_observers.append(observer)

    def observe_stores(self, observer: StreamObserver, stores: bool) -> None:
        """Whether an observer already added is told of each stored message from now on."""
        listed = observer in self._store_observers
        if stores and not listed:
            self._store_observers.append(observer)
        elif listed and not stores:
            self._store_observers.remove(observer)

    def remove_observer(self, observer: StreamObserver) -> None:
        if observer in self._observers:
            self._observers.remove(observer)
        if observer in self._store_observers:
            self._store_observers.remove(observer)

    def add_consumer(self, consumer: RetentionConsumer) -> None:
        self.consumers[consumer.name] = consumer

    def remove_consumer(self, name: str) -> None:
        """Forget a consumer; on an interest stream, messages only it held go."""
        if self.consumers.pop(name, None) is not None and self.config.retention == "interest":
            self.recheck_interest()

    # --- apply -----------------------------------------------------------------------------

    def apply(self, entry: Entry) -> Result:
        if isinstance(entry, StoreMsg):
            return self._apply_msg(entry)
        if isinstance(entry, Purge):
            return self._apply_purge(entry)
        if isinstance(entry, DeleteMsg):
            return self._apply_delete(entry)
        if isinstance(entry, Expire):
            return self._apply_expire(entry.now_ns)
        if isinstance(entry, ConsumerAck):
            return self._apply_consumer_ack(entry.seq)
        if isinstance(entry, Retire):
            return self._apply_retire(entry.seqs)
        return self._apply_config(entry.config)

    def apply_batch(self, batch: StoreBatch, answers: bool = True) -> list[PubAck]:
        """The batch's publishes in order: the same state and answers as applying each
        as its own ``StoreMsg`` entry. ``answers=False``: the answers may be left out
        (an empty list), nobody will read them."""
        msgs = batch.msgs
        if self._plain_run(msgs):
            # _apply_msg's common case for every message: stored in one call to the store.
            # Observers hear of each once all are stored (they only take note, nothing in
            # between looks at the store).
            seq = self.store.store_run(msgs)
            if self._store_observers or self._listeners:
                for k, e in enumerate(msgs):
                    self._stored(seq + k, e.subject, [])
            if not answers:
                return []
            name, domain = self.name, self.domain
            return [PubAck(e.reply, name, seq + k, False, None, domain)
                    for k, e in enumerate(msgs)]
        apply_msg = self._apply_msg
        return [apply_msg(e) for e in msgs]

    def _plain_run(self, msgs: list[StoreMsg]) -> bool:
        """Whether every publish of ``msgs`` takes ``_apply_msg``'s common case (no headers,
        within max_msg_size, limits retention, discard old) and stores no more than that
        (no limit removes a message, no Nats-Msg-Id to forget, sequences left)."""
        cfg = self.config
        store = self.store
        if (cfg.sealed or cfg.retention == "interest" or cfg.discard == "new"
                or self._itr is not None or self._rtr is not None
                or self.last_msg_id or store.prunes_on_store
                or store.last_seq + len(msgs) >= MAX_SEQ):
            return False
        size_limit = cfg.max_msg_size
        if size_limit >= 0:
            return not any(e.hdr or len(e.data) > size_limit for e in msgs)
        return not any(e.hdr for e in msgs)

    def on_consumer_ack(self, seq: int) -> None:
        """A consumer acked (or gave up on) ``seq``: drop it if retention says so."""
        if self.config.retention != "limits":
            self.apply(ConsumerAck(seq))

    # --- publish ---------------------------------------------------------------------------

    def _nack(self, e: StoreMsg, err: ApiError) -> PubAck:
        return PubAck(e.reply, self.name, 0, False, err, self.domain)

    def _transformed(self, e: StoreMsg, itr: Transform) -> StoreMsg:
        """The publish with the stream's subject transform applied (a subject that does not
        match its source is kept). Every replica gets the same answer: the transform comes
        from the config in force at this entry, and ``random()`` draws from a generator
        seeded with the entry's time."""
        rng = random.Random(e.ts_ns) if itr.uses_random else None
        subject = itr.match(e.subject, rng)
        if subject is None or subject == e.subject:
            return e
        if isinstance(e, CopyMsg):
            return CopyMsg(subject, e.reply, e.hdr, e.data, e.ts_ns, e.seq)
        return StoreMsg(subject, e.reply, e.hdr, e.data, e.ts_ns)

    def _apply_msg(self, e: StoreMsg) -> PubAck:
        cfg = self.config
        if cfg.sources or cfg.mirror is not None:
            return self._apply_sourced(e)
        if self._itr is not None:
            e = self._transformed(e, self._itr)
        if (
            e.hdr
            or cfg.sealed
            or cfg.retention == "interest"
            or cfg.discard == "new"
            or self._rtr is not None
        ):
            return self._apply_msg_checked(e)
        # The common case, one call per published message: no headers (so no dedupe, no
        # expectations, no rollup, no TTL), limits retention, discard old. The same
        # decisions as below, in the same order.
        data = e.data
        size_limit = cfg.max_msg_size
        if size_limit >= 0 and len(data) > size_limit:
            return self._nack(e, E.message_exceeds_maximum())
        store = self.store
        if store.last_seq >= MAX_SEQ:
            return self._nack(e, E.store_failed("stream sequence space exhausted"))
        subject = e.subject
        seq, removed = store.store(subject, None, data, e.ts_ns)
        if self.last_msg_id:
            self._remember("", seq, e.ts_ns)
        self._stored(seq, subject, removed)
        return PubAck(e.reply, self.name, seq, False, None, self.domain)

    def stored_headers_newest_first(self) -> Iterator[bytes | None]:
        store = self.store
        msg = store.load_last()
        while msg is not None:
            yield msg.hdr
            msg = store.load_prev(msg.seq - 1) if msg.seq > 1 else None

    def _apply_sourced(self, e: StoreMsg) -> PubAck:
        """A message of a mirror or of a sourcing stream: one the stream holds already (a
        leader change or a restart read it again) is answered as a duplicate, not stored."""
        if self.config.mirror is not None:
            return self._apply_mirrored(e)
        pos = source_position(e.hdr) if _copy_seq(e) == SOURCED else None
        sp = self.source_positions
        if pos is not None and sp.is_duplicate(
            self.config, pos, self.stored_headers_newest_first
        ):
            return PubAck(e.reply, self.name, self.last_seq, True, None, self.domain)
        if self._itr is not None:
            e = self._transformed(e, self._itr)
        ack = self._apply_msg_checked(e)
        if pos is not None and ack.error is None:
            sp.advance(pos)
        return ack

    def _apply_mirrored(self, e: StoreMsg) -> PubAck:
        """A mirror stores at the origin's sequence: below or at its last one is a message it
        holds; a gap before it is skipped, so the sequences stay the origin's."""
        store = self.store
        last = store.last_seq
        seq = _copy_seq(e) or last + 1
        if seq <= last:
            return PubAck(e.reply, self.name, seq, True, None, self.domain)
        if seq > last + 1:
            store.skip_msgs(last + 1, seq - last - 1)
        stored, removed = store.store(e.subject, e.hdr or None, e.data, e.ts_ns)
        self._stored(stored, e.subject, removed)
        return PubAck(e.reply, self.name, stored, False, None, self.domain)

    def _stored(self, seq: int, subject: str, removed: list[int]) -> None:
        """A message is stored at `seq`: tell what the limits removed to make room, then
        the observers (consumers) and listeners (waiters on new messages)."""
        if removed:
            self._tell_removed(removed)
        for obs in self._store_observers:
            obs.on_stored(seq, subject)
        for cb in self._listeners:
            cb(seq)

    def _apply_msg_checked(self, e: StoreMsg) -> PubAck:
        """A publish with headers, or to a stream whose config needs more checks."""
        cfg = self.config
        if cfg.sealed:
            return self._nack(e, E.stream_sealed())
        hdr = e.hdr or None
        msg_id = ""
        rollup = ""
        ttl_s = 0
        h = nats_headers(hdr) if hdr else None
        if h:
            err = check_headers(cfg, self.store, e.subject, _copy_seq(e) == SOURCED, h)
            if err is not None:
                return self._nack(e, err)
            msg_id = h.get(MSG_ID, "")
            if msg_id:
                self._dedupe.prune(e.ts_ns, cfg.duplicate_window)
                seen = self._dedupe.ids.get(msg_id)
                if seen is not None:
                    return PubAck(e.reply, self.name, seen, True, None, self.domain)
            expected_id = h.get(EXPECTED_LAST_MSG_ID)
            if expected_id is not None and expected_id != self.last_msg_id:
                return self._nack(e, E.wrong_last_msg_id(self.last_msg_id))
            rollup = h.get(ROLLUP, "").lower()
            if rollup:
                if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                    return self._nack(e, E.rollup_failed("rollup not permitted"))
                if rollup not in ("sub", "all"):
                    return self._nack(e, E.rollup_failed(f'rollup value invalid: "{rollup}"'))
            if REQUEST_INFO in h and hdr is not None:
                hdr = without_request_info(hdr)  # not part of the message (nats-server)
        size_limit = cfg.max_msg_size
        hlen = len(hdr) if hdr else 0
        if size_limit >= 0 and (hlen > size_limit or len(e.data) > size_limit - hlen):
            return self._nack(e, E.message_exceeds_maximum())
        if hlen > MAX_HEADER_LEN:
            return self._nack(e, E.api_error(10097))
        if self.last_seq >= MAX_SEQ:
            return self._nack(e, E.store_failed("stream sequence space exhausted"))
        if cfg.retention == "interest" and not has_interest(self.consumers.values(), e.subject):
            # Nobody would ever consume it: burn the sequence, keep nothing (nats-server).
            seq = self.last_seq + 1
            self.store.skip_msgs(seq, 1)
            self._remember(msg_id, seq, e.ts_ns)
            return PubAck(e.reply, self.name, seq, False, None, self.domain)
        if h:
            ttl_text = h.get(MSG_TTL)
            if ttl_text is not None:
                try:
                    ttl_s = parse_ttl_s(ttl_text)
                except ApiError as err:
                    return self._nack(e, err)
        if cfg.discard == "new":
            refusal = self.store.would_exceed(e.subject, hdr, e.data, bool(rollup))
            if refusal is not None:
                if refusal == ERR_MAX_MSG_SIZE:
                    return self._nack(e, E.message_exceeds_maximum())
                return self._nack(e, E.store_failed(refusal))
        republish = self._republish_subject(e.subject)
        prev = self.store.last_seq_for_subject(e.subject) if republish else 0
        seq, removed = self.store.store(e.subject, hdr, e.data, e.ts_ns)
        if msg_id or self.last_msg_id:
            self._remember(msg_id, seq, e.ts_ns)
        if ttl_s:
            self._ttl.add(seq, e.ts_ns, ttl_s)
        if rollup == "sub":
            self._purge_quietly(e.subject, keep=1)
        elif rollup == "all":
            self._purge_quietly("", keep=1)
        self._stored(seq, e.subject, removed)
        if republish:
            self._republish(republish, e, hdr, seq, prev)
        return PubAck(e.reply, self.name, seq, False, None, self.domain)

    def _republish_subject(self, subject: str) -> str:
        """Where a message stored on ``subject`` is republished ('' for nowhere: not the
        publishing server, or see ``republish_subject``)."""
        if self.republisher is None:
            return ""
        return republish_subject(self._rtr, subject)

    def _republish(self, to: str, e: StoreMsg, hdr: bytes | None, seq: int, prev: int) -> None:
        """Hand the copy of a stored message to the republisher (see ``republish``)."""
        rp = self.config.republish
        publish = self.republisher
        if not isinstance(rp, RePublish) or publish is None:
            return
        copy_hdr, copy_data = republished(rp, self.name, e, hdr, seq, prev)
        publish(to, copy_hdr, copy_data)

    def _remember(self, msg_id: str, seq: int, ts_ns: int) -> None:
        self.last_msg_id = msg_id
        if msg_id and self.config.duplicate_window > 0:
            self._dedupe.remember(msg_id, seq, ts_ns)

    # --- API operations --------------------------------------------------------------------

    def _apply_purge(self, e: Purge) -> OpResult:
        cfg = self.config
        if cfg.sealed:
            return OpResult(False, 0, E.stream_sealed())
        if cfg.deny_purge:
            return OpResult(False, 0, E.purge_failed("stream purge not permitted"))
        purged = self._purge_quietly(e.filter, e.seq, e.keep)
        return OpResult(True, purged)

    def _purge_quietly(self, filter_subject: str, upto_seq: int = 0, keep: int = 0) -> int:
        purged = self.store.purge(filter_subject or None, upto_seq, keep)
        if purged or upto_seq:
            first = self.store.bounds()[0]
            for obs in self._observers:
                obs.on_purged(first, filter_subject)
        return purged

    def _apply_delete(self, e: DeleteMsg) -> OpResult:
        cfg = self.config
        if cfg.sealed:
            return OpResult(False, 0, E.stream_sealed())
        if cfg.deny_delete:
            return OpResult(False, 0, E.msg_delete_failed("message delete not permitted"))
        if e.seq <= 0 or e.seq > self.last_seq:
            return OpResult(False, 0, E.msg_delete_failed("stream store EOF"))
        # Secure erase (the default) also overwrites the message's bytes on disk.
        removed = self.store.remove(e.seq) if e.no_erase else self.store.erase(e.seq)
        if not removed:
            if e.seq < self.store.bounds()[0]:
                return OpResult(False, 0, E.msg_delete_failed("no message found"))
            return OpResult(False, 0, E.api_error(10043, seq=e.seq))
        self._tell_removed([e.seq])
        return OpResult(True, 1)

    def _apply_config(self, cfg: StreamConfig) -> OpResult:
        old = self.config
        self.config = cfg
        self._compile_transforms()
        self._dedupe.prune_due = -1  # the window may have changed
        if cfg.sources != old.sources:
            self.source_positions.reset()
        removed = self.store.update_limits(limits_of(cfg))
        if removed:
            self._tell_removed(removed)
        if cfg.retention == "interest" and old.retention != "interest":
            self.recheck_interest()
        return OpResult(True, len(removed))

    def _apply_expire(self, now_ns: int) -> OpResult:
        marker_ttl_s = self.config.subject_delete_marker_ttl // NS_PER_S
        max_age = self.config.max_age
        if marker_ttl_s > 0:
            gone = expire_leaving_markers(self.store, self._ttl, now_ns, max_age, marker_ttl_s,
                                          self._tell_removed, self._stored)
            return OpResult(True, gone)
        removed = expire(self.store, self._ttl, now_ns, max_age)
        if removed:
            self._tell_removed(removed)
        return OpResult(True, len(removed))

    def _apply_consumer_ack(self, seq: int) -> OpResult:
        retention = self.config.retention
        if retention == "limits":
            return OpResult(True, 0)
        msg = self.store.load(seq)
        if msg is None:
            return OpResult(True, 0)
        if retention == "interest":
            for c in self.consumers.values():
                if c.needs_ack(seq, msg.subject):
                    return OpResult(True, 0)
        if self.store.remove(seq):
            self._tell_removed([seq])
            return OpResult(True, 1)
        return OpResult(True, 0)

    def _apply_retire(self, seqs: Sequence[int]) -> OpResult:
        removed = [seq for seq in seqs if self.store.remove(seq)]
        if removed:
            self._tell_removed(removed)
        return OpResult(True, len(removed))

    def unneeded(self, seqs: Iterable[int]) -> list[int]:
        """Of ``seqs``, those still stored that retention lets go (no consumer needs them)."""
        if self.config.retention == "limits":
            return []
        return unneeded(self.store, self.consumers.values(), seqs)

    def recheck_interest(self) -> int:
        """Interest retention: drop every message no consumer needs (after a consumer went
        away or the policy changed). Returns how many were removed."""
        if self.config.retention != "interest":
            return 0
        removed = remove_unneeded(self.store, self.consumers.values())
        if removed:
            self._tell_removed(removed)
        return len(removed)

    def _tell_removed(self, seqs: Sequence[int]) -> None:
        for obs in self._observers:
            obs.on_removed(seqs)

    # --- time ------------------------------------------------------------------------------

    def next_expiry_ns(self) -> int | None:
        """When the next Expire entry would remove something (None: nothing to expire)."""
        return next_expiry_ns(self.store, self._ttl, self.config.max_age)

    # --- recovery --------------------------------------------------------------------------

    def beside_store(self) -> tuple[list[tuple[str, int, int]], str, list[tuple[int, int]]]:
        """What apply() keeps beside the store, for a replica's snapshot: the dedupe window
        ((msg id, seq, ts) oldest first), the last Nats-Msg-Id, the TTL schedule. It cannot
        be rebuilt from the store alone: messages that left the store still dedupe."""
        dedupe = self._dedupe.entries()
        ttl = self._ttl.entries(self.store.bounds()[0])
        return dedupe, self.last_msg_id, ttl

    def reload(
        self,
        config: StreamConfig,
        dedupe: list[tuple[str, int, int]],
        last_msg_id: str,
        ttl: list[tuple[int, int]],
    ) -> None:
        """The store's content was replaced by a snapshot's: take the snapshot's config and
        the state it kept beside the store (see ``beside_store``)."""
        self.config = config
        self._compile_transforms()
        self.source_positions.reset()
        self.store.update_limits(limits_of(config))
        self._dedupe.load(dedupe)
        self.last_msg_id = last_msg_id
        self._ttl.load(ttl)

    def recover(self) -> None:
        """Rebuild what lives beside the store after a restart: the dedupe window (from the
        messages stored within it), the last Nats-Msg-Id, and the TTL schedule."""
        first, last = self.store.bounds()
        if not last or first > last:
            return
        last_msg = self.store.load_last()
        if last_msg is not None and last_msg.headers:
            self.last_msg_id = nats_headers(last_msg.headers).get(MSG_ID, "")
        window = self.config.duplicate_window
        if window > 0 and last_msg is not None:
            start = self.store.seq_for_time(last_msg.ts_ns - window)
            for msg in scan(self.store, start):
                if msg.headers:
                    msg_id = nats_headers(msg.headers).get(MSG_ID)
                    if msg_id:
                        self._dedupe.remember(msg_id, msg.seq, msg.ts_ns)
        if self.config.allow_msg_ttl:
            for msg in scan(self.store, first):
                self._ttl.add_stored(msg)

    def _scan(self, start_seq: int) -> Iterable[StoredMsg]:
        return scan(self.store, start_seq)

    def beside_store_len(self) -> int:
        """How many entries ``beside_store`` holds (dedupe window and TTL schedule)."""
        return len(self._dedupe) + len(self._ttl)
