"""Where a snapshot's bytes wait while they travel: in memory, or in a spool file.

A snapshot series (InstallSnapshot chunks of one leader term and snapshot) is collected
by the follower's core into a ``SnapshotSpool``; once the last chunk is in, the spool's
``data()`` is the whole snapshot, handed through Ready to the state machine's restore. The
leader of a durable state machine writes the snapshot it sends into a spool too (its
state machine does: see ``server.js.clustered.stream_file``) and reads the chunks it sends
from the spool's data. So neither side holds more of a large snapshot in memory than a
chunk or two.

* ``MemorySpool``: a bytearray; the core's default (the meta group, memory streams and
  consumers, whose snapshots live in memory anyway, and the simulator).
* ``FileSpool``: an unnamed temporary file in the group's directory (``O_TMPFILE`` where
  the file system has it, else created and unlinked at once). Nothing to clean up, ever:
  the space goes back when the last reference to the spool's data is dropped (its file
  is closed then), and when the process ends, however it ends. A follower that restarts
  in the middle of a series has lost its spool, as it lost the bytearray before: it
  answers the next chunk with offset 0 and the leader starts the series again.

The spool files are not synced: nothing durable depends on them (a restore makes its own
result durable; the leader builds a new spool after a restart).
"""

from __future__ import annotations

import io
import os
import tempfile
import weakref
from typing import Protocol

from .types import SnapshotBytes

SPOOL_PREFIX = "snap-spool-"


class SnapshotSpool(Protocol):
    """The chunks of one snapshot series, in order."""

    def __len__(self) -> int:
        """Bytes held so far."""
        ...

    def append(self, data: bytes) -> None: ...

    def data(self) -> SnapshotBytes:
        """The whole series (after its last chunk); the spool is spent after this."""
        ...

    def close(self) -> None:
        """Drop what is held (a series replaced or no longer needed)."""
        ...


class MemorySpool:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def __len__(self) -> int:
        return len(self._buf)

    def append(self, data: bytes) -> None:
        self._buf += data

    def data(self) -> bytes:
        out = bytes(self._buf)
        self._buf = bytearray()
        return out

    def close(self) -> None:
        self._buf = bytearray()


class FileSnapshotData:
    """A snapshot's bytes in an (unnamed) spool file: reads at offsets, without moving a
    file position, so any number of followers read the same one. The file is closed by
    ``close()`` or once the object is dropped."""

    __slots__ = ("__weakref__", "_closer", "_f", "_size")

    def __init__(self, f: io.BufferedRandom, size: int) -> None:
        self._f = f
        self._size = size
        self._closer = weakref.finalize(self, f.close)

    def __len__(self) -> int:
        return self._size

    def read(self, offset: int, n: int) -> bytes:
        n = max(0, min(n, self._size - offset))
        fd = self._f.fileno()
        parts: list[bytes] = []
        while n > 0:
            got = os.pread(fd, n, offset)
            if not got:
                raise OSError(f"snapshot spool ends before {offset + n} of {self._size} bytes")
            parts.append(got)
            offset += len(got)
            n -= len(got)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._closer()

    @property
    def closed(self) -> bool:
        return not self._closer.alive


class FileSpool:
    """Appends go to an unnamed file in ``directory`` (see the module doc)."""

    __slots__ = ("__weakref__", "_closer", "_f", "_size")

    def __init__(self, directory: str) -> None:
        # Closed by close(), by data()'s owner, or by the finalizer: not a with block.
        f = tempfile.TemporaryFile(mode="w+b", dir=directory, prefix=SPOOL_PREFIX)  # noqa: SIM115
        self._f: io.BufferedRandom | None = f
        self._closer = weakref.finalize(self, f.close)  # a spool dropped mid-series
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, data: bytes) -> None:
        f = self._f
        if f is None:
            raise ValueError("append to a spent snapshot spool")
        f.write(data)
        self._size += len(data)

    def data(self) -> FileSnapshotData:
        f, self._f = self._f, None
        if f is None:
            raise ValueError("snapshot spool already spent")
        f.flush()
        self._closer.detach()  # the file now belongs to the data
        return FileSnapshotData(f, self._size)

    def close(self) -> None:
        self._f = None
        self._closer()
