"""The storage seam under the RAFT log: a small file-system Protocol, real files, a crashable fake.

Contract that every implementation keeps and that the WAL relies on (POSIX, spelled out):

* ``AppendFile.write`` appends; the bytes are durable only once ``AppendFile.sync()`` returned.
* Creating a file (``open_append`` of a new path), ``rename`` and ``remove`` change a directory;
  that change is durable only once ``sync_dir(parent)`` returned.
* ``write_atomic(path, data)`` is durable on return, and ``path`` never holds a partial file:
  a crash leaves either the old content or the new one (it writes ``path + ".tmp"``, syncs
  it, renames it over ``path`` and syncs the directory; a crash may leave the ``.tmp`` file).
* ``makedirs`` is durable on return.

Paths are plain strings joined with ``os.path.join``. ``read`` returns a whole file: the WAL
keeps its files bounded (segments, snapshots), so this is the cheapest way to scan them.

Beyond the ``Disk`` protocol the WAL uses, ``OsDisk`` and ``MemDisk`` also offer what the
JetStream file store needs (``jetraft.jetstream.store.disk.StoreDisk``): ``open_read`` (random
reads through a ``ReadFile``), ``overwrite`` (in place, durable once the file is synced through
any handle) and ``rmdir`` (durable once its parent is synced).
"""

from __future__ import annotations

import builtins
import os
import random
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["AppendFile", "Disk", "MemDisk", "OsDisk", "ReadFile", "SimulatedCrash"]


class AppendFile(Protocol):
    """An open file that only grows at its end (or is cut back with ``truncate``)."""

    def write(self, data: bytes) -> None: ...

    def sync(self) -> None:
        """fsync (fdatasync): every byte written so far is durable on return."""

    def truncate(self, size: int) -> None: ...

    def tell(self) -> int:
        """The current size of the file, unsynced writes included."""

    def close(self) -> None: ...


