"""The file store's read path: a live message's record, read from its block file and checked.

Messages stay on disk (``file.py``); the index gives each live sequence its block, offset and
record length. A read is a positioned read of that record, or of up to ``read_ahead`` bytes
when it starts at or shortly after the previous one (a scan, a consumer reading in order):
the next reads are then served from that buffer (``_rcache``). A record still in the write
buffer is read from there. Every record is checked (magic, length, kind, sequence, CRC)
before it is returned; a mismatch raises ``StoreCorruption``.

``BlockReads`` is the part of ``FileStore`` (its only subclass, through ``_reclaim.FileSpace``)
that reads; ``FileStore`` sets up the state it declares. A base class rather than an object
the store calls: ``load`` is the consumers' per-message path, and its calls stay direct.
"""

from __future__ import annotations

import zlib
from typing import Final

from jetraft.jetstream.store import _records as rec
from jetraft.jetstream.store._base import BaseStore
from jetraft.jetstream.store._blocks import OFF_BITS, OFF_MASK, Block, ReadFiles
from jetraft.jetstream.store.cipher import CipherError, RecordCipher
from jetraft.jetstream.store.types import (
    RawMsg,
    StoreClosed,
    StoreCorruption,
    StoredMsg,
    StoreError,
)

# Final: the compiled build keeps these in C statics, read without a module-dict lookup
# (``load`` and ``load_raw_run`` read them per record).
_unpack_head: Final = rec.HEADER.unpack_from
_unpack_crc: Final = rec.CRC.unpack_from
_crc32: Final = zlib.crc32
_MAGIC: Final = rec.MAGIC
_KIND_MSG: Final = rec.KIND_MSG
_HDR_SIZE: Final = rec.HDR_SIZE
_NO_HDR: Final = rec.NO_HDR


