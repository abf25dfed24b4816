"""Summarise a ``py-spy record --format raw`` profile: where the samples went.

    python -m benchmarks.pyspy_summary PROFILE.txt [--top N] [--under FUNC]

Prints the share of samples per function on top of the stack (self), per function anywhere
on the stack (inclusive, counted once per sample), and per source file (self). ``--under``
keeps only samples whose stack passes through a function whose name contains FUNC.
"""

from __future__ import annotations

import argparse
import collections
import re

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")


def frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) for each frame of one collapsed stack, outermost first."""
    out = []
    for raw in stack.split(";"):
        m = FRAME.match(raw)
        out.append((m["func"], m["file"]) if m else (raw, "?"))
    return out


def summarise(path: str, under: str = "") -> tuple[int, dict[str, collections.Counter[str]]]:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count_s = line.rstrip("\n").rpartition(" ")
            if not stack or not count_s.isdigit():
                continue
            fr = frames(stack)
            if under and not any(under in func for func, _ in fr):
                continue
            n = int(count_s)
            total += n
            func, file = fr[-1]
            own[f"{func} ({file})"] += n
            files[file] += n
            for name in {f"{fn} ({fl})" for fn, fl in fr}:
                incl[name] += n
    return total, {"self": own, "inclusive": incl, "file (self)": files}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--under", default="", help="only stacks through this function")
    args = ap.parse_args()
    total, tables = summarise(args.profile, args.under)
    print(f"{args.profile}: {total} samples")
    for title, counter in tables.items():
        print(f"\n{title}:")
        for name, n in counter.most_common(args.top):
            print(f"  {100 * n / max(total, 1):5.1f}%  {name}")


if __name__ == "__main__":
    main()
