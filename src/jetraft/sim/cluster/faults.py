"""The faults of a simulated cluster, per server, at rates drawn per seed.

As jetraft.raft.sim.faults, lifted to servers that host many groups on one disk:
power loss of a server (every group on it at once; sometimes inside one group's next
fsync), process kills, restarts, a slow disk (the next job of every group on it is
late), a write or fsync error (the group stops; the server goes down with it, its
unsynced pages maybe lost), partitions between servers (also one-way, flaky links, and
sometimes a new leader cut off as it takes over), and corrupted records in one group's
log, on no more replicas of that group than a quorum can repair.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from jetraft.raft.sim.faults import _last_record_start
from jetraft.raft.sim.node import eio, enospc

if TYPE_CHECKING:
    from .server import SimServer
    from .world import ClusterWorld, GroupTrack


class ClusterFaults:
    def __init__(self, world: ClusterWorld) -> None:
        self.w = world

    def strike(self) -> None:
        w, r, rates = self.w, self.w.rng, self.w.rates
        ups = [s for s in w.servers.values() if s.up]
        if ups and r.random() < rates.crash_per_tick:
            s = r.choice(ups)
            nodes = [n for n in s.nodes.values() if n.up]
            if nodes and r.random() < rates.crash_in_io:
                node = r.choice(nodes)
                node.crash_in_io = True
                w.trace(f"{s.name}: will lose power inside the next fsync of {node.wal_dir}")
            else:
                w.stats["crashes"] += 1
                w.trace(f"{s.name}: power loss")
                w.server_down(s, power=True)
                self.after_crash(s)
        ups = [s for s in w.servers.values() if s.up]
        if ups and r.random() < rates.kill_per_tick:
            s = r.choice(ups)
            w.stats["kills"] += 1
            w.trace(f"{s.name}: process killed")
            w.server_down(s, power=False)
        if ups and r.random() < rates.slow_io_per_tick:
            s = r.choice(ups)
            ticks = r.randint(1, 4) if r.random() < 0.8 else r.randint(10, 30)
            for node in s.nodes.values():
                node.io_delay = ticks * w.cfg.tick_steps
            w.stats["slow_io"] += 1
            w.trace(f"{s.name}: the disk's next jobs take {ticks} ticks")
        if ups and r.random() < rates.io_error_per_tick:
            s = r.choice(ups)
            nodes = [n for n in s.nodes.values() if n.up]
            if nodes:
                node = r.choice(nodes)
                node.fail_in_io = eio() if r.random() < 0.5 else enospc()
                w.trace(f"{s.name}: next disk job of {node.wal_dir} fails")
        downs = [s for s in w.servers.values() if not s.up]
        if downs and r.random() < rates.restart_per_tick:
            w.start_server(r.choice(downs))
        self._network(r)
        if r.random() < rates.corrupt_running_per_tick:
            ups = [s for s in w.servers.values() if s.up]
            if ups:
                self.corrupt_some(r.choice(ups))

    def _network(self, r: random.Random) -> None:
        w, rates, net = self.w, self.w.rates, self.w.net
        names = list(w.servers)
        if r.random() < rates.partition_per_tick:
            r.shuffle(names)
            cut = 1 if r.random() < 0.4 else r.randint(1, len(names) - 1)
            groups = [names[:cut], names[cut:]]
            net.partition(groups)
            w.stats["partitions"] += 1
            w.trace("partition " + " | ".join(" ".join(sorted(g)) for g in groups))
        if r.random() < rates.one_way_per_tick:
            a, b = r.sample(sorted(w.servers), 2)
            net.cut_one_way(a, b)
            w.stats["one_way"] += 1
            w.trace(f"cut {a} -> {b} (one way)")
        if r.random() < rates.flaky_per_tick:
            a, b = r.sample(sorted(w.servers), 2)
            loss = r.uniform(0.2, 0.8)
            net.flaky[(a, b)] = loss
            w.stats["flaky"] += 1
            w.trace(f"flaky {a} -> {b} loses {loss:.0%}")
        if (net.cut or net.flaky) and r.random() < rates.heal_per_tick:
            w.trace("heal")
            net.heal()

    def new_leader(self, server: str, track: GroupTrack) -> None:
        """A new leader is sometimes cut off as it takes over (a server: all its groups)."""
        w = self.w
        share = w.rates.isolate_new_leader * (1.0 if track.kind == "meta" else 0.3)
        if w.rng.random() < share:
            others = [n for n in w.servers if n != server]
            w.net.partition([[server], others])
            w.stats["partitions"] += 1
            w.trace(f"partition {server} | {' '.join(others)} (new leader of "
                    f"{track.name} cut off)")

    # ------------------------------------------------------------------ disks
    def after_crash(self, server: SimServer) -> None:
        if self.w.rng.random() < self.w.rates.corrupt_on_crash:
            self.corrupt_some(server)

    def corrupt_some(self, server: SimServer) -> None:
        """Flip a byte in the log of one group of the server that may take it."""
        w = self.w
        groups = sorted(g for g in server.nodes if self._may_damage(w.groups[g], server))
        if not groups:
            return
        group = w.rng.choice(groups)
        if self._corrupt(server, group):
            w.groups[group].damaged[server.name] = server.nodes[group].incarnation

    def _may_damage(self, track: GroupTrack, server: SimServer) -> bool:
        """As raft.sim.faults: a quorum of the group's voters stays undamaged, and no
        membership change is in flight."""
        for other, since in list(track.damaged.items()):
            node = track.nodes.get(other)
            if node is None:
                del track.damaged[other]
                continue
            d = node.driver
            if d is None or not node.up or node.incarnation <= since or d.core.corrupt:
                continue
            if not node.disk.exists(f"{node.wal_dir}/CORRUPT"):
                del track.damaged[other]
        if server.name in track.damaged:
            return True
        cores = [n.driver.core if n.driver is not None else n.last_core
                 for n in track.nodes.values()]
        configs = {c.membership for c in cores if c is not None}
        if len(configs) != 1:
            return False  # a change in flight (or nobody knows the configuration)
        voters = len(next(iter(configs)).voters)
        if voters == 0:
            return False
        if any(c is not None and c.corrupt for c in cores):
            return False  # a replica still rejoining (log lost) counts as damaged
        return len(track.damaged) + 1 <= (voters - 1) // 2

    def _corrupt(self, server: SimServer, group: str) -> bool:
        w = self.w
        disk = server.disk
        d = server.nodes[group].wal_dir
        if not disk.exists(d):
            return False
        names = disk.list(d)
        segs = [n for n in names if n.startswith("seg-") and n.endswith(".wal")]
        snaps = [n for n in names if n.startswith("snap-") and n.endswith(".snap")]
        choices: list[tuple[str, int, int]] = []
        for name in segs + snaps:
            size = len(disk.read(f"{d}/{name}"))
            if size > 0:
                choices.append((name, 0, size))
        if segs and w.rng.random() < 0.3:
            data = disk.read(f"{d}/{segs[-1]}")
            start = _last_record_start(data)
            if start < len(data):
                choices = [(segs[-1], start, len(data))] * 3 + choices
        if not choices:
            return False
        name, lo, hi = w.rng.choice(choices)
        offset = w.rng.randrange(lo, hi)
        disk.corrupt(f"{d}/{name}", offset)
        w.stats["corruptions"] += 1
        w.trace(f"{server.name}: corrupt {group}/{name} at offset {offset}")
        return True
