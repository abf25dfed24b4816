"""One simulated replica: the production Driver over the real WAL on a crashable MemDisk.

The replica runs driver.Driver, the code RaftNode runs, on simulated time: the driver's
blocking jobs (fsync, snapshot writes) complete at once or after a drawn delay (a slow
fsync, during which messages, ticks and proposals queue up as in production), can die
half way (power loss) or fail (EIO, ENOSPC, injected by the disk).

What the checker needs is observed from outside the driver: every Ready (observe_ready),
every message sent, what the WAL made durable (TrackingLog, independent of the driver's
own bookkeeping), every entry applied and snapshot restored (ObservedSM).
"""

from __future__ import annotations

import errno
import hashlib
import random
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

from ..core import RaftCore
from ..disk import MemDisk, SimulatedCrash
from ..driver import (
    Driver,
    DurableStateMachine,
    Job,
    Outcome,
    Process,
    State,
    StateMachine,
)
from ..messages import Message
from ..ready import RaftConfig, Ready
from ..types import Entry, HardState, Snapshot, SnapshotBytes, SnapshotMeta, whole
from ..wal import Recovered, Wal

WAL_DIR = "/wal"
_SM = struct.Struct("<Q")


class SimStateMachine(StateMachine, Protocol):
    """A state machine the simulator can compare across replicas."""

    @property
    def index(self) -> int:
        """Index of the last entry applied (or of the snapshot restored)."""

    def digest(self) -> bytes:
        """A summary of the state: equal on every replica at the same index."""


class HashStateMachine:
    """State = (index of the last applied entry, running hash of everything applied)."""

    __slots__ = ("_digest", "_index")

    def __init__(self) -> None:
        self._index = 0
        self._digest = b"\0" * 8

    @property
    def index(self) -> int:
        return self._index

    def digest(self) -> bytes:
        return self._digest

    def apply(self, e: Entry) -> object:
        h = hashlib.blake2b(self._digest, digest_size=8)
        h.update(struct.pack("<QQB", e.index, e.term, e.kind))
        h.update(e.data)
        self._digest = h.digest()
        self._index = e.index
        return e.index

    def snapshot(self) -> bytes:
        return _SM.pack(self._index) + self._digest

    def restore(self, data: bytes) -> None:
        self._index = _SM.unpack_from(data)[0]
        self._digest = data[_SM.size :]


SmFactory = Callable[[MemDisk], SimStateMachine]  # gets the replica's disk
Payload = Callable[[random.Random, bytes], bytes]  # (rng, proposal id) -> entry data


def hash_sm(disk: MemDisk) -> SimStateMachine:
    return HashStateMachine()


def plain_payload(rng: random.Random, pid: bytes) -> bytes:
    return pid


class DurableHashStateMachine(HashStateMachine):
    """The running hash, kept durably on the replica's own disk (a state machine with
    its own storage, as a stream store is): persisted every few entries, so what is
    durable lags what is applied; entries it already holds are skipped on replay."""

    PATH = "/sm/state"
    __slots__ = ("_disk", "_durable", "_every", "_since")

    def __init__(self, disk: MemDisk, every: int = 3) -> None:
        super().__init__()
        self._disk = disk
        self._every = every
        self._since = 0
        disk.makedirs("/sm")
        if disk.exists(self.PATH):
            super().restore(disk.read(self.PATH))
        self._durable = self._index

    def durable_index(self) -> int:
        return self._durable

    def apply(self, e: Entry) -> object:
        if e.index <= self._index:
            return e.index  # held already (replayed after a restart)
        result = super().apply(e)
        self._since += 1
        if self._since >= self._every:
            self._persist()
        return result

    def restore(self, data: SnapshotBytes) -> None:
        super().restore(whole(data))
        self._persist()  # durable on return, as the contract asks

    def _persist(self) -> None:
        self._disk.write_atomic(self.PATH, self.snapshot())
        self._durable = self._index
        self._since = 0


def durable_hash_sm(disk: MemDisk) -> SimStateMachine:
    return DurableHashStateMachine(disk)


class ObservedSM:
    """Wraps the replica's state machine to report applies and restores."""

    def __init__(self, inner: SimStateMachine, node: SimNode) -> None:
        self.inner = inner
        self.node = node

    def apply(self, entry: Entry) -> object:
        result = self.inner.apply(entry)
        if self.inner.index == entry.index:  # not skipped as already held
            self.node.applied_hook(self.node, entry)
        return result

    def snapshot(self) -> SnapshotBytes:
        return self.inner.snapshot()

    def restore(self, data: SnapshotBytes) -> None:
        self.inner.restore(whole(data))
        self._restored()

    def _restored(self) -> None:
        meta = self.node.snapshot_meta
        assert meta is not None
        self.node.restored_hook(self.node, meta)


