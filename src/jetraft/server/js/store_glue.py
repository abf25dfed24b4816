"""On-disk layout of JetStream streams, and opening their stores.

Layout (nats-server's): ``<store_dir>/jetstream/<account>/streams/<stream>/`` holding

* ``meta.json``: the stream config and creation time, written atomically (temp file, fsync,
  rename, directory fsync) and carrying a SHA-256 of its own content, so a torn or edited file
  is detected instead of being half-believed;
* the FileStore's files (``LOCK``, ``msgs/``);
* ``obs/<consumer>/``: consumer state (written by the consumer glue).

Memory streams are not written at all: like nats-server's, they vanish on restart.
Nothing here ever deletes a stream directory except ``remove_stream_dir`` on an explicit
STREAM.DELETE; a directory that fails to load is reported and left untouched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jetraft.jetstream.store.types import StreamStore
from jetraft.jetstream.stream_config import StreamConfig, from_wire, to_wire

log = logging.getLogger("jetraft.js.store")

META_FILE = "meta.json"
CONSUMERS_DIR = "obs"
META_VERSION = 1


class MetaError(Exception):
    """A stream's meta file is missing, torn or inconsistent."""


@dataclass(frozen=True, slots=True)
class StreamMeta:
    config: StreamConfig
    created_ns: int


def account_dir(store_dir: str, account: str) -> Path:
    return Path(store_dir) / "jetstream" / account / "streams"


def _digest(body: dict[str, object]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, blob: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_meta(stream_dir: Path, meta: StreamMeta) -> None:
    stream_dir.mkdir(parents=True, exist_ok=True)
    body: dict[str, object] = {
        "version": META_VERSION,
        "created": meta.created_ns,
        "config": to_wire(meta.config),
    }
    doc = dict(body)
    doc["sha256"] = _digest(body)
    write_atomic(stream_dir / META_FILE, json.dumps(doc, indent=1).encode())
    fsync_dir(stream_dir.parent)


def read_meta(stream_dir: Path) -> StreamMeta:
    path = stream_dir / META_FILE
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise MetaError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise MetaError(f"{path} is unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise MetaError(f"{path} is not a JSON object")
    digest = doc.pop("sha256", None)
    if digest != _digest(doc):
        raise MetaError(f"{path} fails its checksum")
    if doc.get("version") != META_VERSION:
        raise MetaError(f"{path} has unknown version {doc.get('version')!r}")
    try:
        config = from_wire(json.dumps(doc["config"]).encode())
        created = int(doc["created"])
    except Exception as exc:  # any shape problem is corruption of this file
        raise MetaError(f"{path} holds an invalid config: {exc}") from None
    if config.name != stream_dir.name:
        raise MetaError(f"{path} names stream {config.name!r}, directory is {stream_dir.name!r}")
    return StreamMeta(config, created)


def open_store(cfg: StreamConfig, stream_dir: Path | None) -> StreamStore:
    """A MemoryStore for memory streams (or when JetStream has no directory), else the
    FileStore in ``<stream_dir>/msgs`` (created if new, recovered if existing)."""
    if cfg.storage == "memory" or stream_dir is None:
        from jetraft.jetstream.store.memory import MemoryStore

        return MemoryStore()
    from jetraft.jetstream.store.file import FileStore

    store = FileStore(str(stream_dir))
    for path, offset, cut in store.truncated:
        # A torn last write (a crash mid-write) - or damage of the very last record, which
        # looks the same: say so, the data cut was never acknowledged unless it was damage.
        log.warning("stream %s: cut %d bytes of a torn write at %s:%d", cfg.name, cut, path, offset)
    return store


def prepare_sync(store: StreamStore) -> Callable[[], None] | None:
    """Group commit off the event loop: on the loop, write everything out and return the
    blocking fsync half, safe to run in a worker thread while the loop keeps storing (None:
    nothing needs syncing, everything done so far is already durable).

    A thin seam over ``StreamStore.begin_sync()`` so that tests can hold a sync back."""
    return store.begin_sync()


TRASH_PREFIX = ".deleted-"


def remove_stream_dir(stream_dir: Path) -> None:
    """STREAM.DELETE only: the one place stream data is removed (blocking; a worker thread).

    Durable in one step: the directory is renamed to a trash name (stream names never start
    with a dot, so it can never be loaded as a stream) and the parent is fsync'd; then the
    files go. A crash in between leaves the trash, which ``clear_trash`` removes on start.
    Failures raise, for the requester to hear."""
    if not stream_dir.exists():
        return
    trash = stream_dir.with_name(f"{TRASH_PREFIX}{stream_dir.name}.{secrets.token_hex(4)}")
    os.rename(stream_dir, trash)
    fsync_dir(stream_dir.parent)
    shutil.rmtree(trash)


def clear_trash(account_streams_dir: Path) -> None:
    """Finish stream deletions a crash interrupted (see ``remove_stream_dir``)."""
    if not account_streams_dir.is_dir():
        return
    for entry in account_streams_dir.iterdir():
        if entry.name.startswith(TRASH_PREFIX) and entry.is_dir():
            shutil.rmtree(entry)
