"""Block files of the file store: naming, metadata, the cache of open read handles."""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from jetraft.jetstream.store.disk import ReadFile, StoreDisk

BLOCK_RE = re.compile(r"^blk\.(\d{8})\.dat$")
OFF_BITS: Final = 40  # a location is (block index << 40) | offset
OFF_MASK = (1 << OFF_BITS) - 1
_MAX_READ_FILES = 32


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
    erasing: int = 0  # records waiting to be overwritten in place (secure erase)

    def holds(self, seq: int) -> bool:
        """Is the MSG record of ``seq`` physically in this block?"""
        if not self.first_msg <= seq <= self.last_msg:
            return False
        p = self.present
        if p is None:
            return True
        i = bisect_left(p, seq)
        return i < len(p) and p[i] == seq


class ReadFiles:
    """A small LRU of open read handles on block files (bounded: streams x blocks)."""

    def __init__(self, disk: StoreDisk) -> None:
        self._disk = disk
        self._files: OrderedDict[int, ReadFile] = OrderedDict()

    def get(self, block: Block) -> ReadFile:
        f = self._files.get(block.idx)
        if f is None:
            f = self._disk.open_read(block.path)
            self._files[block.idx] = f
            if len(self._files) > _MAX_READ_FILES:
                _, old = self._files.popitem(last=False)
                old.close()
        else:
            self._files.move_to_end(block.idx)
        return f

    def drop(self, idx: int) -> None:
        f = self._files.pop(idx, None)
        if f is not None:
            f.close()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