class ObservedDurableSM(ObservedSM):
    def __init__(self, inner: SimStateMachine, node: SimNode) -> None:
        super().__init__(inner, node)
        assert isinstance(inner, DurableStateMachine)
        self._durable = inner

    def durable_index(self) -> int:
        return self._durable.durable_index()

    def restore(self, data: SnapshotBytes) -> None:
        self._durable.restore(data)  # as given: a durable one reads it in pieces
        self._restored()


class TrackingLog:
    """The WAL, watched: what it has made durable, as the checker must know it."""

    def __init__(self, wal: Wal, hs: HardState) -> None:
        self.wal = wal
        self.given_hs = hs
        self.durable_hs = hs
        self.durable_last = wal.last_index

    def append(self, entries: Sequence[Entry]) -> None:
        self.wal.append(entries)

    def set_hard_state(self, hs: HardState) -> None:
        self.wal.set_hard_state(hs)
        self.given_hs = hs

    def _durable(self) -> None:
        self.durable_hs = self.given_hs
        self.durable_last = self.wal.last_index

    def sync(self) -> None:
        self.wal.sync()
        self._durable()

    def save_snapshot(self, snap: Snapshot) -> None:
        self.wal.save_snapshot(snap)  # syncs everything given first
        self._durable()

    def compact(self, upto_index: int) -> None:
        self.wal.compact(upto_index)

    def clear_corruption(self) -> None:
        self.wal.clear_corruption()


