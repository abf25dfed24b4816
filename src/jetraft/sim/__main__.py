"""`python -m jetraft.sim`: the seeded RAFT simulator with every state machine.

  python -m jetraft.sim --seeds 3000 [--start 0] [--nodes 3|5] [--sm mixed] [--jobs 2]
  python -m jetraft.sim --seed 17 [--nodes 3] --sm stream --trace

`--sm mixed` (the default) gives the seeds in turn the running hash, the self-durable
hash and the JetStream stream (jetraft.jetstream.stream.Stream over a MemoryStore, with
publishes, Nats-Msg-Id duplicates, expected-sequence checks, rollups, TTLs, deletes,
purges, expiries and config updates); the checker compares the replicas' streams.
A replay line names the machine of a failing seed.
"""

from __future__ import annotations

import sys
import time

from jetraft.raft.sim.__main__ import campaign, parser, report
from jetraft.raft.sim.world import run_seed

from .campaign import MACHINES, config_for, machine_of, run_seed_any


def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m jetraft.sim", __doc__, [*MACHINES, "mixed"])
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
