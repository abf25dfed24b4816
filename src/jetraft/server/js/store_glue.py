"""On-disk layout of JetStream streams, and opening their stores.

Layout (nats-server's): ``<store_dir>/jetstream/<account>/streams/<stream>/`` holding

* ``meta.json``: the stream config and creation time, carrying a SHA-256 of its own content,
  so a torn or edited file is detected instead of being half-believed. Updates replace it
  atomically (temp file, fsync, rename, directory fsync);
* ``key`` (encryption at rest): the stream's data key, sealed by a key derived from the
  configured ``encryption_key`` (see ``jetstream.store.cipher``); then ``meta.json``, the
  message blocks and the consumer state are all sealed with the data key;
* the FileStore's files (``LOCK``, ``msgs/``);
* ``obs/<consumer>/``: consumer state (written by the consumer glue).

Creating a stream (``new_stream_files``) is split like a commit: on the event loop the tree
is made and the files written, no fsync; the blocking half syncs each file and directory
once, bottom-up (the files, the stream's directory, its parent), in a worker thread, and
the answer to STREAM.CREATE waits for it. A crash before it returned may leave a partial
directory, which was never confirmed to anyone: when its ``meta.json`` is missing or torn and
nothing was stored in it, the next start sets it aside (``set_aside_unfinished``) and the
name is free again, as nats-server skips a stream directory without its meta file.

Memory streams are not written at all: like nats-server's, they vanish on restart.
Nothing here ever deletes a stream directory except ``remove_stream_dir`` on an explicit
STREAM.DELETE; a directory that fails to load is reported and left untouched.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jetraft.jetstream.store import MSGS_DIR
from jetraft.jetstream.store.cipher import (
    KEY_FILE,
    CipherError,
    RecordCipher,
    new_key_file,
    open_key_file,
)
from jetraft.jetstream.store.disk import OS_DISK
from jetraft.jetstream.store.types import StreamStore
from jetraft.jetstream.stream_config import StreamConfig, from_wire, to_wire

log = logging.getLogger("jetraft.js.store")

META_FILE = "meta.json"
CONSUMERS_DIR = "obs"
META_VERSION = 1
SEALED_META = b"JRE1"  # meta.json of an encrypted stream: this, then the sealed JSON


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
    """fsync a directory, or a file by its path (both open read-only for it)."""
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


@dataclass(frozen=True, slots=True)
class Encryption:
    """The configured secret (``jetstream { encryption_key }``, "" for none) and cipher."""

    secret: str = ""
    cipher: str = "chachapoly"


def _key_context(account: str, stream: str) -> str:
    return f"jetraft stream {account}/{stream}"


def _write_new(path: Path, blob: bytes) -> None:
    """Write a file that must not exist yet (no fsync: see ``new_stream_files``)."""
    with open(path, "xb") as f:
        f.write(blob)


def new_stream_files(
    enc: Encryption, account: str, stream_dir: Path, meta: StreamMeta
) -> tuple[RecordCipher | None, Callable[[], None]]:
    """STREAM.CREATE of a file stream, on the loop: the stream's directory (which must not
    exist) with the store's ``msgs/``, the key file (encryption at rest) and ``meta.json``,
    written but not synced. Returns the data key (None in clear) and ``sync_new_stream``'s
    blocking half for a worker thread: once it returned, all of it survives a power loss.

    The account's directory is made durable here, on the loop, when it is missing (once per
    account): two creates under way would otherwise each rely on the other's sync of it."""
    parent = stream_dir.parent
    if not parent.is_dir():
        OS_DISK.makedirs(str(parent))
    stream_dir.mkdir()
    (stream_dir / MSGS_DIR).mkdir()
    files = []
    cipher = None
    if enc.secret:
        cipher, blob = new_key_file(enc.secret, _key_context(account, stream_dir.name), enc.cipher)
        _write_new(stream_dir / KEY_FILE, blob)
        files.append(stream_dir / KEY_FILE)
    _write_new(stream_dir / META_FILE, _meta_blob(stream_dir, meta, cipher))
    files.append(stream_dir / META_FILE)
    return cipher, functools.partial(sync_new_stream, stream_dir, tuple(files))


def sync_new_stream(stream_dir: Path, files: tuple[Path, ...]) -> None:
    """The blocking half of ``new_stream_files``: the files' contents, then their names and
    ``msgs/``'s in the stream's directory, then the stream's name in its parent. The name of
    the store's first block is synced by the store's first commit (``open_store``)."""
    for path in files:
        fsync_dir(path)  # a file: the same call
    fsync_dir(stream_dir)
    fsync_dir(stream_dir.parent)