class SimNode:
    def __init__(
        self,
        node_id: str,
        cfg: RaftConfig,
        seed: str,
        peers: tuple[str, ...],
        segment_bytes: int,
        sm_factory: SmFactory,
        *,
        disk: MemDisk | None = None,
        wal_dir: str = WAL_DIR,
    ) -> None:
        """`disk`: the replica's own by default; a simulated server hosting several
        groups gives each its `wal_dir` on the server's one disk (and crashes that disk
        once for all of them: see `halt`)."""
        self.id = node_id
        self.cfg = cfg
        self.seed = seed
        self.peers = peers
        self.segment_bytes = segment_bytes
        self.sm_factory = sm_factory
        self.disk = disk if disk is not None else MemDisk()
        self.wal_dir = wal_dir
        self.up = False
        self.incarnation = 0
        self.driver: Driver | None = None
        self.log: TrackingLog | None = None
        self.last_core: RaftCore | None = None  # the core when the process last died
        self.last_durable = 0  # its last durable index then
        self.sm: SimStateMachine = sm_factory(self.disk)
        self.snapshot_meta: SnapshotMeta | None = None  # of the snapshot being restored
        self.snapshot_every = (8, 40)  # entries between snapshots, drawn at each start
        self.crash_in_io = False  # the next job dies half way (power loss)
        self.fail_in_io: OSError | None = None  # the next job fails with this error
        self.io_delay = 0  # steps the next job takes (a slow fsync)
        # A suspended Driver.process(): waiting for `job` to complete at step `job_at`.
        self._gen: Process | None = None
        self._job: Job | None = None
        self.job_at = 0
        # Set by the world.
        self.send: Callable[[SimNode, Message], None] = lambda n, m: None
        self.ready_hook: Callable[[SimNode, Ready], None] = lambda n, rd: None
        self.commit_hook: Callable[[SimNode, Entry], None] = lambda n, e: None
        self.applied_hook: Callable[[SimNode, Entry], None] = lambda n, e: None
        self.restored_hook: Callable[[SimNode, SnapshotMeta], None] = lambda n, m: None
        self.done_hook: Callable[[SimNode, object, Outcome], None] = lambda n, t, o: None
        self.removed_hook: Callable[[SimNode], None] = lambda n: None
        # What recovery found, before the driver sees it (a host may declare a log lost).
        self.recover_hook: Callable[[Wal, Recovered], Recovered] = lambda wal, rec: rec

    # ------------------------------------------------------------------ lifecycle
    def start(self, rng: random.Random) -> str | None:
        """(Re)open the WAL and start a driver on it. Returns the corruption report."""
        wal, rec = Wal.open(self.disk, self.wal_dir, segment_bytes=self.segment_bytes)
        rec = self.recover_hook(wal, rec)
        self.incarnation += 1
        self.log = TrackingLog(wal, rec.hard_state)
        self.sm = self.sm_factory(self.disk)
        self.snapshot_meta = rec.snapshot.meta if rec.snapshot is not None else None
        core_rng = random.Random(f"{self.seed}:{self.id}:{self.incarnation}")
        driver = Driver(
            self.id, self.peers, self.cfg, self.log, self._observed(),
            lambda m: self.send(self, m), lambda t, o: self.done_hook(self, t, o), core_rng,
            recovered=rec, snapshot_entries=rng.randint(*self.snapshot_every),
            keep_entries=rng.randint(0, 5),
        )
        driver.observe_ready = lambda rd: self.ready_hook(self, rd)
        driver.observe_apply = lambda e: self.commit_hook(self, e)
        driver.on_removed = lambda: self.removed_hook(self)
        self.driver = driver
        self.up = driver.state is State.RUNNING
        self.crash_in_io = False
        self.fail_in_io = None
        self.io_delay = 0
        self._gen = self._job = None
        if driver.state is State.REMOVED:
            self.removed_hook(self)
        return rec.corrupt

    def _observed(self) -> ObservedSM:
        if isinstance(self.sm, DurableStateMachine):
            return ObservedDurableSM(self.sm, self)
        return ObservedSM(self.sm, self)

    def halt(self) -> None:
        """The process stops (its server crashed or was killed); the disk is the
        server's business (crashed or not, once for all the groups on it)."""
        self._drop()

    def _drop(self) -> None:
        if self.driver is not None and self.log is not None:
            # For the checker: what this replica may come back with.
            self.last_core = self.driver.core
            self.last_durable = self.log.durable_last
        if self._gen is not None:
            self._gen.close()
        self._gen = self._job = None
        self.up = False
        self.driver = None
        self.log = None

    def crash(self, rng: random.Random) -> None:
        """Power loss: the process and everything not fsync'd are gone."""
        self._drop()
        self.disk.crash(rng)

    def kill(self) -> None:
        """The process dies, the machine does not: unsynced writes stay readable."""
        self._drop()
        self.disk.kill_process()

    @property
    def core_role_leader(self) -> bool:
        d = self.driver
        return d is not None and self.up and d.core.role.value == "leader"

    # ------------------------------------------------------------------ running
    def busy(self) -> bool:
        """A job (an fsync) is in progress."""
        return self._gen is not None

    def pump(self, now: int, rng: random.Random) -> str | None:
        """Let the driver run as far as it can at step `now`. Returns "crash" if the
        node died in a job (power loss), "failed" if a job failed and the driver
        stopped, else None."""
        driver = self.driver
        if driver is None or not self.up:
            return None
        reply: object = None
        error: BaseException | None = None
        if self._gen is None:
            if not driver.has_work():
                return None
            self._gen = driver.process()
        elif now < self.job_at:
            return None
        else:
            job, self._job = self._job, None
            assert job is not None
            outcome, reply, error = self._exec(job, rng)
            if outcome == "crash":
                return outcome
        gen = self._gen
        while True:
            try:
                job = gen.throw(error) if error is not None else gen.send(reply)
            except StopIteration:
                return self._finished()
            if self.io_delay > 0:  # a slow disk: the job completes later
                self._job, self.job_at = job, now + self.io_delay
                self.io_delay = 0
                return None
            outcome, reply, error = self._exec(job, rng)
            if outcome == "crash":
                return outcome

    def _exec(self, job: Job, rng: random.Random) -> tuple[str, object, BaseException | None]:
        disk = self.disk
        if self.crash_in_io:
            disk.arm_crash(rng.randint(0, 1))  # before the write or the fsync
        elif self.fail_in_io is not None:
            disk.arm_error(rng.randint(0, 1), self.fail_in_io)
        try:
            reply = job()
        except SimulatedCrash:
            self.crash(rng)
            return "crash", None, None
        except OSError as exc:
            return "error", None, exc
        finally:
            disk.disarm()
        return "ok", reply, None

    def _finished(self) -> str | None:
        self._gen = None
        driver = self.driver
        if driver is not None and driver.state is State.FAILED:
            self.up = False
            return "failed"
        if driver is not None and driver.state is State.REMOVED:
            self.up = False
        return None


def enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def eio() -> OSError:
    return OSError(errno.EIO, "Input/output error")
