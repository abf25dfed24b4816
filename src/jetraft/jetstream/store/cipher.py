"""Encryption at rest: the record cipher and the per-stream keys.

``RecordCipher`` seals and opens one record at a time with an AEAD (ChaCha20-Poly1305 or
AES-256-GCM from ``cryptography``), a fresh random 96-bit nonce per record and the caller's
associated data (the record header, so that a header moved or edited fails too). A sealed
record is ``nonce || ciphertext || tag``. Anything that does not open raises
``CipherError``: the caller reports it as corruption (tampering and bit rot look alike).

Keys (the idea of nats-server's, our own construction): the configured ``encryption_key`` is
never used directly. For each stream a key-encryption key is derived from it with HKDF-SHA256
(info names the account and the stream); the stream's data key is 32 random bytes generated at
creation, stored sealed by that key-encryption key in the stream's ``key`` file together with
the cipher it was made for. A wrong ``encryption_key`` therefore fails on that one small file,
before any data is read, and changing ``cipher`` later affects only new streams.

Random nonces: at most 2^32 records should be sealed under one data key (the usual bound for
random 96-bit nonces); a stream stays far below that in practice, and a data key can be
rotated by re-creating the stream.

Nothing here depends on JetStream: the RAFT WAL can seal its records with the same object.
"""

from __future__ import annotations

import os
import struct
from typing import Final, Protocol

# cryptography is imported where a key is made, not here: every server imports this
# module, few encrypt, and the import is a tenth of a second of start-up on this machine.

CIPHERS: Final = ("chachapoly", "aes")
NONCE_SIZE: Final = 12
TAG_SIZE: Final = 16
OVERHEAD: Final = NONCE_SIZE + TAG_SIZE
KEY_SIZE: Final = 32
KEY_FILE: Final = "key"
_KEY_MAGIC = b"JRK1"
_KEY_HEAD = struct.Struct("<4sB")  # magic, cipher id


class CipherError(Exception):
    """Data that does not open with this key (tampered, damaged, or another key)."""


class _Aead(Protocol):
    def encrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...


def normalise_cipher(name: str) -> str:
    """nats-server's names: "chacha" / "chachapoly" and "aes" (any case)."""
    low = name.strip().lower()
    if low in ("chacha", "chachapoly"):
        return "chachapoly"
    if low == "aes":
        return "aes"
    raise ValueError(f"unknown cipher type: {name!r}")


class RecordCipher:
    """Seal and open records with one key. Thread-safe (no mutable state)."""

    __slots__ = ("_aead", "_invalid", "name")

    def __init__(self, key: bytes, cipher: str = "chachapoly") -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

        if len(key) != KEY_SIZE:
            raise ValueError(f"a record key has {KEY_SIZE} bytes, not {len(key)}")
        self.name = normalise_cipher(cipher)
        self._aead: _Aead = ChaCha20Poly1305(key) if self.name == "chachapoly" else AESGCM(key)
        self._invalid: type[Exception] = InvalidTag

    overhead: Final = OVERHEAD

    def seal(self, data: bytes | bytearray | memoryview, aad: bytes = b"") -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, bytes(data), aad)

    def open(self, data: bytes | bytearray | memoryview, aad: bytes = b"") -> bytes:
        raw = bytes(data)
        if len(raw) < OVERHEAD:
            raise CipherError("sealed data is too short")
        try:
            return self._aead.decrypt(raw[:NONCE_SIZE], raw[NONCE_SIZE:], aad)
        except self._invalid:
            raise CipherError("sealed data does not open with this key") from None


def derive_key(secret: str, context: str) -> bytes:
    """A 32-byte key for ``context`` (e.g. "stream $G/ORDERS") from the configured secret."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    if not secret:
        raise ValueError("empty encryption key")
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=KEY_SIZE,
        salt=b"jetraft encryption at rest v1",
        info=context.encode(),
    )
    return hkdf.derive(secret.encode())


def new_key_file(secret: str, context: str, cipher: str) -> tuple[RecordCipher, bytes]:
    """A fresh data key: (its cipher, the key file's content sealing it)."""
    name = normalise_cipher(cipher)
    data_key = os.urandom(KEY_SIZE)
    kek = RecordCipher(derive_key(secret, context), name)
    head = _KEY_HEAD.pack(_KEY_MAGIC, CIPHERS.index(name))
    return RecordCipher(data_key, name), head + kek.seal(data_key, head + context.encode())


def open_key_file(secret: str, context: str, blob: bytes) -> RecordCipher:
    """The data key sealed in a key file; ``CipherError`` when ``secret`` is not the key the
    file was made with (or the file was damaged)."""
    if len(blob) < _KEY_HEAD.size or blob[:4] != _KEY_MAGIC:
        raise CipherError("the key file is damaged")
    _, cid = _KEY_HEAD.unpack_from(blob)
    if cid >= len(CIPHERS):
        raise CipherError("the key file names an unknown cipher")
    name = CIPHERS[cid]
    head = blob[: _KEY_HEAD.size]
    kek = RecordCipher(derive_key(secret, context), name)
    try:
        data_key = kek.open(blob[_KEY_HEAD.size :], head + context.encode())
    except CipherError:
        raise CipherError("wrong encryption key (the stream's key file does not open)") from None
    return RecordCipher(data_key, name)
