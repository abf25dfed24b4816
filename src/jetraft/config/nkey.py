"""Public nkeys: decoding, role checks and Ed25519 signature checks.

An nkey public key is base32 (no padding) of: one prefix byte naming the role (operator 'O',
account 'A', user 'U', server 'N', cluster 'C'), the 32-byte Ed25519 public key, and a CRC-16
(XMODEM, little endian) of the first 33 bytes. The ``nkeys`` package signs and handles seeds;
it has no way to load a key from its public form, so that part is here, and the signature
check itself is ``cryptography``'s Ed25519.
"""

from __future__ import annotations

import base64
import binascii

PREFIX_OPERATOR = 14 << 3
PREFIX_ACCOUNT = 0
PREFIX_USER = 20 << 3
PREFIX_SERVER = 13 << 3
PREFIX_CLUSTER = 2 << 3

_PUBLIC_LEN = 56  # characters of an encoded public key


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def decode_public(key: str, prefix: int | None = None) -> bytes | None:
    """The raw 32-byte Ed25519 key of an encoded public nkey, or None when ``key`` is not one
    (bad length, alphabet, checksum, or not of the role ``prefix`` when given)."""
    if len(key) != _PUBLIC_LEN:
        return None
    try:
        raw = base64.b32decode(key.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    if len(raw) != 35:
        return None
    body, crc = raw[:33], int.from_bytes(raw[33:], "little")
    if _crc16(body) != crc:
        return None
    if prefix is not None and body[0] != prefix:
        return None
    return body[1:]


def is_public(key: str, prefix: int) -> bool:
    return decode_public(key, prefix) is not None


def verify(key: str, data: bytes, signature: bytes) -> bool:
    """True when ``signature`` is the Ed25519 signature of ``data`` by public nkey ``key``."""
    # Imported here: cryptography costs start-up time that servers without nkeys never use.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = decode_public(key)
    if raw is None:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def decode_signature(text: str) -> bytes | None:
    """A CONNECT ``sig``: base64url without padding, or (as nats-server accepts) standard
    base64."""
    for decode in (_urlsafe, _standard):
        try:
            return decode(text)
        except (binascii.Error, ValueError):
            continue
    return None


def _urlsafe(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.b64decode(padded, altchars=b"-_", validate=True)


def _standard(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