class ReadFile(Protocol):
    """An open file for random reads (what a reader sees now, unsynced writes included)."""

    def pread(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` (fewer at the end of the file)."""

    def close(self) -> None: ...


class Disk(Protocol):
    def list(self, dirname: str) -> builtins.list[str]:
        """Names (not paths) in ``dirname``, sorted."""

    def makedirs(self, dirname: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def read(self, path: str) -> bytes: ...

    def open_append(self, path: str) -> AppendFile:
        """Open ``path`` for appending, creating it empty if absent."""

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        """Rename, replacing ``dst`` if it exists (``os.replace``)."""

    def sync_dir(self, dirname: str) -> None: ...


# --------------------------------------------------------------------------------------------
# Real files


_fdatasync = getattr(os, "fdatasync", os.fsync)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _OsAppendFile:
    __slots__ = ("_fd", "_size")

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _O_CLOEXEC, 0o644)
        self._size = os.lseek(self._fd, 0, os.SEEK_END)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)

    def sync(self) -> None:
        # fdatasync also flushes the file size when appends grew the file, which is all that
        # reading the data back needs; it skips the mtime update fsync would force.
        _fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    def tell(self) -> int:
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _OsReadFile:
    __slots__ = ("_fd",)

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)

    def pread(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsDisk:
    """The real file system. Holds no state: each open append file is one descriptor."""

    def list(self, dirname: str) -> builtins.list[str]:
        return sorted(os.listdir(dirname))

    def makedirs(self, dirname: str) -> None:
        path = os.path.abspath(dirname)
        missing: builtins.list[str] = []
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        if not missing:
            return
        os.makedirs(dirname, exist_ok=True)
        for created in reversed(missing):  # top-down: each new entry is durable in its parent
            self.sync_dir(os.path.dirname(created))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def open_append(self, path: str) -> AppendFile:
        return _OsAppendFile(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.sync_dir(os.path.dirname(path) or ".")

    def remove(self, path: str) -> None:
        os.remove(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def sync_dir(self, dirname: str) -> None:
        fd = os.open(dirname or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- beyond the WAL's protocol (the JetStream file store) ----------------------------------

    def open_read(self, path: str) -> ReadFile:
        return _OsReadFile(path)

    def overwrite(self, path: str, offset: int, data: bytes) -> None:
        """Replace bytes inside the file (not past its end); durable once the file is synced
        through any handle. Its own descriptor: pwrite on an O_APPEND one would append."""
        fd = os.open(path, os.O_WRONLY | _O_CLOEXEC)
        try:
            if offset + len(data) > os.fstat(fd).st_size:
                raise ValueError(f"overwrite past the end of {path}")
            view = memoryview(data)
            while view:
                n = os.pwrite(fd, view, offset)
                view, offset = view[n:], offset + n
        finally:
            os.close(fd)

    def rmdir(self, dirname: str) -> None:
        os.rmdir(dirname)


# --------------------------------------------------------------------------------------------
# In-memory fake with crash semantics


class SimulatedCrash(Exception):
    """Raised by a MemDisk armed with ``arm_crash`` (and by every call after it until
    ``crash()``): the process "died" in the middle of whatever called the disk."""


@dataclass(eq=False, slots=True)
class _Inode:
    """One file's bytes. ``current`` is what a reader sees now; ``pending`` lists the writes
    (bytes), truncations (int size) and in-place overwrites ((offset, bytes)) since the last
    sync, in order. The durable content (as of the last sync) is ``current[:durable_len]``
    unless a truncation or overwrite since then changed it, in which case ``durable_copy``
    holds it: syncing never copies the file."""

    current: bytearray = field(default_factory=bytearray)
    durable_len: int = 0
    durable_copy: bytes | None = None
    pending: builtins.list[bytes | int | tuple[int, bytes]] = field(
        default_factory=builtins.list
    )

    def durable(self) -> bytes:
        if self.durable_copy is not None:
            return self.durable_copy
        return bytes(self.current[: self.durable_len])

    def synced(self) -> None:
        self.durable_len = len(self.current)
        self.durable_copy = None
        self.pending.clear()

    def reset(self, content: bytes) -> None:
        self.current = bytearray(content)
        self.synced()


# Directory operations not yet made durable by sync_dir: ("link", path, inode) creates or
# replaces a name, ("unlink", path, None) removes one, ("rename", src, dst) moves one.
_MetaOp = tuple[str, str, "_Inode | str | None"]


class _MemAppendFile:
    __slots__ = ("_closed", "_disk", "_generation", "_inode")

    def __init__(self, disk: MemDisk, inode: _Inode) -> None:
        self._disk = disk
        self._inode = inode
        self._generation = disk._generation
        self._closed = False
        disk.open_handles += 1

    def _check(self) -> None:
        if self._closed or self._generation != self._disk._generation:
            raise ValueError("file handle is closed (or the disk crashed since it was opened)")
        self._disk._tick()

    def write(self, data: bytes) -> None:
        self._check()
        chunk = bytes(data)
        self._inode.current += chunk
        self._inode.pending.append(chunk)
        self._disk.bytes_written += len(chunk)

    def sync(self) -> None:
        self._check()
        self._inode.synced()
        self._disk.fsyncs += 1

    def truncate(self, size: int) -> None:
        self._check()
        inode = self._inode
        if size < inode.durable_len and inode.durable_copy is None:
            inode.durable_copy = inode.durable()
        del inode.current[size:]
        inode.pending.append(size)

    def tell(self) -> int:
        return len(self._inode.current)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._generation == self._disk._generation:
                self._disk.open_handles -= 1


class _MemReadFile:
    __slots__ = ("_disk", "_generation", "_inode")

    def __init__(self, disk: MemDisk, inode: _Inode) -> None:
        self._disk = disk
        self._inode = inode
        self._generation = disk._generation

    def pread(self, offset: int, size: int) -> bytes:
        if self._generation != self._disk._generation:
            raise ValueError("file handle is closed (the disk crashed since it was opened)")
        return bytes(self._inode.current[offset : offset + size])

    def close(self) -> None:
        pass


class MemDisk:
    """An in-memory Disk that can crash, deterministically for a given ``random.Random``.

    Model (an ordered-journal file system such as ext4 with data=ordered):

    * each file keeps its durable content (as of its last sync) and the operations since;
      a crash keeps a random prefix of those operations, and the last write kept may be torn:
      cut at a random byte, or with its missing part read back as zeros or as garbage (the
      size reached the disk, the data did not). Unsynced writes never survive out of order.
    * directory changes (create, rename, remove) form one ordered journal; ``sync_dir(d)``
      commits the journal up to the last change in ``d`` (earlier changes elsewhere become
      durable too, as a journal commit does); a crash keeps a random prefix of the rest.
      A name that is lost takes its file with it; a removal that is lost brings the file back
      with its durable content.
    * ``write_atomic`` is built from those primitives (tmp file, sync, rename, sync_dir), so
      a crash in the middle (see ``arm_crash``) leaves the old file or the new one, whole.
    * directories themselves are durable as soon as they exist (the WAL creates its own once).

    ``arm_crash(n)`` makes the n-th next mutating call raise SimulatedCrash (and every call
    after it, until ``crash()`` or ``kill_process()``), to test crashes in the middle of a
    WAL operation; ``kill_process()`` is a process death without power loss.
    Counters ``fsyncs``, ``dir_syncs``, ``bytes_written`` and ``open_handles`` are public.
    """

    def __init__(self) -> None:
        self._dirs: set[str] = {"", "/", "."}
        self._files: dict[str, _Inode] = {}  # what readers see now
        self._durable_files: dict[str, _Inode] = {}  # the namespace after a crash
        self._meta: builtins.list[_MetaOp] = []  # directory changes not yet durable
        self._generation = 0
        self._armed: int | None = None
        self._armed_error: tuple[int, OSError] | None = None
        self._dead = False
        self.fsyncs = 0
        self.dir_syncs = 0
        self.bytes_written = 0
        self.open_handles = 0

    # -- fault injection ----------------------------------------------------------------------

    def arm_crash(self, after_ops: int) -> None:
        """Let ``after_ops`` more mutating calls through, then raise SimulatedCrash."""
        if after_ops < 0:
            raise ValueError("after_ops must be >= 0")
        self._armed = after_ops

    def arm_error(self, after_ops: int, error: OSError) -> None:
        """Let ``after_ops`` more mutating calls through, then fail the next one with
        ``error`` (EIO, ENOSPC...) without doing it; later calls work again."""
        if after_ops < 0:
            raise ValueError("after_ops must be >= 0")
        self._armed_error = (after_ops, error)

    def disarm(self) -> None:
        self._armed = None
        self._armed_error = None

    def _tick(self) -> None:
        if self._dead:
            raise SimulatedCrash("the disk crashed; call crash() before using it again")
        if self._armed_error is not None:
            left, error = self._armed_error
            if left == 0:
                self._armed_error = None
                raise error
            self._armed_error = (left - 1, error)
        if self._armed is not None:
            if self._armed == 0:
                self._dead = True
                self._armed = None
                raise SimulatedCrash("armed crash point reached")
            self._armed -= 1

    def kill_process(self) -> None:
        """The process died, the machine did not: open handles die, but nothing is lost and
        nothing becomes durable (unsynced data stays readable from the "page cache" and can
        still be lost by a later ``crash``)."""
        self._generation += 1
        self._armed = None
        self._dead = False
        self.open_handles = 0

    def crash(self, rng: random.Random) -> None:
        """Become the disk a machine would find after losing power now. Open handles die."""
        keep = rng.randint(0, len(self._meta))
        for op in self._meta[:keep]:
            self._apply_meta(self._durable_files, op)
        self._meta.clear()
        survivors: dict[int, _Inode] = {}
        for inode in self._durable_files.values():
            survivors[id(inode)] = inode
        for inode in survivors.values():
            inode.reset(_survive(inode, rng))
        self._files = dict(self._durable_files)
        self._generation += 1
        self._armed = None
        self._dead = False
        self.open_handles = 0

    def corrupt(self, path: str, offset: int, mask: int = 0xFF) -> None:
        """Flip bits of one byte, durably (media corruption, not a crash effect)."""
        inode = self._files[_norm(path)]
        if not 0 <= offset < len(inode.current):
            raise IndexError(f"offset {offset} outside {path} ({len(inode.current)} bytes)")
        inode.current[offset] ^= mask  # also the durable byte, unless a truncation copied it
        copy = inode.durable_copy
        if copy is not None and offset < len(copy):
            inode.durable_copy = copy[:offset] + bytes([copy[offset] ^ mask]) + copy[offset + 1 :]

    # -- the Disk protocol --------------------------------------------------------------------

    def list(self, dirname: str) -> builtins.list[str]:
        d = _norm(dirname)
        if d not in self._dirs:
            raise FileNotFoundError(dirname)
        names = {os.path.basename(p) for p in self._files if os.path.dirname(p) == d}
        names.update(os.path.basename(p) for p in self._dirs if p and os.path.dirname(p) == d)
        names.discard("")
        return sorted(names)

    def makedirs(self, dirname: str) -> None:
        self._tick()
        d = _norm(dirname)
        while d not in self._dirs:
            self._dirs.add(d)
            d = os.path.dirname(d)

    def exists(self, path: str) -> bool:
        p = _norm(path)
        return p in self._files or p in self._dirs

    def size(self, path: str) -> int:
        return len(self._lookup(path).current)

    def read(self, path: str) -> bytes:
        return bytes(self._lookup(path).current)

    def open_append(self, path: str) -> AppendFile:
        p = _norm(path)
        inode = self._files.get(p)
        if inode is None:
            self._tick()
            self._need_dir(p)
            inode = _Inode()
            self._files[p] = inode
            self._meta.append(("link", p, inode))
        return _MemAppendFile(self, inode)

    def write_atomic(self, path: str, data: bytes) -> None:
        p = _norm(path)
        tmp = p + ".tmp"
        self._need_dir(p)
        if tmp in self._files:
            self.remove(tmp)
        f = self.open_append(tmp)
        try:
            f.write(data)
            f.sync()
        finally:
            f.close()
        self.rename(tmp, p)
        self.sync_dir(os.path.dirname(p))

    def remove(self, path: str) -> None:
        p = _norm(path)
        self._lookup(p)
        self._tick()
        del self._files[p]
        self._meta.append(("unlink", p, None))

    def rename(self, src: str, dst: str) -> None:
        s, d = _norm(src), _norm(dst)
        inode = self._lookup(s)
        self._need_dir(d)
        self._tick()
        del self._files[s]
        self._files[d] = inode
        self._meta.append(("rename", s, d))

    # -- beyond the WAL's protocol (the JetStream file store) ----------------------------------

    def open_read(self, path: str) -> ReadFile:
        return _MemReadFile(self, self._lookup(path))

    def overwrite(self, path: str, offset: int, data: bytes) -> None:
        """In place, durable once the file is synced; a crash may keep a prefix of it."""
        inode = self._lookup(path)
        if offset + len(data) > len(inode.current):
            raise ValueError(f"overwrite past the end of {path}")
        self._tick()
        if offset < inode.durable_len and inode.durable_copy is None:
            inode.durable_copy = inode.durable()
        chunk = bytes(data)
        inode.current[offset : offset + len(chunk)] = chunk
        inode.pending.append((offset, chunk))
        self.bytes_written += len(chunk)

    def rmdir(self, dirname: str) -> None:
        d = _norm(dirname)
        if d not in self._dirs:
            raise FileNotFoundError(dirname)
        if self.list(d):
            raise OSError(f"directory not empty: {dirname}")
        self._tick()
        self._dirs.discard(d)

    def sync_dir(self, dirname: str) -> None:
        self._tick()
        d = _norm(dirname)
        last = -1
        for i, (_kind, a, b) in enumerate(self._meta):
            if os.path.dirname(a) == d or (isinstance(b, str) and os.path.dirname(b) == d):
                last = i
        for op in self._meta[: last + 1]:
            self._apply_meta(self._durable_files, op)
        del self._meta[: last + 1]
        self.dir_syncs += 1

    # -- helpers ------------------------------------------------------------------------------

    def _lookup(self, path: str) -> _Inode:
        inode = self._files.get(_norm(path))
        if inode is None:
            raise FileNotFoundError(path)
        return inode

    def _need_dir(self, path: str) -> None:
        if os.path.dirname(path) not in self._dirs:
            raise FileNotFoundError(f"no directory for {path}")

    @staticmethod
    def _apply_meta(files: dict[str, _Inode], op: _MetaOp) -> None:
        kind, a, b = op
        if kind == "link":
            assert isinstance(b, _Inode)
            files[a] = b
        elif kind == "unlink":
            files.pop(a, None)
        else:
            assert isinstance(b, str)
            inode = files.pop(a, None)
            if inode is not None:
                files[b] = inode


def _norm(path: str) -> str:
    return os.path.normpath(path) if path else ""


def _survive(inode: _Inode, rng: random.Random) -> bytes:
    """The content of one file after a crash: durable + a prefix of its pending operations."""
    ops = inode.pending
    if not ops:
        return bytes(inode.current)
    content = bytearray(inode.durable())
    keep = rng.randint(0, len(ops))
    for op in ops[:keep]:
        if isinstance(op, int):
            del content[op:]
        elif isinstance(op, tuple):
            _overwrite_into(content, op[0], op[1])
        else:
            content += op
    nxt = ops[keep] if keep < len(ops) else None
    if isinstance(nxt, tuple) and rng.random() < 0.5:
        offset, chunk = nxt  # a torn overwrite: a prefix of it reached the disk
        _overwrite_into(content, offset, chunk[: rng.randrange(len(chunk) + 1)])
    elif keep < len(ops) and isinstance(ops[keep], bytes) and rng.random() < 0.5:
        torn = ops[keep]
        assert isinstance(torn, bytes)
        cut = rng.randrange(len(torn)) if torn else 0
        mode = rng.randrange(3)
        content += torn[:cut]
        if mode == 1:  # the size reached the disk, the data did not
            content += bytes(len(torn) - cut)
        elif mode == 2:  # stale blocks: arbitrary bytes
            content += rng.randbytes(len(torn) - cut)
    return bytes(content)


def _overwrite_into(content: bytearray, offset: int, chunk: bytes) -> None:
    end = min(offset + len(chunk), len(content))  # an earlier truncation may have cut it
    if offset < end:
        content[offset:end] = chunk[: end - offset]
