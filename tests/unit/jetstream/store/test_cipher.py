"""The record cipher and the stream key files (encryption at rest)."""

from __future__ import annotations

import pytest

from jetraft.jetstream import consumer_state
from jetraft.jetstream.consumer import ConsumerCore, Start
from jetraft.jetstream.consumer_config import ConsumerConfig, StreamFacts, apply_defaults
from jetraft.jetstream.store import FileStore, StoreCorruption
from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store.cipher import (
    CipherError,
    RecordCipher,
    derive_key,
    new_key_file,
    normalise_cipher,
    open_key_file,
)
from jetraft.jetstream.store.disk import MemDisk

CIPHERS = ["chachapoly", "aes"]


@pytest.mark.parametrize("name", CIPHERS)
def test_seal_open_round_trip_and_every_change_is_detected(name: str) -> None:
    c = RecordCipher(b"k" * 32, name)
    sealed = c.seal(b"payload", b"header")
    assert b"payload" not in sealed and len(sealed) == len(b"payload") + c.overhead
    assert c.open(sealed, b"header") == b"payload"
    assert c.seal(b"payload", b"header") != sealed  # a fresh nonce every time
    for i in range(len(sealed)):
        bad = bytearray(sealed)
        bad[i] ^= 0x01
        with pytest.raises(CipherError):
            c.open(bytes(bad), b"header")
    with pytest.raises(CipherError):
        c.open(sealed, b"another header")
    with pytest.raises(CipherError):
        RecordCipher(b"x" * 32, name).open(sealed, b"header")
    with pytest.raises(CipherError):
        c.open(sealed[:10], b"header")


def test_cipher_names_are_nats_servers() -> None:
    assert normalise_cipher("ChaCha") == normalise_cipher("chachapoly") == "chachapoly"
    assert normalise_cipher("AES") == "aes"
    with pytest.raises(ValueError, match="unknown cipher"):
        normalise_cipher("des")
    with pytest.raises(ValueError):
        RecordCipher(b"short")


def test_keys_are_derived_per_context_and_the_key_file_needs_the_secret() -> None:
    assert derive_key("s", "stream A/X") != derive_key("s", "stream A/Y")
    assert derive_key("s", "stream A/X") != derive_key("t", "stream A/X")
    cipher, blob = new_key_file("secret", "stream $G/S", "aes")
    assert cipher.name == "aes"
    again = open_key_file("secret", "stream $G/S", blob)
    assert again.open(cipher.seal(b"x")) == b"x"  # the same data key
    with pytest.raises(CipherError, match="wrong encryption key"):
        open_key_file("not the secret", "stream $G/S", blob)
    with pytest.raises(CipherError, match="wrong encryption key"):
        open_key_file("secret", "stream $G/OTHER", blob)  # moved to another stream
    with pytest.raises(CipherError, match="damaged"):
        open_key_file("secret", "stream $G/S", b"junk")
    _, other = new_key_file("secret", "stream $G/S", "chachapoly")
    assert open_key_file("secret", "stream $G/S", other).name == "chachapoly"


def _sealed_store(disk: MemDisk) -> tuple[FileStore, RecordCipher]:
    cipher = RecordCipher(b"d" * 32)
    s = FileStore("/s", disk=disk, cipher=cipher)
    for i in range(3):
        s.store("secret.subject", b"NATS/1.0\r\nX: secret header\r\n\r\n", b"secret %d" % i, i)
    s.remove(2)
    s.sync()
    return s, cipher


def test_a_sealed_store_keeps_nothing_in_clear() -> None:
    disk = MemDisk()
    s, cipher = _sealed_store(disk)
    raw = disk.read(s.block_files()[0])
    for plain in (b"secret", b"subject", b"header"):
        assert plain not in raw
    s.close()
    s = FileStore("/s", disk=disk, cipher=cipher)
    m = s.load(3)
    assert m is not None and (m.subject, m.data) == ("secret.subject", b"secret 2")
    assert m.headers == b"NATS/1.0\r\nX: secret header\r\n\r\n"
    assert s.load(2) is None
    s.close()


def test_tampering_with_a_valid_checksum_is_corruption() -> None:
    """An attacker who rewrites a record and fixes its CRC is still caught by the tag."""
    disk = MemDisk()
    s, cipher = _sealed_store(disk)
    s.close()
    path = s.block_files()[0]
    data = bytearray(disk.read(path))
    off, _, rlen, *_ = next(iter(rec.scan(bytes(data))))
    data[off + rec.HDR_SIZE + 20] ^= 0x01
    crc = rec.zlib.crc32(bytes(data[off : off + rlen - 4]))
    data[off + rlen - 4 : off + rlen] = rec.CRC.pack(crc)
    disk.write_atomic(path, bytes(data))  # the tampered file, checksum fixed
    rec.check_one(bytes(data), off)  # the CRC alone would not notice
    with pytest.raises(StoreCorruption, match="does not open"):
        FileStore("/s", disk=disk, cipher=cipher)


def test_a_sealed_store_does_not_open_in_clear_nor_with_another_key() -> None:
    disk = MemDisk()
    s, _ = _sealed_store(disk)
    s.close()
    with pytest.raises(StoreCorruption, match="no key"):
        FileStore("/s", disk=disk)
    with pytest.raises(StoreCorruption, match="does not open"):
        FileStore("/s", disk=disk, cipher=RecordCipher(b"e" * 32))
    plain = FileStore("/p", disk=disk)
    plain.store("a", None, b"x", 1)
    plain.close()
    with pytest.raises(StoreCorruption, match="unencrypted record"):
        FileStore("/p", disk=disk, cipher=RecordCipher(b"d" * 32))


def test_sealed_consumer_state() -> None:
    cfg = apply_defaults(ConsumerConfig(durable_name="C"), StreamFacts(name="S", subjects=("s",)))
    core = ConsumerCore("S", "C", cfg, created_ns=1)
    core.apply(Start(1))
    cipher = RecordCipher(b"c" * 32, "aes")
    blob = consumer_state.encode(consumer_state.snapshot(core), cipher)
    assert b'"C"' not in blob and b"durable" not in blob
    back = consumer_state.decode(blob, cipher, ("S", "C"))
    assert back.config == cfg
    with pytest.raises(consumer_state.CorruptState, match="does not open"):
        consumer_state.decode(blob, cipher, ("S", "OTHER"))  # copied to another consumer
    with pytest.raises(consumer_state.CorruptState, match="no key"):
        consumer_state.decode(blob)
    plain = consumer_state.encode(consumer_state.snapshot(core))
    with pytest.raises(consumer_state.CorruptState, match="not encrypted"):
        consumer_state.decode(plain, cipher, ("S", "C"))
