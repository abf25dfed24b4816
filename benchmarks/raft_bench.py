"""RAFT library benchmark: one process, in-memory transport, the real WAL on disk.

    python -m benchmarks.raft_bench [--entries N] [--groups G] [--idle-s S] [--dir PATH]

1. Idle groups (first, so that their memory is measured on a fresh process): G groups
   of 3 replicas each (3G RaftNodes) in this process, elected and then idle: CPU used
   (% of one core) and resident memory; once with a timer per node, once with one
   shared Ticker for all of them (what a server hosting many groups uses).
2. Throughput: 3 RaftNodes (one group) over InMemoryHub, each with its own Wal on OsDisk
   (fsync for real). A client keeps a window of proposals in flight on the leader; we
   count entries committed and applied on the leader per second, for 128 B and 1 KiB
   entries, and the fsyncs per second that took (group commit: one per Ready per node).
Timing is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import resource
import shutil
import tempfile
import time

from benchmarks.common import machine_summary
from jetraft.raft.disk import OsDisk
from jetraft.raft.node import Applied, RaftNode, Ticker
from jetraft.raft.ready import RaftConfig
from jetraft.raft.transport import InMemoryHub
from jetraft.raft.types import Entry
from jetraft.raft.wal import Wal


class CountingSM:
    """The cheapest state machine: counts and returns the index (a PubAck's sequence)."""

    def __init__(self) -> None:
        self.n = 0

    def apply(self, entry: Entry) -> object:
        self.n += 1
        return entry.index

    def snapshot(self) -> bytes:
        return str(self.n).encode()

    def restore(self, data: bytes) -> None:
        self.n = int(data or b"0")


async def start_group(
    hub: InMemoryHub, base: str, name: str, cfg: RaftConfig, tick_s: float,
    ticker: Ticker | None = None,
) -> list[RaftNode]:
    ids = [f"{name}-{i}" for i in range(3)]
    nodes = []
    for nid in ids:
        wal, rec = Wal.open(OsDisk(), os.path.join(base, nid))
        node = RaftNode(nid, ids, cfg, wal, hub.endpoint(nid), CountingSM(), tick_s,
                        random.Random(nid), recovered=rec, snapshot_entries=200_000,
                        keep_entries=10_000, ticker=ticker)
        hub.register(nid, node.receive)
        await node.start()
        nodes.append(node)
    return nodes


async def stop_group(hub: InMemoryHub, nodes: list[RaftNode]) -> None:
    for node in nodes:
        hub.unregister(node.id)
        await node.stop()
        assert isinstance(node.wal, Wal)
        node.wal.close()


async def leader_of(nodes: list[RaftNode], timeout_s: float = 30.0) -> RaftNode:
    async with asyncio.timeout(timeout_s):
        while True:
            for n in nodes:
                if n.is_leader:
                    return n
            await asyncio.sleep(0.01)


async def throughput(base: str, entries: int, size: int, window: int) -> dict[str, float]:
    hub = InMemoryHub()
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=2, max_msg_bytes=4 << 20,
                     max_inflight=64)
    nodes = await start_group(hub, base, f"tp{size}", cfg, 0.05)
    lead = await leader_of(nodes)
    await lead.propose(b"warm-up")
    payload = os.urandom(size)
    fsyncs0 = sum(n.fsyncs for n in nodes)
    lead_fsyncs0 = lead.fsyncs
    inflight: collections.deque[asyncio.Future[Applied]] = collections.deque()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    for _ in range(entries):
        if len(inflight) >= window:
            await inflight.popleft()
        inflight.append(lead.propose_nowait(payload))
    await asyncio.gather(*inflight)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    fsyncs = sum(n.fsyncs for n in nodes) - fsyncs0
    for n in nodes:
        await n.wait_for(lambda n=n: n.core.applied >= lead.core.commit, 30.0)
    await stop_group(hub, nodes)
    return {
        "entries_per_s": entries / dt,
        "fsyncs_per_s": fsyncs / dt,
        "leader_fsyncs_per_s": (lead.fsyncs - lead_fsyncs0) / dt,
        "entries_per_leader_fsync": entries / max(1, lead.fsyncs - lead_fsyncs0),
        "cpu_pct": 100 * cpu / dt,
        "seconds": dt,
    }


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def idle_groups(
    base: str, groups: int, idle_s: float, tick_s: float, shared: bool
) -> dict[str, float]:
    rss0 = rss_mb()
    hub = InMemoryHub()
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=2)
    ticker = Ticker(tick_s) if shared else None
    all_groups = [await start_group(hub, base, f"g{g}", cfg, tick_s, ticker)
                  for g in range(groups)]
    for nodes in all_groups:
        lead = await leader_of(nodes, 60.0)
        await lead.propose(b"hello")
    await asyncio.sleep(2 * 10 * tick_s)  # let elections and first commits settle
    delivered0 = hub.delivered
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(idle_s)
    cpu, dt = time.process_time() - cpu0, time.perf_counter() - t0
    msgs = (hub.delivered - delivered0) / dt
    rss = rss_mb()
    leaders = sum(1 for nodes in all_groups for n in nodes if n.is_leader)
    for nodes in all_groups:
        await stop_group(hub, nodes)
    return {"cpu_pct": 100 * cpu / dt, "rss_mb": rss, "rss_delta_mb": rss - rss0,
            "messages_per_s": msgs, "leaders": leaders}


async def main_async(args: argparse.Namespace) -> None:
    base = args.dir or tempfile.mkdtemp(prefix="raft-bench-")
    try:
        print(machine_summary())
        print(f"WAL directory: {base}")
        for shared in (False, True):
            sub = os.path.join(base, "idle-shared" if shared else "idle")
            r = await idle_groups(sub, args.groups, args.idle_s, args.tick_s, shared)
            timers = "one shared Ticker" if shared else "a timer per node"
            print(
                f"idle, {timers}: {args.groups} groups x 3 replicas "
                f"({int(r['leaders'])} leaders), tick {args.tick_s * 1000:.0f} ms, heartbeat "
                f"every 2 ticks: CPU {r['cpu_pct']:.1f}% of one core, RSS {r['rss_mb']:.0f} MB "
                f"(+{r['rss_delta_mb']:.0f} MB for the groups), "
                f"{r['messages_per_s']:,.0f} messages/s"
            )
        for size in (128, 1024):
            sub = os.path.join(base, f"tp-{size}")
            r = await throughput(sub, args.entries, size, args.window)
            print(
                f"throughput {size:>5} B: {r['entries_per_s']:>9,.0f} committed entries/s, "
                f"{r['fsyncs_per_s']:,.0f} fsyncs/s over 3 nodes "
                f"(leader {r['leader_fsyncs_per_s']:,.0f}/s, "
                f"{r['entries_per_leader_fsync']:,.0f} entries per leader fsync), "
                f"CPU {r['cpu_pct']:.0f}% of one core, {r['seconds']:.1f}s"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=1000, help="proposals in flight")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--tick-s", type=float, default=0.1)
    ap.add_argument("--dir", help="WAL directory (default: a temporary one)")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