class BlockReads(BaseStore):
    """Reads of live messages over the file store's blocks (state set up by ``FileStore``)."""

    # The store's state that reads use (see ``FileStore._open``).
    _root: str
    _cipher: RecordCipher | None
    _failed: BaseException | None
    _read_ahead: int
    _blocks: dict[int, Block]
    _files: ReadFiles
    _active: Block
    _wbuf: bytearray
    # The last read-ahead: (block, offset, bytes); and where the last read ended.
    _rcache: tuple[int, int, bytes] | None
    _last_end: tuple[int, int]

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("stream store is closed")
        if self._failed is not None:
            raise StoreError(f"stream store {self._root} failed: {self._failed}")

    def _fail(self, exc: BaseException) -> StoreError:
        """Remember the first I/O failure: the store refuses all further work."""
        self._failed = exc
        return StoreError(f"stream store {self._root} failed: {exc}")

    # --- reading ---------------------------------------------------------------------------

    def _fetch(self, bidx: int, off: int, rlen: int) -> bytes | memoryview:
        active = self._active
        if bidx == active.idx and off >= active.size:
            start = off - active.size
            return bytes(self._wbuf[start : start + rlen])
        c = self._rcache
        end = off + rlen
        if c is not None and c[0] == bidx and c[1] <= off and end <= c[1] + len(c[2]):
            self._last_end = (bidx, end)
            return memoryview(c[2])[off - c[1] : end - c[1]]
        block = self._blocks[bidx]
        # Read ahead when this read starts at or shortly after the previous one (a scan,
        # filtered or not); random access (KV gets) reads just the record.
        last_bidx, last_end = self._last_end
        forward = last_bidx == bidx and 0 <= off - last_end < self._read_ahead
        want = max(rlen, self._read_ahead) if forward else rlen
        try:
            data = self._files.get(block).pread(off, want)
        except OSError as e:
            raise StoreError(f"reading {block.path}: {e}") from e
        if len(data) < rlen:
            raise StoreCorruption(block.path, off, "record missing from the block file")
        self._last_end = (bidx, end)
        if want == rlen:
            return data
        self._rcache = (bidx, off, data)
        return memoryview(data)[:rlen]

    def _record(
        self, seq: int, loc: int, rlen: int
    ) -> tuple[bytes | memoryview, int, int, int]:
        """The verified MSG record of live ``seq`` at ``loc``: (record, ts, subject len,
        header len)."""
        bidx, off = loc >> OFF_BITS, loc & OFF_MASK
        raw = self._fetch(bidx, off, rlen)
        magic, rec_len, kind, _, slen, rseq, ts, hlen = _unpack_head(raw, 0)
        if (
            magic != _MAGIC
            or rec_len != rlen
            or kind != _KIND_MSG
            or rseq != seq
            or _crc32(raw[: rlen - 4]) != _unpack_crc(raw, rlen - 4)[0]
        ):
            raise StoreCorruption(self._blocks[bidx].path, off, f"bad record for seq {seq}")
        return raw, ts, slen, hlen

    def load(self, seq: int) -> StoredMsg | None:
        # The consumers' hot path: one index lookup, no separate liveness check.
        if self._closed or self._failed is not None:
            self._check()
        found = self._ix.locate(seq)
        if found is None:
            return None
        loc, rlen, sid = found
        c = self._rcache
        if c is not None and self._cipher is None:
            # A record inside the read-ahead buffer (a consumer reading in sequence), what
            # ``_read_at`` does with no memoryview and no call per layer: a third of a
            # delivery's store work in the pure build.
            bidx, off = loc >> OFF_BITS, loc & OFF_MASK
            o = off - c[1]
            buf = c[2]
            active = self._active
            if (
                c[0] == bidx
                and o >= 0
                and o + rlen <= len(buf)
                and (bidx != active.idx or off < active.size)
            ):
                self._last_end = (bidx, off + rlen)
                magic, rec_len, kind, _, slen, rseq, ts, hlen = _unpack_head(buf, o)
                e = o + rlen - 4
                if (
                    magic != _MAGIC
                    or rec_len != rlen
                    or kind != _KIND_MSG
                    or rseq != seq
                    or _crc32(buf[o:e]) != _unpack_crc(buf, e)[0]
                ):
                    raise StoreCorruption(self._blocks[bidx].path, off, f"bad record for seq {seq}")
                name = self._ix.names[sid]
                assert name is not None
                p = o + _HDR_SIZE + slen
                if hlen == _NO_HDR:
                    return StoredMsg(seq, name, None, buf[p:e], ts)
                return StoredMsg(seq, name, buf[p : p + hlen] or None, buf[p + hlen : e], ts)
        return self._read_at(seq, loc, rlen, sid)

    def load_raw_run(self, start_seq: int, max_msgs: int, max_bytes: int = 0) -> list[RawMsg]:
        """``load_run`` as tuples, read straight from the read-ahead buffer: the records of a
        run are mostly consecutive in one block, so a row costs an index lookup, the record
        checks ``load`` makes (magic, length, kind, sequence, CRC) and two slices, with no
        message object and no call per row. A record outside the buffer (the first of a
        run, one in the write buffer, every record of an encrypted store) goes through
        ``_read_at``, which reads ahead for the next ones."""
        if self._closed or self._failed is not None:
            self._check()
        out: list[RawMsg] = []
        if max_msgs <= 0:
            return out
        ix = self._ix
        names = ix.names
        seq = start_seq if start_seq > ix.first else ix.first
        last = ix.last
        size = 0
        plain = self._cipher is None
        active = self._active
        # The buffer's block, offset and bytes (-1: none usable), and where the last row
        # read from it ended: written back to ``_last_end`` before any other read, as the
        # read-ahead decision depends on it.
        cb, cstart, buf = -1, 0, b""
        c = self._rcache
        if c is not None and plain:
            cb, cstart, buf = c
        end_b = end_off = -1
        while seq <= last:
            found = ix.locate(seq)
            if found is None:
                seq = ix.next_live(seq)
                if not seq:
                    break
                continue
            loc, rlen, sid = found
            bidx, off = loc >> OFF_BITS, loc & OFF_MASK
            o = off - cstart
            if (
                bidx == cb
                and o >= 0
                and o + rlen <= len(buf)
                and (bidx != active.idx or off < active.size)
            ):
                # ``load``'s checks, on the buffer.
                magic, rec_len, kind, _, slen, rseq, ts, hlen = _unpack_head(buf, o)
                e = o + rlen - 4
                if (
                    magic != _MAGIC
                    or rec_len != rlen
                    or kind != _KIND_MSG
                    or rseq != seq
                    or _crc32(buf[o:e]) != _unpack_crc(buf, e)[0]
                ):
                    self._last_end = (bidx, off + rlen)
                    raise StoreCorruption(self._blocks[bidx].path, off, f"bad record for seq {seq}")
                name = names[sid]
                assert name is not None
                p = o + _HDR_SIZE + slen
                hdrs: bytes | None = None
                if hlen != _NO_HDR:
                    hdrs = buf[p : p + hlen] or None
                    p += hlen
                data = buf[p:e]
                end_b, end_off = bidx, off + rlen
            else:
                if end_b >= 0:
                    self._last_end = (end_b, end_off)
                    end_b = -1
                m = self._read_at(seq, loc, rlen, sid)
                name, hdrs, data, ts = m.subject, m.headers, m.data, m.ts_ns
                c = self._rcache
                if c is not None and plain:
                    cb, cstart, buf = c
            out.append((seq, name, hdrs, data, ts))
            if len(out) >= max_msgs:
                break
            if max_bytes:
                size += len(name) + len(data)
                if hdrs is not None:
                    size += len(hdrs)
                if size >= max_bytes:
                    break
            seq += 1
        if end_b >= 0:
            self._last_end = (end_b, end_off)
        return out

    def _read(self, seq: int) -> StoredMsg:
        found = self._ix.locate(seq)
        assert found is not None
        return self._read_at(seq, *found)

    def _read_at(self, seq: int, loc: int, rlen: int, sid: int) -> StoredMsg:
        raw, ts, slen, hlen = self._record(seq, loc, rlen)
        name = self._ix.names[sid]
        assert name is not None
        if self._cipher is not None:
            try:
                body = rec.plain_body(raw, 0, len(raw), self._cipher)
            except CipherError as e:
                path = self._blocks[loc >> OFF_BITS].path
                raise StoreCorruption(path, loc & OFF_MASK, str(e)) from None
            _, hdrs, data = rec.msg_fields(body, slen, hlen)
            return StoredMsg(seq, name, hdrs, data, ts)
        p = _HDR_SIZE + slen
        headers: bytes | None = None
        if hlen != _NO_HDR:
            headers = bytes(raw[p : p + hlen]) or None
            p += hlen
        return StoredMsg(seq, name, headers, bytes(raw[p : rlen - 4]), ts)

    def _raw_record(self, seq: int) -> bytes:
        found = self._ix.locate(seq)
        assert found is not None
        raw = self._record(seq, found[0], found[1])[0]
        if self._cipher is None:
            return bytes(raw)
        try:
            return rec.plain_record(raw, 0, len(raw), self._cipher)
        except CipherError as e:
            raise StoreCorruption(self._root, 0, f"record of seq {seq}: {e}") from None
