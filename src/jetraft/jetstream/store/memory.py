"""The memory stream store: the shared index plus the message objects themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from jetraft._mypyc import mypyc_attr
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store.types import Limits, StoredMsg, memory_msg_size


@mypyc_attr(allow_interpreted_subclasses=True)
class MemoryStore(BaseStore):
    """Everything in memory; ``sync`` and ``flush`` are no-ops, nothing survives a restart.
    Plain Python may subclass it in the compiled build too (the tests' sources do)."""

    def _size_of(self, subject: str, headers: bytes | None, data: bytes) -> int:
        return memory_msg_size(subject, headers, data)

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(limits or Limits(), file_mode=False)

    def _append(
        self, seq: int, subject: str, headers: bytes | None, data: bytes, ts: int, size: int
    ) -> int:
        if type(data) is not bytes:
            data = bytes(data)
        if headers is not None and type(headers) is not bytes:
            headers = bytes(headers)
        msg = StoredMsg(seq, subject, headers, data, ts)
        return self._ix.append(seq, subject, ts, size, 0, 0, msg)

    def _read(self, seq: int) -> StoredMsg:
        msg = self._ix.obj(seq)
        assert msg is not None
        return msg

    @property
    def needs_sync(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def begin_sync(self) -> Callable[[], None] | None:
        return None

    def restore(self, chunks: Iterable[bytes]) -> None:
        """Replace the content with a snapshot; on a damaged snapshot nothing changes."""
        self._check()
        fresh = type(self)(self._limits)
        fresh._apply_snapshot(chunks)
        self._ix = fresh._ix

    def close(self) -> None:
        self._closed = True

    def abandon(self) -> None:
        self._closed = True

    def delete(self) -> None:
        self._closed = True
        self._ix = type(self._ix)(False)
