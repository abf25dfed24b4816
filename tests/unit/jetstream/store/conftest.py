"""One harness, every store: each test taking ``h`` runs against the memory store, the file
store on the real disk, the file store on the crash-modelling ``MemDisk`` of the storage seam,
and the encrypted file store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jetraft.jetstream.store import FileStore, Limits, MemoryStore
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.disk import MemDisk, StoreDisk
from jetraft.jetstream.store.types import file_msg_size, memory_msg_size


class Harness:
    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root / "stream"
        self.store: BaseStore | None = None
        self.block_size = 2048  # small, so multi-block paths run in every test
        self.disk: StoreDisk | None = MemDisk() if kind == "file-memdisk" else None
        self.cipher = RecordCipher(b"k" * 32, "aes") if kind == "file-sealed" else None

    def _file(self, limits: Limits | None) -> FileStore:
        root = "/stream" if self.disk is not None else self.root
        return FileStore(
            root, limits, block_size=self.block_size, disk=self.disk, cipher=self.cipher
        )

    def open(self, limits: Limits | None = None) -> BaseStore:
        if self.kind == "memory":
            self.store = MemoryStore(limits)
        else:
            self.store = self._file(limits)
        return self.store

    def reopen(self) -> BaseStore:
        """File: close and open again (a clean restart). Memory: the same store."""
        assert self.store is not None
        if self.kind == "memory":
            return self.store
        limits = self.store.limits
        self.store.close()
        self.store = self._file(limits)
        return self.store

    def size(self, subject: str, headers: bytes | None, data: bytes) -> int:
        size_of = memory_msg_size if self.kind == "memory" else file_msg_size
        return size_of(subject, headers, data)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


@pytest.fixture(params=["memory", "file", "file-memdisk", "file-sealed"])
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(request.param, tmp_path)
    yield harness
    harness.close()
