"""One RAFT group hosted by this server: the meta group, a stream's or a consumer's.

``RaftGroup`` opens the group's durable log (``<store_dir>/jetstream/_raft_/<group>``),
drives a ``RaftNode`` over the routes, tells its owner about leadership changes, and
reports the group the way nats-server's ClusterInfo does (leader, replicas with
current/offline, seen ago, lag).

Timing: a 50 ms tick, heartbeats every 2 ticks and an election timeout of 10-20 ticks (0.5
to 1 s) so that a lost leader is replaced within about a second; nats-server uses seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from jetraft.jetstream.models import format_time
from jetraft.jetstream.reconcile import StepKind, next_step
from jetraft.raft.disk import OsDisk
from jetraft.raft.node import DurableStateMachine, RaftNode, StateMachine, Ticker
from jetraft.raft.ready import RaftConfig, RaftError, Role, SoftState
from jetraft.raft.spool import FileSpool, SnapshotSpool
from jetraft.raft.wal import Recovered, Wal
from jetraft.server.cluster.raftnet import RaftNet

log = logging.getLogger("jetraft.js.raft")

TICK_S = 0.1
# A proposal without an outcome by then fails (its outcome is unknown: it may commit later).
PROPOSAL_TIMEOUT_S = 10.0
# Elections time out after 0.5-1 s (the ack gap after a leader dies); leaders heartbeat
# every 200 ms, 2-5 beats per timeout. Every 100 ms cost 200 idle R3 streams about 6% of a
# core per server, every 200 ms about 4%; a commit reaches the followers at once either way
# (the leader sends it when it advances), heartbeats only carry liveness.
RAFT_CONFIG = RaftConfig(election_ticks=5, heartbeat_ticks=2)
# A replica not heard from for this long is not current (nats-server uses a similar bound).
CURRENT_WITHIN_S = 2.0
# A group that keeps losing its quorum advises it at most this often.
QUORUM_LOST_EVERY_NS = 10 * 10**9
# A leader that stepped down knowing no successor: how long the group may stay leaderless
# before that counts as a lost quorum (two election periods: a step-down whose transfer
# failed, or a leader removed from its group, is followed by an election well within it).
QUORUM_LOST_AFTER_S = 2 * RAFT_CONFIG.election_ticks * TICK_S
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def peer_id(server_name: str) -> str:
    """nats-server's 8-character peer id of a server name (base62 of its SHA-256)."""
    digest = hashlib.sha256(server_name.encode()).digest()
    return "".join(_B62[b % 62] for b in digest[:8])


def remove_durably(path: Path) -> None:
    """Remove a replica's directory so that it stays removed: the unlinks are synced
    before the directory goes, and its removal is synced in its parent. Without that a
    power loss may bring back some of the unlinked files, and the replica would restart
    on an older log (say an old configuration in which it was the only voter)."""
    if not path.is_dir():
        return
    disk = OsDisk()
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                child.unlink()
    disk.sync_dir(str(path))
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()
    disk.sync_dir(str(path.parent))


def discard_log(path: Path) -> None:
    """Remove a replica's log files durably, keeping its subdirectories (a state machine's
    own files), so that it restarts as a replica whose log was lost."""
    for child in path.iterdir():
        if child.is_file() or child.is_symlink():
            child.unlink()
    OsDisk().sync_dir(str(path))


class GroupHost(Protocol):
    """What a group needs from the server's clustered JetStream."""

    @property
    def server_name(self) -> str: ...

    @property
    def cluster_name(self) -> str: ...

    @property
    def raftnet(self) -> RaftNet: ...

    @property
    def ticker(self) -> Ticker:
        """One timer ticks every group of this server."""
        ...

    def raft_dir(self, group: str) -> Path: ...

    def is_online(self, server: str) -> bool: ...

    @property
    def domain(self) -> str: ...

    def advise_leader(self, account: str, advisory: Callable[[str], tuple[str, bytes]]) -> None:
        """Publish a group's leader advisory: ``advisory(account_field)`` gives (subject,
        body) for the copy into ``account`` ("") and for the system account's (named)."""
        ...


