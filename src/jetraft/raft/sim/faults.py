"""The faults the simulator injects, at rates drawn per seed (some seeds calm, some not).

Per tick of the safety phase, each with its own probability:
- power loss of a replica (everything not fsync'd is lost), sometimes inside its next
  fsync; a process kill (unsynced writes survive in the page cache);
- a slow disk: the next job (fsync, snapshot write) of a replica takes several ticks,
  sometimes longer than an election timeout; messages and proposals queue meanwhile;
- a write or fsync error (EIO, ENOSPC): the driver must stop without acknowledging; the
  replica restarts later from what is durable (the failed pages may be lost);
- a flipped byte in a durable record (not the last one of the log, which recovery takes
  for a torn write), while the replica runs or after a crash; on more than one replica,
  as long as a quorum of the voters stays undamaged (what a quorum can repair);
- partitions, one-way cuts and flaky links; heals; restarts;
- membership changes (add a learner, promote, remove) and leadership transfers.
Clock drift (replicas ticking at different rates) and long network delays are set per
seed in world.py / network.py from the same rates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from ..disk import MemDisk
from ..membership import ChangeKind, MembershipChange
from ..ready import RaftError
from ..wal_format import decode_at
from .node import WAL_DIR, SimNode, eio, enospc

if TYPE_CHECKING:
    from .world import World


@dataclass(frozen=True)
class FaultRates:
    drop: float = 0.05
    duplicate: float = 0.03
    long_delay: float = 0.002  # share of messages delayed beyond an election timeout
    crash_per_tick: float = 0.012
    kill_per_tick: float = 0.004
    restart_per_tick: float = 0.06
    crash_in_io: float = 0.3  # share of crashes that happen inside the next fsync
    slow_io_per_tick: float = 0.01
    io_error_per_tick: float = 0.003
    partition_per_tick: float = 0.012
    isolate_new_leader: float = 0.15  # share of new leaders cut off as they take over
    one_way_per_tick: float = 0.004
    flaky_per_tick: float = 0.004
    heal_per_tick: float = 0.04
    change_per_tick: float = 0.012
    transfer_per_tick: float = 0.006
    corrupt_on_crash: float = 0.25
    corrupt_running_per_tick: float = 0.002
    drift: bool = True  # may replicas tick at different rates?

    @classmethod
    def storm(cls) -> FaultRates:
        """Leadership storms: nearly every new leader is cut off as it takes over, so
        replicas end up holding uncommitted entries of different terms and old entries
        get replicated by later leaders: the histories where a wrong commit rule loses
        committed entries (Figure 8). Disks behave."""
        return cls(isolate_new_leader=0.8, slow_io_per_tick=0.0, io_error_per_tick=0.0)

    def drawn(self, rng: random.Random) -> FaultRates:
        """These rates scaled per seed: each between 0 and twice its value (a few faults
        are switched off entirely in some seeds)."""
        changes: dict[str, float | bool] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                changes[f.name] = value and rng.random() < 0.5
            elif f.name in ("crash_in_io", "corrupt_on_crash", "heal_per_tick",
                            "restart_per_tick"):
                changes[f.name] = value * rng.uniform(0.5, 1.5)
            else:
                changes[f.name] = value * rng.uniform(0.0, 2.0) if rng.random() < 0.85 else 0.0
        return replace(self, **changes)  # type: ignore[arg-type]


class Faults:
    def __init__(self, world: World) -> None:
        self.w = world
        # Disks damaged and not yet repaired: node id -> its incarnation when damaged (a
        # replica repairs only after a restart has found the damage).
        self.damaged: dict[str, int] = {}
        self._newest: tuple[str, int] | None = None  # (segment, start of its last record)

    def strike(self) -> None:
        w, r, rates = self.w, self.w.rng, self.w.rates
        live = [n for n in w.nodes.values() if n.up]
        if live and r.random() < rates.crash_per_tick:
            node = r.choice(live)
            if r.random() < rates.crash_in_io:
                node.crash_in_io = True
                w.trace(f"{node.id}: will lose power inside its next fsync")
            else:
                w.stats["crashes"] += 1
                w.trace(f"{node.id}: power loss")
                node.crash(w.disk_rng)
                self.after_crash(node)
        if live and r.random() < rates.kill_per_tick:
            node = r.choice(live)
            if node.up:
                w.stats["kills"] += 1
                w.trace(f"{node.id}: process killed")
                node.kill()
        if live and r.random() < rates.slow_io_per_tick:
            node = r.choice(live)
            # Mostly a few ticks; sometimes longer than an election timeout.
            ticks = r.randint(1, 4) if r.random() < 0.8 else r.randint(10, 30)
            node.io_delay = ticks * w.cfg.tick_steps
            w.stats["slow_io"] += 1
            w.trace(f"{node.id}: next disk job takes {ticks} ticks")
        if live and r.random() < rates.io_error_per_tick:
            node = r.choice(live)
            node.fail_in_io = eio() if r.random() < 0.5 else enospc()
            w.trace(f"{node.id}: next disk job fails with {node.fail_in_io.strerror}")
        downs = [n for n in w.nodes.values() if not n.up and not w.retired(n)]
        if downs and r.random() < rates.restart_per_tick:
            w.start(r.choice(downs))
        self._network(r)
        if r.random() < rates.corrupt_running_per_tick:
            running = [n for n in w.nodes.values() if n.up]
            if running:
                node = r.choice(running)
                if self._may_damage(node.id):
                    self.corrupt(node.disk, node.id)
        if r.random() < rates.change_per_tick:
            self._change_membership()
        if r.random() < rates.transfer_per_tick:
            self._transfer()

    def _network(self, r: random.Random) -> None:
        w, rates, net = self.w, self.w.rates, self.w.net
        if r.random() < rates.partition_per_tick:
            self._partition()
        if r.random() < rates.one_way_per_tick:
            a, b = r.sample(list(w.nodes), 2)
            net.cut_one_way(a, b)
            w.stats["one_way"] += 1
            w.trace(f"cut {a} -> {b} (one way)")
        if r.random() < rates.flaky_per_tick:
            a, b = r.sample(list(w.nodes), 2)
            loss = r.uniform(0.2, 0.8)
            net.flaky[(a, b)] = loss
            w.stats["flaky"] += 1
            w.trace(f"flaky {a} -> {b} loses {loss:.0%}")
        if (net.cut or net.flaky) and r.random() < rates.heal_per_tick:
            w.trace("heal")
            net.heal()

    def new_leader(self, nid: str) -> None:
        """A leader just took over: sometimes its links fail at once, before its first
        entries reach anyone (the histories of Figure 8 start like this)."""
        w = self.w
        if w.rng.random() < w.rates.isolate_new_leader:
            others = [n for n in w.nodes if n != nid]
            w.net.partition([[nid], others])
            w.stats["partitions"] += 1
            w.trace(f"partition {nid} | {' '.join(others)} (new leader cut off)")

    # ------------------------------------------------------------------ disks
    def after_crash(self, node: SimNode) -> None:
        if self.w.rng.random() < self.w.rates.corrupt_on_crash and self._may_damage(node.id):
            self.corrupt(node.disk, node.id)

    def _may_damage(self, nid: str) -> bool:
        """A quorum of the voters must stay undamaged: damaged replicas neither campaign
        nor vote for older logs until repaired, by design."""
        w = self.w
        for other, since in list(self.damaged.items()):
            node = w.nodes[other]
            d = node.driver
            if d is None or not node.up or node.incarnation <= since or d.core.corrupt:
                continue
            if not node.disk.exists(f"{WAL_DIR}/CORRUPT"):
                del self.damaged[other]
        if nid in self.damaged:
            return True
        configs = self._known_configs()
        if len(configs) > 1:
            # A membership change is in flight: a replica out of its own newest
            # configuration neither campaigns nor votes for shorter logs, and may be the
            # one whose vote a quorum needs. Damage now could exceed what a quorum repairs.
            return False
        # The smallest configuration any replica knows of (with no leader, the group may
        # be about to commit any of them).
        voters = min((len(c) for c in configs if c), default=w.cfg.nodes)
        voters = min(voters, w.cfg.nodes)
        return len(self.damaged) + 1 <= (voters - 1) // 2

    def _known_configs(self) -> set[tuple[str, ...]]:
        """The voter sets the replicas hold, those that are down included: a replica that
        is down comes back with its newest configuration, or (after a power loss) with the
        one at its last durable index. Counting only the running ones let a removal held
        by down replicas go unseen, and damage then exceeded what the smaller
        configuration's quorum repairs (seed 690, 5 nodes)."""
        configs: set[tuple[str, ...]] = set()
        for node in self.w.nodes.values():
            if node.driver is not None:
                configs.add(node.driver.core.membership.voters)
            elif node.last_core is not None:
                log = node.last_core.log
                configs.add(log.membership().voters)
                configs.add(log.membership_at(min(node.last_durable, log.last_index)).voters)
        return configs

    def corrupt(self, disk: MemDisk, nid: str) -> None:
        """Flip a byte of the log or of a snapshot: anywhere, the newest record included
        (the WAL ends every batch with two copies of the hard state, so a bad newest
        record, taken for a torn write, loses nothing)."""
        names = disk.list(WAL_DIR)
        segs = [n for n in names if n.startswith("seg-") and n.endswith(".wal")]
        snaps = [n for n in names if n.startswith("snap-") and n.endswith(".snap")]
        choices: list[tuple[str, int]] = []
        for name in segs:
            size = len(disk.read(f"{WAL_DIR}/{name}"))
            if size > 0:
                choices.append((name, size))
        if segs and self.w.rng.random() < 0.3:  # often the newest record itself
            data = disk.read(f"{WAL_DIR}/{segs[-1]}")
            start = _last_record_start(data)
            if start < len(data):
                choices = [(segs[-1], len(data))] * 3 + choices
                self._newest = (segs[-1], start)
        for name in snaps:
            choices.append((name, len(disk.read(f"{WAL_DIR}/{name}"))))
        if not choices:
            return
        r = self.w.rng
        name, limit = r.choice(choices)
        newest, self._newest = self._newest, None
        if newest is not None and newest[0] == name:
            offset = r.randrange(newest[1], limit)
        else:
            offset = r.randrange(limit)
        disk.corrupt(f"{WAL_DIR}/{name}", offset)
        node = self.w.nodes[nid]
        self.damaged[nid] = node.incarnation
        self.w.stats["corruptions"] += 1
        self.w.trace(f"{nid}: corrupt {name} at offset {offset}")

    # ------------------------------------------------------------------ the group
    def _partition(self) -> None:
        w = self.w
        ids = list(w.nodes)
        w.rng.shuffle(ids)
        if w.rng.random() < 0.4:
            groups = [ids[:1], ids[1:]]
        else:
            cut = w.rng.randint(1, len(ids) - 1)
            groups = [ids[:cut], ids[cut:]]
        w.net.partition(groups)
        w.stats["partitions"] += 1
        w.trace("partition " + " | ".join(" ".join(sorted(g)) for g in groups))

    def _transfer(self) -> None:
        w = self.w
        lead = w.leader()
        if lead is None:
            return
        d = w.nodes[lead].driver
        assert d is not None
        try:
            to = d.core.transfer_leadership()
            w.stats["transfers"] += 1
            w.trace(f"{lead}: transfer leadership to {to}")
        except RaftError:
            pass
        w.pump(w.nodes[lead])

    def _change_membership(self) -> None:
        w = self.w
        lead = w.leader()
        if lead is None or self.damaged:  # see _may_damage
            return
        d = w.nodes[lead].driver
        assert d is not None
        core = d.core
        m = core.membership
        r = w.rng
        caught_up = [n for n in m.learners if core.learner_caught_up(n)]
        max_members = w.cfg.nodes + 2
        min_voters = 3  # with two voters one damaged replica could stop elections
        if caught_up:
            change = MembershipChange(ChangeKind.PROMOTE, r.choice(caught_up))
        elif len(m.voters) + len(m.learners) < max_members and r.random() < 0.6:
            change = MembershipChange(ChangeKind.ADD_LEARNER, f"n{w.next_id}")
        elif len(m.voters) > min_voters or m.learners:
            victims = list(m.learners) or list(m.voters)
            change = MembershipChange(ChangeKind.REMOVE, r.choice(victims))
        else:
            return
        try:
            core.change_membership(change)
        except (RaftError, ValueError) as exc:
            w.trace(f"{lead}: {change.kind.value} {change.node} refused: {exc}")
            return
        w.stats["changes"] += 1
        w.trace(f"{lead}: {change.kind.value} {change.node}")
        if change.kind is ChangeKind.ADD_LEARNER:
            w.add_node(())
        w.pump(w.nodes[lead])


def _last_record_start(data: bytes) -> int:
    """Offset where the last valid record of a segment starts (0 if one or none)."""
    pos, last = 0, 0
    while pos < len(data):
        rec = decode_at(data, pos)
        if isinstance(rec, str):
            break
        last, pos = pos, rec.end
    return last
