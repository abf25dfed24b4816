"""Pure planning: offsets, read bounds and partition ranges (no sockets, no Spark).

Offsets are JSON dicts ``{"seq": N}`` where N is the next stream sequence to read, so a
micro-batch ``(start, end)`` covers sequences ``start.seq .. end.seq - 1``. They live in Spark's
checkpoint, never in a server-side consumer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SeqRange:
    """Inclusive sequence range one Spark partition reads."""

    index: int
    start: int
    end: int


def offset(seq: int) -> dict[str, int]:
    return {"seq": int(seq)}


def offset_seq(value: dict[str, object] | None, name: str = "offset") -> int:
    """The sequence in an offset dict; ValueError for anything else (a foreign checkpoint)."""
    if not isinstance(value, dict) or "seq" not in value:
        raise ValueError(f"{name} {value!r} is not a jetstream offset (expected {{'seq': N}})")
    seq = value["seq"]
    if not isinstance(seq, int) or seq < 0:
        raise ValueError(f"{name} {value!r} has a bad sequence")
    return seq


def split_ranges(
    start: int, end: int, min_partitions: int, max_records_per_partition: int
) -> list[SeqRange]:
    """Cut ``[start, end]`` (inclusive) into contiguous, near-equal ranges.

    As many ranges as needed so none is longer than ``max_records_per_partition``, and at
    least ``min_partitions`` (never more ranges than sequences).
    """
    if end < start:
        return []
    total = end - start + 1
    count = max(min_partitions, math.ceil(total / max_records_per_partition))
    count = max(1, min(count, total))
    base, extra = divmod(total, count)
    out: list[SeqRange] = []
    lo = start
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(SeqRange(i, lo, lo + size - 1))
        lo += size
    return out


def capped_end(start: int, latest_next: int, max_per_trigger: int | None) -> int:
    """End offset of the next micro-batch: the stream's next sequence, capped by the limit,
    never before ``start`` (a purged or recreated stream must not move offsets backwards)."""
    end = latest_next
    if max_per_trigger is not None:
        end = min(end, start + max_per_trigger)
    return max(end, start)


@dataclass(frozen=True, slots=True)
class Admission:
    """How much of what is available the next micro-batch takes (Kafka's trigger options).

    ``max_rows`` caps a batch; ``min_rows`` holds a batch back until that many sequences are
    waiting or ``max_delay_s`` has passed since the last batch was admitted (so a quiet stream
    is still read, just later). Both count sequences, as Kafka's options count offsets.
    """

    max_rows: int | None = None
    min_rows: int | None = None
    max_delay_s: float = 900.0

    def end(self, start: int, latest_next: int, waited_s: float) -> int:
        """End offset for a batch from ``start``; ``start`` itself means "no batch now"."""
        end = capped_end(start, latest_next, self.max_rows)
        held = self.min_rows is not None and end - start < self.min_rows
        return start if held and waited_s < self.max_delay_s else end
