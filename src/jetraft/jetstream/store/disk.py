"""The storage seam of JetStream's files: the RAFT WAL's ``Disk`` plus what a message store
needs beyond appending (random reads, in-place overwrite for secure erase, removing a
directory). ``OsDisk`` is the real file system; ``MemDisk`` is the crash-modelling fake the
power-loss tests use (unsynced writes dropped, torn last writes, flipped bytes).

Durability rules are the WAL's (see ``jetraft.raft.disk``): appended or overwritten bytes are
durable once the file was synced; creating, renaming or removing a name once its directory
was synced; ``write_atomic`` and ``makedirs`` on return.
"""

from __future__ import annotations

import os
from typing import Protocol

from jetraft.raft.disk import AppendFile, Disk, MemDisk, OsDisk, ReadFile, SimulatedCrash

__all__ = [
    "AppendFile",
    "MemDisk",
    "OsDisk",
    "ReadFile",
    "SimulatedCrash",
    "StoreDisk",
    "remove_dir",
]


class StoreDisk(Disk, Protocol):
    def open_read(self, path: str) -> ReadFile: ...

    def overwrite(self, path: str, offset: int, data: bytes) -> None: ...

    def rmdir(self, dirname: str) -> None: ...


def remove_dir(disk: StoreDisk, dirname: str) -> None:
    """Remove a directory of plain files durably: the files go first (the directory synced,
    so the removal is durable even if the directory itself survives a crash), then the
    directory and its parent's entry. A missing directory is not an error."""
    if not disk.exists(dirname):
        return
    for name in disk.list(dirname):
        disk.remove(os.path.join(dirname, name))
    disk.sync_dir(dirname)
    disk.rmdir(dirname)
    disk.sync_dir(os.path.dirname(dirname) or ".")


OS_DISK: StoreDisk = OsDisk()
"""The shared real-file-system disk (it holds no state)."""
