"""Block files of the file store: naming, metadata, fsync helpers, the read-fd cache."""

from __future__ import annotations

import os
import re
from array import array
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass

BLOCK_RE = re.compile(r"^blk\.(\d{8})\.dat$")
OFF_BITS = 40  # a location is (block index << 40) | offset
OFF_MASK = (1 << OFF_BITS) - 1
_MAX_READ_FDS = 32


def block_name(idx: int) -> str:
    return f"blk.{idx:08d}.dat"


@dataclass(slots=True)
class Block:
    """One append-only block file.

    ``max_ref`` is the highest sequence any record in the block refers to (a message, a
    delete target, a floor - 1, a skip). A block that is not the active one can be unlinked
    once ``max_ref`` is below the store's first sequence: nothing in it can matter any more.

    Which messages are physically in the file: every stored seq in [first_msg, last_msg]
    until the block is rewritten, then exactly ``present``. A DEL record elsewhere is needed
    only while its target is physically present in an older block.
    """

    idx: int
    path: str
    size: int = 0  # bytes in the file (the active block's write buffer is not counted)
    first_msg: int = 0
    last_msg: int = 0
    max_ref: int = 0
    live: int = 0
    live_bytes: int = 0
    present: array[int] | None = None  # set by a rewrite: the seqs it kept
    has_dels: bool = False
    settled: bool = False  # rewritten and nothing in or below it changed since

    def holds(self, seq: int) -> bool:
        """Is the MSG record of ``seq`` physically in this block?"""
        if not self.first_msg <= seq <= self.last_msg:
            return False
        p = self.present
        if p is None:
            return True
        i = bisect_left(p, seq)
        return i < len(p) and p[i] == seq


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fdatasync(fd: int) -> None:
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    with memoryview(data) as mv:
        done = 0
        total = len(mv)
        while done < total:
            done += os.write(fd, mv[done:])


class ReadFds:
    """A small LRU of read-only descriptors for sealed blocks (bounded: streams x blocks)."""

    def __init__(self) -> None:
        self._fds: OrderedDict[int, int] = OrderedDict()

    def get(self, block: Block) -> int:
        fd = self._fds.get(block.idx)
        if fd is None:
            fd = os.open(block.path, os.O_RDONLY)
            self._fds[block.idx] = fd
            if len(self._fds) > _MAX_READ_FDS:
                _, old = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(block.idx)
        return fd

    def drop(self, idx: int) -> None:
        fd = self._fds.pop(idx, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
