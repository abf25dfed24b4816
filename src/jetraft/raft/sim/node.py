"""One simulated replica: the real core and the real WAL over a crashable MemDisk.

The replica follows the Ready contract exactly as the asyncio driver does (persist, fsync
when asked, send, apply, advance), synchronously. Its state machine keeps only a running
hash of what it applied, which is what the checker compares across replicas.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Callable

from ..core import RaftCore
from ..disk import MemDisk, SimulatedCrash
from ..messages import Message
from ..ready import RaftConfig, Ready
from ..storage import core_from_recovered, persist_ready, split_messages
from ..types import Entry, Snapshot
from ..wal import Wal

WAL_DIR = "/wal"
_SM = struct.Struct("<Q")


class HashStateMachine:
    """State = (index of the last applied entry, running hash of everything applied)."""

    __slots__ = ("digest", "index")

    def __init__(self) -> None:
        self.index = 0
        self.digest = b"\0" * 8

    def apply(self, e: Entry) -> None:
        h = hashlib.blake2b(self.digest, digest_size=8)
        h.update(struct.pack("<QQB", e.index, e.term, e.kind))
        h.update(e.data)
        self.digest = h.digest()
        self.index = e.index

    def snapshot(self) -> bytes:
        return _SM.pack(self.index) + self.digest

    def restore(self, data: bytes) -> None:
        self.index = _SM.unpack_from(data)[0]
        self.digest = data[_SM.size :]


class SimNode:
    def __init__(
        self,
        node_id: str,
        cfg: RaftConfig,
        seed: str,
        peers: tuple[str, ...],
        segment_bytes: int,
    ) -> None:
        self.id = node_id
        self.cfg = cfg
        self.seed = seed
        self.peers = peers
        self.segment_bytes = segment_bytes
        self.disk = MemDisk()
        self.up = False
        self.incarnation = 0
        self.core: RaftCore | None = None
        self.wal: Wal | None = None
        self.sm = HashStateMachine()
        self.crash_in_sync = False  # the next fsync dies half way (fault injection)
        self.snapshot_every = 0
        # Durable marks as this driver persisted them, to check "persist before send".
        self.durable_term = 0
        self.durable_vote = ""
        self.durable_last = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self, rng: random.Random) -> str | None:
        """(Re)open the WAL and rebuild the core. Returns the corruption report, if any."""
        wal, rec = Wal.open(self.disk, WAL_DIR, segment_bytes=self.segment_bytes)
        self.incarnation += 1
        core_rng = random.Random(f"{self.seed}:{self.id}:{self.incarnation}")
        self.core = core_from_recovered(self.id, self.cfg, core_rng, rec, peers=self.peers)
        self.wal = wal
        self.sm = HashStateMachine()
        if rec.snapshot is not None:
            self.sm.restore(rec.snapshot.data)
        hs = rec.hard_state
        self.durable_term, self.durable_vote = hs.term, hs.vote
        self.durable_last = (
            rec.entries[-1].index
            if rec.entries
            else (rec.snapshot.meta.index if rec.snapshot else 0)
        )
        self.snapshot_every = rng.randint(8, 40)
        self.up = True
        self.crash_in_sync = False
        return rec.corrupt

    def crash(self, rng: random.Random) -> None:
        """Power loss: the core and everything not fsync'd are gone."""
        self.up = False
        self.core = None
        if self.wal is not None:
            self.wal = None
        self.disk.crash(rng)

    # ------------------------------------------------------------------ Ready loop
    def process(
        self,
        rng: random.Random,
        send: Callable[[Message], None],
        on_ready: Callable[[SimNode, Ready], None],
        on_apply: Callable[[SimNode, Entry], None],
        on_restore: Callable[[SimNode, Snapshot], None],
    ) -> bool:
        """Run Readys until the core is idle. False if the node crashed in an fsync."""
        core, wal = self.core, self.wal
        assert core is not None and wal is not None
        for _ in range(1000):
            if not core.has_ready():
                return True
            rd = core.ready()
            on_ready(self, rd)  # the checker sees entries before they can be truncated
            persist_ready(wal, rd)
            if rd.snapshot is not None:
                self.sm.restore(rd.snapshot.data)
                on_restore(self, rd.snapshot)
            # A leader's AppendEntries may leave while its own fsync runs, as in node.py.
            early, late = split_messages(rd, self.durable_term, self.durable_vote)
            for m in early:
                send(m)
            if rd.must_sync:
                if self.crash_in_sync:
                    self.disk.arm_crash(rng.randint(0, 1))  # before the write or the fsync
                try:
                    wal.sync()
                except SimulatedCrash:
                    self.crash(rng)
                    return False
                self.disk.disarm()
            self._note_durable(rd)
            for m in late:
                send(m)
            for e in rd.committed:
                self.sm.apply(e)
                on_apply(self, e)
            if rd.repaired:
                wal.clear_corruption()
            core.advance(rd)
            self._maybe_snapshot(rng)
        raise AssertionError(f"{self.id}: Ready loop did not settle")

    def _note_durable(self, rd: Ready) -> None:
        if rd.hard_state is not None:
            self.durable_term, self.durable_vote = rd.hard_state.term, rd.hard_state.vote
        if rd.snapshot is not None:
            self.durable_last = rd.snapshot.meta.index
        if rd.entries:
            self.durable_last = rd.entries[-1].index

    def _maybe_snapshot(self, rng: random.Random) -> None:
        core, wal = self.core, self.wal
        assert core is not None and wal is not None
        snap_index = core.log.snapshot.meta.index if core.log.snapshot else 0
        if core.applied - snap_index < self.snapshot_every or self.sm.index != core.applied:
            return
        snap = core.create_snapshot(core.applied, self.sm.snapshot())
        wal.save_snapshot(snap)
        # Keep a few entries in memory so that slightly lagging followers need no snapshot.
        core.compact(snap, snap.meta.index - rng.randint(0, 5))
        self.snapshot_every = rng.randint(8, 40)
