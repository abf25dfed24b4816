"""For each fix of jetraft.sim.cluster.FIXES: the first seeds on which the simulator
catches the bug when the server behaves as it does without that fix.

  python -m tests.sim.ablation [FIX ...] [--seeds 300] [--servers 3] [--jobs 2]

Prints, per fix, the first failing seeds and their errors (or that none failed); the
test_cluster_sim.FIX_SEEDS table keeps one such seed per fix.
"""

from __future__ import annotations

import argparse
import multiprocessing

from jetraft.sim.cluster import FIXES, cluster_config, run_cluster_seed


def _run(args: tuple[int, int, str]) -> tuple[int, str]:
    seed, servers, fix = args
    res = run_cluster_seed(seed, cluster_config(servers, frozenset({fix})))
    return seed, "" if res.ok else res.error


def first_catches(fix: str, seeds: int, servers: int, jobs: int, want: int = 2
                  ) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    work = [(s, servers, fix) for s in range(seeds)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for seed, error in pool.imap(_run, work, chunksize=2):
            if error:
                found.append((seed, error))
                if len(found) >= want:
                    pool.terminate()
                    break
    return found


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.ablation")
    ap.add_argument("fixes", nargs="*", default=sorted(FIXES))
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--want", type=int, default=1, help="failing seeds to find per fix")
    args = ap.parse_args()
    for fix in args.fixes:
        found = first_catches(fix, args.seeds, args.servers, args.jobs, args.want)
        if not found:
            print(f"{fix}: no seed of {args.seeds} fails without it", flush=True)
        for seed, error in found:
            print(f"{fix}: seed {seed}: {error[:160]}", flush=True)


if __name__ == "__main__":
    main()
