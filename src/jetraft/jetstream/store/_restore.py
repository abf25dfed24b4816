"""Replacing a file store's content with a snapshot, crash-safely, through the storage seam.

1. The snapshot is written into a fresh store in ``<root>/restore.tmp/`` whose block indexes
   start above the current ones, verified and synced. A damaged snapshot raises there and
   the current content is untouched (the temporary store is removed).
2. ``restore.tmp/DONE`` (holding the first new block index) is written atomically: from here
   on the restore rolls forward, whatever happens.
3. ``settle_restore`` (also run on every open): the old blocks (below that index) are removed
   and the directory synced, then the new blocks are renamed into ``msgs/`` and the
   directories synced, then ``restore.tmp`` goes. Every step can be repeated after a crash.
   Without ``DONE`` a leftover ``restore.tmp`` is an unfinished restore and is removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol

from jetraft.jetstream.store._blocks import BLOCK_RE
from jetraft.jetstream.store._recovery import MSGS_DIR
from jetraft.jetstream.store.disk import StoreDisk, remove_dir

RESTORE_DIR = "restore.tmp"
RESTORE_DONE = "DONE"


class _Target(Protocol):
    def _apply_snapshot(self, chunks: Iterable[bytes]) -> None: ...

    def checkpoint(self, index: int, state: bytes) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


def restore_into(
    disk: StoreDisk,
    root: str,
    first_block: int,
    open_store: Callable[[str, int], _Target],
    chunks: Iterable[bytes],
    checkpoint: tuple[int, bytes] | None = None,
) -> bool:
    """Steps 1 and 2; True once the restore is committed to roll forward. ``checkpoint``
    is appended after the snapshot's records (see ``FileStore.checkpoint``)."""
    tmp = os.path.join(root, RESTORE_DIR)
    _discard(disk, tmp)
    target = open_store(tmp, first_block)
    try:
        target._apply_snapshot(chunks)
        if checkpoint is not None:
            target.checkpoint(*checkpoint)
        target.close()
    except BaseException:
        target.abandon()
        _discard(disk, tmp)
        raise
    disk.write_atomic(os.path.join(tmp, RESTORE_DONE), str(first_block).encode())
    return True


def settle_restore(disk: StoreDisk, root: str) -> None:
    """Finish (``DONE`` present) or drop (absent) a restore; see the module doc."""
    tmp = os.path.join(root, RESTORE_DIR)
    if not disk.exists(tmp):
        return
    done = os.path.join(tmp, RESTORE_DONE)
    if disk.exists(done):
        first = int(disk.read(done).decode() or "0")
        msgs = os.path.join(root, MSGS_DIR)
        staged = os.path.join(tmp, MSGS_DIR)
        disk.makedirs(msgs)
        for name in disk.list(msgs):
            m = BLOCK_RE.match(name)
            if (m and int(m.group(1)) < first) or name.endswith(".tmp"):
                disk.remove(os.path.join(msgs, name))
        disk.sync_dir(msgs)
        if disk.exists(staged):
            for name in disk.list(staged):
                if BLOCK_RE.match(name):
                    disk.rename(os.path.join(staged, name), os.path.join(msgs, name))
            disk.sync_dir(msgs)
            disk.sync_dir(staged)
    _discard(disk, tmp)


def _discard(disk: StoreDisk, tmp: str) -> None:
    """Remove a (possibly partial) restore directory: its msgs/, its files, itself."""
    if not disk.exists(tmp):
        return
    staged = os.path.join(tmp, MSGS_DIR)
    if disk.exists(staged):
        remove_dir(disk, staged)
    remove_dir(disk, tmp)