def load_cipher(enc: Encryption, account: str, stream_dir: Path) -> RecordCipher | None:
    """The data key of an existing stream (None: stored in clear). Raises ``MetaError`` with
    a clear reason when the configured key cannot open it, when the stream is encrypted and
    no key is configured, or when a key is configured and the stream is in clear (converting
    a stream is not supported; it stays offline rather than keep data in clear)."""
    path = stream_dir / KEY_FILE
    if not path.exists():
        if enc.secret:
            raise MetaError(
                "the stream is stored unencrypted but jetstream encryption_key is set "
                "(converting a stream to encrypted storage is not supported)"
            )
        return None
    if not enc.secret:
        raise MetaError("the stream is encrypted and no jetstream encryption_key is configured")
    try:
        return open_key_file(enc.secret, _key_context(account, stream_dir.name), path.read_bytes())
    except CipherError as exc:
        raise MetaError(str(exc)) from None
    except OSError as exc:
        raise MetaError(f"{path} is unreadable: {exc}") from None


def _meta_aad(stream_dir: Path) -> bytes:
    return b"meta " + stream_dir.name.encode()


def _meta_blob(stream_dir: Path, meta: StreamMeta, cipher: RecordCipher | None) -> bytes:
    body: dict[str, object] = {
        "version": META_VERSION,
        "created": meta.created_ns,
        "config": to_wire(meta.config),
    }
    doc = dict(body)
    doc["sha256"] = _digest(body)
    blob = json.dumps(doc, indent=1).encode()
    if cipher is not None:
        blob = SEALED_META + cipher.seal(blob, _meta_aad(stream_dir))
    return blob


def write_meta(stream_dir: Path, meta: StreamMeta, cipher: RecordCipher | None = None) -> None:
    """Replace an existing stream's ``meta.json`` (a config update), durable on return. The
    stream's directory is durable in its parent since its create: no need to sync that."""
    write_atomic(stream_dir / META_FILE, _meta_blob(stream_dir, meta, cipher))


def read_meta(stream_dir: Path, cipher: RecordCipher | None = None) -> StreamMeta:
    path = stream_dir / META_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise MetaError(f"{path} is missing") from None
    except OSError as exc:
        raise MetaError(f"{path} is unreadable: {exc}") from None
    sealed = raw.startswith(SEALED_META)
    if sealed and cipher is None:
        raise MetaError(f"{path} is encrypted but the stream has no key file")
    if cipher is not None and not sealed:
        raise MetaError(f"{path} is not encrypted in an encrypted stream")
    if cipher is not None:
        try:
            raw = cipher.open(raw[len(SEALED_META) :], _meta_aad(stream_dir))
        except CipherError:
            raise MetaError(
                f"{path} does not open with the stream's key (tampered or damaged)"
            ) from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
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


def open_store(
    cfg: StreamConfig,
    stream_dir: Path | None,
    cipher: RecordCipher | None = None,
    *,
    created: bool = False,
) -> StreamStore:
    """A MemoryStore for memory streams (or when JetStream has no directory), else the
    FileStore in ``<stream_dir>/msgs`` (created if new, recovered if existing), sealing its
    records with ``cipher`` when given. ``created``: the directory was just made by
    ``new_stream_files``; the store then names its first block durably with its first sync
    instead of now (on the event loop)."""
    if cfg.storage == "memory" or stream_dir is None:
        from jetraft.jetstream.store.memory import MemoryStore

        return MemoryStore()
    from jetraft.jetstream.store.file import FileStore

    store = FileStore(str(stream_dir), cipher=cipher, sync_new=not created)
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
UNFINISHED_PREFIX = ".unfinished-"


def _holds_data(path: Path) -> bool:
    """Any non-empty file under ``path`` (a stored message or consumer state)."""
    if not path.is_dir():
        return False
    return any(p.is_file() and p.stat().st_size > 0 for p in path.rglob("*"))


def unfinished_create(stream_dir: Path) -> bool:
    """A stream directory a crash left in the middle of STREAM.CREATE (whose answer was
    therefore never sent): its ``meta.json`` is missing, or in clear and not even JSON (a
    torn first write: updates replace it atomically, so only a create can tear it), and
    neither a message nor a consumer was ever stored in it. A meta file that parses but
    fails its checksum is damage, not a torn create; so is anything beside stored data.
    An encrypted stream's sealed meta file cannot tell a torn write from damage: only a
    missing one counts there."""
    if _holds_data(stream_dir / MSGS_DIR) or _holds_data(stream_dir / CONSUMERS_DIR):
        return False
    try:
        raw = (stream_dir / META_FILE).read_bytes()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if raw.startswith(SEALED_META):
        return False
    try:
        json.loads(raw)
    except ValueError:
        return True
    return False


def set_aside_unfinished(stream_dir: Path) -> Path:
    """Move an ``unfinished_create`` directory out of the way, durably, keeping its files
    (a name starting with a dot is never loaded as a stream, nor removed as trash)."""
    aside = stream_dir.with_name(f"{UNFINISHED_PREFIX}{stream_dir.name}.{secrets.token_hex(4)}")
    os.rename(stream_dir, aside)
    fsync_dir(stream_dir.parent)
    return aside


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
