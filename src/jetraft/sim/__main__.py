"""`python -m jetraft.sim`: the seeded RAFT simulator with every state machine, and the
simulated JetStream cluster.

  python -m jetraft.sim --seeds 3000 [--start 0] [--nodes 3|5] [--sm mixed] [--jobs 2]
  python -m jetraft.sim --seed 17 [--nodes 3] --sm stream --trace
  python -m jetraft.sim --cluster --seeds 500 [--start 0] [--nodes 3|5] [--jobs 2]
  python -m jetraft.sim --cluster --seed 4 [--nodes 3] [--without FIX,...] --trace

`--sm mixed` (the default) gives the seeds in turn the running hash, the self-durable
hash and the JetStream stream (jetraft.jetstream.stream.Stream over a MemoryStore, with
publishes, Nats-Msg-Id duplicates, expected-sequence checks, rollups, TTLs, deletes,
purges, expiries and config updates), and that stream over a checkpointed FileStore on
the replica's crashing disk (`stream-file`: self-durable, as a clustered file stream's
replica); the checker compares the replicas' streams.

`--cluster` runs jetraft.sim.cluster instead: 3 or 5 simulated servers (`--nodes`), each
with the meta group and the stream and consumer groups placed on it, clients publishing,
consuming, acking and administering (placement, step-down, peer removal, scaling,
deletes) under faults. The server logic it mirrors carries fixes of bugs it found
(`--list-fixes`); `--without NAME,...` runs a seed as the server behaves without them.
A replay line names what a failing seed needs.
"""

from __future__ import annotations

import sys
import time

from jetraft.raft.sim.__main__ import campaign, parser, report
from jetraft.raft.sim.world import run_seed

from .campaign import MACHINES, config_for, machine_of, run_seed_any
from .cluster import FIXES, cluster_config, run_cluster_any, run_cluster_seed


def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m jetraft.sim", __doc__, [*MACHINES, "mixed"])
    ap.add_argument("--cluster", action="store_true", help="simulate a JetStream cluster")
    ap.add_argument("--without", default="", help="cluster: fixes to leave out (comma list)")
    ap.add_argument("--list-fixes", action="store_true", help="cluster: list the fixes")
    args = ap.parse_args(argv)
    if args.list_fixes:
        for name, text in FIXES.items():
            print(f"{name}:\n  {text}")
        return 0
    if args.cluster:
        return _cluster(args, ap)
    sm = args.sm or "mixed"
    if args.seed is not None:
        name = machine_of(args.seed, sm)
        res = run_seed(args.seed, config_for(args.nodes, name), print if args.trace else None)
        print(f"seed {res.seed} nodes={res.nodes} sm={res.sm}: "
              f"{'ok' if res.ok else 'FAILED'} after {res.ticks} ticks {res.stats}")
        if not res.ok:
            print(f"  {res.error}")
        return 0 if res.ok else 1
    if args.seeds is None:
        ap.error("give --seeds N (a campaign) or --seed S (one seed)")
    t0 = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    results = campaign(seeds, args.nodes, args.jobs, lambda s: machine_of(s, sm),
                       run_seed_any)
    return report(results, args.nodes, time.monotonic() - t0)


def _cluster(args: object, ap: object) -> int:
    import argparse

    assert isinstance(args, argparse.Namespace) and isinstance(ap, argparse.ArgumentParser)
    without = frozenset(n for n in args.without.split(",") if n)
    try:
        cfg = cluster_config(args.nodes, without)
    except ValueError as exc:
        ap.error(str(exc))
    if args.seed is not None:
        res = run_cluster_seed(args.seed, cfg, print if args.trace else None)
        print(f"seed {res.seed} servers={res.nodes}: "
              f"{'ok' if res.ok else 'FAILED'} after {res.ticks} ticks {res.stats}")
        if not res.ok:
            print(f"  {res.error}\n  replay: {res.replay_command()}")
        return 0 if res.ok else 1
    if args.seeds is None:
        ap.error("give --seeds N (a campaign) or --seed S (one seed)")
    t0 = time.monotonic()
    name = "cluster" + (f"-without:{','.join(sorted(without))}" if without else "")
    results = campaign(range(args.start, args.start + args.seeds), args.nodes, args.jobs,
                       name, run_cluster_any)
    return report(results, args.nodes, time.monotonic() - t0)


if __name__ == "__main__":
    sys.exit(main())
