"""`python -m jetraft.raft.sim`: run a campaign of seeds, or replay one seed with a trace.

  python -m jetraft.raft.sim --seeds 300 [--start 0] [--nodes 3|5] [--jobs 2]
  python -m jetraft.raft.sim --seed 17 [--nodes 3] --trace

A campaign prints one line per failing seed with the command that replays it, then
`seeds: N passed, F failed`; the exit status is 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Iterable

from .world import SeedResult, SimConfig, run_seed, run_seed_nodes


def campaign(seeds: Iterable[int], nodes: int, jobs: int) -> list[SeedResult]:
    work = [(s, nodes) for s in seeds]
    if jobs <= 1:
        return [run_seed_nodes(w) for w in work]
    # The worker function lives in world.py: spawned workers cannot import __main__.
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return pool.map(run_seed_nodes, work, chunksize=4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m jetraft.raft.sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--seeds", type=int, help="number of seeds to run")
    ap.add_argument("--start", type=int, default=0, help="first seed of the campaign")
    ap.add_argument("--seed", type=int, help="replay this one seed")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--trace", action="store_true", help="print a readable trace")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for a campaign")
    args = ap.parse_args(argv)
    if args.seed is not None:
        trace = print if args.trace else None
        res = run_seed(args.seed, SimConfig(nodes=args.nodes), trace)
        print(
            f"seed {res.seed} nodes={res.nodes}: {'ok' if res.ok else 'FAILED'} "
            f"after {res.ticks} ticks {res.stats}"
        )
        if not res.ok:
            print(f"  {res.error}")
        return 0 if res.ok else 1
    if args.seeds is None:
        ap.error("give --seeds N (a campaign) or --seed S (one seed)")
    t0 = time.monotonic()
    results = campaign(range(args.start, args.start + args.seeds), args.nodes, args.jobs)
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"FAIL seed {r.seed} nodes={r.nodes}: {r.error}\n  replay: {r.replay_command()}")
    print(
        f"seeds: {len(results) - len(failed)} passed, {len(failed)} failed "
        f"({args.nodes} nodes, {time.monotonic() - t0:.1f}s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
