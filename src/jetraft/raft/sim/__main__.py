"""`python -m jetraft.raft.sim`: run a campaign of seeds, or replay one seed with a trace.

  python -m jetraft.raft.sim --seeds 300 [--start 0] [--nodes 3|5] [--sm hash|durable] [--jobs 2]
  python -m jetraft.raft.sim --seed 17 [--nodes 3] [--sm hash] --trace

`--sm` picks the replicated state machine: `hash` (a running hash, snapshotted as bytes),
`durable` (the same hash kept durably on the replica's own disk: the log compacts under
external snapshot markers). `python -m jetraft.sim` runs the JetStream stream too.
A campaign prints one line per failing seed with the command that replays it, then
`seeds: N passed, F failed`; the exit status is 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable

from .world import STATE_MACHINES, SeedResult, config_for, run_seed, run_seed_nodes

Worker = Callable[[tuple[int, int, str]], SeedResult]


def campaign(
    seeds: Iterable[int], nodes: int, jobs: int, sm: str | Callable[[int], str] = "hash",
    worker: Worker = run_seed_nodes,
) -> list[SeedResult]:
    pick = sm if callable(sm) else (lambda _seed: sm)
    work = [(s, nodes, pick(s)) for s in seeds]
    if jobs <= 1:
        return [worker(w) for w in work]
    # The worker function lives in a module: spawned workers cannot import __main__.
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return pool.map(worker, work, chunksize=4)


def report(results: list[SeedResult], nodes: int, seconds: float) -> int:
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"FAIL seed {r.seed} nodes={r.nodes} sm={r.sm}: {r.error}\n"
              f"  replay: {r.replay_command()}")
    print(f"seeds: {len(results) - len(failed)} passed, {len(failed)} failed "
          f"({nodes} nodes, {seconds:.1f}s)")
    return 1 if failed else 0


def parser(prog: str, doc: str | None, machines: Iterable[str]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, help="number of seeds to run")
    ap.add_argument("--start", type=int, default=0, help="first seed of the campaign")
    ap.add_argument("--seed", type=int, help="replay this one seed")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--sm", default=None, choices=sorted(machines),
                    help="state machine (default: hash)")
    ap.add_argument("--trace", action="store_true", help="print a readable trace")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for a campaign")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m jetraft.raft.sim", __doc__, STATE_MACHINES)
    args = ap.parse_args(argv)
    sm = args.sm or "hash"
    if args.seed is not None:
        trace = print if args.trace else None
        res = run_seed(args.seed, config_for(args.nodes, sm), trace)
        print(f"seed {res.seed} nodes={res.nodes} sm={res.sm}: "
              f"{'ok' if res.ok else 'FAILED'} after {res.ticks} ticks {res.stats}")
        if not res.ok:
            print(f"  {res.error}")
        return 0 if res.ok else 1
    if args.seeds is None:
        ap.error("give --seeds N (a campaign) or --seed S (one seed)")
    t0 = time.monotonic()
    results = campaign(range(args.start, args.start + args.seeds), args.nodes, args.jobs, sm)
    return report(results, args.nodes, time.monotonic() - t0)


if __name__ == "__main__":
    sys.exit(main())
