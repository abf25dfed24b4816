"""The sink's per-message loops: header blocks of row-index ids, HPUB frames with their
registration in the window, and the check of a run of PubAcks. No sockets, no asyncio.

These loops were about two thirds of a Spark worker's Python time per written row (py-spy of
``benchmarks.spark_sink_partition``), so the optional compiled build compiles this module with
mypyc (setup.py's list); the .py file stays the reference and behaves the same. Everything
in and out is plain data (bytes, ints, lists, dicts, tuples), so the callers (``writer``,
``publish``) stay ordinary Python either way.
"""

from __future__ import annotations

from typing import Any

# What a retry needs: (subject, header block, payload, attempts, ack deadline).
Item = tuple[bytes, bytes, bytes, int, float]
# (subject, reply or b"", header block or b"", payload) of a received message (bulkparse's).
AckFrame = tuple[bytes, bytes, bytes, bytes]


def as_bytes(value: Any) -> bytes:
    """A column value as message bytes: None is empty, text is UTF-8."""
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def payload_list(values: list[Any]) -> list[bytes]:
    """``[as_bytes(v) for v in values]``; ``values`` itself when it holds only bytes (a
    binary Arrow column without nulls, the usual ``data``)."""
    for v in values:
        if type(v) is not bytes:
            return [as_bytes(v) for v in values]
    return values


def id_headers(prefix: bytes, first: int, n: int, extra: bytes) -> list[bytes]:
    """``n`` header blocks whose Nats-Msg-Id is ``prefix`` followed by the row index, from
    ``first``; ``extra`` (header lines, each ending in CRLF) follows the id."""
    out: list[bytes] = []
    append = out.append
    for i in range(first, first + n):
        append(b"NATS/1.0\r\nNats-Msg-Id: %s%d\r\n%s\r\n" % (prefix, i, extra))
    return out


def hpub_frames(
    subjects: list[bytes],
    headers: list[bytes],
    payloads: list[bytes],
    lo: int,
    hi: int,
    budget: int,
    reply_prefix: bytes,
    token: int,
    deadline: float,
    inflight: dict[int, Item],
) -> tuple[bytes, int, int]:
    """HPUB frames for messages ``lo`` up to ``hi`` (excluded), stopping once ``budget``
    bytes of headers and payloads are taken (always at least one message). The message
    sent under token ``token + k`` (reply subject ``reply_prefix`` and that number) is
    registered in ``inflight`` with one attempt and ``deadline``. Returns (frames, message
    count, header and payload bytes); the last token used is ``token`` + the count."""
    parts: list[bytes] = []
    append = parts.append
    size = 0
    i = lo
    while i < hi:
        subject = subjects[i]
        hdr = headers[i]
        data = payloads[i]
        i += 1
        token += 1
        hlen = len(hdr)
        total = hlen + len(data)
        append(
            b"HPUB %s %s%d %d %d\r\n%s%s\r\n"
            % (subject, reply_prefix, token, hlen, total, hdr, data)
        )
        inflight[token] = (subject, hdr, data, 1, deadline)
        size += total
        if size >= budget:
            break
    return b"".join(parts), i - lo, size


class AckRun:
    """What ``take_acks`` made of a run of answers."""

    __slots__ = ("acked", "done", "duplicates", "others", "size")

    def __init__(self) -> None:
        self.acked = 0  # plain successes (new or duplicate)
        self.duplicates = 0  # of which duplicates
        self.done = 0  # messages finished (the plain successes)
        self.size = 0  # their header and payload bytes
        # Answers that are not plain successes, for the caller's slow path, in order:
        # (the message, the answer's header block, the answer's payload).
        self.others: list[tuple[Item, bytes, bytes]] = []


def take_acks(frames: list[AckFrame], inflight: dict[int, Item], skip: int) -> AckRun:
    """Match a run of answers (reply subject ``<inbox>.<token>``, token from ``skip`` on) to
    the messages in flight, taking each out of ``inflight``; an answer whose token is not in
    flight (an attempt already retried under another token) is ignored. A plain success is a
    JSON object without ``"error"``; anything else (statuses, errors, what does not look
    like JSON) goes to ``others`` unread."""
    out = AckRun()
    others = out.others
    acked = dups = size = 0
    for frame in frames:
        subject = frame[0]
        try:
            item = inflight.pop(int(subject[skip:]))
        except (KeyError, ValueError):
            continue
        data = frame[3]
        if not data or data[:1] != b"{" or b'"error"' in data:
            others.append((item, frame[2], data))
            continue
        acked += 1
        if b'"duplicate":true' in data:
            dups += 1
        size += len(item[1]) + len(item[2])
    out.acked = out.done = acked
    out.duplicates = dups
    out.size = size
    return out
