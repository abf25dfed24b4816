"""The publish whose only header is its Nats-Msg-Id, decided without building the entry.

That is what the Spark sink and nats.py's ``js.publish`` send, and on a stream whose config
adds no check to such a message (``takes_lone_ids``) the decisions of
``Stream._apply_msg_checked`` reduce to: dedupe, max_msg_size, the header and sequence
limits, store, remember the id. ``store_lone_id`` takes them in that order on the publish's
body as it arrived (header block and payload in one piece, which the file store writes
whole: ``StreamStore.store_body``), with no ``StoreMsg``, header dict or ``PubAck`` per
message. Anything it would refuse it leaves to ``Stream.apply`` untouched, so refusals and
their errors have one code path.

These are functions over a ``Stream``'s state rather than its methods only to keep
``stream.py`` a readable size; they belong to the state machine and touch its private
state as its methods do (the compiled build calls them directly, as methods).
"""

from __future__ import annotations

from jetraft.jetstream.publish_headers import MAX_HEADER_LEN
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.stream import MAX_SEQ, Stream


def takes_lone_ids(stream: Stream) -> bool:
    """Whether ``store_lone_id`` may decide publishes to ``stream``: its config adds no check
    to a message carrying only a Nats-Msg-Id (not sealed, limits retention, discard old, no
    subject transform, no republish)."""
    cfg = stream.config
    return (
        not cfg.sealed
        and cfg.retention == "limits"
        and cfg.discard != "new"
        and stream._itr is None
        and stream._rtr is None
    )


def store_lone_id(
    stream: Stream, subject: str, body: bytes, hdr_len: int, msg_id: str, ts_ns: int
) -> int:
    """Apply ``StoreMsg(subject, _, body[:hdr_len], body[hdr_len:], ts_ns)`` whose header
    block is the lone ``msg_id`` (``publish_headers.lone_msg_id_in``; ``hdr_len`` > 0) to a
    stream that ``takes_lone_ids``. Returns the new sequence; minus the sequence the id was
    stored at for a duplicate; 0 for a refusal, which the caller leaves to ``apply``
    (nothing was changed). One int rather than a tuple: no object per publish."""
    cfg = stream.config
    window = stream._dedupe
    dd = window.ids
    if msg_id:
        if dd and ts_ns > window.prune_due:
            window.prune(ts_ns, cfg.duplicate_window)
        seen = dd.get(msg_id)
        if seen is not None:
            return -seen
    size_limit = cfg.max_msg_size
    # The order of _apply_msg_checked: the message's size (header block and payload, which
    # is the body's length), then the header block's own limit, then the sequence space.
    if size_limit >= 0 and len(body) > size_limit:
        return 0
    if hdr_len > MAX_HEADER_LEN:
        return 0
    store = stream.store
    if isinstance(store, BaseStore):
        # The stores of this package: a direct call in the compiled build. Through the
        # StreamStore protocol it is a generic Python call with its arguments boxed, and so
        # it is on ``store`` even here: mypy narrows it to "a BaseStore that is also a
        # StreamStore", which mypyc does not know as a native class; a variable declared
        # BaseStore it does.
        base: BaseStore = store
        if base.last_seq >= MAX_SEQ:
            return 0
        seq, removed = base.store_body(subject, body, hdr_len, ts_ns)
    else:
        if store.last_seq >= MAX_SEQ:
            return 0
        seq, removed = store.store_body(subject, body, hdr_len, ts_ns)
    stream.last_msg_id = msg_id
    if msg_id and cfg.duplicate_window > 0:
        # DedupeWindow.add_new inline (the id was looked up above: it is new).
        dd[msg_id] = seq
        window.order.append(msg_id)
        window.times.append(ts_ns)
    stream._stored(seq, subject, removed)
    return seq