class RaftGroup:
    def __init__(
        self,
        host: GroupHost,
        group: str,
        sm: StateMachine,
        peers: Sequence[str],
        *,
        bootstrap_size: int = 0,
        on_role: Callable[[SoftState], None] | None = None,
        on_quorum_lost: Callable[[], None] | None = None,
        snapshot_entries: int = 8192,
    ) -> None:
        """``on_quorum_lost``: called when this server led the group, stepped down without
        a successor, and the group stayed leaderless (its stream or consumer is stalled);
        at most once per QUORUM_LOST_EVERY_NS."""
        self.host = host
        self.group = group
        self.sm = sm
        self.peers = tuple(peers)
        self.bootstrap_size = bootstrap_size
        self.on_role = on_role
        self.on_quorum_lost = on_quorum_lost
        self.snapshot_entries = snapshot_entries
        self.node: RaftNode | None = None
        self.wal: Wal | None = None
        self.leader_since_ns = 0
        self._last_leader = ""
        self._led_term = 0  # the term this server last led the group in (0: not leading)
        self._quorum_check: asyncio.TimerHandle | None = None
        self._quorum_advised_ns = 0
        self.corrupt = ""
        self.removed = False  # the group committed a configuration without us
        self.failed = ""  # the node stopped on a storage error

    @property
    def dir(self) -> Path:
        return self.host.raft_dir(self.group)

    async def start(self, *, known: bool = False) -> None:
        """``known``: the group existed before this server started (its assignment was
        replayed from the meta log). A known group that finds neither a log nor the
        record of how its replica started (its directory is gone: the disk was wiped, or
        this server had removed it; or its files are) lost its log: it rejoins as a
        damaged replica, which neither votes nor campaigns until its leader has repaired
        it, so what it forgot can never be decided by its vote. A replica that finds the
        record but an empty log is not damaged: it stopped before its first fsync, so it
        acknowledged nothing and voted for nobody (see ``_recover``)."""
        wal, recovered = Wal.open(OsDisk(), str(self.dir))
        if self._state_lost(recovered):
            # The state machine keeps its own state (a file stream's store) and holds less
            # than the log was compacted under: the entries in between are gone here. Drop
            # the log (not the state machine's files) and rejoin as a replica that lost it.
            wal.close()
            await asyncio.to_thread(discard_log, self.dir)
            wal, recovered = Wal.open(OsDisk(), str(self.dir))
            known = True
        empty = not recovered.entries and recovered.snapshot is None and not (
            recovered.hard_state.term
        )
        try:
            recovered = self._recover(wal, recovered, known=known, empty=empty)
        except BaseException:
            with contextlib.suppress(Exception):
                wal.close()
            raise
        if recovered.corrupt:
            self.corrupt = recovered.corrupt
            log.error("RAFT group %s: log damaged (%s); repairing from peers", self.group,
                      recovered.corrupt)
        self.wal = wal
        fresh = empty and not known
        self.node = RaftNode(
            self.host.server_name,
            self.peers,
            RAFT_CONFIG,
            wal,
            self.host.raftnet.transport(self.group),
            self.sm,
            rng=random.Random(),
            recovered=recovered,
            snapshot_entries=self.snapshot_entries,
            bootstrap_size=self.bootstrap_size,
            ticker=self.host.ticker,
            proposal_timeout_s=PROPOSAL_TIMEOUT_S,
            on_removed=self._removed,
            on_error=self._failed,
            snapshot_spool=self._spool_maker(),
        )
        self.node.subscribe(self._on_soft_state)
        self.host.raftnet.register(self.group, self.node)
        await self.node.start()
        if fresh and self.peers and self.peers[0] == self.host.server_name:
            # A new group's preferred leader (placed first) campaigns at once.
            self.node.campaign()

    def _spool_maker(self) -> Callable[[], SnapshotSpool] | None:
        """A state machine that keeps its state on disk (a file stream) can be far larger
        than memory: a snapshot from the leader is collected in a spool file in the
        group's directory. The others' snapshots live in memory anyway."""
        if not isinstance(self.sm, DurableStateMachine):
            return None
        return functools.partial(FileSpool, str(self.dir))

    def _recover(self, wal: Wal, recovered: Recovered, *, known: bool,
                 empty: bool) -> Recovered:
        """Settle how the replica starts, durably, before it takes part in anything.

        Its first configuration is not a log entry, so it is recorded (the BOOTSTRAP file:
        the group's first voters, or none when it joins an existing group) and every
        restart starts it the recorded way, whatever assignment the meta log replays (a
        later one may name other servers). A lost log is recorded too (the CORRUPT
        marker): once the damaged replica persisted its next term its log is no longer
        empty, and without the mark a restart would take it for a healthy one."""
        if not known and empty:
            wal.set_bootstrap(self.peers)
            return recovered
        if recovered.bootstrap is not None:
            self.peers = recovered.bootstrap
            return recovered
        if not (known and empty):
            return recovered  # a log of before the record existed: started as assigned
        self.peers = ()  # lost: its configuration comes from its leader, every time
        wal.set_bootstrap(())
        if recovered.corrupt is None:
            log.warning("RAFT group %s: no log on disk although the group exists; "
                        "rejoining as a damaged replica, repaired from its peers", self.group)
            wal.mark_corrupt("log lost")
            recovered = dataclasses.replace(recovered, corrupt="log lost")
        return recovered

    def _state_lost(self, recovered: Recovered) -> bool:
        sm = self.sm
        snap = recovered.snapshot
        if not isinstance(sm, DurableStateMachine) or snap is None or not snap.external:
            return False
        held = sm.durable_index()
        if held >= snap.meta.index:
            return False
        log.error("RAFT group %s: the log was compacted up to %d but the state kept beside "
                  "it holds only up to %d (lost or damaged files); repairing from peers",
                  self.group, snap.meta.index, held)
        return True

    def _removed(self) -> None:
        log.info("RAFT group %s: this server was removed from the group", self.group)
        self.removed = True

    def _failed(self, exc: BaseException) -> None:
        log.error("RAFT group %s stopped on a storage error: %s", self.group, exc)
        self.failed = str(exc)

    def _on_soft_state(self, ss: SoftState) -> None:
        if ss.leader != self._last_leader:
            self._last_leader = ss.leader
            self.leader_since_ns = time.time_ns() if ss.leader else 0
        # A leader that stops leading in its own term knowing no other leader: most often
        # it could not hear a quorum (check-quorum), but a failed transfer or its removal
        # from the group look the same, and are followed by an election at once. So the
        # group counts as without quorum if it is still leaderless a while later.
        if (
            self.on_quorum_lost is not None
            and ss.role is not Role.LEADER
            and 0 < self._led_term == ss.term
            and not ss.leader
            and self._quorum_check is None
        ):
            self._quorum_check = asyncio.get_running_loop().call_later(
                QUORUM_LOST_AFTER_S, self._check_quorum_lost
            )
        self._led_term = ss.term if ss.role is Role.LEADER else 0
        if self.on_role is not None:
            try:
                self.on_role(ss)
            except Exception:
                log.exception("group %s: leadership handler failed", self.group)

    async def stop(self) -> None:
        if self._quorum_check is not None:
            self._quorum_check.cancel()
            self._quorum_check = None
        node = self.node
        if node is None:
            return
        self.host.raftnet.unregister(self.group, node)
        await node.stop()
        if self.wal is not None:
            with contextlib.suppress(Exception):
                self.wal.close()
        self.node = None

    async def destroy(self) -> None:
        """This server left the group: stop and remove its log, durably."""
        await self.stop()
        await asyncio.to_thread(remove_durably, self.dir)

    def differs_from(self, want: Sequence[str]) -> bool:
        """Leader: does the group's membership differ from ``want``?"""
        node = self.node
        if node is None:
            return False
        m = node.core.membership
        return bool(m.learners) or set(m.voters) != set(want)

    async def reconcile_members(self, want: Sequence[str],
                                wanted: Callable[[], Sequence[str]] | None = None) -> bool:
        """Leader: one step towards the membership ``want`` (the assignment's servers), as
        ``jetstream.reconcile.next_step`` decides: promote a caught-up learner, wait for
        one catching up, add a missing server as a learner, remove one no longer wanted,
        or hand leadership to a wanted voter when we are the one unwanted (the new leader
        removes us). True when it did something (call again). ``wanted`` gives the
        assignment's servers as they are now: waiting for a learner stops when they
        change (the learner may be unwanted now, and the group keeps unwanted replicas
        meanwhile)."""
        node = self.node
        if node is None or not node.is_leader:
            return False
        core = node.core
        m = core.membership
        caught_up = [p for p in m.learners if core.learner_caught_up(p)]
        step = next_step(want, m.voters, m.learners, self.host.server_name, caught_up)
        if step is None:
            return False
        try:
            if step.kind is StepKind.TRANSFER:
                node.transfer_leadership(step.peer)
                return False
            if step.kind is StepKind.CATCH_UP:
                peer = step.peer
                await node.wait_for(
                    lambda: core.learner_caught_up(peer) or not node.is_leader
                    or (wanted is not None and tuple(wanted()) != tuple(want)), 30.0)
                return True
            change = step.change()
            assert change is not None
            log.info("RAFT group %s: %s %s", self.group, step.kind.value, step.peer)
            await node.change_membership(change, timeout_s=PROPOSAL_TIMEOUT_S)
            return True
        except (RaftError, ValueError, TimeoutError) as exc:
            log.debug("RAFT group %s: membership change: %s", self.group, exc)
            await asyncio.sleep(0.2)
            return True

    # --- queries -----------------------------------------------------------------------------

    @property
    def leader(self) -> str:
        return self.node.leader if self.node is not None else ""

    @property
    def is_leader(self) -> bool:
        return self.node is not None and self.node.is_leader

    def members(self) -> tuple[str, ...]:
        """Voters and learners of the configuration in force here."""
        if self.node is None:
            return self.peers
        m = self.node.core.membership
        return (*m.voters, *m.learners) if m.voters else self.peers

    def voters(self) -> tuple[str, ...]:
        if self.node is None:
            return self.peers
        return self.node.core.membership.voters or self.peers

    def cluster_info(self) -> dict[str, Any]:
        """nats-server's ClusterInfo. On the leader, replicas carry current/active/lag from
        its view of each follower; elsewhere only names and online state are known."""
        out: dict[str, Any] = {"name": self.host.cluster_name, "raft_group": self.group}
        leader = self.leader
        out["leader"] = leader
        if leader and self.leader_since_ns:
            out["leader_since"] = format_time(self.leader_since_ns)
        replicas = self.peer_infos(with_leader=False)
        if replicas:
            out["replicas"] = replicas
        return out

    def _check_quorum_lost(self) -> None:
        self._quorum_check = None
        node = self.node
        if node is None or self.removed or node.leader or self.on_quorum_lost is None:
            return
        now = time.time_ns()
        if now - self._quorum_advised_ns < QUORUM_LOST_EVERY_NS:
            return  # as nats-server: at most one per interval
        self._quorum_advised_ns = now
        self.on_quorum_lost()

    def peer_infos(self, with_leader: bool) -> list[dict[str, Any]]:
        """nats-server's PeerInfo of each member (the leader's own with ``with_leader``, as
        leader advisories list it: current, active 0)."""
        host = self.host
        node = self.node
        leader = self.leader
        replicas: list[dict[str, Any]] = []
        status = node.status() if node is not None else None
        by_peer = {p.id: p for p in status.peers} if status is not None else {}
        members = list(self.voters())
        if node is not None:
            members += list(node.core.membership.learners)
        for name in members:
            if name == leader:
                if with_leader:
                    replicas.append(
                        {"name": name, "current": True, "active": 0, "peer": peer_id(name)}
                    )
                continue
            rep: dict[str, Any] = {"name": name, "current": False, "active": 0}
            ps = by_peer.get(name)
            if ps is not None and status is not None:
                ago = ps.last_heard_ticks_ago
                if ago is not None:
                    # Ticks are the clock here: "heard within the last tick" is up to one
                    # tick ago, never 0 (which clients read as "not seen").
                    rep["active"] = int((ago + 1) * TICK_S * 1e9)
                lag = max(status.commit - ps.match, 0)
                if lag:
                    rep["lag"] = lag
                rep["current"] = lag == 0 and ago is not None and ago * TICK_S < CURRENT_WITHIN_S
            if not host.is_online(name):
                rep["offline"] = True
                rep["current"] = False
            rep["peer"] = peer_id(name)
            replicas.append(rep)
        return replicas

    def raftz(self) -> dict[str, Any]:
        """This replica's view of its group for /raftz (nats-server's field names, the
        parts that apply; ``peers`` is filled on the leader only)."""
        node = self.node
        if node is None:
            return {"id": peer_id(self.host.server_name), "state": "CLOSED"}
        st = node.status()
        peers = {
            peer_id(p.id): {
                "name": p.id,
                "known": True,
                "voter": p.voter,
                "last_replicated_index": p.match,
                "lag": p.lag,
                **({"last_seen": f"{p.last_heard_ticks_ago * TICK_S:.3f}s"}
                   if p.last_heard_ticks_ago is not None else {}),
            }
            for p in st.peers if p.id != st.id
        }
        return {
            "id": peer_id(st.id),
            "state": st.role.value.upper() if isinstance(st.role, Role) else str(st.role),
            "size": len(st.membership.voters),
            "quorum_needed": len(st.membership.voters) // 2 + 1,
            "committed": st.commit,
            "applied": st.applied,
            "leader": peer_id(st.leader) if st.leader else "",
            "leader_name": st.leader,
            "term": st.term,
            "first_index": st.first_index,
            "last_index": st.last_index,
            "corrupt": st.corrupt,
            "peers": peers,
        }

    def status(self) -> dict[str, Any]:
        node = self.node
        if node is None:
            return {"group": self.group, "stopped": True}
        st = node.status()
        return {
            "group": self.group,
            "term": st.term,
            "leader": st.leader,
            "role": st.role.value if isinstance(st.role, Role) else str(st.role),
            "commit": st.commit,
            "applied": st.applied,
            "voters": list(st.membership.voters),
        }
