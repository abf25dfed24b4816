"""One benchmark on the pure-Python and the compiled build, runs interleaved.

    python -m benchmarks.ab_builds [--rounds R] [--compiled DIR] BENCHMARK [ARGS...]
    e.g. python -m benchmarks.ab_builds --rounds 3 core_pubsub --only jetraft --scenario "1:1 1KB"

Runs ``python -m benchmarks.BENCHMARK ARGS`` R times on each build, alternating (pure,
compiled, pure, ...), so that the shared machine's load falls on both alike; the servers a
benchmark starts inherit the build through PYTHONPATH. The pure build is ``src/`` of this
checkout, the compiled one the package that ``make compiled`` installs into
``build/mypyc-site`` (or ``--compiled DIR``). Compare the server CPU per message columns: they
move much less with the load than the rates do. Each run's output is printed as it is, after a
line naming the build and the load average; a run that fails is reported and the rest go on.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from benchmarks.common import load_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compiled", default=os.path.join(ROOT, "build", "mypyc-site"))
    ap.add_argument("benchmark", help="a module of benchmarks/, e.g. core_pubsub")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    builds = {"pure": os.path.join(ROOT, "src"), "compiled": os.path.abspath(args.compiled)}
    if not os.path.isdir(os.path.join(builds["compiled"], "jetraft")):
        sys.exit(f"no compiled build in {builds['compiled']}: run `make compiled` first")
    for r in range(1, args.rounds + 1):
        for name, path in builds.items():
            print(f"== {name} build, round {r}, {load_summary()}", flush=True)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, ROOT]))
            cmd = [sys.executable, "-m", f"benchmarks.{args.benchmark}", *args.args]
            rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode
            if rc:  # e.g. a load generator that fell behind on a busy machine: go on
                print(f"== {name} build, round {r}: exit status {rc}", flush=True)


if __name__ == "__main__":
    main()
